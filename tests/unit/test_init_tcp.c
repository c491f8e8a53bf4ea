/* test_init_tcp.c - agentbox-init over TCP: SHA-256/HMAC vectors, the
 * handshake's parsers, and $AGENTBOX_INIT started with --listen-tcp on
 * loopback beside its unix socket. The right secret gets served; a wrong
 * secret, no handshake, a replayed proof and a fake init are refused;
 * connections that never authenticate do not block init. Every wait is
 * bounded. */
#include "base/sha256.h"
#include "base/id.h"
#include "base/util.h"
#include "proto/handshake.h"
#include "proto/initclient.h"
#include "proto/proto.h"
#include "tap.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

static char tmp[256], sock[300], secret_path[300], addr[64];
static uint8_t secret[32];
static pid_t init_pid = -1;

static void msleep(int ms)
{
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
        nanosleep(&ts, NULL);
}

static void hex(const uint8_t *b, size_t n, char *out)
{
        for (size_t i = 0; i < n; i++)
                sprintf(out + 2 * i, "%02x", b[i]);
}

/* ---- the primitives ---- */

static void test_sha256(void)
{
        uint8_t d[32];
        char h[65];
        ab_sha256("abc", 3, d);
        hex(d, 32, h);
        TAP_IS_STR(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
                   "SHA-256 of \"abc\" (FIPS 180-4)");
        ab_sha256("", 0, d);
        hex(d, 32, h);
        TAP_IS_STR(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                   "SHA-256 of nothing");
        const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        ab_sha256(two, strlen(two), d);
        hex(d, 32, h);
        TAP_IS_STR(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
                   "SHA-256 of the two-block message");
        /* a million 'a' fed in uneven pieces */
        ab_sha256_ctx c;
        ab_sha256_init(&c);
        char a[997];
        memset(a, 'a', sizeof(a));
        size_t left = 1000000;
        while (left) {
                size_t k = left < sizeof(a) ? left : sizeof(a);
                ab_sha256_update(&c, a, k);
                left -= k;
        }
        ab_sha256_final(&c, d);
        hex(d, 32, h);
        TAP_IS_STR(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0",
                   "SHA-256 of a million a's, in pieces");

        /* RFC 4231 test cases 1 and 2, and 6 (a key longer than a block) */
        uint8_t k1[20];
        memset(k1, 0x0b, sizeof(k1));
        const void *parts[2] = {"Hi ", "There"};
        size_t lens[2] = {3, 5};
        ab_hmac_sha256(k1, sizeof(k1), parts, lens, 2, d);
        hex(d, 32, h);
        TAP_IS_STR(h, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
                   "HMAC-SHA256, RFC 4231 case 1 (message in two parts)");
        const void *p2[1] = {"what do ya want for nothing?"};
        size_t l2[1] = {28};
        ab_hmac_sha256("Jefe", 4, p2, l2, 1, d);
        hex(d, 32, h);
        TAP_IS_STR(h, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
                   "HMAC-SHA256, RFC 4231 case 2");
        uint8_t k6[131];
        memset(k6, 0xaa, sizeof(k6));
        const void *p6[1] = {"Test Using Larger Than Block-Size Key - Hash Key First"};
        size_t l6[1] = {54};
        ab_hmac_sha256(k6, sizeof(k6), p6, l6, 1, d);
        hex(d, 32, h);
        TAP_IS_STR(h, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
                   "HMAC-SHA256, RFC 4231 case 6 (long key)");
        tap_ok(ab_ct_equal("abcd", "abcd", 4) && !ab_ct_equal("abcd", "abce", 4),
               "ab_ct_equal tells equal from different");
}

