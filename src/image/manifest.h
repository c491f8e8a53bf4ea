/* manifest.h - the JSON documents of an image: OCI image index / Docker
 * manifest list, OCI image manifest / Docker schema 2 manifest, and the image
 * config. Shared by registry pulls and archive imports (OCI layouts carry the
 * same documents). Untrusted input: every field is type-checked, every
 * digest validated (ab_digest_valid), counts bounded. Host-side (jansson). */
#ifndef AB_IMAGE_MANIFEST_H
#define AB_IMAGE_MANIFEST_H

#include "base/err.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AB_MANIFEST_MAX_LAYERS 127 /* most layers an image may have (as Docker) */
#define AB_MANIFEST_MAX_BYTES  (4u << 20)

/* Media types (the Accept header a pull sends lists all four). */
#define AB_MT_OCI_INDEX       "application/vnd.oci.image.index.v1+json"
#define AB_MT_OCI_MANIFEST    "application/vnd.oci.image.manifest.v1+json"
#define AB_MT_DOCKER_LIST     "application/vnd.docker.distribution.manifest.list.v2+json"
#define AB_MT_DOCKER_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"

typedef enum {
        AB_LAYER_TAR = 0, /* uncompressed */
        AB_LAYER_GZIP,
        AB_LAYER_ZSTD,
} ab_layer_compression;

typedef struct ab_manifest_layer {
        char *digest; /* "sha256:..." of the blob as stored (compressed) */
        uint64_t size;
        ab_layer_compression compression;
} ab_manifest_layer;

typedef struct ab_manifest {
        char *config_digest;
        uint64_t config_size;
        ab_manifest_layer *layers; /* bottom first */
        size_t n_layers;
} ab_manifest;

/* True when the document (with the Content-Type it came with, may be NULL) is
 * an index / manifest list rather than one image's manifest. Looks at
 * mediaType in the body first, then at the header, then at the shape
 * ("manifests" vs "layers"). */
bool ab_manifest_is_index(const char *json, size_t len, const char *content_type);

/* From an index: the digest of the entry for os/arch (e.g. "linux",
 * "amd64"; variant ignored). AB_E_NOT_FOUND naming the platforms the index
 * has when none matches; AB_E_INVALID for a malformed index. */
int ab_index_pick(const char *json, size_t len, const char *os, const char *arch, char **digest,
                  ab_err **err);

/* Parses an image manifest. Layer media types accepted: OCI tar, tar+gzip,
 * tar+zstd and Docker's rootfs.diff.tar.gzip; a foreign or unknown layer type
 * is AB_E_UNSUPPORTED naming it; anything malformed AB_E_INVALID. */
int ab_manifest_parse(const char *json, size_t len, ab_manifest *out, ab_err **err);
void ab_manifest_clear(ab_manifest *m);

/* What a box takes from an image's config ("config" object of the config
 * blob). Arrays are NULL-terminated, or NULL when absent. */
typedef struct ab_image_config {
        char *os, *arch; /* "linux", "amd64" */
        char **env;      /* "K=V" */
        char *workdir;   /* or NULL */
        char *user;      /* "name", "uid", "uid:gid", "name:group", or NULL */
        char **entrypoint;
        char **cmd;
        char **diff_ids; /* rootfs.diff_ids, bottom first */
} ab_image_config;

/* Parses a config blob. AB_E_INVALID when malformed. */
int ab_image_config_parse(const char *json, size_t len, ab_image_config *out, ab_err **err);
void ab_image_config_clear(ab_image_config *c);

#endif
