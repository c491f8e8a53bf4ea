/* net.c - applying a box's network policy (net.h): the proxy listener of
 * allowlist boxes, the veth pair and iptables rules of full boxes. */
#include "net/net.h"
#include "base/log.h"
#include "base/util.h"
#include "net/netns.h"
#include "net/proxy.h"

#include <arpa/inet.h>
#include <limits.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <pthread.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define HOST_IF_PREFIX "abnet"
#define BOX_IF         "eth0"
/* The box end's alias, set as the last step of full mode's set-up: an eth0
 * without it is a set-up a crash cut short, made again. */
#define BOX_IF_READY "agentbox-full"

extern char **environ;

struct ab_net {
        ab_net_opts o;
        ab_proxy *proxy;
        pthread_mutex_t lock; /* full mode: rules and interface allocation */
        bool rules_done;
        char **full_boxes; /* boxes this process gave a veth (NULL-terminated) */
        size_t n_full;
        char *rules_error;  /* why full mode cannot work here, once known */
        uint32_t net, mask; /* host order */
        unsigned max_index;
        char subnet[32];
        char iptables[64];
};

static bool find_tool(const char *name, char *out, size_t len)
{
        static const char *const dirs[] = {"/usr/sbin", "/sbin", "/usr/bin", "/bin"};
        for (size_t i = 0; i < AB_ARRAY_LEN(dirs); i++) {
                snprintf(out, len, "%s/%s", dirs[i], name);
                if (access(out, X_OK) == 0)
                        return true;
        }
        return false;
}

static int parse_subnet(const char *s, uint32_t *net, uint32_t *mask)
{
        char buf[32];
        const char *slash = strchr(s, '/');
        if (!slash || (size_t)(slash - s) >= sizeof(buf))
                return -EINVAL;
        memcpy(buf, s, (size_t)(slash - s));
        buf[slash - s] = '\0';
        struct in_addr a;
        char *end;
        long bits = strtol(slash + 1, &end, 10);
        if (inet_pton(AF_INET, buf, &a) != 1 || *end || bits < 8 || bits > 28)
                return -EINVAL;
        *mask = (uint32_t)(~0ull << (32 - bits));
        *net = ntohl(a.s_addr) & *mask;
        return 0;
}

int ab_net_new(const ab_net_opts *o, ab_net **out, ab_err **err)
{
        ab_net *n = xzalloc(sizeof(*n));
        n->o = *o;
        const char *sub = o->subnet ? o->subnet : "10.88.0.0/16";
        if (parse_subnet(sub, &n->net, &n->mask) < 0) {
                free(n);
                return ab_err_set(err, AB_E_INVALID, 0,
                                  "network_subnet: \"%s\" is not an IPv4 CIDR between /8 and /28",
                                  sub);
        }
        snprintf(n->subnet, sizeof(n->subnet), "%s", sub);
        n->max_index = (~n->mask + 1u) / 4u - 1u;
        if (n->max_index > 99999) /* "abnet" + 5 digits fits IFNAMSIZ */
                n->max_index = 99999;
        ab_proxy_opts po = {.events = o->events,
                            .metrics = o->metrics,
                            .hosts_file = o->hosts_file,
                            .max_conns_per_app = o->proxy_max_per_app > INT_MAX
                                                     ? INT_MAX
                                                     : (int)o->proxy_max_per_app};
        if (ab_proxy_new(&po, &n->proxy, err) < 0) {
                free(n);
                return -1;
        }
        pthread_mutex_init(&n->lock, NULL);
        *out = n;
        return 0;
}

void ab_net_free(ab_net *n)
{
        if (!n)
                return;
        ab_proxy_free(n->proxy);
        for (size_t i = 0; i < n->n_full; i++)
                free(n->full_boxes[i]);
        free(n->full_boxes);
        pthread_mutex_destroy(&n->lock);
        free(n->rules_error);
        free(n);
}

/* ---- full mode: iptables -------------------------------------------- */

/* Runs argv (no shell) with `input` on its stdin (NULL = /dev/null);
 * returns its exit status, or -errno. */
static int run(char *const argv[], const char *input)
{
        int pfd[2] = {-1, -1};
        if (input && pipe2(pfd, O_CLOEXEC) < 0)
                return -errno;
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        if (input)
                posix_spawn_file_actions_adddup2(&fa, pfd[0], 0);
        else
                posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
        pid_t pid;
        int r = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        if (input) {
                close(pfd[0]);
                if (!r)
                        (void)!ab_write_all(pfd[1], input, strlen(input));
                close(pfd[1]);
        }
        if (r)
                return -r;
        int st;
        while (waitpid(pid, &st, 0) < 0)
                if (errno != EINTR)
                        return -errno;
        return WIFEXITED(st) ? WEXITSTATUS(st) : -EIO;
}

