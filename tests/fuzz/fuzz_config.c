/* fuzz_config - libFuzzer target for the config file (config/config.c): the
 * input is the YAML file given to --config, loaded over the defaults and then
 * validated, as `agentbox serve` does. Besides memory errors it checks the
 * loader's promise: a file that fails to load leaves the configuration as it
 * was. Build and run with scripts/fuzz.sh. */
#include "config/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* abort() names the broken promise */
#define check(cond) ((cond) ? (void)0 : (fprintf(stderr, "check failed: %s\n", #cond), abort()))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        int fd = memfd_create("config.yaml", MFD_CLOEXEC);
        check(fd >= 0);
        check(ab_write_all(fd, data, size) == 0);
        char path[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        ab_config c;
        ab_config_default(&c);
        ab_err *e = NULL;
        if (ab_config_load_file(&c, path, &e) < 0) {
                check(e && e->msg);
                ab_err_free(&e);
                /* left untouched: still the defaults */
                check(!strcmp(c.listen, "127.0.0.1:8080") && !c.token && !c.n_keys);
        } else if (ab_config_validate(&c, &e) < 0) {
                check(e && e->msg);
                ab_err_free(&e);
        }
        ab_config_release(&c);
        close(fd);
        return 0;
}
