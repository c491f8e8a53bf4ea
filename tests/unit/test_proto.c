/* test_proto.c - the init protocol codec: round trips of every message type,
 * rejection of malformed input, and a quick random-input run. */
#include "proto/proto.h"
#include "base/util.h"
#include "tap.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

/* Feeds the frames in b to a fresh reader one byte at a time (so every
 * partial state is seen) and returns the first frame. */
static abp_reader rd;
static int reparse(const abp_buf *b, abp_frame *f)
{
        abp_reader_free(&rd);
        for (size_t i = 0; i < b->len; i++) {
                if (abp_reader_next(&rd, f) != 0)
                        return -1; /* a frame before all bytes arrived */
                if (abp_reader_feed(&rd, b->p + i, 1) < 0)
                        return -1;
        }
        return abp_reader_next(&rd, f) == 1 ? 0 : -1;
}

static void test_roundtrips(void)
{
        abp_buf b = {0};
        abp_frame f;

        /* PING and EOF: no fields. */
        tap_ok(abp_enc_empty(&b, ABP_PING) == 0 && b.len == ABP_HDR_SIZE, "PING encodes");
        tap_ok(reparse(&b, &f) == 0 && f.type == ABP_PING && f.len == 0, "PING round trip");
        b.len = 0;
        tap_ok(abp_enc_empty(&b, ABP_EOF) == 0 && reparse(&b, &f) == 0 && f.type == ABP_EOF,
               "EOF round trip");
        b.len = 0;

        /* EXEC with every field, stdin holding NUL bytes. */
        const char *env[] = {"A=1", "B=two words", "C=", NULL};
        static const char in[] = "x\0y\0z";
        abp_exec_req e = {.command = "echo 'hi' \"$A\"",
                          .env = env,
                          .n_env = 3,
                          .cwd = "/workspace/sub",
                          .user = "alice:staff",
                          .stdin_data = in,
                          .stdin_len = sizeof(in),
                          .stdin_stream = true,
                          .timeout_ms = 12345,
                          .output_cap = 1ull << 40};
        abp_exec_req d;
        tap_ok(abp_enc_exec(&b, &e) == 0, "EXEC encodes");
        tap_ok(reparse(&b, &f) == 0 && abp_dec_exec(&f, &d) == 0, "EXEC decodes");
        TAP_IS_STR(d.command, e.command, "EXEC command");
        TAP_IS_INT(d.n_env, 3, "EXEC env count");
        tap_ok(d.n_env == 3 && strcmp(d.env[0], "A=1") == 0 &&
                   strcmp(d.env[1], "B=two words") == 0 && strcmp(d.env[2], "C=") == 0 &&
                   d.env[3] == NULL,
               "EXEC env values, NULL-terminated");
        TAP_IS_STR(d.cwd, "/workspace/sub", "EXEC cwd");
        TAP_IS_STR(d.user, "alice:staff", "EXEC user");
        tap_ok(d.stdin_len == sizeof(in) && memcmp(d.stdin_data, in, sizeof(in)) == 0,
               "EXEC stdin bytes with NULs");
        tap_ok(d.stdin_stream && d.timeout_ms == 12345 && d.output_cap == 1ull << 40,
               "EXEC stream flag, timeout, cap");
        abp_exec_req_clear(&d);
        b.len = 0;

        /* EXEC with only a command: defaults. */
        abp_exec_req e2 = {.command = ""};
        tap_ok(abp_enc_exec(&b, &e2) == 0 && reparse(&b, &f) == 0 && abp_dec_exec(&f, &d) == 0 &&
                   strcmp(d.command, "") == 0 && d.n_env == 0 && d.env && !d.env[0] && !d.cwd &&
                   !d.stdin_data && !d.stdin_stream && d.timeout_ms == 0 && d.output_cap == 0 &&
                   !d.user,
               "EXEC minimal round trip (no user: none decoded)");
        abp_exec_req_clear(&d);
        b.len = 0;
        /* An empty user is root, as no user: not sent at all. */
        e2.user = "";
        tap_ok(abp_enc_exec(&b, &e2) == 0 && reparse(&b, &f) == 0 && abp_dec_exec(&f, &d) == 0 &&
                   !d.user && b.len == ABP_HDR_SIZE + 8 + 1,
               "EXEC with an empty user sends no USER field");
        abp_exec_req_clear(&d);
        b.len = 0;

        /* EXEC with an argv instead of a command: words kept as they are, empty ones too. */
        const char *argv[] = {"printf", "%s|", "a b", "", "$HOME", NULL};
        abp_exec_req e3 = {.argv = argv, .n_argv = 5, .env = env, .n_env = 1, .user = "1000:1000"};
        tap_ok(abp_enc_exec(&b, &e3) == 0 && reparse(&b, &f) == 0 && abp_dec_exec(&f, &d) == 0,
               "EXEC with ARGV round trip");
        tap_ok(d.command == NULL && d.n_argv == 5 && d.argv && strcmp(d.argv[0], "printf") == 0 &&
                   strcmp(d.argv[1], "%s|") == 0 && strcmp(d.argv[2], "a b") == 0 &&
                   strcmp(d.argv[3], "") == 0 && strcmp(d.argv[4], "$HOME") == 0 &&
                   d.argv[5] == NULL && d.n_env == 1 && d.user && !strcmp(d.user, "1000:1000"),
               "EXEC argv words in order, NULL-terminated, no command, the user");
        abp_exec_req_clear(&d);
        tap_ok(d.argv == NULL && d.env == NULL, "abp_exec_req_clear releases argv");
        b.len = 0;
        /* An encoder given both sends the argv only. */
        e3.command = "ignored";
        tap_ok(abp_enc_exec(&b, &e3) == 0 && reparse(&b, &f) == 0 && abp_dec_exec(&f, &d) == 0 &&
                   d.command == NULL && d.n_argv == 5,
               "EXEC encoder: argv wins over command");
        abp_exec_req_clear(&d);
        b.len = 0;

        /* Every file request. */
        const uint32_t types[] = {ABP_READ,  ABP_WRITE,  ABP_LIST,  ABP_STAT,   ABP_DELETE,
                                  ABP_MKDIR, ABP_RENAME, ABP_CHMOD, ABP_SYMLINK};
        for (size_t i = 0; i < AB_ARRAY_LEN(types); i++) {
                abp_file_req m = {.path = "dir/file name",
                                  .to = "other",
                                  .offset = 1ull << 33,
                                  .length = 77,
                                  .flags = 5,
                                  .mode = 0750,
                                  .depth = 3};
                abp_file_req g;
                b.len = 0;
                int ok = abp_enc_file(&b, types[i], &m) == 0 && reparse(&b, &f) == 0 &&
                         f.type == types[i] && abp_dec_file(&f, &g) == 0 &&
                         strcmp(g.path, m.path) == 0 && strcmp(g.to, "other") == 0 &&
                         g.offset == m.offset && g.length == 77 && g.flags == 5 && g.mode == 0750 &&
                         g.depth == 3;
                tap_ok(ok, "file request type %u round trip", types[i]);
        }
        b.len = 0;

        /* DATA, including an empty chunk and a maximal one. */
        abp_data dd;
        tap_ok(abp_enc_data(&b, 2, "abc", 3) == 0 && reparse(&b, &f) == 0 &&
                   abp_dec_data(&f, &dd) == 0 && dd.stream == 2 && dd.len == 3 &&
                   memcmp(dd.data, "abc", 3) == 0,
               "DATA round trip");
        b.len = 0;
        tap_ok(abp_enc_data(&b, 0, NULL, 0) == 0 && reparse(&b, &f) == 0 &&
                   abp_dec_data(&f, &dd) == 0 && dd.stream == 0 && dd.len == 0,
               "empty DATA round trip");
        b.len = 0;
        size_t big = ABP_MAX_PAYLOAD - 2 * 8 - 4; /* two field headers and the stream */
        uint8_t *p = xmalloc(big + 1);
        memset(p, 0xab, big + 1);
        tap_ok(abp_enc_data(&b, 1, p, big) == 0 && b.len == ABP_HDR_SIZE + ABP_MAX_PAYLOAD,
               "DATA of exactly the maximum payload encodes");
        abp_reader_free(&rd);
        tap_ok(abp_reader_feed(&rd, b.p, b.len) == 0 && abp_reader_next(&rd, &f) == 1 &&
                   abp_dec_data(&f, &dd) == 0 && dd.len == big,
               "... and decodes");
        b.len = 0;
        tap_ok(abp_enc_data(&b, 1, p, big + 1) == -EMSGSIZE && b.len == 0,
               "one byte more is refused and leaves the buffer as it was");
        free(p);

        /* OK with and without fields. */
        abp_ok ok;
        abp_ok okm = {.version = "1.2.3", .proto = 7};
        tap_ok(abp_enc_ok(&b, &okm) == 0 && reparse(&b, &f) == 0 && abp_dec_ok(&f, &ok) == 0 &&
                   strcmp(ok.version, "1.2.3") == 0 && ok.proto == 7,
               "OK round trip");
        b.len = 0;
        tap_ok(abp_enc_ok(&b, NULL) == 0 && reparse(&b, &f) == 0 && abp_dec_ok(&f, &ok) == 0 &&
                   !ok.version && ok.proto == 0,
               "bare OK round trip");
        b.len = 0;

        /* STATS' answer: an OK with counters, each optional. */
        abp_stats sm;
        abp_frame_begin(&b, ABP_OK);
        abp_put_u64(&b, ABP_F_MEMORY, 123456);
        abp_put_u64(&b, ABP_F_PIDS, 3);
        tap_ok(abp_frame_end(&b) == 0 && reparse(&b, &f) == 0 && abp_dec_stats(&f, &sm) == 0 &&
                   sm.has_memory && sm.memory == 123456 && sm.has_pids && sm.pids == 3 &&
                   !sm.has_memory_max && !sm.has_cpu_ns && !sm.has_oom_kills,
               "STATS answer round trip: absent counters stay absent");
        b.len = 0;
        abp_frame_begin(&b, ABP_OK);
        abp_put_u32(&b, ABP_F_MEMORY, 1);
        tap_ok(abp_frame_end(&b) == 0 && reparse(&b, &f) == 0 && abp_dec_stats(&f, &sm) == -EBADMSG,
               "STATS answer with a 4-byte MEMORY is malformed");
        b.len = 0;
        tap_ok(abp_enc_empty(&b, ABP_STATS) == 0 && reparse(&b, &f) == 0 &&
                   abp_is_request(f.type) && abp_dec_stats(&f, &sm) == -EBADMSG,
               "STATS is a request; its answer decoder wants an OK");
        b.len = 0;

        /* PORT */
        uint32_t port, pto;
        abp_frame_begin(&b, ABP_PORT);
        abp_put_u32(&b, ABP_F_PORT, 8080);
        abp_put_u32(&b, ABP_F_TIMEOUT_MS, 1500);
        tap_ok(abp_frame_end(&b) == 0 && reparse(&b, &f) == 0 && abp_is_request(f.type) &&
                   abp_dec_port(&f, &port, &pto) == 0 && port == 8080 && pto == 1500,
               "PORT round trip: a request with its port and timeout");
        b.len = 0;
        const uint32_t bad_ports[] = {0, 65536, 0xffffffffu};
        for (size_t i = 0; i < sizeof(bad_ports) / sizeof(bad_ports[0]); i++) {
                abp_frame_begin(&b, ABP_PORT);
                abp_put_u32(&b, ABP_F_PORT, bad_ports[i]);
                tap_ok(abp_frame_end(&b) == 0 && reparse(&b, &f) == 0 &&
                           abp_dec_port(&f, &port, &pto) == -EBADMSG,
                       "PORT %u is malformed", bad_ports[i]);
                b.len = 0;
        }
        tap_ok(abp_enc_empty(&b, ABP_PORT) == 0 && reparse(&b, &f) == 0 &&
                   abp_dec_port(&f, &port, &pto) == -EBADMSG,
               "PORT without a port is malformed");
        b.len = 0;

        /* ERROR */
        abp_error er;
        tap_ok(abp_enc_error(&b, "not_found", "no such file: x") == 0 && reparse(&b, &f) == 0 &&
                   abp_dec_error(&f, &er) == 0 && strcmp(er.code, "not_found") == 0 &&
                   strcmp(er.message, "no such file: x") == 0,
               "ERROR round trip");
        b.len = 0;

        /* EXIT with a negative code and big counters. */
        abp_exit ex = {.exit_code = -5,
                       .timed_out = true,
                       .truncated = true,
                       .duration_ms = 99,
                       .stdout_bytes = 1ull << 35,
                       .stderr_bytes = 3},
                 eg;
        tap_ok(abp_enc_exit(&b, &ex) == 0 && reparse(&b, &f) == 0 && abp_dec_exit(&f, &eg) == 0 &&
                   eg.exit_code == -5 && eg.timed_out && eg.truncated && eg.duration_ms == 99 &&
                   eg.stdout_bytes == 1ull << 35 && eg.stderr_bytes == 3,
               "EXIT round trip");
        b.len = 0;

        /* ENTRY with and without a link, negative mtime. */
        abp_entry en = {.path = "a/b",
                        .type = ABP_T_SYMLINK,
                        .mode = 0777,
                        .size = 12,
                        .mtime = -42,
                        .link = "../t"},
                  eng;
        tap_ok(abp_enc_entry(&b, &en) == 0 && reparse(&b, &f) == 0 &&
                   abp_dec_entry(&f, &eng) == 0 && strcmp(eng.path, "a/b") == 0 &&
                   eng.type == ABP_T_SYMLINK && eng.mode == 0777 && eng.size == 12 &&
                   eng.mtime == -42 && strcmp(eng.link, "../t") == 0,
               "ENTRY round trip");
        b.len = 0;
        en.link = NULL;
        en.type = ABP_T_DIR;
        tap_ok(abp_enc_entry(&b, &en) == 0 && reparse(&b, &f) == 0 &&
                   abp_dec_entry(&f, &eng) == 0 && eng.type == ABP_T_DIR && !eng.link,
               "ENTRY without link round trip");
        b.len = 0;
        tap_ok(abp_dec_entry(&f, &eng) == 0 && !eng.has_ids && !eng.owner && !eng.group,
               "ENTRY of an init before proto 3: no ids, no names");
        en.has_ids = true;
        en.uid = 1000;
        en.gid = 0;
        en.owner = "user";
        en.group = "root";
        tap_ok(abp_enc_entry(&b, &en) == 0 && reparse(&b, &f) == 0 &&
                   abp_dec_entry(&f, &eng) == 0 && eng.has_ids && eng.uid == 1000 && eng.gid == 0 &&
                   !strcmp(eng.owner, "user") && !strcmp(eng.group, "root"),
               "ENTRY with UID, GID, OWNER, GROUP round trip");
        b.len = 0;

        /* CHOWN: owner and/or group, never neither; RENAME and SYMLINK need TO. */
        abp_file_req co = {.path = "p", .owner = "u"}, cg;
        tap_ok(abp_enc_file(&b, ABP_CHOWN, &co) == 0 && reparse(&b, &f) == 0 &&
                   abp_dec_file(&f, &cg) == 0 && !strcmp(cg.owner, "u") && !cg.group,
               "CHOWN with an owner only round trip");
        b.len = 0;
        co = (abp_file_req){.path = "p", .group = "g"};
        tap_ok(abp_enc_file(&b, ABP_CHOWN, &co) == 0 && reparse(&b, &f) == 0 &&
                   abp_dec_file(&f, &cg) == 0 && !cg.owner && !strcmp(cg.group, "g"),
               "CHOWN with a group only round trip");
        b.len = 0;
        co = (abp_file_req){.path = "p"};
        tap_ok(abp_enc_file(&b, ABP_CHOWN, &co) == 0 && reparse(&b, &f) == 0 &&
                   abp_dec_file(&f, &cg) == -EBADMSG,
               "CHOWN with neither owner nor group does not decode");
        b.len = 0;
        tap_ok(abp_enc_file(&b, ABP_SYMLINK, &co) == 0 && reparse(&b, &f) == 0 &&
                   abp_dec_file(&f, &cg) == -EBADMSG,
               "SYMLINK without a target does not decode");
        b.len = 0;

        /* Several frames in one buffer come out in order. */
        tap_ok(abp_enc_data(&b, 1, "one", 3) == 0 && abp_enc_empty(&b, ABP_EOF) == 0 &&
                   abp_enc_ok(&b, NULL) == 0,
               "three frames queued");
        abp_reader_free(&rd);
        int seq_ok = abp_reader_feed(&rd, b.p, b.len) == 0;
        uint32_t want[] = {ABP_DATA, ABP_EOF, ABP_OK};
        for (int i = 0; i < 3; i++)
                seq_ok = seq_ok && abp_reader_next(&rd, &f) == 1 && f.type == want[i];
        seq_ok = seq_ok && abp_reader_next(&rd, &f) == 0 && !abp_reader_partial(&rd);
        tap_ok(seq_ok, "frames come out in order, then nothing");
        abp_buf_consume(&b, ABP_HDR_SIZE + 8 + 4 + 8 + 3);
        tap_ok(b.len == 2 * ABP_HDR_SIZE && b.p[0] == (ABP_EOF & 0xff),
               "abp_buf_consume drops the sent frame");
        abp_buf_free(&b);
}

