/* Signed /files URLs of the E2B front's envd (the SDK's uploadUrl and
 * downloadUrl): a GET or POST of /files with no X-Access-Token but a
 * "signature" (and maybe "signature_expiration") in its query is let in when
 * the signature is the one E2B's envd would take for the box's access token:
 * "v1_" + base64 (no padding) of SHA-256 of "PATH:OPERATION:USERNAME:TOKEN"
 * (":EXPIRATION" appended when the URL has one), with PATH and USERNAME the
 * URL's own parameters ("" when absent) and OPERATION "read" for a GET,
 * "write" for a POST, the expiration a Unix time not yet passed. The box is
 * the one the call names (its host name, 49983-ID.ports_domain, or
 * E2b-Sandbox-Id): its token is the one checked, so a URL of one box opens
 * no other, nor the other operation, nor another path or user. */
#include "fronts/e2b/envd_int.h"
#include "store/store.h"

#include <openssl/evp.h>
#include <openssl/sha.h>
#include <time.h>

/* The longest signature_expiration taken: a Unix time in decimal. */
#define SIGN_EXP_DIGITS 18

bool envd_sign_asked(ab_req *r)
{
        return req_query(r, "signature") &&
               (!strcmp(r->method, "GET") || !strcmp(r->method, "POST")) && r->n_seg == 3 &&
               !strcmp(r->seg[0], "e2b") && !strcmp(r->seg[1], "envd") &&
               !strcmp(r->seg[2], "files");
}

/* The signature of a /files call with token tok (out: "v1_" + 43 base64
 * characters + NUL). */
static void sign(const char *path, const char *op, const char *user, const char *tok,
                 const char *exp, char out[3 + 44 + 1])
{
        _cleanup_buf_ ab_buf in = {0};
        ab_buf_printf(&in, "%s:%s:%s:%s", path, op, user, tok);
        if (exp)
                ab_buf_printf(&in, ":%s", exp);
        unsigned char md[SHA256_DIGEST_LENGTH];
        SHA256((const unsigned char *)in.p, in.n, md);
        memcpy(out, "v1_", 3);
        int n = EVP_EncodeBlock((unsigned char *)out + 3, md, sizeof(md)); /* 44, one '=' */
        while (n > 0 && out[3 + n - 1] == '=')
                n--;
        out[3 + n] = 0;
}

/* signature_expiration as envd reads it (an integer), written back in
 * decimal into buf (what was signed) and as *when. False when malformed. */
static bool parse_exp(const char *s, char buf[SIGN_EXP_DIGITS + 2], long long *when)
{
        size_t n = strlen(s), neg = s[0] == '-';
        if (n == neg || n - neg > SIGN_EXP_DIGITS)
                return false;
        for (size_t i = neg; i < n; i++)
                if (s[i] < '0' || s[i] > '9')
                        return false;
        *when = strtoll(s, NULL, 10);
        snprintf(buf, SIGN_EXP_DIGITS + 2, "%lld", *when);
        return true;
}

/* True when sig is the signature of the call with the token of rec bound to
 * key_id (NULL: the key-less token). */
static bool signed_with(ab_req *r, const ab_box_rec *rec, const char *key_id, const char *sig,
                        const char *exp, ab_err **err)
{
        char tok[E2B_TOKEN_MAX + 1], want[3 + 44 + 1];
        if (e2b_access_token(r->srv, rec, key_id, tok, err) < 0)
                return false;
        const char *path = req_query(r, "path"), *user = req_query(r, "username");
        sign(path ? path : "", strcmp(r->method, "GET") ? "write" : "read", user ? user : "", tok,
             exp, want);
        explicit_bzero(tok, sizeof(tok));
        return req_secret_eq(sig, want);
}

/* Which token of rec signed the call: its key-less one, or the one of a
 * store API key of the box's app (each key gets its own token of a box).
 * 1 (*key_id: that key, or NULL), 0 none, -1 with *err. */
static int signer(ab_req *r, const ab_box_rec *rec, const char *sig, const char *exp, char **key_id,
                  ab_err **err)
{
        *key_id = NULL;
        if (signed_with(r, rec, NULL, sig, exp, err))
                return 1;
        if (*err)
                return -1;
        ab_api_key *keys = NULL;
        size_t n = 0;
        if (ab_store_key_list_app(r->srv->store, rec->app_id, &keys, &n, err) < 0)
                return -1;
        int rc = 0;
        for (size_t i = 0; i < n && rc == 0; i++) {
                if (signed_with(r, rec, keys[i].key_id, sig, exp, err)) {
                        *key_id = steal_pointer(&keys[i].key_id);
                        rc = 1;
                } else if (*err) {
                        rc = -1;
                }
        }
        ab_api_keys_free(keys, n);
        return rc;
}

int envd_sign_box(ab_req *r, const char *id, ab_box_rec *rec, char **key_id, unsigned *status,
                  const char **why, ab_err **err)
{
        *key_id = NULL;
        *status = 401;
        *why = "invalid signature";
        const char *sig = req_query(r, "signature");
        const char *exp_q = req_query(r, "signature_expiration");
        char exp[SIGN_EXP_DIGITS + 2];
        long long when = 0;
        if (exp_q && !parse_exp(exp_q, exp, &when)) {
                *status = 400;
                *why = "signature_expiration: a Unix time in seconds";
                return 0;
        }
        if (!sig || strncmp(sig, "v1_", 3))
                return 0;
        if (ab_manager_get(r->srv->mgr, id, NULL, rec, err) < 0) {
                if ((*err)->code != AB_E_NOT_FOUND)
                        return -1;
                ab_err_free(err);
                return 0;
        }
        int rc = rec->status == AB_BOX_DELETING
                     ? 0
                     : signer(r, rec, sig, exp_q ? exp : NULL, key_id, err);
        if (rc == 1 && exp_q && when < (long long)time(NULL)) {
                *why = "signature is already expired";
                free(*key_id);
                *key_id = NULL;
                rc = 0;
        }
        if (rc != 1)
                ab_box_rec_clear(rec);
        return rc;
}
