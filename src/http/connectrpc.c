/* The Connect protocol's framing and error mapping (connectrpc.h). */
#include "http/connectrpc.h"

#include <openssl/evp.h>
#include <string.h>

const char *crpc_code_of(ab_code c)
{
        switch (c) {
        case AB_E_INVALID:
                return "invalid_argument";
        case AB_E_NOT_FOUND:
                return "not_found";
        case AB_E_CONFLICT:
                return "failed_precondition";
        case AB_E_UNAVAILABLE:
                return "unavailable";
        case AB_E_LIMIT:
        case AB_E_QUOTA:
        case AB_E_STORAGE:
                return "resource_exhausted";
        case AB_E_PERMISSION:
                return "permission_denied";
        case AB_E_TIMEOUT:
                return "deadline_exceeded";
        case AB_E_UNSUPPORTED:
                return "unimplemented";
        default:
                return "internal";
        }
}

unsigned crpc_http_status(const char *code)
{
        static const struct {
                const char *code;
                unsigned status;
        } map[] = {
            {"canceled", 499},
            {"unknown", 500},
            {"invalid_argument", 400},
            {"deadline_exceeded", 504},
            {"not_found", 404},
            {"already_exists", 409},
            {"permission_denied", 403},
            {"resource_exhausted", 429},
            {"failed_precondition", 400},
            {"aborted", 409},
            {"out_of_range", 400},
            {"unimplemented", 501},
            {"internal", 500},
            {"unavailable", 503},
            {"data_loss", 500},
            {"unauthenticated", 401},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(map); i++)
                if (!strcmp(map[i].code, code))
                        return map[i].status;
        return 500;
}

void crpc_envelope(ab_buf *b, unsigned flags, json_t *j)
{
        char *txt = json_dumps(j, JSON_COMPACT);
        json_decref(j);
        if (!txt)
                txt = xstrdup("{}");
        size_t n = strlen(txt);
        unsigned char head[5] = {(unsigned char)flags, (unsigned char)(n >> 24),
                                 (unsigned char)(n >> 16), (unsigned char)(n >> 8),
                                 (unsigned char)n};
        ab_buf_add(b, head, sizeof(head));
        ab_buf_add(b, txt, n);
        free(txt);
}

void crpc_end(ab_buf *b, const char *code, const char *message)
{
        json_t *j = code ? json_pack("{s:{s:s,s:s?}}", "error", "code", code, "message", message)
                         : json_object();
        crpc_envelope(b, CRPC_FLAG_END, j);
}

/* One envelope at body[*off]: its flags and message. 1 = read, 0 = no more
 * bytes, -1 = malformed. */
static int next_envelope(const char *body, size_t len, size_t *off, unsigned *flags,
                         const char **msg, size_t *mlen)
{
        if (*off == len)
                return 0;
        if (len - *off < 5)
                return -1;
        const unsigned char *h = (const unsigned char *)body + *off;
        size_t n = (size_t)h[1] << 24 | (size_t)h[2] << 16 | (size_t)h[3] << 8 | h[4];
        if (n > CRPC_MAX_MESSAGE || n > len - *off - 5)
                return -1;
        *flags = h[0];
        *msg = body + *off + 5;
        *mlen = n;
        *off += 5 + n;
        return 1;
}

static int parse_object(const char *s, size_t n, json_t **out, ab_err **err)
{
        if (n == 0) {
                *out = json_object();
                return 0;
        }
        json_error_t je;
        json_t *j = json_loadb(s, n, JSON_REJECT_DUPLICATES, &je);
        if (!j || !json_is_object(j)) {
                json_decref(j);
                return ab_err_set(err, AB_E_INVALID, 0, "request message: not a JSON object%s%s",
                                  j ? "" : ": ", j ? "" : je.text);
        }
        *out = j;
        return 0;
}

int crpc_parse_request(const char *body, size_t len, bool enveloped, json_t **out, ab_err **err)
{
        if (!enveloped)
                return parse_object(body, len, out, err);
        size_t off = 0;
        unsigned flags = 0;
        const char *msg = NULL;
        size_t mlen = 0;
        int k = next_envelope(body, len, &off, &flags, &msg, &mlen);
        if (k == 0) {
                *out = json_object();
                return 0;
        }
        if (k < 0 || (flags & ~(unsigned)CRPC_FLAG_END))
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "request: a malformed or compressed Connect envelope");
        return parse_object(msg, mlen, out, err);
}

int crpc_parse_stream(const char *body, size_t len, json_t **out, ab_err **err)
{
        json_t *a = json_array();
        size_t off = 0;
        for (;;) {
                unsigned flags = 0;
                const char *msg = NULL;
                size_t mlen = 0;
                int k = next_envelope(body, len, &off, &flags, &msg, &mlen);
                if (k == 0)
                        break;
                if (k < 0 || (flags & CRPC_FLAG_COMPRESSED)) {
                        json_decref(a);
                        return ab_err_set(err, AB_E_INVALID, 0,
                                          "request: a malformed or compressed Connect envelope");
                }
                if (flags & CRPC_FLAG_END)
                        break;
                json_t *m;
                if (parse_object(msg, mlen, &m, err) < 0) {
                        json_decref(a);
                        return -1;
                }
                json_array_append_new(a, m);
        }
        *out = a;
        return 0;
}

char *crpc_b64_encode(const void *data, size_t len)
{
        char *out = xmalloc(xadd(xmul((len + 2) / 3, 4), 1));
        /* EVP_EncodeBlock takes an int: encode in slices */
        size_t o = 0;
        const unsigned char *p = data;
        while (len > 0) {
                size_t n = len > 3u * (1u << 20) ? 3u * (1u << 20) : len;
                o += (size_t)EVP_EncodeBlock((unsigned char *)out + o, p, (int)n);
                p += n;
                len -= n;
        }
        out[o] = 0;
        return out;
}

int crpc_b64_decode(const char *s, char **out, size_t *len)
{
        size_t n = strlen(s);
        /* standard alphabet, padded to a multiple of 4 */
        _cleanup_free_ char *t = xmalloc(xadd(n, 4));
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                if (c == '-')
                        c = '+';
                else if (c == '_')
                        c = '/';
                else if (c == '=')
                        break;
                t[k++] = c;
        }
        size_t pad = 0;
        while ((k + pad) % 4)
                t[k + pad++] = '=';
        if (pad == 3)
                return -1;
        k += pad;
        t[k] = 0;
        char *o = xmalloc(k / 4 * 3 + 1);
        if (k > (size_t)INT32_MAX) {
                free(o);
                return -1;
        }
        int got = k ? EVP_DecodeBlock((unsigned char *)o, (unsigned char *)t, (int)k) : 0;
        if (got < 0) {
                free(o);
                return -1;
        }
        size_t m = (size_t)got - pad; /* DecodeBlock counts the padding's zero bytes */
        o[m] = 0;
        *out = o;
        *len = m;
        return 0;
}
