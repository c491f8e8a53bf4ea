/* fuzz_box_host - libFuzzer target for the parser of box host names
 * (http/reqcheck.h: ab_req_host_box), which reads the Host header of every
 * request of a server with ports_domain: "PORT-ID.DOMAIN[:N]". The input is
 * "DOMAIN\nHOST". Besides memory errors it checks the promises: on a match
 * the port is 1 to AB_HOST_PORT_MAX digits, the id 1 to AB_HOST_BOX_MAX
 * characters, lowercase and free of '.' and ':' only where the host had
 * none there, and the host begins with "PORT-" followed by the id in any
 * case. Build and run with scripts/fuzz.sh. */
#include "http/reqcheck.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define check(cond) ((cond) ? (void)0 : (fprintf(stderr, "check failed: %s\n", #cond), abort()))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        char *in = malloc(size + 1); /* exactly the bytes and a NUL: overreads are caught */
        if (!in)
                return 0;
        memcpy(in, data, size);
        in[size] = 0;
        char *nl = strchr(in, '\n');
        const char *domain = in, *host = nl ? nl + 1 : NULL;
        if (nl)
                *nl = 0;
        char port[AB_HOST_PORT_MAX + 1], box[AB_HOST_BOX_MAX + 1];
        memset(port, 'P', sizeof(port));
        memset(box, 'B', sizeof(box));
        if (ab_req_host_box(host, domain, port, box)) {
                size_t pl = strlen(port), bl = strlen(box);
                check(pl >= 1 && pl <= AB_HOST_PORT_MAX);
                check(bl >= 1 && bl <= AB_HOST_BOX_MAX);
                for (size_t i = 0; i < pl; i++)
                        check(isdigit((unsigned char)port[i]));
                for (size_t i = 0; i < bl; i++)
                        check(!isupper((unsigned char)box[i]));
                check(!strncmp(host, port, pl) && host[pl] == '-');
                check(!strncasecmp(host + pl + 1, box, bl) && host[pl + 1 + bl] == '.');
                check(*domain);
        }
        free(in);
        return 0;
}
