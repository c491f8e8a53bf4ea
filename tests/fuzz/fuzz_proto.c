/* fuzz_proto - libFuzzer target for the init protocol decoder: the bytes a
 * box's init sends the host (WATCH_EVENT frames included), and the bytes a
 * client sends init (WATCH included). Every frame the reader cuts is run
 * through every decoder. Build and run with
 * scripts/fuzz.sh (clang -fsanitize=fuzzer,address,undefined). */
#include "base/util.h"
#include "proto/proto.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A listing entry's name (the box chooses it) as the zip download stores it
 * (ab_name_escape): nothing unsafe may be left. */
static void check_escape(const char *name)
{
        char *e = ab_name_escape(name, NULL);
        for (const unsigned char *c = (const unsigned char *)e; *c; c++)
                if (*c < 0x20 || *c == 0x7f || *c == '\\')
                        abort();
        /* the result escapes nothing again: it is all safe UTF-8 */
        bool changed = true;
        char *again = ab_name_escape(e, &changed);
        if (changed || strcmp(again, e) != 0)
                abort();
        free(again);
        free(e);
}

static void decode_all(const abp_frame *f)
{
        abp_exec_req ex;
        if (abp_dec_exec(f, &ex) == 0)
                abp_exec_req_clear(&ex);
        abp_file_req fr;
        /* a watch event has a name and one of the kinds (docs/protocol.md) */
        if (abp_dec_file(f, &fr) == 0 && f->type == ABP_WATCH_EVENT &&
            (!fr.path || fr.flags < ABP_WATCH_CREATE || fr.flags > ABP_WATCH_CHMOD))
                abort();
        abp_data d;
        (void)!abp_dec_data(f, &d);
        abp_ok ok;
        (void)!abp_dec_ok(f, &ok);
        abp_error er;
        (void)!abp_dec_error(f, &er);
        abp_stats st;
        (void)!abp_dec_stats(f, &st);
        uint32_t port, port_timeout;
        if (abp_dec_port(f, &port, &port_timeout) == 0 && (port < 1 || port > 65535))
                abort();
        abp_exit ei;
        (void)!abp_dec_exit(f, &ei);
        abp_entry en;
        if (abp_dec_entry(f, &en) == 0 && en.path)
                check_escape(en.path);
        abp_term_req tq;
        if (abp_dec_term_req(f, &tq) == 0)
                abp_term_req_clear(&tq);
        abp_term_info ti;
        if (abp_dec_term(f, &ti) == 0)
                abp_term_info_clear(&ti);
        abp_grep_req gq;
        if (abp_dec_grep(f, &gq) == 0)
                abp_grep_req_clear(&gq);
        abp_match ma;
        (void)!abp_dec_match(f, &ma);
        size_t off = 0;
        abp_field fl;
        while (abp_field_next(f, &off, &fl) == 1)
                ;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        abp_reader r = {0};
        /* Feed in two pieces so partial-frame handling is exercised too. */
        size_t half = size / 2;
        if (abp_reader_feed(&r, data, half) == 0) {
                abp_frame f;
                int n;
                while ((n = abp_reader_next(&r, &f)) == 1)
                        decode_all(&f);
                if (n == 0 && abp_reader_feed(&r, data + half, size - half) == 0)
                        while (abp_reader_next(&r, &f) == 1)
                                decode_all(&f);
        }
        abp_reader_free(&r);
        return 0;
}
