#include "base/id.h"
#include "base/codec.h"

#include <fcntl.h>
#include <sys/random.h>

bool ab_id_valid(const char *s)
{
        if (!s || !s[0])
                return false;
        size_t n = strlen(s);
        if (n > 63)
                return false;
        for (size_t i = 0; i < n; i++) {
                char c = s[i];
                bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
                if (!alnum && (i == 0 || (c != '_' && c != '-')))
                        return false;
        }
        return true;
}

int ab_id_check(const char *s, ab_err **err)
{
        if (ab_id_valid(s))
                return 0;
        return ab_err_set(err, AB_E_INVALID, 0,
                          "invalid box id '%s': use 1-63 characters of a-z, 0-9, '_' and '-', "
                          "starting with a letter or digit",
                          s ? s : "");
}

void ab_random_bytes(void *b, size_t n)
{
        size_t got = 0;
        while (got < n) {
                ssize_t r = getrandom((char *)b + got, n - got, 0);
                if (r < 0) {
                        if (errno == EINTR)
                                continue;
                        abort();
                }
                got += (size_t)r;
        }
}

void ab_random_hex(char *out, size_t cap, const char *prefix, size_t n)
{
        size_t pl = strlen(prefix);
        if (n > 64 || cap < pl + 2 * n + 1)
                abort();
        unsigned char b[64];
        ab_random_bytes(b, n);
        memcpy(out, prefix, pl);
        ab_hex_encode(b, n, out + pl);
}

void ab_id_random(char out[17])
{
        ab_random_hex(out, 17, "", 8);
}
