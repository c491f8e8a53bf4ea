/* sse.h - a parser of Server-Sent Events (the WHATWG EventSource format) as
 * OpenAI-compatible servers stream chat completions: "data:" lines joined
 * with '\n' until a blank line ends the event; "event:" names it; comments
 * (":...") and other fields are ignored; lines end in LF, CRLF or CR.
 *
 * Bounded: a line longer than max_line or an event's data longer than
 * max_event is AB_E_LIMIT, so a hostile server cannot grow it without end.
 * Pure (no I/O), one parser per stream, not thread-safe; fuzzed by
 * tests/fuzz/fuzz_sse.c. */
#ifndef AB_AGENT_SSE_H
#define AB_AGENT_SSE_H

#include "base/buf.h"
#include "base/err.h"

#define AB_SSE_LINE_MAX  (1024 * 1024)     /* default max_line */
#define AB_SSE_EVENT_MAX (4 * 1024 * 1024) /* default max_event */

/* Called for each complete event with data (an event without data lines is
 * not dispatched, as EventSource does): event is its "event:" name ("message"
 * when none), data its data (NUL-terminated, len bytes). A non-zero return
 * stops the parse: ab_sse_feed returns it. */
typedef int (*ab_sse_fn)(void *ud, const char *event, const char *data, size_t len);

typedef struct ab_sse {
        ab_buf line; /* the line read so far */
        ab_buf data; /* the event's data so far */
        char event[64];
        bool has_data;
        bool after_cr; /* the last byte was CR: an LF next ends nothing */
        size_t max_line, max_event;
        ab_sse_fn fn;
        void *ud;
} ab_sse;

/* Sets up p (0 limits: the defaults). */
void ab_sse_init(ab_sse *p, size_t max_line, size_t max_event, ab_sse_fn fn, void *ud);
/* Parses n more bytes. 0; a callback's non-zero result; or -1 with *err
 * (AB_E_LIMIT) when a bound is passed. After a non-zero return the parser
 * must not be fed again. */
int ab_sse_feed(ab_sse *p, const char *buf, size_t n, ab_err **err);
/* Frees the parser's buffers (an unfinished event is dropped, as at the end
 * of an EventSource stream). */
void ab_sse_free(ab_sse *p);

#endif
