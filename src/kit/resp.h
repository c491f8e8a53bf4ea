/* resp.h - answers (kit/resp.c): JSON and error bodies with the status
 * fitting an ab_err, streamed bodies fed by a producer thread, and the
 * stream slots that count long-lived streams. */
#ifndef AB_KIT_RESP_H
#define AB_KIT_RESP_H

#include "kit/server.h"

/* Queues a JSON response (steals j). Returns an MHD result. */
enum MHD_Result resp_json(ab_req *r, unsigned status, json_t *j);
/* Queues {"error":{"code","message"}} with the status fitting e's code (frees e). */
enum MHD_Result resp_err(ab_req *r, ab_err *e);
/* Same, with an explicit status and code name. */
enum MHD_Result resp_error(ab_req *r, unsigned status, const char *code, const char *fmt, ...)
    AB_PRINTF(4, 5);
/* HTTP status for an error code. */
unsigned status_of(ab_code c);

/* A response whose body is read from fd until EOF (chunked); the fd is
 * closed when the response is done. The producer writes the other end of a
 * pipe from its own thread and sees EPIPE when the client goes away. */
enum MHD_Result resp_stream(ab_req *r, unsigned status, const char *content_type, int fd,
                            const char *const *headers);
/* Same, for a long-lived stream: slot (from req_stream_slot, may be NULL)
 * is released when the response ends. */
enum MHD_Result resp_stream_counted(ab_req *r, unsigned status, const char *content_type, int fd,
                                    const char *const *headers, ab_stream_slot *slot);
/* Streams `length` bytes (0: to the end) of the box's file at `path` (as the
 * box names it), from `offset`, as the body of a `status` answer: a thread
 * reads it through the box's init into a pipe. Takes over *use, ended when
 * the stream ends (or at once when it cannot start). */
enum MHD_Result resp_box_file(ab_req *r, ab_use *use, const char *path, uint64_t offset,
                              uint64_t length, unsigned status, const char *const *headers);
/* Queues a response made by the caller (adds the common headers; steals
 * resp). Use it rather than MHD_queue_response: on a worker the answer is
 * queued by MHD's thread. */
enum MHD_Result resp_send(ab_req *r, unsigned status, struct MHD_Response *resp);
/* Counts a long-lived stream of r (an event stream, an exec stream, a
 * terminal) against max_streams and max_streams_per_address, apart from
 * connections and requests in flight. Returns the slot (release it with
 * ab_stream_slot_release when the stream ends, from any thread), or NULL
 * after answering r 503 (the server's cap) or 429 (the address's cap); *ret
 * is then the handler's result. */
ab_stream_slot *req_stream_slot(ab_req *r, enum MHD_Result *ret);
/* Starts a detached thread running fn(arg). 0 or -errno. ab_server_stop
 * waits for it (it may use the manager): fn must end once the stop has
 * closed the streams and cancelled the fronts' execs. */
int spawn_detached(void *(*fn)(void *), void *arg);
/* Waits up to timeout_ms for every thread of spawn_detached to end; the
 * number still running. */
size_t spawn_wait(uint64_t timeout_ms);

#endif
