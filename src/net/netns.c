/* netns.c - sockets inside a box's network namespace and a small rtnetlink
 * client (netns.h). */
#include "net/netns.h"
#include "base/util.h"

#include <fcntl.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <net/if.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>

int ab_netns_open(pid_t pid)
{
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

typedef struct {
        int nsfd, domain, type, proto, backlog;
        const struct sockaddr *addr;
        socklen_t alen;
        int result;
} sock_job;

/* Runs on its own thread: setns(CLONE_NEWNET) changes only the calling
 * thread, and this thread ends right after, so no thread of the server is
 * ever left in a box's namespace. */
static void *sock_thread(void *arg)
{
        sock_job *j = arg;
        if (setns(j->nsfd, CLONE_NEWNET) < 0) {
                j->result = -errno;
                return NULL;
        }
        int fd = socket(j->domain, j->type | SOCK_CLOEXEC, j->proto);
        if (fd < 0) {
                j->result = -errno;
                return NULL;
        }
        if (j->addr) {
                int one = 1;
                if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
                    bind(fd, j->addr, j->alen) < 0 ||
                    (j->backlog > 0 && listen(fd, j->backlog) < 0)) {
                        j->result = -errno;
                        close(fd);
                        return NULL;
                }
        }
        j->result = fd;
        return NULL;
}

int ab_netns_socket(int nsfd, int domain, int type, int proto, const struct sockaddr *addr,
                    socklen_t alen, int backlog)
{
        sock_job j = {.nsfd = nsfd,
                      .domain = domain,
                      .type = type,
                      .proto = proto,
                      .backlog = backlog,
                      .addr = addr,
                      .alen = alen,
                      .result = -EIO};
        pthread_t t;
        int r = pthread_create(&t, NULL, sock_thread, &j);
        if (r)
                return -r;
        pthread_join(t, NULL);
        return j.result;
}

int ab_netns_connect_loopback(pid_t pid, uint16_t port, int timeout_ms)
{
        _cleanup_close_ int ns = ab_netns_open(pid);
        if (ns < 0)
                return ns;
        struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons(port)};
        a4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons(port)};
        a6.sin6_addr = in6addr_loopback;
        const struct sockaddr *addrs[] = {(struct sockaddr *)&a4, (struct sockaddr *)&a6};
        socklen_t lens[] = {sizeof(a4), sizeof(a6)};
        int err = -ECONNREFUSED;
        for (int i = 0; i < 2; i++) {
                int fd = ab_netns_socket(ns, addrs[i]->sa_family, SOCK_STREAM | SOCK_NONBLOCK, 0,
                                         NULL, 0, 0);
                if (fd < 0) {
                        err = fd;
                        continue;
                }
                if (connect(fd, addrs[i], lens[i]) == 0)
                        return fd;
                if (errno == EINPROGRESS) {
                        struct pollfd p = {.fd = fd, .events = POLLOUT};
                        int so = 0;
                        socklen_t sl = sizeof(so);
                        if (poll(&p, 1, timeout_ms) == 1 &&
                            getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &sl) == 0 && so == 0)
                                return fd;
                        err = so ? -so : -ETIMEDOUT;
                } else {
                        err = -errno;
                }
                close(fd);
                if (err != -ECONNREFUSED && err != -EADDRNOTAVAIL && err != -EAFNOSUPPORT)
                        break;
        }
        return err;
}

/* ---- rtnetlink -------------------------------------------------------- */

typedef struct {
        struct nlmsghdr h;
        char buf[1024];
} nl_msg;

static struct rtattr *nl_attr(nl_msg *m, unsigned short type, const void *data, size_t len)
{
        size_t off = NLMSG_ALIGN(m->h.nlmsg_len);
        struct rtattr *a = (struct rtattr *)((char *)m + off);
        a->rta_type = type;
        a->rta_len = (unsigned short)RTA_LENGTH(len);
        if (len)
                memcpy(RTA_DATA(a), data, len);
        m->h.nlmsg_len = (unsigned)(off + RTA_ALIGN(a->rta_len));
        return a;
}

static void nl_nest_end(nl_msg *m, struct rtattr *a)
{
        a->rta_len = (unsigned short)((char *)m + m->h.nlmsg_len - (char *)a);
}

static void nl_init(nl_msg *m, unsigned short type, unsigned short flags, const void *hdr,
                    size_t hlen)
{
        memset(m, 0, sizeof(*m));
        m->h.nlmsg_type = type;
        m->h.nlmsg_flags = (unsigned short)(NLM_F_REQUEST | NLM_F_ACK | flags);
        m->h.nlmsg_len = (unsigned)NLMSG_LENGTH(hlen);
        memcpy(NLMSG_DATA(&m->h), hdr, hlen);
}

typedef struct {
        int ifindex;
        char alias[64];
} link_info;

/* Sends m and reads the answer: the kernel's ack (0 or -errno), and for a
 * GETLINK what it says of the link. */