/* iptables ARGS... with "-w" (wait for the xtables lock); 0 when it succeeded. */
static int ipt(ab_net *n, ...)
{
        char *argv[16];
        size_t k = 0;
        argv[k++] = n->iptables;
        argv[k++] = (char *)"-w";
        va_list ap;
        va_start(ap, n);
        for (char *a; k + 1 < AB_ARRAY_LEN(argv) && (a = va_arg(ap, char *));)
                argv[k++] = a;
        va_end(ap);
        argv[k] = NULL;
        return run(argv, NULL);
}

static int write_sysctl(const char *path, const char *val)
{
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        int r = ab_write_all(fd, val, strlen(val));
        close(fd);
        return r;
}

/* Our chains are replaced in one iptables-restore transaction per table
 * (--noflush leaves everything else alone), so there is no moment with the
 * guards half in place; then each is hooked first into its built-in chain
 * unless it already is. */
static int install_rules(ab_net *n)
{
        const char *ifs = HOST_IF_PREFIX "+";
        _cleanup_free_ char *rules = xasprintf(
            "*filter\n"
            ":AGENTBOX-IN - [0:0]\n"
            ":AGENTBOX-FWD - [0:0]\n"
            /* nothing from a box reaches the host itself, on any of its addresses */
            "-A AGENTBOX-IN -i %1$s -j DROP\n"
            "-A AGENTBOX-FWD -i %1$s ! -s %2$s -j DROP\n"
            "-A AGENTBOX-FWD -i %1$s -o %1$s -j DROP\n"
            "-A AGENTBOX-FWD -i %1$s -d 127.0.0.0/8 -j DROP\n"
            "-A AGENTBOX-FWD -i %1$s -d 169.254.0.0/16 -j DROP\n"
            "-A AGENTBOX-FWD -i %1$s -d 100.100.100.200/32 -j DROP\n"
            "-A AGENTBOX-FWD -i %1$s -j ACCEPT\n"
            "-A AGENTBOX-FWD -o %1$s -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n"
            "-A AGENTBOX-FWD -o %1$s -j DROP\n"
            "COMMIT\n"
            "*nat\n"
            ":AGENTBOX-NAT - [0:0]\n"
            "-A AGENTBOX-NAT -s %2$s ! -o %1$s -j MASQUERADE\n"
            "COMMIT\n",
            ifs, n->subnet);
        char restore[80];
        snprintf(restore, sizeof(restore), "%s-restore", n->iptables);
        char *argv[] = {restore, (char *)"-w", (char *)"--noflush", NULL};
        if (run(argv, rules))
                return -1;
        static const char *const hooks[][3] = {{"filter", "INPUT", "AGENTBOX-IN"},
                                               {"filter", "FORWARD", "AGENTBOX-FWD"},
                                               {"nat", "POSTROUTING", "AGENTBOX-NAT"}};
        for (size_t i = 0; i < AB_ARRAY_LEN(hooks); i++) {
                char *t = (char *)hooks[i][0], *h = (char *)hooks[i][1], *c = (char *)hooks[i][2];
                if (ipt(n, "-t", t, "-C", h, "-j", c, NULL) &&
                    ipt(n, "-t", t, "-I", h, "1", "-j", c, NULL))
                        return -1;
        }
        return write_sysctl("/proc/sys/net/ipv4/ip_forward", "1");
}

static int ensure_rules(ab_net *n, ab_err **err)
{
        if (n->rules_done)
                return 0;
        if (!n->rules_error) {
                if (!find_tool("iptables", n->iptables, sizeof(n->iptables)))
                        n->rules_error = xstrdup("iptables is not installed on this host");
                else if (install_rules(n) < 0)
                        n->rules_error =
                            xasprintf("%s could not install the NAT and filter rules", n->iptables);
                else
                        n->rules_done = true;
                if (n->rules_error)
                        ab_log(AB_LOG_WARN, "full network mode unavailable", "reason",
                               n->rules_error, NULL);
        }
        if (n->rules_done)
                return 0;
        return ab_err_set(err, AB_E_UNSUPPORTED, 0, "network.mode \"full\": %s", n->rules_error);
}

