/* Unit tests: the error contract and the util helpers. */
#include "base/buf.h"
#include "base/err.h"
#include "tap.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>

static int leaf_fails(ab_err **err)
{
        return ab_err_set(err, AB_E_NOT_FOUND, ENOENT, "no file %s", "x.txt");
}

static void test_err(void)
{
        ab_err *e = NULL;
        int r = leaf_fails(&e);
        TAP_IS_INT(r, -ENOENT, "ab_err_set returns -errnum");
        tap_ok(e && e->code == AB_E_NOT_FOUND, "code kept");
        TAP_IS_STR(e ? e->msg : NULL, "no file x.txt: No such file or directory",
                   "message carries strerror");
        ab_err_wrap(&e, "box %s", "b1");
        TAP_IS_STR(e ? e->msg : NULL, "box b1: no file x.txt: No such file or directory",
                   "wrap prefixes");
        /* A second error never overwrites the first. */
        ab_err_set(&e, AB_E_INTERNAL, 0, "later");
        tap_ok(e && e->code == AB_E_NOT_FOUND, "first error wins");
        ab_err_free(&e);
        tap_ok(e == NULL, "free clears");
        TAP_IS_INT(ab_err_set(NULL, AB_E_INVALID, 0, "ignored"), -1, "NULL err allowed");
        TAP_IS_STR(ab_code_name(AB_E_CONFLICT), "conflict", "code name");
        TAP_IS_INT(ab_code_from_name("limit_exceeded"), AB_E_LIMIT, "code from name");
        TAP_IS_INT(ab_code_from_name("bogus"), AB_E_INTERNAL, "unknown name -> internal");
}

static void test_files(void)
{
        char dir[] = "/tmp/ab-util-XXXXXX";
        tap_ok(mkdtemp(dir) != NULL, "mkdtemp");
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        TAP_IS_INT(ab_write_file_atomic(dfd, "f.json", "hello", 5, 0600), 0, "atomic write");
        char *buf = NULL;
        size_t len = 0;
        TAP_IS_INT(ab_read_file(dfd, "f.json", &buf, &len), 0, "read back");
        TAP_IS_STR(buf, "hello", "content");
        TAP_IS_INT(len, 5, "length");
        free(buf);
        struct stat st;
        fstatat(dfd, "f.json", &st, 0);
        TAP_IS_INT(st.st_mode & 0777, 0600, "mode");
        TAP_IS_INT(ab_write_file_atomic(dfd, "f.json", "bye", 3, 0600), 0, "overwrite");
        TAP_IS_INT(ab_read_file(dfd, "f.json", &buf, &len), 0, "read again");
        TAP_IS_STR(buf, "bye", "replaced whole");
        free(buf);
        TAP_IS_INT(ab_write_file_atomic(dfd, "empty", "", 0, 0600), 0, "write an empty file");
        TAP_IS_INT(ab_read_file(dfd, "empty", &buf, &len), 0, "read it");
        tap_ok(len == 0 && buf && buf[0] == 0, "an empty file reads as \"\", length 0");
        free(buf);
        unlinkat(dfd, "empty", 0);
        TAP_IS_INT(ab_read_file(dfd, "missing", &buf, &len), -ENOENT, "missing -> -ENOENT");
        /* An empty file after a big one: the reused heap block must not show through. */
        char big[4000];
        memset(big, 'x', sizeof(big));
        TAP_IS_INT(ab_write_file_atomic(dfd, "big", big, sizeof(big), 0600), 0, "write big");
        TAP_IS_INT(ab_write_file_atomic(dfd, "empty", "", 0, 0600), 0, "write empty");
        for (int i = 0; i < 3; i++) {
                TAP_IS_INT(ab_read_file(dfd, "big", &buf, &len), 0, "read a 4000-byte file");
                free(buf);
                buf = NULL;
                TAP_IS_INT(ab_read_file(dfd, "empty", &buf, &len), 0, "read an empty file");
                TAP_IS_STR(buf, "", "an empty file reads as \"\"");
                TAP_IS_INT(len, 0, "... of length 0");
                free(buf);
        }
        unlinkat(dfd, "big", 0);
        unlinkat(dfd, "empty", 0);
        /* No temp files are left behind. */
        TAP_IS_INT(faccessat(dfd, "f.json.tmp.0", F_OK, 0), -1, "no temp left");
        unlinkat(dfd, "f.json", 0);
        close(dfd);
        rmdir(dir);
}

