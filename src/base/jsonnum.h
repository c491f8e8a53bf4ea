/* jsonnum.h - a JSON number read as a whole int64_t (request bodies, tool
 * arguments). */
#ifndef AB_JSONNUM_H
#define AB_JSONNUM_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* Whether v is a JSON integer or a whole real (2.0) within int64_t's range;
 * if so, its value is in *out. A real's range is checked before it is cast:
 * outside it the cast is undefined (fuzz_bodies sent 1e230). */
static inline bool ab_json_whole(const json_t *v, int64_t *out)
{
        if (json_is_integer(v)) {
                *out = json_integer_value(v);
                return true;
        }
        double d = json_is_real(v) ? json_real_value(v) : 0.5; /* not a number: not whole */
        if (!(d >= -0x1p63 && d < 0x1p63) || d != (double)(int64_t)d)
                return false;
        *out = (int64_t)d;
        return true;
}

#endif