static void test_parsers(void)
{
        uint8_t out[32], nc[32], ns[32];
        char hx[66];
        memset(out, 0, sizeof(out));
        tap_ok(abh_secret_parse(secret, 32, out) == 0 && memcmp(out, secret, 32) == 0,
               "a 32-byte secret file is the secret");
        hex(secret, 32, hx);
        hx[64] = '\n';
        memset(out, 0, sizeof(out));
        tap_ok(abh_secret_parse(hx, 65, out) == 0 && memcmp(out, secret, 32) == 0,
               "64 hex digits and a newline are the secret");
        hx[3] = 'g';
        tap_ok(abh_secret_parse(hx, 64, out) == -EINVAL, "a non-hex digit is refused");
        tap_ok(abh_secret_parse(hx, 31, out) == -EINVAL && abh_secret_parse("", 0, out) == -EINVAL,
               "short or empty secrets are refused");

        uint8_t hello[ABH_HELLO_LEN];
        memcpy(hello, "ABH1", 4);
        memset(hello + 4, 7, 32);
        tap_ok(abh_parse_hello(hello, sizeof(hello), nc) == 0 && nc[0] == 7, "HELLO parses");
        tap_ok(abh_parse_hello(hello, sizeof(hello) - 1, nc) == -EBADMSG, "a short HELLO fails");
        hello[0] = 'X';
        tap_ok(abh_parse_hello(hello, sizeof(hello), nc) == -EBADMSG, "a wrong magic fails");

        uint8_t ch[ABH_CHALLENGE_LEN];
        memset(nc, 1, 32);
        memcpy(ch, "ABH1", 4);
        memset(ch + 4, 2, 32);
        abh_mac(secret, ABH_ROLE_INIT, nc, ch + 4, ch + 36);
        tap_ok(abh_parse_challenge(ch, sizeof(ch), secret, nc, ns) == 0 && ns[0] == 2,
               "a CHALLENGE with the secret's MAC is accepted");
        uint8_t other[32];
        memset(other, 0x55, 32);
        tap_ok(abh_parse_challenge(ch, sizeof(ch), other, nc, ns) == -EACCES,
               "a CHALLENGE made with another secret is refused");
        /* a client's proof reflected as init's MAC must not pass */
        abh_mac(secret, ABH_ROLE_CLIENT, nc, ch + 4, ch + 36);
        tap_ok(abh_parse_challenge(ch, sizeof(ch), secret, nc, ns) == -EACCES,
               "the client's MAC reflected as init's is refused");
        uint8_t proof[32];
        abh_mac(secret, ABH_ROLE_CLIENT, nc, ch + 4, proof);
        tap_ok(abh_check_proof(proof, 32, secret, nc, ch + 4) == 0, "a right PROOF passes");
        ns[0] ^= 1;
        memcpy(ns + 1, ch + 5, 31);
        ns[0] = 3;
        tap_ok(abh_check_proof(proof, 32, secret, nc, ns) == -EACCES,
               "a PROOF for another nonce is refused");

        struct sockaddr_storage ss;
        unsigned len;
        tap_ok(abh_parse_addr("10.1.2.3:7433", &ss, &len) == 0 && ss.ss_family == AF_INET &&
                   ntohs(((struct sockaddr_in *)&ss)->sin_port) == 7433,
               "IPv4:PORT parses");
        tap_ok(abh_parse_addr("[fd00::1]:1", &ss, &len) == 0 && ss.ss_family == AF_INET6,
               "[IPv6]:PORT parses");
        tap_ok(abh_parse_addr("10.1.2.3", &ss, &len) < 0 &&
                   abh_parse_addr("10.1.2.3:0", &ss, &len) < 0 &&
                   abh_parse_addr("10.1.2.3:65536", &ss, &len) < 0 &&
                   abh_parse_addr("host:80", &ss, &len) < 0 &&
                   abh_parse_addr("fd00::1:80", &ss, &len) < 0 &&
                   abh_parse_addr(":80", &ss, &len) < 0,
               "addresses without a port, out of range, by name or unbracketed IPv6 fail");
}

/* ---- init over TCP ---- */

static int free_port(void)
{
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t l = sizeof(a);
        if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 ||
            getsockname(s, (struct sockaddr *)&a, &l) < 0)
                abort();
        close(s);
        return ntohs(a.sin_port);
}

static int raw_connect(void)
{
        struct sockaddr_storage ss;
        unsigned len;
        if (abh_parse_addr(addr, &ss, &len) < 0)
                abort();
        int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (s < 0 || connect(s, (struct sockaddr *)&ss, len) < 0) {
                if (s >= 0)
                        close(s);
                return -1;
        }
        return s;
}

