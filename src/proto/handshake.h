/* handshake.h - mutual authentication of a TCP connection to agentbox-init
 * (docs/protocol.md, "Over TCP"). libc only: linked by init and the host.
 *
 * A box reached over the network (a Kubernetes pod) has a 32-byte random
 * secret that only its pod and the server hold. Before any frame, both ends
 * prove they hold it, neither revealing it:
 *
 *   C -> I  HELLO   "ABH1" | nonce_c[32]                       36 bytes
 *   I -> C  CHALLENGE "ABH1" | nonce_s[32] | mac_s[32]         68 bytes
 *   C -> I  PROOF   mac_c[32]                                  32 bytes
 *   I -> C  ACCEPT  "ABOK"                                      4 bytes
 *
 *   mac_s = HMAC-SHA256(secret, "agentbox-init tcp v1 init\0"   | nonce_c | nonce_s)
 *   mac_c = HMAC-SHA256(secret, "agentbox-init tcp v1 client\0" | nonce_c | nonce_s)
 *
 * The client checks mac_s before it answers (it talks to the box it meant,
 * not to whichever pod now has that IP); init checks mac_c against the nonce
 * it just drew (a recorded PROOF is worthless on another connection). The two
 * labels differ, so neither side's MAC can be reflected as the other's. Any
 * failure closes the connection without a word. After ACCEPT the connection
 * carries the framed protocol (proto.h) unchanged and unencrypted. */
#ifndef AB_HANDSHAKE_H
#define AB_HANDSHAKE_H

#include "base/err.h"
#include "base/sha256.h"

#include <stdint.h>

#define ABH_SECRET_LEN    32
#define ABH_NONCE_LEN     32
#define ABH_MAC_LEN       AB_SHA256_LEN
#define ABH_MAGIC         "ABH1"
#define ABH_ACCEPT        "ABOK"
#define ABH_HELLO_LEN     (4 + ABH_NONCE_LEN)
#define ABH_CHALLENGE_LEN (4 + ABH_NONCE_LEN + ABH_MAC_LEN)
#define ABH_PROOF_LEN     ABH_MAC_LEN
#define ABH_ACCEPT_LEN    4
/* The whole handshake must end within this on init's side; the client's
 * default timeout. */
#define ABH_DEADLINE_MS 5000
/* The TCP port agentbox-init listens on in a pod (docs/kubernetes.md). */
#define ABH_DEFAULT_PORT 7433

struct sockaddr_storage;
/* Parses "A.B.C.D:PORT" or "[IPv6]:PORT" (numeric only, port 1-65535) into
 * *ss and *len. 0, or -EINVAL. */
int abh_parse_addr(const char *s, struct sockaddr_storage *ss, unsigned *len);

typedef enum { ABH_ROLE_INIT = 0, ABH_ROLE_CLIENT = 1 } abh_role;

/* The MAC `role` sends for the nonces nc and ns. */
void abh_mac(const uint8_t secret[ABH_SECRET_LEN], abh_role role, const uint8_t nc[ABH_NONCE_LEN],
             const uint8_t ns[ABH_NONCE_LEN], uint8_t out[ABH_MAC_LEN]);

/* Parses a HELLO of len bytes into nc: 0, or -EBADMSG (wrong size or magic). */
int abh_parse_hello(const void *buf, size_t len, uint8_t nc[ABH_NONCE_LEN]);
/* Parses a CHALLENGE and checks its MAC for nc: 0 with *ns filled; -EBADMSG
 * (wrong size or magic), -EACCES (the MAC is not the secret's). */
int abh_parse_challenge(const void *buf, size_t len, const uint8_t secret[ABH_SECRET_LEN],
                        const uint8_t nc[ABH_NONCE_LEN], uint8_t ns[ABH_NONCE_LEN]);
/* Checks a PROOF for the nonces: 0, -EBADMSG (wrong size), -EACCES. */
int abh_check_proof(const void *buf, size_t len, const uint8_t secret[ABH_SECRET_LEN],
                    const uint8_t nc[ABH_NONCE_LEN], const uint8_t ns[ABH_NONCE_LEN]);

/* A secret file's content: exactly 32 bytes, or 64 hex digits (either case)
 * with at most one trailing newline. 0, or -EINVAL. */
int abh_secret_parse(const void *buf, size_t len, uint8_t out[ABH_SECRET_LEN]);
/* Reads and parses the secret file at path (at most 4 KiB). 0 or -errno
 * (-EINVAL for content that is no secret). */
int abh_secret_load(const char *path, uint8_t out[ABH_SECRET_LEN]);

/* init's side on the connected fd: the whole exchange, ending by the
 * absolute monotonic deadline_ms (ab_now_ms()). 0 = authenticated, ACCEPT
 * sent; -EBADMSG, -EACCES, -ETIMEDOUT, -ECONNRESET or -errno otherwise (the
 * caller closes fd without answering). */
int abh_serve(int fd, const uint8_t secret[ABH_SECRET_LEN], uint64_t deadline_ms);

/* The client's side on the connected fd (blocking or not), within
 * timeout_ms. 0, or -1 with *err: AB_E_PERMISSION when init does not hold
 * the secret or refuses ours, AB_E_TIMEOUT, AB_E_UNAVAILABLE for a peer that
 * went away or speaks something else. */
int abh_client(int fd, const uint8_t secret[ABH_SECRET_LEN], int timeout_ms, ab_err **err);

#endif
