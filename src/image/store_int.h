/* store_int.h - what the parts of the image store share: store.c (records,
 * names, holds, GC, staging layers and committing records, pulls) and
 * store_import.c (archive imports). Not for other modules. */
#ifndef AB_IMAGE_STORE_INT_H
#define AB_IMAGE_STORE_INT_H

#include "image/store.h"

#define IMGSTORE_HEX_LEN 64

#if defined(__aarch64__)
#define HOST_ARCH "arm64"
#else
#define HOST_ARCH "amd64"
#endif

struct ab_image_store {
        char *dir; /* absolute */
        int dfd;
        ab_registry_opts registry; /* deep copy */
        char **insecure;
        ab_registry_cred *creds;
        ab_layer_opts layer;
        uint64_t max_blob;
        char **app_registries; /* NULL-terminated (may be empty) */
        bool app_loopback;
};

/* An image on its way into the store (pull or import). */
typedef struct stage_layer {
        char *digest;   /* "sha256:HEX" of the blob: the layer's key */
        char *diff_id;  /* or NULL */
        char *path;     /* import: the blob inside the extracted archive */
        uint64_t bytes; /* file data, once in the store */
} stage_layer;

typedef struct stage_image {
        char *id; /* "sha256:HEX" of the config blob */
        ab_image_config cfg;
        stage_layer *layers;
        size_t n_layers;
        char **names;          /* canonical, NULL-terminated */
        char **digests;        /* manifest digests, NULL-terminated */
        bool reused;           /* in the store already, with all its layers: keep those */
        const char *app;       /* a private image's app (names already "@APP/..."), or NULL */
        const char *pulled_by; /* the app whose pull this is, or NULL */
} stage_image;

/* NULL-terminated string vectors. */
void imgstore_strv_free(char **v);
size_t imgstore_strv_len(char *const *v);
/* Appends a copy of s to *v unless it is there already. */
void imgstore_strv_add_unique(char ***v, const char *s);
bool imgstore_is_hex(const char *s, size_t n);

/* Calls fn when it is not NULL. */
void imgstore_progress(ab_image_progress_fn fn, void *ud, const char *phase, const char *digest,
                       uint64_t done, uint64_t total);

/* "sha256:HEX" of a buffer; of fd from its offset to its end (0 or -errno). */
char *imgstore_digest_of(const void *buf, size_t len);
int imgstore_digest_fd(int fd, char **out, uint64_t *bytes);

/* Opens path inside the tree rootfd: symlinks resolve inside it, never out. */
int imgstore_open_in_root(int rootfd, const char *path, int flags);
int imgstore_open_dir_at(int dfd, const char *name);
/* A fresh directory "tmp/PREFIX.…" under the store (caller frees the name). */
char *imgstore_mkdir_tmp(ab_image_store *s, const char *prefix, ab_err **err);
/* Takes DIR/NAME as an flock (LOCK_SH/LOCK_EX); the fd holds it. */
int imgstore_lock_or_err(ab_image_store *s, const char *name, int op, ab_err **err);

void imgstore_stage_clear(stage_image *im);
void imgstore_stages_free(stage_image *v, size_t n);
/* Parses im's config blob (im->id = its digest) and checks the platform. */
int imgstore_stage_config(stage_image *im, const char *json, size_t len, ab_err **err);
/* Adds the canonical form of name to im->names. */
int imgstore_stage_name(stage_image *im, const char *name, ab_err **err);
/* True when layers/HEX is in the store; *bytes gets its file data size. */
bool imgstore_layer_present(ab_image_store *s, const char *hex, uint64_t *bytes);
/* Checks that the layer in fd decompresses to diff_id (when non-NULL:
 * AB_E_INVALID if not, before anything is written), unpacks it into tmp/,
 * records its diff id and renames it into layers/HEX. fd must be seekable.
 * max_bytes: file data it may unpack to (0: the store's layer bound). */
int imgstore_layer_install(ab_image_store *s, const char *digest, const char *diff_id, int fd,
                           uint64_t total, uint64_t max_bytes, ab_image_progress_fn fn, void *ud,
                           uint64_t *bytes, ab_err **err);
/* For a layer already in the store: AB_E_INVALID when it recorded a diff id
 * other than diff_id (NULL: nothing to check). Layers installed before diff
 * ids were recorded pass. */
int imgstore_layer_diff_check(ab_image_store *s, const char *digest, const char *diff_id,
                              ab_err **err);
/* True (and im->reused set) when im is stored already with all its layers. */
bool imgstore_stage_reuse(ab_image_store *s, stage_image *im, ab_image_progress_fn fn, void *ud);
/* Writes the records, then the names; *out (may be NULL) gets the images. */
int imgstore_commit(ab_image_store *s, stage_image *v, size_t n, const char *source, ab_image **out,
                    ab_err **err);

#endif
