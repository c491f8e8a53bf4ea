/* Unit tests: ab_fetch, the code runner's only way to the network.
 *
 * - ab_fetch_addr_allowed over every internal IPv4/IPv6 range and their edges
 *   (documentation ranges stay allowed: they are our "outside" addresses);
 * - SSRF attacks against listening sockets this test opens on 127.0.0.1 and
 *   ::1: every request must fail with permission_denied AND the sockets must
 *   have no connection waiting (nothing is ever accepted, so the kernel's
 *   backlog counts every connection attempt);
 * - DNS rebinding through req->resolve, redirects into the inside, schemes,
 *   methods and headers, size limits, timeouts;
 * - the successful path against a test host made here: a network namespace
 *   (unshare in a child) joined by a veth pair, 203.0.113.1/24 on our side and
 *   203.0.113.10/24 (plus 2001:db8:ab::/64 when IPv6 works) on its side, and a
 *   tiny HTTP server in the namespace.
 * No packet can leave the machine: as root the test first moves itself into a
 * network namespace of its own (only lo and the veth), so even a broken fetch
 * or a stray DNS lookup goes nowhere. Without root the namespace checks, and
 * the refusals whose failure would reach another machine, are skipped with
 * the reason. */
#include "runners/fetch.h"
#include "tap.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

/* ---- the address policy ---- */

static bool allowed(const char *ip)
{
        struct sockaddr_storage ss = {0};
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        if (inet_pton(AF_INET, ip, &s4->sin_addr) == 1)
                ss.ss_family = AF_INET;
        else if (inet_pton(AF_INET6, ip, &s6->sin6_addr) == 1)
                ss.ss_family = AF_INET6;
        else
                abort(); /* a typo in the table below */
        return ab_fetch_addr_allowed((struct sockaddr *)&ss);
}

static void test_policy(void)
{
        static const char *const refused[] = {
            /* IPv4 */
            "0.0.0.0",
            "0.255.255.255",
            "10.0.0.1",
            "10.255.255.255",
            "100.64.0.0",
            "100.127.255.255",
            "127.0.0.1",
            "127.255.255.254",
            "169.254.0.1",
            "169.254.169.254",
            "169.254.255.255",
            "172.16.0.0",
            "172.31.255.255",
            "192.0.0.0",
            "192.0.0.255",
            "192.168.0.1",
            "192.168.255.255",
            "198.18.0.0",
            "198.19.255.255",
            "224.0.0.1",
            "239.255.255.255",
            "240.0.0.1",
            "255.255.255.254",
            "255.255.255.255",
            /* IPv6 */
            "::",
            "::1",
            "fc00::1",
            "fdff:ffff:ffff::1",
            "fe80::1",
            "febf:ffff::1",
            "fec0::1",
            "feff::1",
            "ff02::1",
            "ff0e::1",
            "ffff::1",
            /* IPv4-mapped */
            "::ffff:127.0.0.1",
            "::ffff:10.1.2.3",
            "::ffff:169.254.169.254",
            "::ffff:0.0.0.0",
            "::ffff:100.64.1.1",
            "::ffff:192.168.1.1",
            "::ffff:255.255.255.255",
            "::ffff:224.0.0.1",
            /* deprecated IPv4-compatible */
            "::127.0.0.1",
            "::203.0.113.10",
            /* NAT64 (well-known and local-use prefix) embedding an internal address */
            "64:ff9b::127.0.0.1",
            "64:ff9b::169.254.169.254",
            "64:ff9b::10.0.0.1",
            "64:ff9b::192.168.1.1",
            "64:ff9b:1::a00:1",
            /* 6to4 embedding an internal address */
            "2002:7f00:1::1",
            "2002:a00:1::",
            "2002:a9fe:a9fe::1",
            "2002:c0a8:101::1",
            /* Teredo with an internal server or (inverted) client address */
            "2001:0:a00:1::",
            "2001:0:cb00:710a::80ff:fefe",
        };
        static const char *const ok[] = {
            /* the documentation ranges: tests use them as "outside" */
            "192.0.2.1",
            "198.51.100.7",
            "203.0.113.10",
            "2001:db8::1",
            /* just outside each refused IPv4 range */
            "1.0.0.0",
            "9.255.255.255",
            "11.0.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "126.255.255.255",
            "128.0.0.0",
            "169.253.255.255",
            "169.255.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "192.0.1.0",
            "192.167.255.255",
            "192.169.0.0",
            "198.17.255.255",
            "198.20.0.0",
            "223.255.255.255",
            /* public IPv6 and translations of public addresses */
            "2606:4700::1111",
            "fbff:ffff::1",
            "::2:0:0:1",
            "::ffff:203.0.113.10",
            "64:ff9b::203.0.113.10",
            "64:ff9b::198.51.100.1",
            "2002:cb00:710a::1",
            "2001:0:cb00:710a::34ff:fff5",
        };
        int bad = 0;
        for (size_t i = 0; i < AB_ARRAY_LEN(refused); i++)
                if (allowed(refused[i])) {
                        tap_diag("  %s is allowed", refused[i]);
                        bad++;
                }
        tap_ok(bad == 0, "policy: %zu internal addresses refused", AB_ARRAY_LEN(refused));
        bad = 0;
        for (size_t i = 0; i < AB_ARRAY_LEN(ok); i++)
                if (!allowed(ok[i])) {
                        tap_diag("  %s is refused", ok[i]);
                        bad++;
                }
        tap_ok(bad == 0, "policy: %zu outside addresses allowed", AB_ARRAY_LEN(ok));

        struct sockaddr_un un = {.sun_family = AF_UNIX};
        tap_ok(!ab_fetch_addr_allowed((struct sockaddr *)&un), "policy: AF_UNIX refused");
        tap_ok(!ab_fetch_addr_allowed(NULL), "policy: NULL refused");
}

/* ---- loopback targets: listening sockets that must never see a connection ---- */

static int lo4 = -1, lo6 = -1, p4, p6;

/* Listens on ip:*port (0: any port, then *port says which); IPv6 sockets take
 * IPv4 too. Returns the fd or -1. */
static int listen_on(int family, const char *ip, int *port)
{
        int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -1;
        int one = 1, zero = 0;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        struct sockaddr_storage ss = {0};
        socklen_t len;
        if (family == AF_INET) {
                struct sockaddr_in *s = (struct sockaddr_in *)&ss;
                s->sin_family = AF_INET;
                s->sin_port = htons((uint16_t)*port);
                inet_pton(AF_INET, ip, &s->sin_addr);
                len = sizeof(*s);
        } else {
                struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;
                s->sin6_family = AF_INET6;
                s->sin6_port = htons((uint16_t)*port);
                inet_pton(AF_INET6, ip, &s->sin6_addr);
                len = sizeof(*s);
                setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
        }
        if (bind(fd, (struct sockaddr *)&ss, len) < 0 || listen(fd, 64) < 0 ||
            getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
                close(fd);
                return -1;
        }
        *port = ntohs(family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                        : ((struct sockaddr_in6 *)&ss)->sin6_port);
        return fd;
}

