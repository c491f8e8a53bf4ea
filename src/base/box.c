#include "base/box.h"

#include <string.h>

static const char *const status_names[] = {
    [AB_BOX_CREATING] = "creating", [AB_BOX_RUNNING] = "running", [AB_BOX_STOPPED] = "stopped",
    [AB_BOX_DELETING] = "deleting", [AB_BOX_ERROR] = "error",     [AB_BOX_PAUSED] = "paused",
};

static const char *const mode_names[] = {
    [AB_MODE_SESSION] = "session",
    [AB_MODE_TASK] = "task",
    [AB_MODE_POOL] = "pool",
    [AB_MODE_SYSTEM] = "system",
};

const char *ab_box_status_name(ab_box_status s)
{
        return s > 0 && s <= AB_BOX_STATUS_MAX ? status_names[s] : "unknown";
}

ab_box_status ab_box_status_parse(const char *s)
{
        for (int i = 1; s && i <= AB_BOX_STATUS_MAX; i++)
                if (!strcmp(s, status_names[i]))
                        return (ab_box_status)i;
        return 0;
}

const char *ab_box_mode_name(ab_box_mode m)
{
        return m > 0 && m <= AB_MODE_SYSTEM ? mode_names[m] : "unknown";
}

ab_box_mode ab_box_mode_parse(const char *s)
{
        for (int i = 1; s && i <= AB_MODE_SYSTEM; i++)
                if (!strcmp(s, mode_names[i]))
                        return (ab_box_mode)i;
        return 0;
}