static void test_buf(void)
{
        ab_buf b = {0};
        _cleanup_free_ char *empty = ab_buf_steal(&b);
        TAP_IS_STR(empty, "", "an empty buffer steals as \"\" (never NULL)");
        ab_buf_reserve(&b, 100);
        _cleanup_free_ char *reserved = ab_buf_steal(&b);
        TAP_IS_STR(reserved, "", "reserved but uncommitted space reads as \"\"");
        ab_buf_puts(&b, "ab");
        ab_buf_putc(&b, 'c');
        ab_buf_add(&b, "d\0e", 3);
        TAP_IS_INT(b.n, 6, "add counts bytes, NULs included");
        tap_ok(memcmp(b.p, "abcd\0e", 7) == 0, "contents, NUL-terminated");
        for (int i = 0; i < 10000; i++)
                ab_buf_printf(&b, "%04d", i);
        TAP_IS_INT(b.n, 6 + 40000, "printf grows across many reallocations");
        tap_ok(!memcmp(b.p + 6, "0000", 4) && !memcmp(b.p + b.n - 4, "9999", 4) && !b.p[b.n],
               "first and last formatted values in place");
        ab_buf_drop(&b, 6);
        tap_ok(b.n == 40000 && !memcmp(b.p, "00000001", 8), "drop removes a prefix");
        ab_buf_drop(&b, b.n + 5);
        tap_ok(b.n == 0 && b.p && !b.p[0], "dropping past the end empties it");
        char *p = ab_buf_reserve(&b, 3);
        memcpy(p, "xyz", 3);
        ab_buf_commit(&b, 2);
        TAP_IS_STR(b.p, "xy", "reserve + commit uses only what was committed");
        _cleanup_free_ char *out = ab_buf_steal(&b);
        tap_ok(b.p == NULL && b.n == 0 && b.cap == 0, "steal resets the buffer");
        ab_buf_free(&b);
}

static void expect_escape(const char *in, const char *want, bool want_changed)
{
        bool changed = !want_changed;
        char *got = ab_name_escape(in, &changed);
        tap_ok(strcmp(got, want) == 0 && changed == want_changed, "escape \"%s\" -> \"%s\"", want,
               got);
        free(got);
}

static void test_name_escape(void)
{
        expect_escape("plain/name 100%.txt", "plain/name 100%.txt", false);
        expect_escape("caf\xc3\xa9/\xe6\x97\xa5.txt", "caf\xc3\xa9/\xe6\x97\xa5.txt", false);
        expect_escape("", "", false);
        expect_escape("new\nline\r\t", "new%0Aline%0D%09", true);
        expect_escape("..\\..\\x", "..%5C..%5Cx", true);
        expect_escape("\x1b[31mred\x7f", "%1B[31mred%7F", true);
        expect_escape("csi\xc2\x9b"
                      "2J",
                      "csi%C2%9B2J", true); /* C1 CSI */
        expect_escape("a\xe2\x80\xae"
                      "b\xe2\x81\xa6",
                      "a%E2%80%AEb%E2%81%A6", true); /* bidi */
        expect_escape("bad\xff\xfe", "bad%FF%FE", true);
        expect_escape("trunc\xe6\x97", "trunc%E6%97", true);                /* cut in the middle */
        expect_escape("over\xc0\xaf", "over%C0%AF", true);                  /* overlong '/' */
        expect_escape("sur\xed\xa0\x80", "sur%ED%A0%80", true);             /* a surrogate */
        expect_escape("big\xf4\x90\x80\x80", "big%F4%90%80%80", true);      /* above U+10FFFF */
        expect_escape("\xf0\x9f\x98\x80 ok", "\xf0\x9f\x98\x80 ok", false); /* 4-byte UTF-8 */
        char *s = ab_name_escape("x\n", NULL);
        TAP_IS_STR(s, "x%0A", "changed may be NULL");
        free(s);
}

