/* Unit tests: the error contract and the util helpers. */
#include "base/err.h"
#include "tap.h"

#include <fcntl.h>
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
        TAP_IS_INT(ab_read_file(dfd, "missing", &buf, &len), -ENOENT, "missing -> -ENOENT");
        /* No temp files are left behind. */
        TAP_IS_INT(faccessat(dfd, "f.json.tmp.0", F_OK, 0), -1, "no temp left");
        unlinkat(dfd, "f.json", 0);
        close(dfd);
        rmdir(dir);
}

int main(void)
{
        test_err();
        test_files();
        tap_ok(xadd(1, 2) == 3 && xmul(3, 4) == 12, "checked arithmetic");
        char *s = xasprintf("%s-%d", "a", 7);
        TAP_IS_STR(s, "a-7", "xasprintf");
        free(s);
        return tap_done();
}