/* Connections waiting in the backlog (we never accept otherwise). */
static int drain(int fd)
{
        int n = 0;
        if (fd < 0)
                return 0;
        for (;;) {
                int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (c < 0)
                        break;
                close(c);
                n++;
        }
        return n;
}

/* ---- the test host in its own network namespace ---- */

static struct {
        pid_t pid;        /* the server: PID 1 of nothing, just the netns holder */
        char host_if[16]; /* our end of the veth pair */
        char host_addr[INET_ADDRSTRLEN], ns_addr[INET_ADDRSTRLEN];
        char host_addr6[INET6_ADDRSTRLEN], ns_addr6[INET6_ADDRSTRLEN];
        bool up, up6;
} net = {.pid = -1};

/* Runs argv quietly; returns its exit status (or -1). Output goes to out when given. */
static int run(const char *const argv[], char *out, size_t out_len)
{
        int pfd[2] = {-1, -1};
        if (out && pipe2(pfd, O_CLOEXEC) < 0)
                return -1;
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0)
                return -1;
        if (pid == 0) {
                int null = open("/dev/null", O_RDWR | O_CLOEXEC);
                dup2(null, 0);
                dup2(out ? pfd[1] : null, 1);
                dup2(null, 2);
                execvp(argv[0], (char *const *)argv);
                _exit(127);
        }
        if (out) {
                close(pfd[1]);
                size_t n = 0;
                ssize_t r;
                while (n + 1 < out_len && (r = read(pfd[0], out + n, out_len - 1 - n)) > 0)
                        n += (size_t)r;
                out[n] = '\0';
                close(pfd[0]);
        }
        int st;
        while (waitpid(pid, &st, 0) < 0)
                if (errno != EINTR)
                        return -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *header_in(const char *head, const char *name, char *out, size_t len)
{
        char pat[64];
        snprintf(pat, sizeof(pat), "\r\n%s:", name);
        const char *p = strcasestr(head, pat);
        out[0] = '\0';
        if (!p)
                return out;
        p += strlen(pat);
        while (*p == ' ')
                p++;
        snprintf(out, len, "%.*s", (int)strcspn(p, "\r\n"), p);
        return out;
}

static void respond(int c, const char *status, const char *extra, const char *body, size_t len)
{
        char head[1024];
        int n = snprintf(head, sizeof(head),
                         "HTTP/1.1 %s\r\nContent-Length: %zu\r\nConnection: close\r\n%s\r\n",
                         status, len, extra);
        if (ab_write_all(c, head, (size_t)n) == 0 && len)
                (void)!ab_write_all(c, body, len);
}

/* Writes n bytes of 'x' with no Content-Length: the body ends at close. */
static void stream(int c, size_t n)
{
        static const char head[] = "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n";
        static char chunk[65536];
        memset(chunk, 'x', sizeof(chunk));
        if (ab_write_all(c, head, sizeof(head) - 1) < 0)
                return;
        while (n > 0) {
                size_t k = n < sizeof(chunk) ? n : sizeof(chunk);
                if (ab_write_all(c, chunk, k) < 0)
                        return;
                n -= k;
        }
}

/* One request per connection, in its own process. */
static void serve(int c, int nconn)
{
        static char buf[65536];
        size_t n = 0;
        char *end = NULL;
        while (n < sizeof(buf) - 1 && !end) {
                ssize_t r = read(c, buf + n, sizeof(buf) - 1 - n);
                if (r <= 0)
                        return;
                n += (size_t)r;
                buf[n] = '\0';
                end = strstr(buf, "\r\n\r\n");
        }
        if (!end)
                return;
        size_t head_len = (size_t)(end + 4 - buf);
        char cl[32];
        size_t want =
            head_len + strtoul(header_in(buf, "Content-Length", cl, sizeof(cl)), NULL, 10);
        while (n < want && n < sizeof(buf) - 1) {
                ssize_t r = read(c, buf + n, sizeof(buf) - 1 - n);
                if (r <= 0)
                        break;
                n += (size_t)r;
        }
        buf[n] = '\0';
        char method[16] = "", path[4096] = "";
        if (sscanf(buf, "%15s %4095s", method, path) != 2)
                return;

        if (strcmp(path, "/json") == 0) {
                static const char b[] = "{\"hello\":\"world\"}";
                respond(c, "200 OK", "Content-Type: application/json\r\n", b, sizeof(b) - 1);
        } else if (strcmp(path, "/headers") == 0) {
                respond(c, "200 OK",
                        "Content-Type: text/plain\r\nX-Multi: one\r\nX-Multi: two\r\n"
                        "X-Mixed-Case:   Value  \r\n",
                        "plain text", 10);
        } else if (strcmp(path, "/teapot") == 0) {
                respond(c, "418 I'm a teapot", "", "short and stout", 15);
        } else if (strcmp(path, "/redirect") == 0) {
                respond(c, "302 Found", "Location: /json\r\n", "", 0);
        } else if (strcmp(path, "/r303") == 0) {
                respond(c, "303 See Other", "Location: /echo\r\n", "", 0);
        } else if (strcmp(path, "/r307") == 0) {
                respond(c, "307 Temporary Redirect", "Location: /echo\r\n", "", 0);
        } else if (strcmp(path, "/loop") == 0) {
                respond(c, "302 Found", "Location: /loop\r\n", "", 0);
        } else if (strncmp(path, "/goto?", 6) == 0) {
                char loc[4200];
                snprintf(loc, sizeof(loc), "Location: %s\r\n", path + 6);
                respond(c, "302 Found", loc, "", 0);
        } else if (strcmp(path, "/echo") == 0) {
                respond(c, "200 OK", "Content-Type: text/plain\r\n", buf, n);
        } else if (strcmp(path, "/big") == 0) {
                size_t len = (size_t)3 << 20;
                char *b = malloc(len);
                memset(b, 'b', len);
                respond(c, "200 OK", "", b, len);
                free(b);
        } else if (strncmp(path, "/stream?", 8) == 0) {
                stream(c, strtoul(path + 8, NULL, 10));
        } else if (strcmp(path, "/hang") == 0) {
                sleep(30);
        } else if (strcmp(path, "/count") == 0) {
                char b[32];
                int len = snprintf(b, sizeof(b), "%d", nconn);
                respond(c, "200 OK", "", b, (size_t)len);
        } else {
                respond(c, "404 Not Found", "", "", 0);
        }
}