static pid_t spawn_init(const char *listen_tcp, const char *secret_file, int *status_out)
{
        const char *bin = getenv("AGENTBOX_INIT");
        pid_t pid = fork();
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                const char *argv[12];
                int n = 0;
                argv[n++] = bin;
                argv[n++] = "--listen";
                argv[n++] = sock;
                argv[n++] = "--workdir";
                argv[n++] = tmp;
                if (listen_tcp) {
                        argv[n++] = "--listen-tcp";
                        argv[n++] = listen_tcp;
                }
                if (secret_file) {
                        argv[n++] = "--secret-file";
                        argv[n++] = secret_file;
                }
                argv[n] = NULL;
                execv(bin, (char **)argv);
                _exit(127);
        }
        if (status_out) {
                /* expected to fail at once */
                for (int i = 0; i < 100; i++) {
                        if (waitpid(pid, status_out, WNOHANG) == pid)
                                return -1;
                        msleep(20);
                }
                kill(pid, SIGKILL);
                waitpid(pid, NULL, 0);
                *status_out = -1;
                return -1;
        }
        return pid;
}

static bool ping_unix(void)
{
        ab_err *e = NULL;
        int fd = abc_connect(AT_FDCWD, sock, &e);
        if (fd < 0) {
                ab_err_free(&e);
                return false;
        }
        char *v = NULL;
        int r = abc_ping(fd, &v, &e);
        close(fd);
        free(v);
        ab_err_free(&e);
        return r == 0;
}

static int ping_tcp(const uint8_t *key, ab_code *code)
{
        ab_err *e = NULL;
        *code = 0;
        int fd = abc_connect_tcp(addr, key, 3000, &e);
        if (fd < 0) {
                *code = e ? e->code : AB_E_INTERNAL;
                if (e)
                        tap_diag("  (%s)", e->msg);
                ab_err_free(&e);
                return -1;
        }
        char *v = NULL;
        int r = abc_ping(fd, &v, &e);
        close(fd);
        free(v);
        if (e)
                *code = e->code;
        ab_err_free(&e);
        return r;
}

/* True when the peer closes fd within ms without sending a byte. */
static bool closed_silently(int fd, int ms)
{
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, ms) <= 0)
                return false;
        char b[8];
        ssize_t n = recv(fd, b, sizeof(b), 0);
        return n == 0 || (n < 0 && errno == ECONNRESET);
}

static void start_init(void)
{
        int port = free_port();
        snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
        init_pid = spawn_init(addr, secret_path, NULL);
        for (int i = 0; i < 250; i++) {
                int s = raw_connect();
                if (s >= 0) {
                        close(s);
                        if (ping_unix())
                                return;
                }
                msleep(20);
        }
        tap_diag("init did not start listening on %s", addr);
        abort();
}

