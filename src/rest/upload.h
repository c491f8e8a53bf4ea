/* upload.h - archive uploads into a box: PUT /v1/sandboxes/{id}/files?path=DIR&extract=1
 * (docs/api.md, "Files"). */
#ifndef AB_UPLOAD_H
#define AB_UPLOAD_H

#include "rest/rest.h"

/* True when the PUT asks for extraction (`extract` other than 0/false, or a
 * `format`): the body is then an archive, not a file's bytes. */
bool upload_wants_extract(ab_req *r);

/* Extracts the spooled zip/tar upload (r->upload_fd) into directory `dir` of
 * box `id`, entry by entry through the box's init. Every entry is checked
 * (names, types, sizes, checksums) before anything is written: a bad one
 * answers 400 naming it (413 for a size or count limit) and the box is left
 * untouched. The entries' data is decompressed straight into the box (a
 * pipe to its init), never onto the host's disk; a full box disk is 507.
 * Answers 201 {"path", "files", "dirs", "size"}. */
enum MHD_Result upload_extract(ab_req *r, const char *id, const char *dir);

#endif