static void server_loop(int lfd)
{
        signal(SIGPIPE, SIG_IGN);
        signal(SIGCHLD, SIG_IGN); /* reap connection children */
        int nconn = 0;
        for (;;) {
                int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
                if (c < 0) {
                        if (errno == EINTR)
                                continue;
                        _exit(1);
                }
                nconn++;
                pid_t pid = fork();
                if (pid == 0) {
                        prctl(PR_SET_PDEATHSIG, SIGKILL);
                        close(lfd);
                        serve(c, nconn);
                        shutdown(c, SHUT_WR);
                        close(c);
                        _exit(0);
                }
                close(c);
        }
}

/* The child: enters a new network namespace, waits for the veth end,
 * configures it and serves on port. Reports on ready: '1' (in the namespace),
 * then '6' (serving IPv4 and IPv6), '4' (IPv4 only) or 'E'. */
static void ns_child(int ready, int go, const char *ns_if, int port)
{
        char ch;
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (lo4 >= 0)
                close(lo4);
        if (lo6 >= 0)
                close(lo6);
        if (unshare(CLONE_NEWNET) < 0) {
                (void)!write(ready, "E", 1);
                _exit(1);
        }
        (void)!write(ready, "1", 1);
        if (read(go, &ch, 1) != 1 || ch != '1')
                _exit(1);
        char cidr[32], cidr6[64];
        snprintf(cidr, sizeof(cidr), "%s/24", net.ns_addr);
        snprintf(cidr6, sizeof(cidr6), "%s/64", net.ns_addr6);
        const char *lo_up[] = {"ip", "link", "set", "lo", "up", NULL};
        const char *addr[] = {"ip", "addr", "add", cidr, "dev", ns_if, NULL};
        const char *addr6[] = {"ip", "-6", "addr", "add", cidr6, "dev", ns_if, "nodad", NULL};
        const char *up[] = {"ip", "link", "set", ns_if, "up", NULL};
        if (run(lo_up, NULL, 0) != 0 || run(addr, NULL, 0) != 0 || run(up, NULL, 0) != 0) {
                (void)!write(ready, "E", 1);
                _exit(1);
        }
        bool v6 = net.ns_addr6[0] && run(addr6, NULL, 0) == 0;
        int p = port;
        int lfd = v6 ? listen_on(AF_INET6, "::", &p) : -1;
        if (lfd < 0) {
                v6 = false;
                lfd = listen_on(AF_INET, net.ns_addr, &p);
        }
        if (lfd < 0) {
                (void)!write(ready, "E", 1);
                _exit(1);
        }
        fcntl(lfd, F_SETFL, 0); /* blocking accept */
        (void)!write(ready, v6 ? "6" : "4", 1);
        close(ready);
        server_loop(lfd);
        _exit(0);
}

static char wait_byte(int fd, int ms)
{
        struct pollfd p = {.fd = fd, .events = POLLIN};
        char ch = 0;
        if (poll(&p, 1, ms) != 1 || read(fd, &ch, 1) != 1)
                return 0;
        return ch;
}

static void net_teardown(void)
{
        if (net.pid > 0) {
                kill(net.pid, SIGKILL);
                waitpid(net.pid, NULL, 0);
                net.pid = -1;
        }
        if (net.host_if[0]) {
                const char *del[] = {"ip", "link", "del", net.host_if, NULL};
                (void)run(del, NULL, 0);
                net.host_if[0] = '\0';
        }
        net.up = net.up6 = false;
}

/* Moves this test into a network namespace of its own with only lo: nothing
 * it does, even a broken ab_fetch connecting to 10.0.0.1 or a DNS lookup, can
 * reach past this machine. Returns NULL when done, else why not. */
static bool isolated;

static const char *isolate(void)
{
        if (geteuid() != 0)
                return "not root: cannot create a network namespace";
        const char *ip_v[] = {"ip", "-V", NULL};
        if (run(ip_v, NULL, 0) != 0)
                return "iproute2 'ip' not found";
        if (unshare(CLONE_NEWNET) < 0)
                return "unshare(CLONE_NEWNET) failed";
        const char *lo_up[] = {"ip", "link", "set", "lo", "up", NULL};
        if (run(lo_up, NULL, 0) != 0)
                tap_skip_all("cannot bring lo up in the private network namespace");
        isolated = true;
        return NULL;
}

/* Requests whose failure would send packets to another machine (an internal
 * address that is not loopback, a DNS lookup) run only when isolated. */
static bool skip_unless_isolated(const char *name)
{
        if (!isolated)
                tap_ok(1, "%s # SKIP not isolated: a broken fetch could send packets out", name);
        return !isolated;
}

/* Makes the test host; returns NULL when it is up, else why not. The server
 * listens on `port` (the loopback target's port too, so a rebinding attack
 * that got past the pin would land on the loopback socket, and one that was
 * pinned lands here). */
static const char *net_setup(int port)
{
        /* Our side lives in the test's private namespace (isolate()), so these
         * cannot collide with anything on the machine. */
        snprintf(net.host_addr, sizeof(net.host_addr), "203.0.113.1");
        snprintf(net.ns_addr, sizeof(net.ns_addr), "203.0.113.10");
        snprintf(net.host_addr6, sizeof(net.host_addr6), "2001:db8:ab::1");
        snprintf(net.ns_addr6, sizeof(net.ns_addr6), "2001:db8:ab::a");
        char ns_if[16];
        snprintf(net.host_if, sizeof(net.host_if), "abf%dh", (int)getpid());
        snprintf(ns_if, sizeof(ns_if), "abf%dn", (int)getpid());

        int ready[2], go[2];
        if (pipe2(ready, O_CLOEXEC) < 0)
                return "pipe failed";
        if (pipe2(go, O_CLOEXEC) < 0) {
                close(ready[0]);
                close(ready[1]);
                return "pipe failed";
        }
        fflush(stdout);
        net.pid = fork();
        if (net.pid == 0) {
                close(ready[0]);
                close(go[1]);
                ns_child(ready[1], go[0], ns_if, port);
        }
        close(ready[1]);
        close(go[0]);
        const char *why = NULL;
        char pid_s[16], cidr[32], cidr6[64], route[512];
        snprintf(pid_s, sizeof(pid_s), "%d", (int)net.pid);
        snprintf(cidr, sizeof(cidr), "%s/24", net.host_addr);
        snprintf(cidr6, sizeof(cidr6), "%s/64", net.host_addr6);
        const char *add[] = {"ip",   "link", "add", net.host_if, "type", "veth",
                             "peer", "name", ns_if, "netns",     pid_s,  NULL};
        const char *addr[] = {"ip", "addr", "add", cidr, "dev", net.host_if, NULL};
        const char *addr6[] = {"ip", "-6", "addr", "add", cidr6, "dev", net.host_if, "nodad", NULL};
        const char *up[] = {"ip", "link", "set", net.host_if, "up", NULL};
        const char *get[] = {"ip", "-o", "route", "get", net.ns_addr, NULL};
        const char *get6[] = {"ip", "-o", "-6", "route", "get", net.ns_addr6, NULL};
        char needle[32];
        snprintf(needle, sizeof(needle), "dev %s ", net.host_if);

        char served = 0;
        bool host6 = false;
        if (net.pid < 0)
                why = "fork failed";
        else if (wait_byte(ready[0], 10000) != '1')
                why = "unshare(CLONE_NEWNET) failed";
        else if (run(add, NULL, 0) != 0)
                why = "cannot create a veth pair";
        else if (run(addr, NULL, 0) != 0 || run(up, NULL, 0) != 0)
                why = "cannot configure the veth pair";
        if (!why) {
                host6 = run(addr6, NULL, 0) == 0;
                served = write(go[1], "1", 1) == 1 ? wait_byte(ready[0], 10000) : 0;
                if (served != '4' && served != '6')
                        why = "the test host did not start";
                else if (run(get, route, sizeof(route)) != 0 || !strstr(route, needle))
                        why = "the test host's address is not routed to our veth";
        }
        close(ready[0]);
        close(go[1]);
        if (why) {
                net_teardown();
                return why;
        }
        /* IPv6 is a bonus: used only when routed to our veth too. */
        net.up6 =
            served == '6' && host6 && run(get6, route, sizeof(route)) == 0 && strstr(route, needle);
        net.up = true;
        return NULL;
}