int ab_net_check(ab_net *n, const ab_netpol *p, ab_err **err)
{
        if (p->mode != AB_NET_FULL)
                return 0;
        if (n->o.full_disabled)
                return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                                  "network.mode \"full\" is disabled on this server "
                                  "(config network.full: false)");
        pthread_mutex_lock(&n->lock);
        int r = ensure_rules(n, err);
        pthread_mutex_unlock(&n->lock);
        return r;
}

/* ---- full mode: the veth pair ----------------------------------------- */

/* The set of boxes with a veth from us (callers hold n->lock). */
static ssize_t full_find(ab_net *n, const char *box)
{
        for (size_t i = 0; i < n->n_full; i++)
                if (!strcmp(n->full_boxes[i], box))
                        return (ssize_t)i;
        return -1;
}

static void full_mark(ab_net *n, const char *box, bool on)
{
        pthread_mutex_lock(&n->lock);
        ssize_t i = full_find(n, box);
        if (on && i < 0) {
                n->full_boxes = xrealloc(n->full_boxes, (n->n_full + 2) * sizeof(char *));
                n->full_boxes[n->n_full++] = xstrdup(box);
                n->full_boxes[n->n_full] = NULL;
        } else if (!on && i >= 0) {
                free(n->full_boxes[i]);
                n->full_boxes[i] = n->full_boxes[--n->n_full];
                n->full_boxes[n->n_full] = NULL;
        }
        pthread_mutex_unlock(&n->lock);
}

static struct in_addr addr_at(ab_net *n, unsigned index, unsigned host)
{
        return (struct in_addr){.s_addr = htonl(n->net + index * 4u + host)};
}

static int full_setup(ab_net *n, int nsfd, int box_nl, ab_err **err)
{
        _cleanup_close_ int nl = ab_nl_open();
        if (nl < 0)
                return ab_err_set(err, AB_E_INTERNAL, -nl, "netlink");
        char name[16] = "";
        unsigned idx = 0;
        int r = -ENOSPC;
        pthread_mutex_lock(&n->lock);
        for (unsigned i = 1; i <= n->max_index; i++) {
                snprintf(name, sizeof(name), HOST_IF_PREFIX "%u", i);
                r = ab_nl_veth_add(nl, name, BOX_IF, nsfd);
                if (r != -EEXIST) {
                        idx = i;
                        break;
                }
        }
        pthread_mutex_unlock(&n->lock);
        if (r < 0)
                return ab_err_set(err, r == -ENOSPC ? AB_E_LIMIT : AB_E_INTERNAL, -r,
                                  "full network: cannot make a veth pair%s",
                                  r == -ENOSPC ? " (the subnet is full)" : "");
        char path[128];
        snprintf(path, sizeof(path), "/proc/sys/net/ipv6/conf/%s/disable_ipv6", name);
        write_sysctl(path, "1");
        snprintf(path, sizeof(path), "/proc/sys/net/ipv4/conf/%s/rp_filter", name);
        write_sysctl(path, "1");
        struct in_addr gw = addr_at(n, idx, 1), mine = addr_at(n, idx, 2);
        int hidx = ab_nl_link_index(nl, name);
        int bidx = hidx > 0 ? ab_nl_link_index(box_nl, BOX_IF) : hidx;
        if (hidx < 0 || bidx < 0 || (r = ab_nl_addr4_add(nl, hidx, gw, 30)) < 0 ||
            (r = ab_nl_link_up(nl, hidx)) < 0 ||
            (r = ab_nl_addr4_add(box_nl, bidx, mine, 30)) < 0 ||
            (r = ab_nl_link_up(box_nl, bidx)) < 0 || (r = ab_nl_route4_default(box_nl, gw)) < 0 ||
            (r = ab_nl_link_set_alias(box_nl, bidx, BOX_IF_READY)) < 0) {
                int e = hidx < 0 ? hidx : bidx < 0 ? bidx : r;
                ab_nl_link_del(nl, name);
                return ab_err_set(err, AB_E_INTERNAL, -e, "full network: configuring %s", name);
        }
        char a[INET_ADDRSTRLEN], g[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &mine, a, sizeof(a));
        inet_ntop(AF_INET, &gw, g, sizeof(g));
        ab_log(AB_LOG_INFO, "full network up", "interface", name, "address", a, "gateway", g, NULL);
        return 0;
}

/* ---- apply ------------------------------------------------------------ */