/* Builds a raw frame: header + the given payload bytes. */
static abp_frame raw(uint32_t type, const void *payload, size_t len)
{
        return (abp_frame){.type = type, .len = (uint32_t)len, .payload = payload};
}

/* Terminal requests and answers: round trips, and what each type requires. */
static void test_term_codec(void)
{
        abp_buf b = {0};
        abp_frame f;
        abp_term_req q;
        const char *argv[] = {"bash", "-l"}, *env[] = {"A=1", "B=2"};
        abp_term_req in = {.argv = argv,
                           .n_argv = 2,
                           .env = env,
                           .n_env = 2,
                           .cwd = "/tmp",
                           .user = "nobody",
                           .cols = 100,
                           .rows = 30};
        tap_ok(abp_enc_term_req(&b, ABP_TERM_OPEN, &in) == 0 && reparse(&b, &f) == 0 &&
                   abp_dec_term_req(&f, &q) == 0 && q.n_argv == 2 && !strcmp(q.argv[1], "-l") &&
                   q.n_env == 2 && !strcmp(q.env[1], "B=2") && !strcmp(q.cwd, "/tmp") && q.user &&
                   !strcmp(q.user, "nobody") && q.cols == 100 && q.rows == 30 && !q.id,
               "TERM_OPEN round trip");
        abp_term_req_clear(&q);
        b.len = 0;
        in.user = NULL;
        tap_ok(abp_enc_term_req(&b, ABP_TERM_OPEN, &in) == 0 && reparse(&b, &f) == 0 &&
                   abp_dec_term_req(&f, &q) == 0 && !q.user,
               "TERM_OPEN without a user decodes none");
        abp_term_req_clear(&q);
        abp_buf_free(&b);

        struct {
                uint32_t type;
                abp_term_req m;
                bool ok;
                const char *name;
        } cases[] = {
            {ABP_TERM_OPEN, {0}, true, "TERM_OPEN with nothing (the login shell)"},
            {ABP_TERM_LIST, {0}, true, "TERM_LIST"},
            {ABP_TERM_ATTACH, {.id = "t_1"}, true, "TERM_ATTACH with an id"},
            {ABP_TERM_ATTACH, {0}, false, "TERM_ATTACH without an id"},
            {ABP_TERM_CLOSE, {0}, false, "TERM_CLOSE without an id"},
            {ABP_TERM_RESIZE, {.id = "t_1", .cols = 10}, false, "TERM_RESIZE without rows"},
            {ABP_TERM_RESIZE,
             {.id = "t_1", .cols = 10, .rows = 1001},
             false,
             "TERM_RESIZE with rows over 1000"},
            {ABP_TERM_RESIZE, {.id = "t_1", .cols = 10, .rows = 5}, true, "TERM_RESIZE"},
            {ABP_TERM_SIGNAL, {.id = "t_1"}, false, "TERM_SIGNAL without a signal"},
            {ABP_TERM_SIGNAL, {.id = "t_1", .signal = 99}, false, "TERM_SIGNAL 99"},
            {ABP_TERM_SIGNAL, {.id = "t_1", .signal = 2}, true, "TERM_SIGNAL 2"},
            {ABP_TERM_OPEN, {.cols = 5000}, false, "TERM_OPEN with cols over 1000"},
            {ABP_TERM_ATTACH,
             {.id = "t_0123456789012345678901234567890123456789"},
             false,
             "TERM_ATTACH with an id over 40 bytes"},
        };
        for (size_t i = 0; i < AB_ARRAY_LEN(cases); i++) {
                int r =
                    abp_enc_term_req(&b, cases[i].type, &cases[i].m) == 0 && reparse(&b, &f) == 0
                        ? abp_dec_term_req(&f, &q)
                        : -99;
                tap_ok(cases[i].ok ? r == 0 : r == -EBADMSG, "%s: %s", cases[i].name,
                       cases[i].ok ? "decodes" : "refused");
                if (r == 0)
                        abp_term_req_clear(&q);
                abp_buf_free(&b);
        }
        /* A file request type is no terminal request, and the reverse. */
        abp_file_req fr = {.path = "x"};
        tap_ok(abp_enc_file(&b, ABP_READ, &fr) == 0 && reparse(&b, &f) == 0 &&
                   abp_dec_term_req(&f, &q) == -EBADMSG,
               "READ does not decode as a terminal request");
        abp_buf_free(&b);
        in = (abp_term_req){.id = "t_1"};
        tap_ok(abp_enc_term_req(&b, ABP_TERM_CLOSE, &in) == 0 && reparse(&b, &f) == 0 &&
                   abp_dec_file(&f, &fr) == -EBADMSG,
               "TERM_CLOSE does not decode as a file request");
        abp_buf_free(&b);

        abp_term_info ti = {.id = "t_ab",
                            .argv = argv,
                            .n_argv = 2,
                            .cols = 80,
                            .rows = 24,
                            .pid = 7,
                            .created_ms = 1764000000000ull,
                            .running = false,
                            .has_exit = true,
                            .exit_code = -3};
        abp_term_info to;
        tap_ok(abp_enc_term(&b, &ti) == 0 && reparse(&b, &f) == 0 && abp_dec_term(&f, &to) == 0 &&
                   !strcmp(to.id, "t_ab") && to.n_argv == 2 && !strcmp(to.argv[0], "bash") &&
                   to.cols == 80 && to.rows == 24 && to.pid == 7 &&
                   to.created_ms == 1764000000000ull && !to.running && to.has_exit &&
                   to.exit_code == -3,
               "TERM round trip (a negative exit code too)");
        abp_term_info_clear(&to);
        abp_buf_free(&b);
        ti.id = NULL;
        abp_frame_begin(&b, ABP_TERM);
        abp_put_u32(&b, ABP_F_COLS, 1);
        tap_ok(abp_frame_end(&b) == 0 && reparse(&b, &f) == 0 && abp_dec_term(&f, &to) == -EBADMSG,
               "TERM without an id is refused");
        abp_buf_free(&b);
        /* background processes: PIPES, TAG, CLOSE_STDIN */
        abp_term_req pq = {.argv = argv,
                           .n_argv = 2,
                           .pipes = true,
                           .close_stdin = true,
                           .tag = "{\"kind\":\"e2b\"}"};
        tap_ok(abp_enc_term_req(&b, ABP_TERM_OPEN, &pq) == 0 && reparse(&b, &f) == 0 &&
                   abp_dec_term_req(&f, &q) == 0 && q.pipes && q.close_stdin && q.tag &&
                   !strcmp(q.tag, "{\"kind\":\"e2b\"}"),
               "TERM_OPEN of a process round trip (pipes, close stdin, tag)");
        abp_term_req_clear(&q);
        abp_buf_free(&b);
        _cleanup_free_ char *big = xmalloc(ABP_TERM_TAG_MAX + 2);
        memset(big, 'x', ABP_TERM_TAG_MAX + 1);
        big[ABP_TERM_TAG_MAX + 1] = 0;
        pq.tag = big;
        tap_ok(abp_enc_term_req(&b, ABP_TERM_OPEN, &pq) == 0 && reparse(&b, &f) == 0 &&
                   abp_dec_term_req(&f, &q) == -EBADMSG,
               "a tag over ABP_TERM_TAG_MAX is refused");
        abp_buf_free(&b);
        pq = (abp_term_req){.id = "t_1", .data = "x", .data_len = 1, .close_stdin = true};
        tap_ok(abp_enc_term_req(&b, ABP_TERM_INPUT, &pq) == 0 && reparse(&b, &f) == 0 &&
                   abp_dec_term_req(&f, &q) == 0 && q.close_stdin && q.data_len == 1,
               "TERM_INPUT with CLOSE_STDIN round trip");
        abp_term_req_clear(&q);
        abp_buf_free(&b);
        pq = (abp_term_req){.pipes = true};
        tap_ok(abp_enc_term_req(&b, ABP_TERM_LIST, &pq) == 0 && reparse(&b, &f) == 0 &&
                   abp_dec_term_req(&f, &q) == 0 && q.pipes,
               "TERM_LIST of processes round trip");
        abp_term_req_clear(&q);
        abp_buf_free(&b);
        ti = (abp_term_info){.id = "t_cd",
                             .argv = argv,
                             .n_argv = 1,
                             .pid = 9,
                             .running = true,
                             .pipes = true,
                             .tag = "label"};
        tap_ok(abp_enc_term(&b, &ti) == 0 && reparse(&b, &f) == 0 && abp_dec_term(&f, &to) == 0 &&
                   to.pipes && to.tag && !strcmp(to.tag, "label") && to.pid == 9 && !to.has_exit,
               "TERM of a process round trip (pipes, tag)");
        abp_term_info_clear(&to);
        abp_buf_free(&b);
        ti.tag = big;
        tap_ok(abp_enc_term(&b, &ti) == 0 && reparse(&b, &f) == 0 &&
                   abp_dec_term(&f, &to) == -EBADMSG,
               "a TERM with a tag over ABP_TERM_TAG_MAX is refused");
        abp_buf_free(&b);
        tap_ok(abp_is_term_request(ABP_TERM_OPEN) && abp_is_term_request(ABP_TERM_ATTACH) &&
                   !abp_is_term_request(ABP_RENAME) && !abp_is_term_request(ABP_TERM) &&
                   abp_is_request(ABP_TERM_ATTACH),
               "abp_is_term_request");
}