/* ---- resolve hooks ---- */

static int hook_calls;

static int answer(const char *const *ips, const char *port, struct addrinfo **res)
{
        struct addrinfo *head = NULL, **tail = &head;
        for (; *ips; ips++) {
                struct addrinfo h = {.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV,
                                     .ai_socktype = SOCK_STREAM};
                struct addrinfo *r = NULL;
                int rc = getaddrinfo(*ips, port, &h, &r);
                if (rc != 0) {
                        if (head)
                                freeaddrinfo(head);
                        return rc;
                }
                *tail = r; /* glibc frees each entry on its own: lists can be chained */
                while (*tail)
                        tail = &(*tail)->ai_next;
        }
        *res = head;
        return 0;
}

/* Any name -> the test host. */
static int hook_ns(const char *host, const char *port, struct addrinfo **res)
{
        hook_calls++;
        return answer((const char *[]){net.ns_addr, NULL}, port, res);
}

static int hook_ns6(const char *host, const char *port, struct addrinfo **res)
{
        hook_calls++;
        return answer((const char *[]){net.ns_addr6, NULL}, port, res);
}

/* The rebinding attacker's DNS: public first, loopback afterwards. */
static int hook_flip(const char *host, const char *port, struct addrinfo **res)
{
        hook_calls++;
        return answer((const char *[]){hook_calls == 1 ? net.ns_addr : "127.0.0.1", NULL}, port,
                      res);
}

/* Public and loopback in one answer. */
static int hook_both(const char *host, const char *port, struct addrinfo **res)
{
        hook_calls++;
        return answer((const char *[]){net.ns_addr, "198.51.100.1", "127.0.0.1", NULL}, port, res);
}

static int hook_both6(const char *host, const char *port, struct addrinfo **res)
{
        hook_calls++;
        return answer((const char *[]){net.ns_addr6, "::1", NULL}, port, res);
}

static int hook_private(const char *host, const char *port, struct addrinfo **res)
{
        hook_calls++;
        return answer((const char *[]){"10.1.2.3", NULL}, port, res);
}

static int hook_none(const char *host, const char *port, struct addrinfo **res)
{
        hook_calls++;
        return EAI_NONAME;
}

/* ---- helpers ---- */

/* Prints an error as a TAP comment, on one line. */
static void diag(const ab_err *e)
{
        printf("#   %s: ", ab_code_name(e->code));
        for (const char *c = e->msg; *c; c++)
                putchar((unsigned char)*c < 0x20 ? '.' : *c);
        putchar('\n');
}

/* Expects ab_fetch to fail with code, its message to hold each of want (a
 * NULL-terminated list), and the loopback targets to have seen nothing. */
static void refused(const char *name, const ab_fetch_req *req, ab_code code,
                    const char *const *want)
{
        ab_fetch_res res;
        ab_err *e = NULL;
        int r = ab_fetch(req, &res, &e);
        tap_ok(r < 0 && e && e->code == code, "%s: %s", name, ab_code_name(code));
        if (e)
                diag(e);
        for (; want && *want; want++)
                tap_ok(e && strstr(e->msg, *want), "%s: message names '%s'", name, *want);
        int c4 = drain(lo4), c6 = drain(lo6);
        tap_ok(c4 == 0 && c6 == 0, "%s: the loopback servers saw no connection", name);
        if (c4 || c6)
                tap_diag("  127.0.0.1 saw %d, ::1 saw %d", c4, c6);
        tap_ok(res.status == 0 && !res.body && !res.headers, "%s: no result", name);
        ab_err_free(&e);
        ab_fetch_res_clear(&res);
}

/* Formats into one of a ring of buffers: enough for the URLs of one test. */
static char *url(const char *fmt, ...) AB_PRINTF(1, 2);
static char *url(const char *fmt, ...)
{
        static char bufs[16][4300];
        static int i;
        char *b = bufs[i++ % 16];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b, sizeof(bufs[0]), fmt, ap);
        va_end(ap);
        return b;
}

/* The same for test names, apart so a name never overwrites a URL in use. */
static char *label(const char *fmt, ...) AB_PRINTF(1, 2);
static char *label(const char *fmt, ...)
{
        static char buf[4400];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf, sizeof(buf), fmt, ap);
        va_end(ap);
        for (char *c = buf; *c; c++)
                if ((unsigned char)*c < 0x20)
                        *c = '.'; /* keep a TAP line one line */
        return buf;
}

#define WANT(...) ((const char *const[]){__VA_ARGS__, NULL})

/* ---- refusals ---- */

