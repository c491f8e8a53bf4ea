/* fuzz_gunzip - libFuzzer target for gzip-encoded uploads (kit_gunzip_fd,
 * kit/gunzip.h; the E2B front's POST /files with Content-Encoding: gzip).
 * The input is the body. Besides memory errors it checks the promises: at
 * most the bound is written (64 KiB here, so bombs hit it), a failure
 * carries a message and one of the documented codes, and a success never
 * comes with a cap refusal. Build and run with scripts/fuzz.sh. */
#include "kit/gunzip.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define check(cond) ((cond) ? (void)0 : (fprintf(stderr, "check failed: %s\n", #cond), abort()))

#define BOUND (64u << 10)

/* A cap of 48 KiB: the spool's refusal is reached by some inputs too. */
static bool take(void *ud, uint64_t n)
{
        uint64_t *left = ud;
        if (n > *left)
                return false;
        *left -= n;
        return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        int src = memfd_create("fuzz-src", MFD_CLOEXEC);
        int dst = memfd_create("fuzz-dst", MFD_CLOEXEC);
        check(src >= 0 && dst >= 0);
        check(ab_write_all(src, data, size) == 0);
        check(lseek(src, 0, SEEK_SET) == 0);
        uint64_t left = 48u << 10;
        ab_err *e = NULL;
        int rc = kit_gunzip_fd(src, dst, BOUND, size && (data[0] & 1) ? take : NULL, &left, &e);
        struct stat st;
        check(fstat(dst, &st) == 0);
        check((uint64_t)st.st_size <= BOUND);
        if (rc < 0) {
                check(e && e->msg[0]);
                check(e->code == AB_E_INVALID || e->code == AB_E_LIMIT ||
                      e->code == AB_E_UNAVAILABLE);
                ab_err_free(&e);
        } else {
                check(!e && rc == 0);
        }
        close(src);
        close(dst);
        return 0;
}