static void test_start_refusals(void)
{
        int st = 0;
        spawn_init("127.0.0.1:1", NULL, &st);
        tap_ok(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 2,
               "init refuses --listen-tcp without a secret file (exit 2)");
        char bad[320];
        snprintf(bad, sizeof(bad), "%s/bad-secret", tmp);
        int fd = open(bad, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        (void)!write(fd, "short\n", 6);
        close(fd);
        spawn_init("127.0.0.1:1", bad, &st);
        tap_ok(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 1,
               "init refuses a secret file that holds no secret (exit 1)");
        spawn_init("localhost:7433", secret_path, &st);
        tap_ok(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 2,
               "init refuses a TCP address that is not IP:PORT (exit 2)");
}

static void test_right_secret(void)
{
        ab_code code;
        tap_ok(ping_tcp(secret, &code) == 0, "the box's secret gets a PING answered over TCP");
        ab_err *e = NULL;
        int fd = abc_connect_tcp(addr, secret, 3000, &e);
        abc_exec_req req = {.command = "echo over-tcp; echo err >&2; exit 3", .stdin_fd = -1};
        abc_exec_res res = {0};
        int r = fd >= 0 ? abc_exec(fd, &req, NULL, NULL, &res, &e) : -1;
        tap_ok(r == 0 && res.exit_code == 3 && res.stdout_bytes == 9,
               "an exec over TCP runs and reports its exit code and output");
        if (fd >= 0)
                close(fd);
        ab_err_free(&e);
}

static void test_wrong_secret(void)
{
        uint8_t other[32];
        memcpy(other, secret, 32);
        other[31] ^= 0x80;
        ab_code code;
        tap_ok(ping_tcp(other, &code) < 0 && code == AB_E_PERMISSION,
               "another secret (one bit off) is refused with AB_E_PERMISSION");
}

static void test_no_handshake(void)
{
        /* a client that speaks the framed protocol at once, without a handshake */
        int s = raw_connect();
        abp_buf b = {0};
        abp_frame_begin(&b, ABP_PING);
        int r = abp_frame_end(&b);
        r = r == 0 ? abp_send(s, &b, 2000) : r;
        abp_buf_free(&b);
        /* init wants 36 bytes of HELLO; a PING frame is 8, so pad with garbage */
        char junk[64];
        memset(junk, 'x', sizeof(junk));
        (void)!send(s, junk, sizeof(junk), MSG_NOSIGNAL);
        tap_ok(r == 0 && closed_silently(s, 3000),
               "a frame without a handshake is met with a silent close");
        close(s);
}

/* Runs a handshake by hand with the right secret, returning its HELLO and
 * PROOF so they can be replayed. */
static bool handshake_by_hand(uint8_t hello[ABH_HELLO_LEN], uint8_t proof[32], bool *accepted)
{
        int s = raw_connect();
        uint8_t ch[ABH_CHALLENGE_LEN], ns[32], acc[4];
        memcpy(hello, "ABH1", 4);
        memset(hello + 4, 0x42, 32);
        if (s < 0 || ab_send_all(s, hello, ABH_HELLO_LEN, 2000) < 0 ||
            ab_read_full(s, ch, sizeof(ch)) != (ssize_t)sizeof(ch) ||
            abh_parse_challenge(ch, sizeof(ch), secret, hello + 4, ns) < 0) {
                if (s >= 0)
                        close(s);
                return false;
        }
        abh_mac(secret, ABH_ROLE_CLIENT, hello + 4, ns, proof);
        *accepted = ab_send_all(s, proof, 32, 2000) == 0 && ab_read_full(s, acc, 4) == 4 &&
                    memcmp(acc, "ABOK", 4) == 0;
        close(s);
        return true;
}

static void test_replay(void)
{
        uint8_t hello[ABH_HELLO_LEN], proof[32], ch[ABH_CHALLENGE_LEN];
        bool accepted = false;
        tap_ok(handshake_by_hand(hello, proof, &accepted) && accepted,
               "a handshake made by hand with the secret is accepted");
        /* the same HELLO and PROOF on a new connection: init draws a new nonce */
        int s = raw_connect();
        bool got = s >= 0 && ab_send_all(s, hello, sizeof(hello), 2000) == 0 &&
                   ab_read_full(s, ch, sizeof(ch)) == (ssize_t)sizeof(ch);
        bool refused = got && ab_send_all(s, proof, 32, 2000) == 0 && closed_silently(s, 3000);
        tap_ok(refused, "the recorded PROOF replayed on a new connection is refused");
        if (s >= 0)
                close(s);
}

struct fake_init {
        int lfd;
        bool got_proof;
};

/* Answers a HELLO with a challenge made with another secret, then waits to
 * see whether the client sends a PROOF anyway. */
static void *fake_init(void *arg)
{
        struct fake_init *f = arg;
        int c = accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC);
        uint8_t hello[ABH_HELLO_LEN], ch[ABH_CHALLENGE_LEN], other[32], b[32];
        memset(other, 9, sizeof(other));
        if (c < 0 || ab_read_full(c, hello, sizeof(hello)) != (ssize_t)sizeof(hello))
                return NULL;
        memcpy(ch, "ABH1", 4);
        memset(ch + 4, 1, 32);
        abh_mac(other, ABH_ROLE_INIT, hello + 4, ch + 4, ch + 36);
        if (ab_send_all(c, ch, sizeof(ch), 2000) == 0) {
                struct pollfd p = {.fd = c, .events = POLLIN};
                f->got_proof = poll(&p, 1, 2000) > 0 && recv(c, b, sizeof(b), 0) > 0;
        }
        close(c);
        return NULL;
}

