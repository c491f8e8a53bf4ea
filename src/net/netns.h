/* netns.h - the host side's reach into a box's network namespace: sockets
 * made inside it (the allowlist proxy's listener, a netlink socket to
 * configure it) and the few rtnetlink operations full mode needs (a veth
 * pair, addresses, a default route). Every function returns 0 (or an fd) or
 * -errno. Thread-safe: namespace switches happen on a short-lived thread of
 * their own, never on the caller's. */
#ifndef AB_NETNS_H
#define AB_NETNS_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

/* Opens /proc/PID/ns/net (O_CLOEXEC). */
int ab_netns_open(pid_t pid);

/* A socket(domain, type|SOCK_CLOEXEC, proto) created inside the namespace
 * nsfd. When addr is given it is bound there (SO_REUSEADDR) and, for a
 * stream socket with backlog > 0, listens. */
int ab_netns_socket(int nsfd, int domain, int type, int proto, const struct sockaddr *addr,
                    socklen_t alen, int backlog);

/* A TCP connection to 127.0.0.1:port, else [::1]:port, made inside the
 * network namespace of process pid (a box's init): connected and
 * non-blocking (caller closes), or -errno (-ECONNREFUSED when nothing
 * listens, -ETIMEDOUT after timeout_ms). */
int ab_netns_connect_loopback(pid_t pid, uint16_t port, int timeout_ms);

/* rtnetlink, on a NETLINK_ROUTE socket nl (made with ab_netns_socket for
 * another namespace, or socket() for the caller's). */
int ab_nl_open(void);
int ab_nl_link_index(int nl, const char *name);
/* The link's alias (IFLA_IFALIAS; "" when none) / sets it. */
int ab_nl_link_alias(int nl, const char *name, char *out, size_t len);
int ab_nl_link_set_alias(int nl, int ifindex, const char *alias);
/* A veth pair: `name` in nl's namespace, `peer` moved into peer_nsfd. */
int ab_nl_veth_add(int nl, const char *name, const char *peer, int peer_nsfd);
int ab_nl_link_del(int nl, const char *name);
int ab_nl_link_up(int nl, int ifindex);
int ab_nl_addr4_add(int nl, int ifindex, struct in_addr a, int prefix);
int ab_nl_route4_default(int nl, struct in_addr gw);

#endif
