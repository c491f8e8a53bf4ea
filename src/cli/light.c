/* What the front binary (front.c) links in place of the parts that need
 * libcurl, libpq, libarchive or libcrypto. Its manager runs no background
 * jobs, so no resource sampler ever posts an alert to a webhook and no
 * snapshot exports a layer; and front.c hands an exec to agentbox-full
 * before it opens a store or a backend when the environment names a
 * PostgreSQL store, the Docker, mock or Kubernetes backend. A new use of
 * one of these libraries in the exec path fails the link of `agentbox`
 * (tests/layout/test_light_cli.py checks what it loads), not silently here. */
#include "backend/backend.h"
#include "core/webhook.h"
#include "native/boxfs.h"
#include "store/store_int.h"

#define IN_FULL "(agentbox-full has it)"

void ab_webhook_post(ab_webhook *w, const char *json)
{
        (void)w;
        (void)json;
}

int ab_store_pg_open(const char *url, ab_store **out, ab_err **err)
{
        (void)url;
        *out = NULL;
        return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                          "this agentbox binary has no PostgreSQL client " IN_FULL);
}

int ab_docker_open(const ab_docker_opts *opts, ab_backend **out, ab_err **err)
{
        (void)opts;
        *out = NULL;
        return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                          "this agentbox binary has no Docker client " IN_FULL);
}

int ab_mock_open(const ab_mock_opts *opts, ab_backend **out, ab_err **err)
{
        (void)opts;
        *out = NULL;
        return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                          "this agentbox binary has no mock backend " IN_FULL);
}

int ab_boxfs_export_layer(int upper, int workspace, uid_t base, int out_fd, ab_err **err)
{
        (void)upper;
        (void)workspace;
        (void)base;
        (void)out_fd;
        return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                          "this agentbox binary exports no layers " IN_FULL);
}

int ab_k8s_open(const ab_k8s_opts *opts, ab_backend **out, ab_err **err)
{
        (void)opts;
        *out = NULL;
        return ab_err_set(err, AB_E_UNSUPPORTED, 0,
                          "this agentbox binary has no Kubernetes client " IN_FULL);
}