int ab_net_apply(ab_net *n, const char *box, const char *app, pid_t init_pid, const ab_netpol *p,
                 bool thorough, ab_err **err)
{
        pid_t attached = ab_proxy_pid(n->proxy, box);
        pthread_mutex_lock(&n->lock);
        bool had_full = full_find(n, box) >= 0;
        pthread_mutex_unlock(&n->lock);
        if (p->mode == AB_NET_NONE && attached == 0 && !had_full && !thorough)
                return 0; /* nothing of ours is in this box */
        if (p->mode == AB_NET_ALLOWLIST && attached == init_pid) {
                ab_proxy_update(n->proxy, box, p);
                return 0;
        }
        if (ab_net_check(n, p, err) < 0)
                return -1;
        _cleanup_close_ int nsfd = ab_netns_open(init_pid);
        if (nsfd < 0)
                return ab_err_set(err, AB_E_UNAVAILABLE, -nsfd,
                                  "box %s: cannot reach its network namespace", box);
        /* full mode's interface, present or not, as the policy says */
        if (p->mode == AB_NET_FULL || had_full || thorough) {
                _cleanup_close_ int box_nl =
                    ab_netns_socket(nsfd, AF_NETLINK, SOCK_RAW, NETLINK_ROUTE, NULL, 0, 0);
                if (box_nl < 0)
                        return ab_err_set(err, AB_E_INTERNAL, -box_nl, "box %s: netlink", box);
                char alias[64] = "";
                bool has = ab_nl_link_alias(box_nl, BOX_IF, alias, sizeof(alias)) == 0;
                if (has && p->mode == AB_NET_FULL && strcmp(alias, BOX_IF_READY)) {
                        ab_nl_link_del(box_nl, BOX_IF); /* half made: start again */
                        has = false;
                }
                if (p->mode == AB_NET_FULL && !has && full_setup(n, nsfd, box_nl, err) < 0)
                        return ab_err_wrap(err, "box %s", box);
                if (p->mode != AB_NET_FULL && has) {
                        int r = ab_nl_link_del(box_nl, BOX_IF); /* takes the host end too */
                        if (r < 0)
                                return ab_err_set(err, AB_E_INTERNAL, -r,
                                                  "box %s: removing its veth", box);
                }
                full_mark(n, box, p->mode == AB_NET_FULL);
        }
        if (p->mode != AB_NET_ALLOWLIST) {
                ab_proxy_detach(n->proxy, box);
                return 0;
        }
        struct sockaddr_in sa = {.sin_family = AF_INET,
                                 .sin_port = htons(AB_PROXY_PORT),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        int lfd =
            ab_netns_socket(nsfd, AF_INET, SOCK_STREAM, 0, (struct sockaddr *)&sa, sizeof(sa), 128);
        if (lfd < 0)
                return ab_err_set(err, AB_E_UNAVAILABLE, -lfd,
                                  "box %s: cannot open the proxy port 127.0.0.1:%d inside it%s",
                                  box, AB_PROXY_PORT,
                                  lfd == -EADDRINUSE ? " (a process in the box holds it)" : "");
        ab_proxy_attach(n->proxy, box, app, init_pid, lfd, p);
        return 0;
}

bool ab_net_active(ab_net *n, const char *box)
{
        pthread_mutex_lock(&n->lock);
        bool full = full_find(n, box) >= 0;
        pthread_mutex_unlock(&n->lock);
        return full || ab_proxy_pid(n->proxy, box) != 0;
}

void ab_net_release(ab_net *n, const char *box)
{
        if (!n)
                return;
        ab_proxy_detach(n->proxy, box);
        full_mark(n, box, false); /* the veth dies with the box's namespace */
}

char **ab_net_env(const ab_netpol *p)
{
        static const char *const names[] = {"HTTP_PROXY",  "http_proxy", "HTTPS_PROXY",
                                            "https_proxy", "ALL_PROXY",  "all_proxy"};
        char **v = xcalloc(AB_ARRAY_LEN(names) + 3, sizeof(char *));
        size_t k = 0;
        if (p->mode == AB_NET_ALLOWLIST) {
                for (size_t i = 0; i < AB_ARRAY_LEN(names); i++)
                        v[k++] = xasprintf("%s=http://127.0.0.1:%d", names[i], AB_PROXY_PORT);
                v[k++] = xstrdup("NO_PROXY=localhost,127.0.0.1,::1");
                v[k++] = xstrdup("no_proxy=localhost,127.0.0.1,::1");
        }
        v[k] = NULL;
        return v;
}
