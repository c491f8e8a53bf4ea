/* sessions_int.h - between the files of the sessions front. */
#ifndef AB_SESSIONS_INT_H
#define AB_SESSIONS_INT_H

#include "fronts/sessions/sessions.h"

/* The longest thread id a client may choose. */
#define SESSION_ID_MAX 128

/* True when id is a valid thread id: 1..SESSION_ID_MAX of [A-Za-z0-9._-]. */
bool session_id_ok(const char *id);
/* Answers 400 or 404 (or the store's error) unless thread id is a session of
 * r's app; true when it is. */
bool session_check(ab_req *r, const char *id, enum MHD_Result *ret);
/* Finds or makes the thread's box and makes it run (the box's id into
 * out[17]). The manager's errors. In a fleet, a box another node made at
 * the same moment (it won the race for the thread) is left as it is: *node
 * gets that node (the caller frees; the request belongs there), else NULL. */
int session_box(ab_server *s, const char *scope, const char *thread, char out[17], char **node,
                ab_err **err);
/* The answer for a thread whose box another fleet node made while this
 * request was read: 409, send it again (it is then passed on there). */
enum MHD_Result session_elsewhere(ab_req *r, const char *thread, const char *node);

enum MHD_Result sessions_create(ab_req *r, const char *id);
enum MHD_Result sessions_delete(ab_req *r, const char *id);
enum MHD_Result sessions_chat(ab_req *r, const char *id);
enum MHD_Result sessions_upload(ab_req *r, const char *id);
enum MHD_Result sessions_download(ab_req *r, const char *id);
/* The table's stop: running chats end (their model request and tools). */
void sessions_quiesce(void);

#endif
