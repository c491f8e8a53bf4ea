/* fuzz_envd_token - libFuzzer target for the parser of E2B envd access
 * tokens (X-Access-Token, fronts/e2b/front_e2b.h: e2b_token_parse). Besides memory
 * errors it checks its promises: a key-less token is E2B_TOKEN_LEN
 * characters; a key-bound one is "<key id>.<MAC>" with the key id a copy of
 * the token's head, of 1 to E2B_TOKEN_KEY_MAX characters of [A-Za-z0-9_-]
 * (so no key id holds the separator), and the MAC E2B_TOKEN_LEN characters;
 * a refusal leaves no key id. Build and run with scripts/fuzz.sh. */
#include "fronts/e2b/front_e2b.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define check(cond) ((cond) ? (void)0 : (fprintf(stderr, "check failed: %s\n", #cond), abort()))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char *tok = xmalloc(size + 1); /* exactly the bytes and a NUL: overreads are caught */
        memcpy(tok, data, size);
        tok[size] = 0;
        size_t n = strlen(tok);
        char *key_id = (char *)"not set";
        bool ok = e2b_token_parse(tok, &key_id);
        if (!ok) {
                check(key_id == NULL);
        } else if (!key_id) {
                check(n == E2B_TOKEN_LEN);
        } else {
                size_t kl = strlen(key_id);
                check(kl >= 1 && kl <= E2B_TOKEN_KEY_MAX);
                check(n == kl + 1 + E2B_TOKEN_LEN);
                check(!memcmp(tok, key_id, kl) && tok[kl] == '.');
                for (size_t i = 0; i < kl; i++)
                        check(isalnum((unsigned char)key_id[i]) || key_id[i] == '_' ||
                              key_id[i] == '-');
                free(key_id);
        }
        free(tok);
        return 0;
}
