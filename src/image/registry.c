/* TEMP stand-in (dropped at merge): no registry in this branch, so that
 * store.c links; every call fails with AB_E_UNSUPPORTED. */
#include "image/registry.h"

int ab_registry_open(const ab_registry_opts *opts, const ab_image_ref *ref, ab_registry **out,
                     ab_err **err)
{
        return ab_err_set(err, AB_E_UNSUPPORTED, 0, "registry stand-in");
}

void ab_registry_free(ab_registry *r)
{
}

int ab_registry_get_manifest(ab_registry *r, const char *reference, ab_buf *body, char **media_type,
                             char **digest, ab_err **err)
{
        return ab_err_set(err, AB_E_UNSUPPORTED, 0, "registry stand-in");
}

int ab_registry_get_blob(ab_registry *r, const char *digest, int fd, uint64_t max_bytes,
                         ab_registry_progress_fn fn, void *ud, ab_err **err)
{
        return ab_err_set(err, AB_E_UNSUPPORTED, 0, "registry stand-in");
}
