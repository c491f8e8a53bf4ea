/* fuzz_k8s_watch - libFuzzer target for what a Kubernetes API server sends
 * the kubernetes backend (backend/k8s_api.h): each line of the input as a
 * watch event, its object (and the whole input) as a Status, and the error
 * made from it. */
#include "backend/k8s_api.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void status_of(json_t *j, long http)
{
        long code;
        const char *reason, *msg;
        (void)!ab_kapi_status_parse(j, &code, &reason, &msg);
        ab_kapi_res res = {.status = http, .json = j};
        ab_err *e = NULL;
        ab_kapi_status_err(&res, "fuzz", &e);
        ab_err_free(&e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        const char *p = (const char *)data, *end = p + size;
        while (p < end) {
                const char *nl = memchr(p, '\n', (size_t)(end - p));
                size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
                json_t *ev, *obj;
                const char *type;
                if (ab_kapi_watch_line(p, len, &ev, &type, &obj) == 0) {
                        status_of(obj, 410);
                        json_decref(ev);
                }
                p += len + 1;
        }
        json_t *j = json_loadb((const char *)data, size, 0, NULL);
        status_of(j, size ? 400 + data[0] % 200 : 500);
        json_decref(j);
        return 0;
}