static void test_fake_init(void)
{
        struct fake_init f = {.lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)};
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t l = sizeof(a);
        if (f.lfd < 0 || bind(f.lfd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
            listen(f.lfd, 4) < 0 || getsockname(f.lfd, (struct sockaddr *)&a, &l) < 0)
                abort();
        char fa[64];
        snprintf(fa, sizeof(fa), "127.0.0.1:%d", ntohs(a.sin_port));
        pthread_t t;
        pthread_create(&t, NULL, fake_init, &f);
        ab_err *e = NULL;
        int fd = abc_connect_tcp(fa, secret, 3000, &e);
        pthread_join(t, NULL);
        tap_ok(fd < 0 && e && e->code == AB_E_PERMISSION,
               "a peer without the secret (another box at that IP) is refused by the client");
        tap_ok(!f.got_proof, "the client sends no PROOF to a peer that failed its challenge");
        if (fd >= 0)
                close(fd);
        ab_err_free(&e);
        close(f.lfd);
}

static void test_half_open(void)
{
        enum { N = 20 }; /* more than init's 16 handshakes in flight */
        int idle[N];
        for (int i = 0; i < N; i++)
                idle[i] = raw_connect();
        msleep(200);
        uint64_t t0 = ab_now_ms();
        tap_ok(ping_unix() && ab_now_ms() - t0 < 1000,
               "with 20 silent TCP connections open, the unix socket is served at once");
        /* with its handshake slots full, init closes new connections at once */
        ab_code code;
        int r = ping_tcp(secret, &code);
        tap_diag("TCP ping with every handshake slot held: %d (%s)", r, ab_code_name(code));
        /* after the deadline the silent ones are dropped and TCP works again */
        bool dropped = true;
        for (int i = 0; i < N && i < 16; i++)
                dropped =
                    dropped && idle[i] >= 0 && closed_silently(idle[i], ABH_DEADLINE_MS + 3000);
        tap_ok(dropped, "silent connections are closed at the handshake deadline");
        bool back = false;
        for (int i = 0; i < 50 && !back; i++) {
                back = ping_tcp(secret, &code) == 0;
                if (!back)
                        msleep(100);
        }
        tap_ok(back, "once they are gone, the secret's TCP connections are served again");
        for (int i = 0; i < N; i++)
                if (idle[i] >= 0)
                        close(idle[i]);

        /* a few silent connections never block a good one */
        int few[3];
        for (int i = 0; i < 3; i++)
                few[i] = raw_connect();
        t0 = ab_now_ms();
        tap_ok(ping_tcp(secret, &code) == 0 && ab_now_ms() - t0 < 1000,
               "three silent connections do not delay an authenticated one");
        for (int i = 0; i < 3; i++)
                if (few[i] >= 0)
                        close(few[i]);
}

int main(void)
{
        signal(SIGPIPE, SIG_IGN);
        if (!getenv("AGENTBOX_INIT"))
                tap_skip_all("AGENTBOX_INIT is not set");
        snprintf(tmp, sizeof(tmp), "/tmp/ab-inittcp-XXXXXX");
        if (!mkdtemp(tmp))
                abort();
        snprintf(sock, sizeof(sock), "%s/init.sock", tmp);
        snprintf(secret_path, sizeof(secret_path), "%s/secret", tmp);
        ab_random_bytes(secret, sizeof(secret));
        int fd = open(secret_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0 || ab_write_all(fd, secret, sizeof(secret)) < 0)
                abort();
        close(fd);

        test_sha256();
        test_parsers();
        test_start_refusals();
        start_init();
        test_right_secret();
        test_wrong_secret();
        test_no_handshake();
        test_replay();
        test_fake_init();
        test_half_open();
        tap_ok(ping_unix(), "init still serves its unix socket at the end");

        kill(init_pid, SIGTERM);
        waitpid(init_pid, NULL, 0);
        (void)!ab_rm_tree_at(AT_FDCWD, tmp);
        return tap_done();
}