static void test_refusals(void)
{
        ab_fetch_req q = {.timeout_ms = 2000};

        q.url = url("http://127.0.0.1:%d/", p4);
        refused("127.0.0.1", &q, AB_E_PERMISSION, WANT("127.0.0.1", "loopback"));
        q.url = url("https://127.0.0.1:%d/", p4);
        refused("https 127.0.0.1", &q, AB_E_PERMISSION, WANT("127.0.0.1"));
        q.url = url("http://user:pw@127.0.0.1:%d/x?y#z", p4);
        refused("userinfo@127.0.0.1", &q, AB_E_PERMISSION, NULL);
        if (lo6 >= 0) {
                q.url = url("http://[::1]:%d/", p6);
                refused("[::1]", &q, AB_E_PERMISSION, WANT("::1", "loopback"));
                q.url = url("http://[::]:%d/", p6);
                refused("[::]", &q, AB_E_PERMISSION, WANT("unspecified"));
                q.url = url("http://localhost:%d/", p6);
                refused("localhost (::1 port)", &q, AB_E_PERMISSION, WANT("localhost"));
        } else {
                tap_ok(1, "[::1] # SKIP no IPv6 loopback");
        }
        q.url = url("http://localhost:%d/", p4);
        refused("localhost", &q, AB_E_PERMISSION, WANT("localhost", "loopback"));
        /* by name, without a lookup that could leave the machine */
        q.url = url("http://LocalHost.:%d/", p4);
        refused("LocalHost.", &q, AB_E_PERMISSION, WANT("LocalHost."));
        q.url = url("http://app.localhost:%d/", p4);
        refused("app.localhost", &q, AB_E_PERMISSION, WANT("app.localhost"));
        q.url = url("http://0.0.0.0:%d/", p4);
        refused("0.0.0.0 (reaches local services on Linux)", &q, AB_E_PERMISSION,
                WANT("unspecified"));
        static const char *const odd[] = {"2130706433", "0177.0.0.1", "0x7f000001",  "0x7f.1",
                                          "127.1",      "0177.1",     "017700000001"};
        for (size_t i = 0; i < AB_ARRAY_LEN(odd); i++) {
                q.url = url("http://%s:%d/", odd[i], p4);
                refused(label("%s (127.0.0.1 in another form)", odd[i]), &q, AB_E_PERMISSION,
                        WANT("loopback"));
        }
        q.url = url("http://[::ffff:127.0.0.1]:%d/", p4);
        refused("[::ffff:127.0.0.1]", &q, AB_E_PERMISSION, WANT("loopback"));
        q.url = url("http://[::ffff:7f00:1]:%d/", p4);
        refused("[::ffff:7f00:1]", &q, AB_E_PERMISSION, NULL);
        /* Internal addresses past loopback, and names a broken fetch would look up. */
        static const struct {
                const char *url, *name, *want;
        } outside[] = {
            {"http://169.254.169.254/latest/meta-data/", "169.254.169.254", "metadata"},
            {"http://[::ffff:169.254.169.254]/latest/meta-data/", "[::ffff:169.254.169.254]",
             "metadata"},
            {"http://[64:ff9b::169.254.169.254]/", "NAT64 169.254.169.254", "metadata"},
            {"http://[2002:a9fe:a9fe::1]/", "6to4 169.254.169.254", "metadata"},
            {"http://metadata.google.internal/computeMetadata/v1/",
             "metadata.google.internal (by name)", "metadata.google.internal"},
            {"http://METADATA.Google.Internal./", "METADATA.Google.Internal.", "metadata"},
            {"http://metadata/computeMetadata/v1/", "metadata (by name)", "metadata"},
            {"http://10.0.0.1/", "10.0.0.1", "private"},
            {"http://172.16.5.4:8080/", "172.16.5.4", "private"},
            {"http://192.168.1.1/", "192.168.1.1", "private"},
            {"http://100.100.100.200/", "100.100.100.200 (Alibaba metadata)", "carrier-grade NAT"},
            {"http://224.0.0.1/", "224.0.0.1", "multicast"},
            {"http://255.255.255.255/", "255.255.255.255", "broadcast"},
            {"http://[fd00::1]/", "[fd00::1]", "unique local"},
            {"http://[fe80::1]/", "[fe80::1]", "link-local"},
            {"http://[fd00:ec2::254]/", "[fd00:ec2::254] (AWS IPv6 metadata)", "unique local"},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(outside); i++) {
                if (skip_unless_isolated(outside[i].name))
                        continue;
                q.url = outside[i].url;
                refused(outside[i].name, &q, AB_E_PERMISSION, WANT(outside[i].want));
        }
        if (!skip_unless_isolated("name resolving to 10.1.2.3")) {
                hook_calls = 0;
                q.resolve = hook_private;
                q.url = url("http://intranet.test:%d/", p4);
                refused("name resolving to 10.1.2.3", &q, AB_E_PERMISSION,
                        WANT("intranet.test", "10.1.2.3", "private"));
        }
        /* A literal is never handed to the resolver (here one that maps every
         * name to an allowed address). */
        hook_calls = 0;
        q.resolve = hook_ns;
        q.url = url("http://127.0.0.1:%d/", p4);
        refused("literal 127.0.0.1 with a resolver", &q, AB_E_PERMISSION, NULL);
        q.url = url("http://0x7f.1:%d/", p4);
        refused("literal 0x7f.1 with a resolver", &q, AB_E_PERMISSION, NULL);
        TAP_IS_INT(hook_calls, 0, "address literals are not looked up");
        q.resolve = hook_none;
        q.url = url("http://nowhere.test:%d/", p4);
        refused("name that does not resolve", &q, AB_E_UNAVAILABLE, WANT("nowhere.test"));
}

static void test_rebinding(void)
{
        ab_fetch_req q = {.timeout_ms = 3000};
        if (!skip_unless_isolated("DNS answer with public and loopback addresses")) {
                hook_calls = 0;
                q.resolve = hook_both;
                q.url = url("http://rebind.test:%d/", p4);
                refused("DNS answer with public and loopback addresses", &q, AB_E_PERMISSION,
                        WANT("rebind.test", "127.0.0.1"));
                q.resolve = hook_both6;
                q.url = url("http://rebind6.test:%d/", lo6 >= 0 ? p6 : p4);
                refused("DNS answer with 2001:db8:ab::a and ::1", &q, AB_E_PERMISSION, WANT("::1"));
        }

        if (!net.up) {
                tap_ok(1, "DNS rebinding (public, then loopback) # SKIP no test host");
                return;
        }
        /* The attacker's name answers the test host first and 127.0.0.1 after:
         * the loopback socket listens on the same port as the test host, so a
         * second lookup by curl would land there. */
        hook_calls = 0;
        q.resolve = hook_flip;
        q.url = url("http://rebind.test:%d/json", p4);
        ab_fetch_res res;
        ab_err *e = NULL;
        int r = ab_fetch(&q, &res, &e);
        bool pinned = r == 0 && res.status == 200 && strstr(res.body, "hello");
        bool refused_ = r < 0 && e && e->code == AB_E_PERMISSION;
        tap_ok(pinned || refused_, "DNS rebinding: refused or served by the checked address");
        if (e)
                tap_diag("  %s", e->msg);
        TAP_IS_INT(hook_calls, 1, "DNS rebinding: the name was resolved once, by us");
        TAP_IS_INT(drain(lo4), 0, "DNS rebinding: the loopback server saw no connection");
        ab_err_free(&e);
        ab_fetch_res_clear(&res);

        /* The same through a redirect: the second hop resolves again and is refused. */
        hook_calls = 0;
        q.url = url("http://rebind.test:%d/goto?http://rebind.test:%d/json", p4, p4);
        refused("DNS rebinding across a redirect", &q, AB_E_PERMISSION,
                WANT("rebind.test", "127.0.0.1"));
        TAP_IS_INT(hook_calls, 2, "DNS rebinding across a redirect: one lookup per hop");
}

