/* fleet.h - several servers as one service on a shared PostgreSQL store
 * (docs/fleet.md): this node's record in the store's nodes table, kept
 * fresh by a heartbeat thread (its URL, its running boxes, its host's memory
 * and its data folder's disk), and the state of any node as the others see
 * it (up, draining, down).
 *
 * Thread-safety: every function may be called from any thread once
 * ab_fleet_start returned; ab_fleet_stop only after every user is done. */
#ifndef AB_FLEET_H
#define AB_FLEET_H

#include "core/manager.h"
#include "store/store.h"

typedef struct ab_fleet ab_fleet;

typedef struct ab_fleet_opts {
        ab_store *store;       /* borrowed; shared by every node */
        ab_manager *mgr;       /* borrowed; counts this node's running boxes */
        const char *node;      /* this node's id (copied) */
        const char *url;       /* where the other nodes reach it (copied) */
        const char *data_dir;  /* whose filesystem's free space is reported (copied) */
        const char *secret;    /* the fleet's shared secret (copied; never logged) */
        int64_t heartbeat_ms;  /* period of the heartbeat */
        int64_t down_after_ms; /* a node silent this long is down */
        ab_events *events;     /* borrowed: the node's bus, joined to the fleet's events */
        const char *store_url; /* the shared store's postgres:// url (its events' LISTEN) */
} ab_fleet_opts;

/* Records this node's first heartbeat (so that a node that cannot reach
 * the store does not start: AB_E_UNAVAILABLE), then starts the heartbeat
 * thread. *out is owned by the caller (ab_fleet_stop). */
int ab_fleet_start(const ab_fleet_opts *o, ab_fleet **out, ab_err **err);
/* Stops the heartbeat thread and frees. The node's record stays: it reads
 * down once its heartbeat is older than down_after. NULL is a no-op. */
void ab_fleet_stop(ab_fleet *f);

/* This node's id and URL (owned by f). */
const char *ab_fleet_node(const ab_fleet *f);
const char *ab_fleet_url(const ab_fleet *f);
/* The fleet's secret: node-to-node requests carry it, and only requests
 * that carry it may speak for a caller (kit/auth.c). Owned by f. */
const char *ab_fleet_secret(const ab_fleet *f);

typedef enum { AB_NODE_UP = 1, AB_NODE_DRAINING, AB_NODE_DOWN } ab_node_state;

/* A node's state at now_ms: down when its heartbeat is older than
 * down_after_ms; else draining when marked so; else up. */
ab_node_state ab_node_state_at(const ab_node_rec *n, int64_t down_after_ms, int64_t now_ms);
const char *ab_node_state_name(ab_node_state s);
/* A node's JSON view: id, url, state, draining, heartbeat_at, started_at
 * (RFC 3339), running, memory {total, available}, disk {total, available}
 * (bytes). */
json_t *ab_node_json(const ab_node_rec *n, int64_t down_after_ms, int64_t now_ms);
/* The same with this node's down_after. */
ab_node_state ab_fleet_node_state(const ab_fleet *f, const ab_node_rec *n, int64_t now_ms);
json_t *ab_fleet_node_json(const ab_fleet *f, const ab_node_rec *n, int64_t now_ms);

/* The node n and its state, read from the store. AB_E_NOT_FOUND when the
 * fleet has no such node. */
int ab_fleet_node_get(ab_fleet *f, const char *id, ab_node_rec *out, ab_node_state *state,
                      ab_err **err);

/* The URL (*url: the caller frees) and state of node, as of the last
 * heartbeat (the store is read for a node not seen yet). -1 when the fleet
 * has no such node. For the requests about boxes the node owns. */
int ab_fleet_owner(ab_fleet *f, const char *node, char **url, ab_node_state *state);

/* Where a new box goes (docs/fleet.md, "Placement"): of the live nodes not
 * draining whose last heartbeat shows room (mem_bytes of memory and
 * disk_bytes of disk available), the better of two picked at random (fewer
 * running boxes, then more memory available). *node: its id (the caller
 * frees; maybe this node's). AB_E_UNAVAILABLE when no node has room. */
int ab_fleet_place(ab_fleet *f, uint64_t mem_bytes, uint64_t disk_bytes, char **node, ab_err **err);

#endif
