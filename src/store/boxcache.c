/* boxcache.c - box records kept per store handle, so that the hot reads of
 * one box (every exec reads its box) skip the row's fetch and the parse of
 * its JSON columns. Validity rules: store_int.h. */
#include "store/store_int.h"

#include <string.h>

static char *dup_or_null(const char *s)
{
        return s ? xstrdup(s) : NULL;
}

static json_t *json_copy_or_null(const json_t *j)
{
        return j ? json_deep_copy(j) : NULL;
}

static void rec_copy(ab_box_rec *dst, const ab_box_rec *src)
{
        *dst = *src;
        char **strs[] = {&dst->provider,  &dst->id,      &dst->backend_id,
                         &dst->app_id,    &dst->user_id, &dst->chat_id,
                         &dst->thread_id, &dst->error,   &dst->node};
        for (size_t i = 0; i < AB_ARRAY_LEN(strs); i++)
                *strs[i] = dup_or_null(*strs[i]);
        dst->spec = json_copy_or_null(src->spec);
        dst->metadata = json_copy_or_null(src->metadata);
}

static ab_box_cached *find(ab_store *s, const char *provider, const char *id)
{
        for (size_t i = 0; i < AB_BOX_CACHE_N; i++) {
                ab_box_cached *c = &s->box_cache[i];
                if (c->rec.id && !strcmp(c->rec.id, id) && !strcmp(c->rec.provider, provider))
                        return c;
        }
        return NULL;
}

bool ab_box_cache_get(ab_store *s, const char *provider, const char *id, uint64_t ver,
                      ab_box_rec *out)
{
        ab_box_cached *c = find(s, provider, id);
        if (!c)
                return false;
        if (c->gen != ab_store_box_gen(s) || c->ver != ver) {
                ab_box_rec_clear(&c->rec);
                return false;
        }
        c->used = ++s->box_cache_uses;
        rec_copy(out, &c->rec);
        return true;
}

void ab_box_cache_put(ab_store *s, const ab_box_rec *r, uint64_t ver)
{
        if (!r->provider || !r->id)
                return;
        ab_box_cached *c = find(s, r->provider, r->id);
        for (size_t i = 0; !c && i < AB_BOX_CACHE_N; i++)
                if (!s->box_cache[i].rec.id)
                        c = &s->box_cache[i];
        for (size_t i = 0; !c && i < AB_BOX_CACHE_N; i++) /* all taken: the oldest */
                if (i == 0 || s->box_cache[i].used < c->used)
                        c = &s->box_cache[i];
        if (!c) /* unreachable: AB_BOX_CACHE_N > 0 */
                return;
        ab_box_rec_clear(&c->rec);
        rec_copy(&c->rec, r);
        c->gen = ab_store_box_gen(s);
        c->ver = ver;
        c->used = ++s->box_cache_uses;
}

void ab_box_cache_touch(ab_store *s, const char *provider, const char *id, int64_t at_ms)
{
        ab_box_cached *c = find(s, provider, id);
        if (c && c->rec.last_active_at < at_ms)
                c->rec.last_active_at = at_ms;
}

void ab_box_cache_drop(ab_store *s, const char *provider, const char *id)
{
        ab_box_cached *c = find(s, provider, id);
        if (c)
                ab_box_rec_clear(&c->rec);
}

void ab_box_cache_clear(ab_store *s)
{
        for (size_t i = 0; i < AB_BOX_CACHE_N; i++)
                ab_box_rec_clear(&s->box_cache[i].rec);
}
