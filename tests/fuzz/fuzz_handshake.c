/* fuzz_handshake - libFuzzer target for agentbox-init's TCP handshake
 * (proto/handshake.h): what a network peer sends either side. The input is
 * cut into a HELLO, a CHALLENGE and a PROOF (each taking the bytes it wants,
 * the last one the rest), and also tried whole as a secret file and an
 * address. A forged message must never authenticate: only a MAC computed
 * with the secret may pass. */
#include "proto/handshake.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint8_t secret[ABH_SECRET_LEN] = "0123456789abcdef0123456789abcde";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        uint8_t nc[ABH_NONCE_LEN], ns[ABH_NONCE_LEN], out[ABH_SECRET_LEN];
        (void)!abh_secret_parse(data, size, out);
        char *s = malloc(size + 1);
        memcpy(s, data, size);
        s[size] = 0;
        struct sockaddr_storage ss;
        unsigned len;
        (void)!abh_parse_addr(s, &ss, &len);
        free(s);

        size_t off = 0, take = size < ABH_HELLO_LEN ? size : ABH_HELLO_LEN;
        if (abh_parse_hello(data, take, nc) < 0)
                memset(nc, 0, sizeof(nc));
        off += take;
        take = size - off < ABH_CHALLENGE_LEN ? size - off : ABH_CHALLENGE_LEN;
        /* a challenge from the fuzzer, who has no secret, never passes */
        if (abh_parse_challenge(data + off, take, secret, nc, ns) == 0)
                abort();
        memset(ns, 0x5a, sizeof(ns));
        off += take;
        if (abh_check_proof(data + off, size - off, secret, nc, ns) == 0)
                abort();
        return 0;
}
