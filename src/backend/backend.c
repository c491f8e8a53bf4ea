#include "backend/backend.h"

void ab_box_info_clear(ab_box_info *i)
{
        free(i->id);
        free(i->rootfs);
        free(i->image);
        free(i->error);
        memset(i, 0, sizeof(*i));
}

void ab_volume_info_clear(ab_volume_info *v)
{
        free(v->name);
        free(v->owner);
        ab_strvfreep(&v->boxes);
        memset(v, 0, sizeof(*v));
}