static int nl_talk(int nl, nl_msg *m, link_info *li)
{
        static _Atomic unsigned seq;
        m->h.nlmsg_seq = ++seq;
        struct sockaddr_nl to = {.nl_family = AF_NETLINK};
        if (sendto(nl, &m->h, m->h.nlmsg_len, 0, (struct sockaddr *)&to, sizeof(to)) < 0)
                return -errno;
        char buf[8192] __attribute__((aligned(4)));
        for (;;) {
                ssize_t n = recv(nl, buf, sizeof(buf), 0);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n);
                     h = NLMSG_NEXT(h, n)) {
                        if (h->nlmsg_seq != m->h.nlmsg_seq)
                                continue;
                        if (h->nlmsg_type == NLMSG_ERROR) {
                                struct nlmsgerr *e = NLMSG_DATA(h);
                                return e->error;
                        }
                        if (h->nlmsg_type == RTM_NEWLINK && li) {
                                struct ifinfomsg *ifi = NLMSG_DATA(h);
                                li->ifindex = ifi->ifi_index;
                                int alen = (int)IFLA_PAYLOAD(h);
                                for (struct rtattr *a = IFLA_RTA(ifi); RTA_OK(a, alen);
                                     a = RTA_NEXT(a, alen))
                                        if (a->rta_type == IFLA_IFALIAS) {
                                                size_t al = RTA_PAYLOAD(a);
                                                if (al >= sizeof(li->alias))
                                                        al = sizeof(li->alias) - 1;
                                                memcpy(li->alias, RTA_DATA(a), al);
                                                li->alias[al] = '\0';
                                        }
                        }
                }
        }
}

int ab_nl_open(void)
{
        int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
        return fd < 0 ? -errno : fd;
}

static int link_get(int nl, const char *name, link_info *li)
{
        nl_msg m;
        struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
        nl_init(&m, RTM_GETLINK, 0, &ifi, sizeof(ifi));
        nl_attr(&m, IFLA_IFNAME, name, strlen(name) + 1);
        memset(li, 0, sizeof(*li));
        int r = nl_talk(nl, &m, li);
        if (r < 0)
                return r;
        return li->ifindex > 0 ? li->ifindex : -ENODEV;
}

int ab_nl_link_index(int nl, const char *name)
{
        link_info li;
        return link_get(nl, name, &li);
}

int ab_nl_link_alias(int nl, const char *name, char *out, size_t len)
{
        link_info li;
        int r = link_get(nl, name, &li);
        if (r < 0)
                return r;
        snprintf(out, len, "%s", li.alias);
        return 0;
}

int ab_nl_link_set_alias(int nl, int ifindex, const char *alias)
{
        nl_msg m;
        struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC, .ifi_index = ifindex};
        nl_init(&m, RTM_NEWLINK, 0, &ifi, sizeof(ifi));
        nl_attr(&m, IFLA_IFALIAS, alias, strlen(alias));
        return nl_talk(nl, &m, NULL);
}

int ab_nl_veth_add(int nl, const char *name, const char *peer, int peer_nsfd)
{
        nl_msg m;
        struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
        nl_init(&m, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &ifi, sizeof(ifi));
        nl_attr(&m, IFLA_IFNAME, name, strlen(name) + 1);
        struct rtattr *li = nl_attr(&m, IFLA_LINKINFO, NULL, 0);
        nl_attr(&m, IFLA_INFO_KIND, "veth", 4);
        struct rtattr *data = nl_attr(&m, IFLA_INFO_DATA, NULL, 0);
        struct rtattr *pa = nl_attr(&m, VETH_INFO_PEER, NULL, 0);
        /* the peer's ifinfomsg comes first, then its attributes */
        m.h.nlmsg_len += (unsigned)NLMSG_ALIGN(sizeof(struct ifinfomsg));
        nl_attr(&m, IFLA_IFNAME, peer, strlen(peer) + 1);
        uint32_t fd = (uint32_t)peer_nsfd;
        nl_attr(&m, IFLA_NET_NS_FD, &fd, sizeof(fd));
        nl_nest_end(&m, pa);
        nl_nest_end(&m, data);
        nl_nest_end(&m, li);
        return nl_talk(nl, &m, NULL);
}

int ab_nl_link_del(int nl, const char *name)
{
        nl_msg m;
        struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC};
        nl_init(&m, RTM_DELLINK, 0, &ifi, sizeof(ifi));
        nl_attr(&m, IFLA_IFNAME, name, strlen(name) + 1);
        return nl_talk(nl, &m, NULL);
}

int ab_nl_link_up(int nl, int ifindex)
{
        nl_msg m;
        struct ifinfomsg ifi = {.ifi_family = AF_UNSPEC,
                                .ifi_index = ifindex,
                                .ifi_flags = IFF_UP,
                                .ifi_change = IFF_UP};
        nl_init(&m, RTM_NEWLINK, 0, &ifi, sizeof(ifi));
        return nl_talk(nl, &m, NULL);
}

int ab_nl_addr4_add(int nl, int ifindex, struct in_addr a, int prefix)
{
        nl_msg m;
        struct ifaddrmsg ifa = {.ifa_family = AF_INET,
                                .ifa_prefixlen = (unsigned char)prefix,
                                .ifa_scope = RT_SCOPE_UNIVERSE,
                                .ifa_index = (unsigned)ifindex};
        nl_init(&m, RTM_NEWADDR, NLM_F_CREATE | NLM_F_REPLACE, &ifa, sizeof(ifa));
        nl_attr(&m, IFA_LOCAL, &a, sizeof(a));
        nl_attr(&m, IFA_ADDRESS, &a, sizeof(a));
        return nl_talk(nl, &m, NULL);
}

int ab_nl_route4_default(int nl, struct in_addr gw)
{
        nl_msg m;
        struct rtmsg rt = {.rtm_family = AF_INET,
                           .rtm_table = RT_TABLE_MAIN,
                           .rtm_protocol = RTPROT_STATIC,
                           .rtm_scope = RT_SCOPE_UNIVERSE,
                           .rtm_type = RTN_UNICAST};
        nl_init(&m, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_REPLACE, &rt, sizeof(rt));
        nl_attr(&m, RTA_GATEWAY, &gw, sizeof(gw));
        return nl_talk(nl, &m, NULL);
}
