/* store.h - the image store: images pulled from registries or imported from
 * archives, kept in the data folder, their layers unpacked once per digest
 * and shared read-only by every box that uses them.
 *
 * On disk (DIR = DATA/images):
 *   DIR/lock               flock: metadata changes and GC are exclusive
 *   DIR/gc.lock            flock: pulls and imports hold it shared while they
 *                          run; GC takes it exclusive without waiting (and
 *                          skips this round when it cannot)
 *   DIR/refs.json          {"canonical name": "image id", ...} (atomic rewrite);
 *                          the names of an app's private images (snapshots
 *                          made with an API key) are "@APP/canonical name",
 *                          apart from every other app's and the shared ones
 *   DIR/images/HEX.json    one image's record (id = "sha256:HEX", the digest of
 *                          its config blob, as Docker's image ids): layers
 *                          (blob digest, diff id, bytes), its config (env,
 *                          workdir, user, entrypoint, cmd, os, arch), the
 *                          manifest digests it was pulled by, created, source,
 *                          apps (the apps a private image belongs to)
 *   DIR/layers/HEX/fs      one unpacked layer (layer.h), HEX = its blob digest
 *   DIR/layers/HEX/layer.json  {digest, bytes, entries}
 *   DIR/holds/HOLDER       the image id a holder (a box id) uses
 *   DIR/tmp/               downloads and unpacks in progress; emptied at open
 * A layer directory appears only by rename() of a fully unpacked tmp
 * directory, a record or refs.json only by atomic rename, so a crash at any
 * moment leaves the store consistent (at worst a tmp entry, removed at the
 * next open, or an unreferenced layer, removed by the next GC).
 *
 * Thread-safety: every call may run concurrently from several threads and
 * processes on one DIR. */
#ifndef AB_IMAGE_STORE_H
#define AB_IMAGE_STORE_H

#include "base/err.h"
#include "image/layer.h"
#include "image/manifest.h"
#include "image/registry.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct ab_image_store ab_image_store;

typedef struct ab_image_store_opts {
        const char *dir;           /* DATA/images; created if missing */
        ab_registry_opts registry; /* copied (strings too) */
        ab_layer_opts layer;       /* bounds on one layer's unpacked size */
        uint64_t max_blob_bytes;   /* most bytes of one downloaded blob; 0 = 8 GiB */
        /* The registries an app (a pull with an API key) may pull from, as in
         * a reference ("docker.io", "ghcr.io", "reg.example.com:5000", or
         * "*.example.com" for its subdomains), NULL-terminated; NULL means
         * AB_IMAGE_APP_REGISTRIES_DEFAULT, an empty list none. Copied. */
        const char *const *app_registries;
        /* Apps may also pull from loopback registries, and their pulls may
         * connect to loopback addresses (development). */
        bool app_loopback;
} ab_image_store_opts;

/* The public registries apps may pull from unless the config says otherwise. */
#define AB_IMAGE_APP_REGISTRIES_DEFAULT                                                            \
        {                                                                                          \
                "docker.io", "ghcr.io", "quay.io", "gcr.io", "registry.k8s.io", "public.ecr.aws",  \
                    "mcr.microsoft.com", NULL                                                      \
        }

typedef struct ab_image {
        char *id;       /* "sha256:HEX" of the config blob */
        char **names;   /* canonical references naming it, NULL-terminated (may be empty) */
        char **digests; /* manifest digests it is known by, NULL-terminated (may be empty) */
        char **layers;  /* absolute paths of the unpacked layer trees (DIR/layers/HEX/fs),
                         * bottom first, NULL-terminated */
        size_t n_layers;
        ab_image_config config; /* manifest.h */
        uint64_t size;          /* bytes of file data of its layers */
        int64_t created;        /* unix seconds it came into the store */
        char *source;           /* "pull" | "import" | "snapshot" */
        char **apps;      /* NULL: shared (every app sees it); else the apps whose private image it
                           * is, NULL-terminated (a snapshot made with an API key: it holds a
                           * box's files) */
        char **pulled_by; /* apps that pulled it with an API key (its size counts against
                           * each one's disk quota), NULL-terminated, or NULL */
} ab_image;

/* May app (NULL: the admin) see and use img? */
bool ab_image_visible(const ab_image *img, const char *app);
/* How app (NULL: the admin) sees one of an image's names: a shared name as
 * it is, one of app's private names without its "@APP/", another app's
 * private name not at all (NULL). The admin sees every name as stored. */
const char *ab_image_name_shown(const char *name, const char *app);

void ab_image_clear(ab_image *img);
void ab_image_list_free(ab_image *imgs, size_t n);

int ab_image_store_open(const ab_image_store_opts *opts, ab_image_store **out, ab_err **err);
void ab_image_store_free(ab_image_store *s);

/* Progress of a pull or import: phase is "resolve" (done/total unused),
 * "download" or "unpack" (of layer `digest`; bytes done and total, total 0
 * when unknown), "exists" (layer `digest` was already in the store) or
 * "done". May be called from the calling thread only. */
typedef void (*ab_image_progress_fn)(void *ud, const char *phase, const char *digest, uint64_t done,
                                     uint64_t total);

/* Pulls ref (ref.h syntax) from its registry: resolves the tag, picks the
 * linux/amd64 entry of an index, verifies every digest before use, unpacks
 * the layers not yet in the store, writes the record and names the image
 * `ref` (canonical). The record keeps the digests of the index and of the
 * manifest. An image for another platform is AB_E_UNSUPPORTED. The
 * registry's errors are passed on (registry.h). fn may be NULL. */
int ab_image_pull(ab_image_store *s, const char *ref, ab_image_progress_fn fn, void *ud,
                  ab_image *out, ab_err **err);
