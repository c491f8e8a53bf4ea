/* docker.c - placeholder until the Docker backend lands (branch docker). */
#include "backend/backend.h"

int ab_docker_open(const ab_docker_opts *opts, ab_backend **out, ab_err **err)
{
        (void)opts;
        (void)out;
        return ab_err_set(err, AB_E_UNSUPPORTED, 0, "this build has no Docker backend yet");
}
