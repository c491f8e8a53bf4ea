#include "base/id.h"

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

void ab_id_random(char out[17])
{
        unsigned char b[8];
        size_t got = 0;
        while (got < sizeof(b)) {
                ssize_t r = getrandom(b + got, sizeof(b) - got, 0);
                if (r < 0) {
                        if (errno == EINTR)
                                continue;
                        abort();
                }
                got += (size_t)r;
        }
        static const char hex[] = "0123456789abcdef";
        for (size_t i = 0; i < sizeof(b); i++) {
                out[2 * i] = hex[b[i] >> 4];
                out[2 * i + 1] = hex[b[i] & 15];
        }
        out[16] = '\0';
}
