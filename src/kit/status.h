/* status.h - how a failed operation on a box's files answers over HTTP,
 * the same for agentbox's routes and every front: one rule, so a full disk
 * reads the same everywhere. */
#ifndef AB_KIT_STATUS_H
#define AB_KIT_STATUS_H

#include "kit/resp.h"

/* The status of a failed file operation (a read, write, upload, mkdir, ...
 * on a box): 507 Insufficient Storage for AB_E_LIMIT (the box's disk or
 * its inode quota is full, as the box's init reports ENOSPC/EDQUOT), else
 * status_of(c). A front keeps its own error body and codes. */
unsigned kit_file_status(ab_code c);

/* agentbox's own answer to a failed file operation: resp_err, with
 * kit_file_status's status (a full disk is 507 "limit_exceeded"). Frees e. */
enum MHD_Result kit_file_err(ab_req *r, ab_err *e);

#endif
