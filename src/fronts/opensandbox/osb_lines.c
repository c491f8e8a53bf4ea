/* osb_lines.c - execd's output events, a line each (osb_lines.h). */
#include "fronts/opensandbox/osb_lines.h"
#include "fronts/opensandbox/front_osb.h"
#include "base/util.h"

/* Appends event ev (taken), stamped with the time, as a server-sent event. */
void osb_sse_frame(ab_buf *f, json_t *ev)
{
        json_object_set_new(ev, "timestamp", json_integer(osb_wall_ms()));
        char *txt = json_dumps(ev, JSON_COMPACT);
        json_decref(ev);
        if (!txt)
                abort(); /* jansson fails only without memory */
        ab_buf_puts(f, "data: ");
        ab_buf_puts(f, txt);
        ab_buf_puts(f, "\n\n");
        free(txt);
}

static void lines_event(osb_lines *l, const char *text, size_t n)
{
        osb_sse_frame(&l->frames,
                      json_pack("{s:s,s:o}", "type", l->type, "text", json_bytes(text, n)));
}

/* The first n bytes of the line so far are a line. */
static void lines_emit(osb_lines *l, size_t n)
{
        size_t len = n;
        if (l->session && len && l->b.p[len - 1] == '\r')
                len--;
        if (len)
                lines_event(l, l->b.p, len);
        ab_buf_drop(&l->b, n);
}

/* Takes the next n bytes of output; the lines they end go to l->frames. */
void osb_lines_feed(osb_lines *l, const char *p, size_t n)
{
        while (n) {
                size_t k = 0;
                while (k < n && p[k] != '\n' && (l->session || p[k] != '\r'))
                        k++;
                if (k) {
                        l->cr = false;
                        ab_buf_add(&l->b, p, k);
                        while (l->b.n > OSB_LINE_MAX) { /* b.p[cut] is a byte of it */
                                size_t cut = OSB_LINE_MAX;
                                while (cut > OSB_LINE_MAX - 4 &&
                                       ((unsigned char)l->b.p[cut] & 0xc0) == 0x80)
                                        cut--; /* not inside a character */
                                lines_emit(l, cut);
                        }
                }
                if (k == n)
                        return;
                bool pair = p[k] == '\n' && l->cr; /* the \n of a \r\n */
                if (l->b.n)
                        lines_emit(l, l->b.n);
                else if (!pair && !l->session)
                        lines_event(l, "\n", 1);
                l->cr = p[k] == '\r';
                p += k + 1;
                n -= k + 1;
        }
}

/* The command ended: a last line without its end goes to l->frames. */
void osb_lines_flush(osb_lines *l)
{
        if (l->b.n)
                lines_emit(l, l->b.n);
}

void osb_lines_free(osb_lines *l)
{
        ab_buf_free(&l->b);
        ab_buf_free(&l->frames);
}