/* ab_image_pull for app (NULL: the admin, exactly ab_image_pull). An app
 * pulls only from the registries opts.app_registries allows (loopback ones
 * too with opts.app_loopback), else AB_E_PERMISSION before anything is
 * sent; and every address its pull connects to (the registry, redirects,
 * the token realm) must pass base/addrcheck.h (loopback too with
 * app_loopback), else AB_E_PERMISSION. The image is shared, as any pull,
 * and records app in pulled_by. budget (app only; 0 = no bound) is the
 * file data the whole image may hold (its layers already in the store
 * count too, unless app pulled this image before): a layer is unpacked
 * with no more than what is left, and an image over it is AB_E_QUOTA with
 * nothing recorded. */
int ab_image_pull_as(ab_image_store *s, const char *app, uint64_t budget, const char *ref,
                     ab_image_progress_fn fn, void *ud, ab_image *out, ab_err **err);
/* Bytes of file data of the images app pulled or made (pulled_by, apps):
 * what counts against its disk quota. Each image counts whole. */
int ab_image_app_bytes(ab_image_store *s, const char *app, uint64_t *out, ab_err **err);
/* May app pull from the registry `domain` (as in a reference)? */
bool ab_image_app_registry_allowed(const ab_image_store *s, const char *domain);

/* Imports every image of a `docker save` tarball or an OCI image-layout
 * tarball (plain, gzip or zstd) read from fd to its end (a pipe is fine),
 * named by the names the archive gives (RepoTags; in a layout
 * io.containerd.image.name, else org.opencontainers.image.ref.name when it is
 * a whole reference), canonicalised; `name`, when non-NULL, names the
 * archive's only image instead (AB_E_INVALID if it has several). An image
 * left with no name (no RepoTags, or a ref.name that is only a tag such as
 * "latest": it has no repository) is AB_E_INVALID asking for `name`: unnamed
 * it would only wait for the next GC. Digests in the archive are verified
 * (layer blobs, configs, manifests; an uncompressed layer against its diff
 * id) before anything enters the store; an image already in the store keeps
 * the layers it has. *out gets the images (free with ab_image_list_free), *n
 * their count. */
int ab_image_import(ab_image_store *s, int fd, const char *name, ab_image_progress_fn fn, void *ud,
                    ab_image **out, size_t *n, ab_err **err);

/* Makes a new local image of image base_id plus one layer: write_layer
 * (called once) writes the layer, an uncompressed tar, to fd (a fresh
 * unnamed file of the store); it is unpacked like any pulled layer
 * (layer.h: OCI whiteouts, every check) and keyed by its real digest. The
 * record (source "snapshot") has the base's config with the new layer's
 * diff id added (the id is the digest of that config blob) and is named
 * `name`, canonicalised as Docker does ("myenv:1" ->
 * docker.io/library/myenv:1); a name that named another image moves to
 * this one. With app non-NULL the image is app's private image: named in
 * app's own names ("@APP/docker.io/library/myenv:1"), so it takes no name
 * of another app or a shared one, and only app (and the admin) see it.
 * AB_E_INVALID for a bad name (nothing is written then), AB_E_NOT_FOUND
 * when base_id is not in the store. *out gets the image. */
int ab_image_commit(ab_image_store *s, const char *base_id, const char *name, const char *app,
                    int (*write_layer)(void *ud, int fd, ab_err **err), void *ud, ab_image *out,
                    ab_err **err);

/* Looks up an image by reference (canonicalised first: "busybox" finds
 * docker.io/library/busybox:latest), by id ("sha256:HEX", or a unique prefix
 * of HEX of at least 12 characters, a name winning over a prefix) or by a
 * manifest digest it was pulled by. AB_E_NOT_FOUND when absent; AB_E_INVALID
 * for a prefix that matches several images or a malformed reference. A name
 * as stored ("@APP/...") is looked up as it is. */
int ab_image_get(ab_image_store *s, const char *ref_or_id, ab_image *out, ab_err **err);
/* Same, as app sees the store (NULL: the admin, as ab_image_get): a
 * reference is looked up in app's private names first, then in the shared
 * ones; an image app may not see is AB_E_NOT_FOUND, as if absent. */
int ab_image_get_as(ab_image_store *s, const char *app, const char *ref_or_id, ab_image *out,
                    ab_err **err);

/* Every image, sorted by id. */
int ab_image_list(ab_image_store *s, ab_image **out, size_t *n, ab_err **err);

/* Removes a name (or, given an id or digest, every name of that image).
 * The image's record and layers go at the next ab_image_gc unless a holder
 * still uses it. AB_E_NOT_FOUND when nothing matched. */
int ab_image_remove(ab_image_store *s, const char *ref_or_id, ab_err **err);

/* Marks image_id as used by holder (a box id): kept, with its layers, until
 * released, whatever its names. A holder holds one image; holding again
 * replaces it. AB_E_NOT_FOUND when no such image. */
int ab_image_hold(ab_image_store *s, const char *holder, const char *image_id, ab_err **err);
/* Ends holder's hold (none: no-op). */
int ab_image_release(ab_image_store *s, const char *holder, ab_err **err);
/* Ends every hold whose holder `live` says is gone (false): for recovery
 * after a crash between a box's delete and its release. */
int ab_image_prune_holds(ab_image_store *s, bool (*live)(void *ud, const char *holder), void *ud,
                         ab_err **err);

/* Removes images with no name and no holder, then layers no image uses.
 * *freed (may be NULL) gets the bytes of file data removed. Returns 0 also
 * when it skipped because a pull is running. */
int ab_image_gc(ab_image_store *s, uint64_t *freed, ab_err **err);

#endif
