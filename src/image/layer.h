/* layer.h - unpacking one image layer (an OCI/Docker layer tar) into a
 * directory that overlayfs uses as a read-only lower layer.
 *
 * The input is untrusted. Compression is detected from the bytes (plain tar,
 * gzip, zstd). Every entry is written fd-relative under dest, never following
 * a symlink (openat2 RESOLVE_IN_ROOT|RESOLVE_NO_SYMLINKS on parents, O_NOFOLLOW
 * on the leaf): absolute names and ".." are refused (AB_E_INVALID, naming the
 * entry); a symlink in the layer may point anywhere (it is resolved inside the
 * box), but nothing is ever written through one; a hard link must name an
 * earlier regular file of this same layer; character and block devices,
 * fifos and sockets are skipped and counted (a box's lowers are mounted nodev
 * anyway); setuid/setgid/sticky bits are kept (the lowers are mounted
 * nosuid). Owners (uid/gid as in the tar), modes, mtimes and xattrs in the
 * user.* namespace are kept; other xattrs are dropped, and so is
 * user.overlay.* (overlayfs's own under a userxattr mount). Names are
 * normalised ("./a//b/" -> "a/b"); an entry for the root ("./") sets only
 * dest's mode; missing parent directories are made 0755, owned by root.
 *
 * OCI whiteouts become overlayfs ones: ".wh.NAME" -> a 0/0 character device
 * NAME; ".wh..wh..opq" in DIR -> DIR gets trusted.overlay.opaque="y". A later
 * entry of the same path replaces an earlier one, as tar extraction does.
 *
 * Limits count what is really decompressed (headers may lie): a layer over
 * max_bytes of file data or max_entries entries fails with AB_E_LIMIT (a
 * decompression bomb), leaving dest partly filled: the caller unpacks into a
 * temporary directory and renames it into place only on success. */
#ifndef AB_IMAGE_LAYER_H
#define AB_IMAGE_LAYER_H

#include "base/err.h"

#include <stdint.h>

#define AB_LAYER_DEFAULT_MAX_BYTES   (16ull << 30) /* 16 GiB of file data */
#define AB_LAYER_DEFAULT_MAX_ENTRIES 2000000ull

typedef struct ab_layer_opts {
        uint64_t max_bytes;   /* 0 = AB_LAYER_DEFAULT_MAX_BYTES */
        uint64_t max_entries; /* 0 = AB_LAYER_DEFAULT_MAX_ENTRIES */
} ab_layer_opts;

typedef struct ab_layer_stats {
        uint64_t bytes;     /* file data written (data of skipped entries is read, counted
                               against max_bytes, not written) */
        uint64_t entries;   /* entries read */
        uint64_t skipped;   /* device nodes, fifos, sockets left out */
        uint64_t whiteouts; /* whiteouts and opaque markers made */
} ab_layer_stats;

/* Unpacks the layer read from fd (read to its end; not seekable is fine)
 * into the directory dest_dirfd (should be empty). Needs root on the host (it
 * sets owners and makes whiteout devices). o and st may be NULL. */
int ab_layer_unpack(int fd, int dest_dirfd, const ab_layer_opts *o, ab_layer_stats *st,
                    ab_err **err);

/* The layer's diff id: "sha256:HEX" of the whole tar stream read from fd
 * (from its current offset to its end) after gzip or zstd decompression (a
 * plain tar as it is), as an image config's rootfs.diff_ids lists it. Only
 * reads; more than max_bytes of file data plus room for max_entries
 * entries' headers (o's bounds, as for ab_layer_unpack) fails with
 * AB_E_LIMIT, a stream that is not plain, gzip or zstd with AB_E_INVALID.
 * *out (caller frees) is set only on success. */
int ab_layer_diff_id(int fd, const ab_layer_opts *o, char **out, ab_err **err);

#endif