static void test_input(void)
{
        ab_fetch_req q = {.timeout_ms = 2000, .resolve = hook_ns};
        static const char *const schemes[] = {
            "file:///etc/passwd",
            "ftp://127.0.0.1:%d/",
            "gopher://127.0.0.1:%d/_x",
            "dict://127.0.0.1:%d/x",
            "ldap://127.0.0.1:%d/",
            "telnet://127.0.0.1:%d/",
            "javascript:alert(1)",
            "127.0.0.1:%d/",
            "//127.0.0.1:%d/",
            "http://",
            "http://:80/",
            "",
            "http://exa mple.test/",
            "http://a.test/\r\nX: y",
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(schemes); i++) {
                hook_calls = 0;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
                q.url = url(schemes[i], p4);
#pragma GCC diagnostic pop
                refused(label("refused URL '%s'", schemes[i]), &q, AB_E_INVALID, NULL);
                TAP_IS_INT(hook_calls, 0, "  ... without a lookup");
        }
        q.url = url("file:///etc/passwd");
        refused("file: message", &q, AB_E_INVALID, WANT("http", "file"));

        q.url = url("http://127.0.0.1:%d/json", p4);
        static const char *const methods[] = {"TRACE", "CONNECT", "GET /x", "PROPFIND"};
        for (size_t i = 0; i < AB_ARRAY_LEN(methods); i++) {
                q.method = methods[i];
                refused(label("method %s", methods[i]), &q, AB_E_INVALID, NULL);
        }
        q.method = NULL;

        json_t *h = json_pack("{s:s}", "X-Evil", "a\r\nHost: 127.0.0.1");
        q.headers = h;
        hook_calls = 0;
        refused("header value with CRLF", &q, AB_E_INVALID, WANT("X-Evil"));
        TAP_IS_INT(hook_calls, 0, "  ... before any lookup");
        json_decref(h);
        h = json_pack("{s:s}", "X-Evil", "a\nb");
        q.headers = h;
        refused("header value with LF", &q, AB_E_INVALID, NULL);
        json_decref(h);
        h = json_pack("{s:s}", "X Bad", "a");
        q.headers = h;
        refused("header name with a space", &q, AB_E_INVALID, NULL);
        json_decref(h);
        h = json_pack("{s:s}", "X-Bad:", "a");
        q.headers = h;
        refused("header name with a colon", &q, AB_E_INVALID, NULL);
        json_decref(h);
        h = json_pack("{s:[]}", "X-Arr");
        q.headers = h;
        refused("header value not a string", &q, AB_E_INVALID, NULL);
        json_decref(h);
        h = json_pack("[]");
        q.headers = h;
        refused("headers not an object", &q, AB_E_INVALID, NULL);
        json_decref(h);
        q.headers = NULL;

        /* Request size: refused before any lookup or connection. */
        char *body = xmalloc(((size_t)5 << 20) + 1);
        memset(body, 'a', ((size_t)5 << 20) + 1);
        q.method = "POST";
        q.body = body;
        q.body_len = ((size_t)5 << 20) + 1;
        hook_calls = 0;
        refused("request body over the 5 MiB default", &q, AB_E_LIMIT, WANT("5242880"));
        TAP_IS_INT(hook_calls, 0, "  ... before any lookup");
        q.max_request = 1000;
        q.body_len = 1001;
        refused("request body over max_request", &q, AB_E_LIMIT, NULL);
        TAP_IS_INT(hook_calls, 0, "  ... before any lookup");
        free(body);
}

/* ---- the successful path (test host) ---- */

static int fetch_ok(const char *name, ab_fetch_req *q, ab_fetch_res *res)
{
        ab_err *e = NULL;
        int r = ab_fetch(q, res, &e);
        tap_ok(r == 0, "%s: succeeds", name);
        if (e)
                tap_diag("  %s: %s", ab_code_name(e->code), e->msg);
        ab_err_free(&e);
        return r;
}

static const char *hdr(const ab_fetch_res *res, const char *name)
{
        json_t *v = res->headers ? json_object_get(res->headers, name) : NULL;
        return v ? json_string_value(v) : NULL;
}

static int server_count(void)
{
        ab_fetch_req q = {.url = url("http://%s:%d/count", net.ns_addr, p4)};
        ab_fetch_res res;
        ab_err *e = NULL;
        int n = -1;
        if (ab_fetch(&q, &res, &e) == 0)
                n = atoi(res.body);
        ab_err_free(&e);
        ab_fetch_res_clear(&res);
        return n;
}

