/* What the front binary (front.c) links in place of libcurl and libpq. Its
 * manager runs no background jobs, so no resource sampler ever posts an
 * alert to a webhook; and it hands an exec with a PostgreSQL store to
 * agentbox-full before it opens a store. A new use of either library in the
 * exec path fails the link of `agentbox`, not silently here. */
#include "core/webhook.h"
#include "store/store_int.h"

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
                          "this agentbox binary has no PostgreSQL client (agentbox-full has)");
}
