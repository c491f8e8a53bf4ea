#include "backend/backend.h"

void ab_box_info_clear(ab_box_info *i)
{
        free(i->id);
        free(i->rootfs);
        free(i->image);
        free(i->error);
        memset(i, 0, sizeof(*i));
}