static void test_success(void)
{
        ab_fetch_res res;
        ab_fetch_req q = {.url = url("http://%s:%d/json", net.ns_addr, p4)};
        if (fetch_ok("GET /json", &q, &res) == 0) {
                TAP_IS_INT(res.status, 200, "GET /json: status");
                TAP_IS_STR(res.status_text, "OK", "GET /json: status_text");
                TAP_IS_STR(hdr(&res, "content-type"), "application/json",
                           "GET /json: content-type header, lower-cased name");
                TAP_IS_STR(res.body, "{\"hello\":\"world\"}", "GET /json: body");
                TAP_IS_INT(res.body_len, 17, "GET /json: body_len");
        }
        ab_fetch_res_clear(&res);

        q.url = url("http://%s:%d/headers", net.ns_addr, p4);
        if (fetch_ok("GET /headers", &q, &res) == 0) {
                TAP_IS_STR(hdr(&res, "x-multi"), "one, two", "repeated headers joined with ', '");
                TAP_IS_STR(hdr(&res, "x-mixed-case"), "Value", "header value trimmed");
                TAP_IS_STR(hdr(&res, "content-length"), "10", "content-length header");
                TAP_IS_STR(res.body, "plain text", "text body");
        }
        ab_fetch_res_clear(&res);

        q.url = url("http://%s:%d/teapot", net.ns_addr, p4);
        if (fetch_ok("GET /teapot", &q, &res) == 0) {
                TAP_IS_INT(res.status, 418, "status 418 is a result, not an error");
                TAP_IS_STR(res.status_text, "I'm a teapot", "status_text from the status line");
        }
        ab_fetch_res_clear(&res);

        q.url = url("http://%s:%d/json", net.ns_addr, p4);
        q.method = "HEAD";
        if (fetch_ok("HEAD /json", &q, &res) == 0) {
                TAP_IS_INT(res.status, 200, "HEAD: status");
                TAP_IS_INT(res.body_len, 0, "HEAD: no body");
                TAP_IS_STR(res.body, "", "HEAD: body is an empty string");
                TAP_IS_STR(hdr(&res, "content-length"), "17", "HEAD: headers");
        }
        ab_fetch_res_clear(&res);

        /* Through a name (the hook), with a body and headers; Host is the name. */
        hook_calls = 0;
        json_t *h = json_pack("{s:s, s:s, s:s, s:i, s:s}", "Content-Type", "application/json",
                              "X-Test", "yes", "Host", "127.0.0.1", "X-Num", 42, "X-Empty", "");
        q = (ab_fetch_req){.url = url("http://api.test:%d/echo", p4),
                           .method = "post",
                           .headers = h,
                           .body = "{\"a\":1}",
                           .body_len = 7,
                           .resolve = hook_ns};
        if (fetch_ok("POST /echo by name", &q, &res) == 0) {
                char v[256];
                tap_ok(strncmp(res.body, "POST /echo HTTP/1.1\r\n", 21) == 0,
                       "POST: method (lower-case 'post' accepted) and path");
                TAP_IS_STR(header_in(res.body, "Host", v, sizeof(v)), url("api.test:%d", p4),
                           "POST: Host is the URL's name, a user Host header is dropped");
                TAP_IS_STR(header_in(res.body, "X-Test", v, sizeof(v)), "yes", "POST: header");
                TAP_IS_STR(header_in(res.body, "X-Num", v, sizeof(v)), "42",
                           "POST: numeric header value");
                tap_ok(strstr(res.body, "\r\nX-Empty:") != NULL, "POST: empty header sent");
                TAP_IS_STR(header_in(res.body, "Content-Type", v, sizeof(v)), "application/json",
                           "POST: content-type");
                TAP_IS_STR(header_in(res.body, "Content-Length", v, sizeof(v)), "7",
                           "POST: content-length");
                size_t n = strlen(res.body);
                tap_ok(n >= 7 && strcmp(res.body + n - 7, "{\"a\":1}") == 0, "POST: body");
                TAP_IS_INT(hook_calls, 1, "POST: one lookup");
        }
        ab_fetch_res_clear(&res);
        json_decref(h);

        static const char *const methods[] = {"PUT", "PATCH", "DELETE", "OPTIONS", "GET"};
        for (size_t i = 0; i < AB_ARRAY_LEN(methods); i++) {
                q = (ab_fetch_req){.url = url("http://%s:%d/echo", net.ns_addr, p4),
                                   .method = methods[i],
                                   .body = "zz",
                                   .body_len = 2};
                if (fetch_ok(methods[i], &q, &res) == 0) {
                        char line[64];
                        snprintf(line, sizeof(line), "%s /echo HTTP/1.1\r\n", methods[i]);
                        tap_ok(strncmp(res.body, line, strlen(line)) == 0, "%s: method sent",
                               methods[i]);
                        bool has_body = strcmp(res.body + strlen(res.body) - 6, "\r\n\r\nzz") == 0;
                        tap_ok(has_body == (strcmp(methods[i], "GET") != 0), "%s: body sent %s",
                               methods[i], strcmp(methods[i], "GET") ? "" : "(not for GET)");
                }
                ab_fetch_res_clear(&res);
        }

        /* IPv6: the pin must work for an IPv6 address too. */
        if (net.up6) {
                q = (ab_fetch_req){.url = url("http://[%s]:%d/json", net.ns_addr6, p4)};
                if (fetch_ok("GET over IPv6 (literal)", &q, &res) == 0)
                        TAP_IS_STR(res.body, "{\"hello\":\"world\"}", "IPv6 literal: body");
                ab_fetch_res_clear(&res);
                q = (ab_fetch_req){.url = url("http://v6.test:%d/echo", p4), .resolve = hook_ns6};
                if (fetch_ok("GET over IPv6 (name)", &q, &res) == 0) {
                        char v[128];
                        TAP_IS_STR(header_in(res.body, "Host", v, sizeof(v)), url("v6.test:%d", p4),
                                   "IPv6 name: Host is the name");
                }
                ab_fetch_res_clear(&res);
                q.url = url("http://v6.test:%d/goto?http://[::1]:%d/", p4, lo6 >= 0 ? p6 : p4);
                refused("IPv6 host redirecting to [::1]", &q, AB_E_PERMISSION, WANT("::1"));
        } else {
                tap_ok(1, "IPv6 test host # SKIP no IPv6 on the veth pair");
        }

        /* Response size: exactly at the limit is fine, one byte over is not. */
        q = (ab_fetch_req){.url = url("http://%s:%d/big", net.ns_addr, p4)};
        if (fetch_ok("3 MiB body under the default limit", &q, &res) == 0)
                TAP_IS_INT(res.body_len, (size_t)3 << 20, "3 MiB body: all of it");
        ab_fetch_res_clear(&res);
        q.url = url("http://%s:%d/stream?1000", net.ns_addr, p4);
        q.max_response = 1000;
        if (fetch_ok("body of exactly max_response", &q, &res) == 0)
                TAP_IS_INT(res.body_len, 1000, "body of exactly max_response: all of it");
        ab_fetch_res_clear(&res);
}