/* ab_send_all: all of it, a peer that takes nothing, a peer gone. */
static void test_send_all(void)
{
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
                tap_ok(0, "socketpair");
                return;
        }
        int sz = 4096;
        setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
        TAP_IS_INT(ab_send_all(sv[0], "hello", 5, 1000), 0, "a short send");
        char got[8] = {0};
        tap_ok(read(sv[1], got, sizeof(got)) == 5 && !memcmp(got, "hello", 5), "... arrives whole");
        size_t big = 4 << 20;
        char *buf = xmalloc(big);
        memset(buf, 'x', big);
        uint64_t t0 = ab_now_ms();
        TAP_IS_INT(ab_send_all(sv[0], buf, big, 200), -ETIMEDOUT,
                   "a peer that reads nothing: -ETIMEDOUT");
        uint64_t took = ab_now_ms() - t0;
        tap_ok(took >= 150 && took < 5000, "... after about the timeout (%llu ms)",
               (unsigned long long)took);
        close(sv[1]);
        TAP_IS_INT(ab_send_all(sv[0], "x", 1, -1), -EPIPE, "a peer gone: -EPIPE, no SIGPIPE");
        close(sv[0]);
        free(buf);
}

/* ab_proc_cgroup_path on a written /proc/PID/cgroup: v1 lines (a
 * controller list, a named hierarchy), the v2 line, a missing controller. */
static void test_proc_cgroup(void)
{
        char file[] = "/tmp/ab-cgroup-XXXXXX";
        int fd = mkstemp(file);
        static const char text[] = "12:pids:/docker/abc\n"
                                   "4:cpu,cpuacct:/docker/abc/cpu\n"
                                   "1:name=systemd:/init.scope\n"
                                   "0::/box/v2\n";
        tap_ok(fd >= 0 && ab_write_all(fd, text, sizeof(text) - 1) == 0, "cgroup file written");
        if (fd >= 0)
                close(fd);
        char *ctrls = NULL;
        char *p = ab_proc_cgroup_path(file, "cpuacct", &ctrls);
        TAP_IS_STR(p, "/docker/abc/cpu", "v1: controller in a list");
        TAP_IS_STR(ctrls, "cpu,cpuacct", "v1: the line's controller list");
        free(p);
        free(ctrls);
        p = ab_proc_cgroup_path(file, "cpu", NULL);
        TAP_IS_STR(p, "/docker/abc/cpu", "v1: first of a list");
        free(p);
        p = ab_proc_cgroup_path(file, "pids", NULL);
        TAP_IS_STR(p, "/docker/abc", "v1: a single controller");
        free(p);
        ctrls = NULL;
        p = ab_proc_cgroup_path(file, NULL, &ctrls);
        TAP_IS_STR(p, "/box/v2", "v2: the 0:: line");
        TAP_IS_STR(ctrls, "", "v2: no controller list");
        free(p);
        free(ctrls);
        tap_ok(ab_proc_cgroup_path(file, "memory", NULL) == NULL, "missing controller: NULL");
        tap_ok(ab_proc_cgroup_path(file, "cpuac", NULL) == NULL, "a prefix is no match");
        tap_ok(ab_csv_has("cpu,cpuacct", "cpuacct") && !ab_csv_has("cpu,cpuacct", "acct"),
               "csv entries match whole");
        unlink(file);
        tap_ok(ab_proc_cgroup_path(file, NULL, NULL) == NULL, "no file: NULL");
}

int main(void)
{
        test_send_all();
        test_err();
        test_name_escape();
        test_buf();
        test_files();
        test_proc_cgroup();
        tap_ok(xadd(1, 2) == 3 && xmul(3, 4) == 12, "checked arithmetic");
        char *s = xasprintf("%s-%d", "a", 7);
        TAP_IS_STR(s, "a-7", "xasprintf");
        free(s);
        return tap_done();
}
