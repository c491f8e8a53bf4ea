/* front_execd_int.h - what front_execd.c (commands, sessions, metrics, the
 * routing of execd) and front_execd_files.c (files and directories) share.
 * Private to the OpenSandbox front. */
#ifndef AB_FRONT_EXECD_INT_H
#define AB_FRONT_EXECD_INT_H

#include "fronts/opensandbox/front_osb.h"

/* Errors of an operation on a box's files or commands in execd's codes: a
 * missing path is FILE_NOT_FOUND, a bad request INVALID_REQUEST_BODY, a full
 * disk 507; others as osb_err. Frees e. */
enum MHD_Result execd_err(ab_req *r, ab_err *e);
/* Begins a use of box id for the caller; answers the error itself (-1). */
int execd_begin_use(ab_req *r, const char *id, ab_use *u, enum MHD_Result *ret);
/* Checks that box id is the caller's; answers the error itself (-1). */
int execd_box_check(ab_req *r, const char *id, enum MHD_Result *ret);
/* 200 with an empty body. */
enum MHD_Result execd_ok(ab_req *r);

/* The file and directory calls (front_execd_files.c). */
enum MHD_Result execd_files_info(ab_req *r, const char *id);
/* DELETE /files (files) and /directories (recursive: trees). */
enum MHD_Result execd_remove_paths(ab_req *r, const char *id, bool recursive);
/* POST /files/permissions and POST /directories (mkdirs: made first). */
enum MHD_Result execd_paths_perm(ab_req *r, const char *id, bool mkdirs);
enum MHD_Result execd_files_mv(ab_req *r, const char *id);
/* GET /directories/list, or GET /files/search (search: a glob, 32 levels). */
enum MHD_Result execd_dir_list(ab_req *r, const char *id, bool search);
enum MHD_Result execd_files_replace(ab_req *r, const char *id);
enum MHD_Result execd_files_download(ab_req *r, const char *id);

#endif