static void test_rejections(void)
{
        abp_frame f;
        abp_exec_req e;
        abp_file_req fr;
        abp_data d;
        abp_error er;
        abp_exit ex;
        abp_entry en;
        abp_ok ok;

        /* Truncated frame: header says 10 bytes, 4 arrive. */
        uint8_t hdr[] = {1, 0, 0, 0, 10, 0, 0, 0, 'a', 'b', 'c', 'd'};
        abp_reader_free(&rd);
        tap_ok(abp_reader_feed(&rd, hdr, sizeof(hdr)) == 0 && abp_reader_next(&rd, &f) == 0 &&
                   abp_reader_partial(&rd),
               "truncated frame: no frame, partial data reported");

        /* Oversize length. */
        uint8_t big[] = {1, 0, 0, 0, 0x01, 0x00, 0x10, 0x00}; /* 1 MiB + 1 */
        abp_reader_free(&rd);
        tap_ok(abp_reader_feed(&rd, big, sizeof(big)) == 0 && abp_reader_next(&rd, &f) == -EBADMSG,
               "length of 1 MiB + 1 is rejected");
        uint8_t huge[] = {1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
        abp_reader_free(&rd);
        tap_ok(abp_reader_feed(&rd, huge, sizeof(huge)) == 0 &&
                   abp_reader_next(&rd, &f) == -EBADMSG,
               "length 0xffffffff is rejected");

        /* Field length beyond the payload. */
        uint8_t over[] = {ABP_F_PATH, 0, 0, 0, 100, 0, 0, 0, 'x', 0};
        f = raw(ABP_STAT, over, sizeof(over));
        tap_ok(abp_dec_file(&f, &fr) == -EBADMSG, "field longer than the payload");
        uint8_t overmax[] = {ABP_F_PATH, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 'x', 0};
        f = raw(ABP_STAT, overmax, sizeof(overmax));
        tap_ok(abp_dec_file(&f, &fr) == -EBADMSG, "field length 0xffffffff");
        /* A partial field header at the end. */
        uint8_t tail[] = {ABP_F_PATH, 0, 0, 0, 2, 0, 0, 0, 'x', 0, 7, 0, 0};
        f = raw(ABP_STAT, tail, sizeof(tail));
        tap_ok(abp_dec_file(&f, &fr) == -EBADMSG, "partial field header at the end");
        /* A u32 field of 3 bytes, a u64 of 4. */
        uint8_t short32[] = {ABP_F_PATH, 0, 0, 0, 2, 0, 0, 0, 'x', 0, ABP_F_MODE,
                             0,          0, 0, 3, 0, 0, 0, 1, 2,   3};
        f = raw(ABP_STAT, short32, sizeof(short32));
        tap_ok(abp_dec_file(&f, &fr) == -EBADMSG, "u32 field of 3 bytes");
        uint8_t short64[] = {ABP_F_PATH, 0, 0, 0, 2, 0, 0, 0, 'x', 0, ABP_F_OFFSET,
                             0,          0, 0, 4, 0, 0, 0, 1, 2,   3, 4};
        f = raw(ABP_READ, short64, sizeof(short64));
        tap_ok(abp_dec_file(&f, &fr) == -EBADMSG, "u64 field of 4 bytes");
        /* Strings: no NUL, an inner NUL, empty. */
        uint8_t nonul[] = {ABP_F_PATH, 0, 0, 0, 2, 0, 0, 0, 'x', 'y'};
        f = raw(ABP_STAT, nonul, sizeof(nonul));
        tap_ok(abp_dec_file(&f, &fr) == -EBADMSG, "string without its NUL");
        uint8_t innernul[] = {ABP_F_PATH, 0, 0, 0, 3, 0, 0, 0, 'x', 0, 0};
        f = raw(ABP_STAT, innernul, sizeof(innernul));
        tap_ok(abp_dec_file(&f, &fr) == -EBADMSG, "string with an inner NUL");
        uint8_t empty[] = {ABP_F_PATH, 0, 0, 0, 0, 0, 0, 0};
        f = raw(ABP_STAT, empty, sizeof(empty));
        tap_ok(abp_dec_file(&f, &fr) == -EBADMSG, "string of zero bytes");
        /* Booleans other than 0/1. */
        uint8_t badbool[] = {ABP_F_COMMAND,
                             0,
                             0,
                             0,
                             2,
                             0,
                             0,
                             0,
                             'x',
                             0,
                             ABP_F_STDIN_STREAM,
                             0,
                             0,
                             0,
                             4,
                             0,
                             0,
                             0,
                             2,
                             0,
                             0,
                             0};
        f = raw(ABP_EXEC, badbool, sizeof(badbool));
        tap_ok(abp_dec_exec(&f, &e) == -EBADMSG && e.env == NULL, "boolean 2 (and no leak)");
        /* Bad env value after good ones: rejected, nothing leaks (ASan checks). */
        uint8_t badenv[] = {ABP_F_COMMAND, 0, 0, 0, 2, 0, 0, 0, 'x', 0,
                            ABP_F_ENV,     0, 0, 0, 2, 0, 0, 0, 'a', 0,
                            ABP_F_ENV,     0, 0, 0, 1, 0, 0, 0, 'b'};
        f = raw(ABP_EXEC, badenv, sizeof(badenv));
        tap_ok(abp_dec_exec(&f, &e) == -EBADMSG && e.env == NULL, "bad second ENV");

        /* COMMAND and ARGV together; an ARGV word that is no string. */
        uint8_t both[] = {ABP_F_COMMAND, 0, 0, 0, 2, 0, 0, 0, 'x', 0,
                          ABP_F_ARGV,    0, 0, 0, 2, 0, 0, 0, 'y', 0};
        f = raw(ABP_EXEC, both, sizeof(both));
        tap_ok(abp_dec_exec(&f, &e) == -EBADMSG && e.env == NULL && e.argv == NULL,
               "EXEC with both COMMAND and ARGV");
        uint8_t argv_only[] = {ABP_F_ARGV, 0, 0, 0, 2, 0, 0, 0, 'y', 0};
        f = raw(ABP_EXEC, argv_only, sizeof(argv_only));
        tap_ok(abp_dec_exec(&f, &e) == 0 && e.n_argv == 1 && strcmp(e.argv[0], "y") == 0 &&
                   !e.command,
               "EXEC with only ARGV decodes");
        abp_exec_req_clear(&e);
        uint8_t badargv[] = {ABP_F_ARGV, 0, 0, 0, 2, 0, 0, 0, 'y', 0,
                             ABP_F_ARGV, 0, 0, 0, 1, 0, 0, 0, 'z'};
        f = raw(ABP_EXEC, badargv, sizeof(badargv));
        tap_ok(abp_dec_exec(&f, &e) == -EBADMSG && e.argv == NULL, "bad second ARGV (no leak)");
        uint8_t baduser[] = {ABP_F_ARGV, 0, 0, 0, 2, 0, 0, 0, 'y', 0,
                             ABP_F_USER, 0, 0, 0, 2, 0, 0, 0, 'u', 'v'};
        f = raw(ABP_EXEC, baduser, sizeof(baduser));
        tap_ok(abp_dec_exec(&f, &e) == -EBADMSG, "EXEC with a USER without its NUL");
        uint8_t baduser_t[] = {ABP_F_USER, 0, 0, 0, 3, 0, 0, 0, 'u', 0, 'v'};
        f = raw(ABP_TERM_OPEN, baduser_t, sizeof(baduser_t));
        abp_term_req tq;
        tap_ok(abp_dec_term_req(&f, &tq) == -EBADMSG, "TERM_OPEN with a NUL inside USER");

        /* Unknown tags are skipped. */
        uint8_t unknown[] = {99,         1, 0, 0, 3, 0, 0, 0, 1,   2, 3,
                             ABP_F_PATH, 0, 0, 0, 2, 0, 0, 0, 'p', 0};
        f = raw(ABP_STAT, unknown, sizeof(unknown));
        tap_ok(abp_dec_file(&f, &fr) == 0 && strcmp(fr.path, "p") == 0, "unknown tag skipped");

        /* Required fields. */
        f = raw(ABP_EXEC, NULL, 0);
        tap_ok(abp_dec_exec(&f, &e) == -EBADMSG, "EXEC without command");
        f = raw(ABP_STAT, NULL, 0);
        tap_ok(abp_dec_file(&f, &fr) == -EBADMSG, "STAT without path");
        uint8_t pathonly[] = {ABP_F_PATH, 0, 0, 0, 2, 0, 0, 0, 'p', 0};
        f = raw(ABP_RENAME, pathonly, sizeof(pathonly));
        tap_ok(abp_dec_file(&f, &fr) == -EBADMSG, "RENAME without target");
        f = raw(ABP_ERROR, NULL, 0);
        tap_ok(abp_dec_error(&f, &er) == -EBADMSG, "ERROR without code");
        f = raw(ABP_EXIT, NULL, 0);
        tap_ok(abp_dec_exit(&f, &ex) == -EBADMSG, "EXIT without exit code");
        f = raw(ABP_DATA, NULL, 0);
        tap_ok(abp_dec_data(&f, &d) == -EBADMSG, "DATA without stream");
        uint8_t stream9[] = {ABP_F_STREAM, 0, 0, 0, 4, 0, 0, 0, 9, 0, 0, 0};
        f = raw(ABP_DATA, stream9, sizeof(stream9));
        tap_ok(abp_dec_data(&f, &d) == -EBADMSG, "DATA on stream 9");
        uint8_t type9[] = {ABP_F_PATH, 0, 0, 0, 2, 0, 0, 0, 'p', 0, ABP_F_TYPE,
                           0,          0, 0, 4, 0, 0, 0, 9, 0,   0, 0};
        f = raw(ABP_ENTRY, type9, sizeof(type9));
        tap_ok(abp_dec_entry(&f, &en) == -EBADMSG, "ENTRY of type 9");

        /* Wrong or unknown frame types. */
        f = raw(0x7777, pathonly, sizeof(pathonly));
        tap_ok(abp_dec_file(&f, &fr) == -EBADMSG && abp_dec_exec(&f, &e) == -EBADMSG &&
                   abp_dec_data(&f, &d) == -EBADMSG && abp_dec_ok(&f, &ok) == -EBADMSG &&
                   abp_dec_error(&f, &er) == -EBADMSG && abp_dec_exit(&f, &ex) == -EBADMSG &&
                   abp_dec_entry(&f, &en) == -EBADMSG,
               "unknown frame type: every decoder refuses");
        tap_ok(!abp_is_request(0x7777) && !abp_is_request(0) && !abp_is_request(ABP_OK) &&
                   abp_is_request(ABP_PING) && abp_is_request(ABP_RENAME),
               "abp_is_request");
        f = raw(ABP_PING, pathonly, sizeof(pathonly));
        tap_ok(abp_dec_file(&f, &fr) == -EBADMSG, "PING is not a file request");
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return (uint32_t)(rng >> 16);
}

/* Runs every decoder over every frame the reader cuts from the bytes. */
static int chew(const uint8_t *p, size_t n)
{
        abp_reader r = {0};
        abp_frame f;
        int frames = 0, k;
        if (abp_reader_feed(&r, p, n) < 0) {
                abp_reader_free(&r);
                return -1;
        }
        while ((k = abp_reader_next(&r, &f)) == 1) {
                abp_exec_req e;
                abp_file_req fr;
                abp_data d;
                abp_ok ok;
                abp_error er;
                abp_exit ex;
                abp_entry en;
                abp_field fl;
                size_t off = 0;
                frames++;
                if (abp_dec_exec(&f, &e) == 0)
                        abp_exec_req_clear(&e);
                (void)!abp_dec_file(&f, &fr);
                (void)!abp_dec_data(&f, &d);
                (void)!abp_dec_ok(&f, &ok);
                (void)!abp_dec_error(&f, &er);
                (void)!abp_dec_exit(&f, &ex);
                (void)!abp_dec_entry(&f, &en);
                while (abp_field_next(&f, &off, &fl) > 0)
                        if (fl.val + fl.len > f.payload + f.len)
                                return -1;
        }
        abp_reader_free(&r);
        return frames;
}

static void test_random(void)
{
        uint8_t buf[512];
        int bad = 0, frames = 0;
        /* Random bytes, with small lengths in the header now and then so that
         * some of them are whole frames. */
        for (int i = 0; i < 5000; i++) {
                size_t n = rnd() % sizeof(buf);
                for (size_t j = 0; j < n; j++)
                        buf[j] = (uint8_t)rnd();
                if (n >= 8 && (i & 1)) {
                        buf[0] = (uint8_t)(rnd() % 12);
                        buf[1] = (i & 2) ? 0x01 : 0x02;
                        buf[2] = buf[3] = 0;
                        uint32_t len = rnd() % (uint32_t)(n - 7);
                        buf[4] = (uint8_t)len;
                        buf[5] = (uint8_t)(len >> 8);
                        buf[6] = buf[7] = 0;
                }
                int k = chew(buf, n);
                if (k < 0)
                        bad++;
                else
                        frames += k;
        }
        tap_ok(bad == 0, "5000 random byte strings: no crash, fields stay in bounds");

        /* Mutations of valid frames reach the field decoders. */
        abp_buf b = {0};
        const char *env[] = {"A=1", NULL};
        abp_exec_req e = {.command = "ls", .env = env, .n_env = 1, .cwd = "/", .timeout_ms = 5};
        abp_entry en = {.path = "p", .type = 1, .link = "l"};
        abp_exit ex = {.exit_code = 1};
        abp_file_req fr = {.path = "a", .to = "b", .offset = 1};
        abp_ok okm = {.version = "v", .proto = 1};
        if (abp_enc_exec(&b, &e) < 0 || abp_enc_entry(&b, &en) < 0 || abp_enc_exit(&b, &ex) < 0 ||
            abp_enc_file(&b, ABP_RENAME, &fr) < 0 || abp_enc_error(&b, "x", "y") < 0 ||
            abp_enc_ok(&b, &okm) < 0 || abp_enc_data(&b, 1, "zz", 2) < 0)
                abort();
        uint8_t *m = xmalloc(b.len);
        for (int i = 0; i < 3000; i++) {
                memcpy(m, b.p, b.len);
                int flips = 1 + (int)(rnd() % 4);
                for (int j = 0; j < flips; j++)
                        m[rnd() % b.len] = (uint8_t)rnd();
                int k = chew(m, b.len);
                if (k < 0)
                        bad++;
                else
                        frames += k;
        }
        tap_ok(bad == 0, "3000 mutated frame sequences: no crash");
        tap_ok(frames > 1000, "the random inputs produced frames to decode (%d)", frames);
        free(m);
        abp_buf_free(&b);
}

static void test_socket(void)
{
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
                abort();
        abp_buf b = {0};
        abp_reader r = {0};
        abp_frame f;
        abp_error er;
        tap_ok(abp_enc_error(&b, "conflict", "m") == 0 && abp_send(sv[0], &b, 1000) == 0 &&
                   b.len == 0,
               "abp_send sends and empties the buffer");
        tap_ok(abp_recv(sv[1], &r, &f, 1000) == 0 && abp_dec_error(&f, &er) == 0 &&
                   strcmp(er.code, "conflict") == 0,
               "abp_recv receives it");
        tap_ok(abp_recv(sv[1], &r, &f, 50) == -ETIMEDOUT, "abp_recv times out on silence");
        uint8_t half[] = {ABP_OK & 0xff, ABP_OK >> 8, 0, 0, 5, 0};
        tap_ok(write(sv[0], half, sizeof(half)) == (ssize_t)sizeof(half), "half a frame sent");
        close(sv[0]);
        tap_ok(abp_recv(sv[1], &r, &f, 1000) == -ECONNRESET,
               "EOF in the middle of a frame is an error");
        close(sv[1]);
        abp_buf_free(&b);
        abp_reader_free(&r);
}

/* GREP and MATCH: a pattern holding a NUL, repeated paths; rejections. */
static void test_grep_codec(void)
{
        abp_buf b = {0};
        abp_frame f;
        static const char pat[] = "a\0b(c";
        const char *paths[] = {"x/one.txt", "/abs/two", "three", NULL};
        abp_grep_req q = {.pattern = pat,
                          .pattern_len = sizeof(pat) - 1,
                          .flags = ABP_G_LITERAL | ABP_G_CASE_SENSITIVE,
                          .count = 7,
                          .timeout_ms = 1234,
                          .size_max = 1u << 20,
                          .paths = paths,
                          .n_paths = 3};
        abp_grep_req d;
        tap_ok(abp_enc_grep(&b, &q) == 0 && reparse(&b, &f) == 0 && abp_dec_grep(&f, &d) == 0,
               "GREP round trip");
        tap_ok(d.pattern_len == sizeof(pat) - 1 && memcmp(d.pattern, pat, sizeof(pat) - 1) == 0,
               "GREP: the pattern keeps its NUL and length");
        tap_ok(d.flags == q.flags && d.count == 7 && d.timeout_ms == 1234 && d.size_max == 1u << 20,
               "GREP: flags, count, timeout, size");
        tap_ok(d.n_paths == 3 && !strcmp(d.paths[0], "x/one.txt") &&
                   !strcmp(d.paths[1], "/abs/two") && !strcmp(d.paths[2], "three"),
               "GREP: the paths in order");
        abp_grep_req_clear(&d);
        b.len = 0;
        abp_grep_req none = {.n_paths = 0};
        abp_frame_begin(&b, ABP_GREP);
        abp_put_u32(&b, ABP_F_COUNT, 1);
        tap_ok(abp_frame_end(&b) == 0 && reparse(&b, &f) == 0 &&
                   abp_dec_grep(&f, &none) == -EBADMSG,
               "GREP without a pattern is refused");
        abp_grep_req_clear(&none);
        b.len = 0;
        abp_match m = {.index = 2, .line = 99, .text = "hit\0me", .len = 6}, dm;
        tap_ok(abp_enc_match(&b, &m) == 0 && reparse(&b, &f) == 0 && abp_dec_match(&f, &dm) == 0 &&
                   dm.index == 2 && dm.line == 99 && dm.len == 6 && !memcmp(dm.text, "hit\0me", 6),
               "MATCH round trip");
        b.len = 0;
        abp_frame_begin(&b, ABP_MATCH);
        abp_put_u32(&b, ABP_F_INDEX, 1);
        abp_put_bytes(&b, ABP_F_DATA, "x", 1);
        tap_ok(abp_frame_end(&b) == 0 && reparse(&b, &f) == 0 && abp_dec_match(&f, &dm) == -EBADMSG,
               "MATCH without a line number is refused");
        abp_buf_free(&b);
}

int main(void)
{
        test_roundtrips();
        test_grep_codec();
        test_term_codec();
        test_rejections();
        test_random();
        test_socket();
        abp_reader_free(&rd);
        return tap_done();
}