static void test_limits_and_redirects(void)
{
        ab_fetch_req q = {.url = url("http://%s:%d/big", net.ns_addr, p4), .max_response = 1 << 20};
        refused("response over max_response (Content-Length)", &q, AB_E_LIMIT, WANT("1048576"));
        q.url = url("http://%s:%d/stream?1001", net.ns_addr, p4);
        q.max_response = 1000;
        refused("response over max_response (no length, aborted)", &q, AB_E_LIMIT, NULL);
        q.url = url("http://%s:%d/stream?%zu", net.ns_addr, p4, ((size_t)10 << 20) + 1);
        q.max_response = 0;
        uint64_t t0 = ab_now_ms();
        refused("response over the 10 MiB default (aborted)", &q, AB_E_LIMIT, WANT("10485760"));
        tap_diag("  took %llu ms", (unsigned long long)(ab_now_ms() - t0));

        /* Timeouts against a server that never answers. */
        q = (ab_fetch_req){.url = url("http://%s:%d/hang", net.ns_addr, p4), .timeout_ms = 700};
        t0 = ab_now_ms();
        refused("server that never answers", &q, AB_E_TIMEOUT, WANT("timed out"));
        uint64_t took = ab_now_ms() - t0;
        tap_ok(took >= 600 && took < 3000, "timeout after about 700 ms (took %llu)",
               (unsigned long long)took);
        q.timeout_ms = 60000;
        q.max_timeout_ms = 500;
        t0 = ab_now_ms();
        refused("timeout_ms clamped to max_timeout_ms", &q, AB_E_TIMEOUT, NULL);
        took = ab_now_ms() - t0;
        tap_ok(took >= 400 && took < 3000, "clamped timeout after about 500 ms (took %llu)",
               (unsigned long long)took);

        /* Redirects, followed by hand. */
        ab_fetch_res res;
        q = (ab_fetch_req){.url = url("http://%s:%d/redirect", net.ns_addr, p4)};
        if (fetch_ok("302 to an allowed path", &q, &res) == 0) {
                TAP_IS_INT(res.status, 200, "302: final status");
                TAP_IS_STR(res.body, "{\"hello\":\"world\"}", "302: final body");
                TAP_IS_STR(hdr(&res, "content-type"), "application/json",
                           "302: headers of the final response only");
                tap_ok(hdr(&res, "location") == NULL, "302: no location header left over");
        }
        ab_fetch_res_clear(&res);
        q.max_redirects = 1;
        if (fetch_ok("302 with max_redirects 1", &q, &res) == 0)
                TAP_IS_INT(res.status, 200, "max_redirects 1: one hop is allowed");
        ab_fetch_res_clear(&res);

        q = (ab_fetch_req){.url = url("http://%s:%d/r307", net.ns_addr, p4),
                           .method = "PUT",
                           .body = "keep",
                           .body_len = 4};
        if (fetch_ok("307 keeps method and body", &q, &res) == 0) {
                tap_ok(strncmp(res.body, "PUT /echo ", 10) == 0, "307: PUT again");
                size_t n = strlen(res.body);
                tap_ok(n >= 4 && strcmp(res.body + n - 4, "keep") == 0, "307: body again");
        }
        ab_fetch_res_clear(&res);
        q.url = url("http://%s:%d/r303", net.ns_addr, p4);
        q.method = "POST";
        if (fetch_ok("303 after POST", &q, &res) == 0)
                tap_ok(strncmp(res.body, "GET /echo ", 10) == 0 && !strstr(res.body, "keep"),
                       "303: continues as GET without the body");
        ab_fetch_res_clear(&res);

        /* Credentials are not carried to another origin. */
        json_t *h = json_pack("{s:s, s:s, s:s}", "Authorization", "Bearer secret", "Cookie", "s=1",
                              "X-Keep", "1");
        q = (ab_fetch_req){
            .url = url("http://a.test:%d/goto?http://b.test:%d/echo", p4, p4),
            .headers = h,
            .resolve = hook_ns,
        };
        if (fetch_ok("redirect to another origin", &q, &res) == 0) {
                char v[128];
                TAP_IS_STR(header_in(res.body, "Host", v, sizeof(v)), url("b.test:%d", p4),
                           "cross-origin: Host of the new origin");
                tap_ok(!strcasestr(res.body, "Authorization") && !strcasestr(res.body, "Cookie"),
                       "cross-origin: Authorization and Cookie dropped");
                TAP_IS_STR(header_in(res.body, "X-Keep", v, sizeof(v)), "1",
                           "cross-origin: other headers kept");
        }
        ab_fetch_res_clear(&res);
        q.url = url("http://a.test:%d/goto?/echo", p4);
        if (fetch_ok("redirect to the same origin", &q, &res) == 0)
                tap_ok(strcasestr(res.body, "Authorization: Bearer secret") != NULL,
                       "same origin: Authorization kept");
        ab_fetch_res_clear(&res);
        json_decref(h);

        q = (ab_fetch_req){.url = url("http://%s:%d/loop", net.ns_addr, p4)};
        refused("redirect loop", &q, AB_E_LIMIT, WANT("redirects"));

        /* Redirects into the inside: refused at the hop. */
        int before = server_count();
        char inside[6][128];
        snprintf(inside[0], sizeof(inside[0]), "http://127.0.0.1:%d/", p4);
        snprintf(inside[1], sizeof(inside[1]), "http://localhost:%d/", p4);
        snprintf(inside[2], sizeof(inside[2]), "http://[::1]:%d/", lo6 >= 0 ? p6 : p4);
        snprintf(inside[3], sizeof(inside[3]), "http://2130706433:%d/", p4);
        snprintf(inside[4], sizeof(inside[4]), "http://169.254.169.254/latest/meta-data/");
        snprintf(inside[5], sizeof(inside[5]), "http://metadata.google.internal/");
        for (size_t i = 0; i < AB_ARRAY_LEN(inside); i++) {
                q.url = url("http://%s:%d/goto?%s", net.ns_addr, p4, inside[i]);
                refused(label("redirect to %s", inside[i]), &q, AB_E_PERMISSION, NULL);
        }
        static const char *const bad_schemes[] = {"file:///etc/passwd", "gopher://127.0.0.1/",
                                                  "ftp://127.0.0.1/"};
        for (size_t i = 0; i < AB_ARRAY_LEN(bad_schemes); i++) {
                q.url = url("http://%s:%d/goto?%s", net.ns_addr, p4, bad_schemes[i]);
                refused(label("redirect to %s", bad_schemes[i]), &q, AB_E_INVALID, NULL);
        }
        /* count: itself + one per redirect request above */
        TAP_IS_INT(server_count() - before,
                   1 + (int)(AB_ARRAY_LEN(inside) + AB_ARRAY_LEN(bad_schemes)),
                   "each redirecting hop reached the test host once");
}

int main(void)
{
        signal(SIGPIPE, SIG_IGN);
        test_policy();

        const char *why = isolate();
        lo4 = listen_on(AF_INET, "127.0.0.1", &p4);
        lo6 = listen_on(AF_INET6, "::1", &p6);
        if (lo4 < 0)
                tap_skip_all("cannot listen on 127.0.0.1");

        if (!why)
                why = net_setup(p4);
        atexit(net_teardown);
        if (why)
                tap_diag("test host: %s", why);
        else
                tap_diag("test host %s%s%s in its own netns, reached through %s (%s)", net.ns_addr,
                         net.up6 ? " and " : "", net.up6 ? net.ns_addr6 : "", net.host_if,
                         net.host_addr);

        test_refusals();
        test_input();
        test_rebinding();
        if (net.up) {
                test_success();
                test_limits_and_redirects();
        } else {
                tap_ok(1, "successful requests, limits, timeouts, redirects # SKIP %s", why);
        }
        char ifname[16];
        snprintf(ifname, sizeof(ifname), "%s", net.host_if);
        bool was_up = net.up;
        net_teardown();
        if (was_up) {
                const char *show[] = {"ip", "link", "show", ifname, NULL};
                tap_ok(run(show, NULL, 0) != 0, "teardown: %s is gone", ifname);
        }
        return tap_done();
}
