#include "backend/backend.h"

void ab_box_info_clear(ab_box_info *i)
{
        free(i->id);
        free(i->rootfs);
        free(i->error);
        memset(i, 0, sizeof(*i));
}

int ab_box_exec(ab_backend *b, const char *id, const abc_exec_req *req, abc_output_fn out, void *ud,
                abc_exec_res *res, ab_err **err)
{
        _cleanup_close_ int fd = b->ops->connect(b, id, err);
        if (fd < 0)
                return -1;
        return abc_exec(fd, req, out, ud, res, err);
}
