/* status.c - the status of a failed file operation (kit/status.h). */
#include "kit/status.h"

unsigned kit_file_status(ab_code c)
{
        return c == AB_E_LIMIT ? 507 : status_of(c);
}

enum MHD_Result kit_file_err(ab_req *r, ab_err *e)
{
        if (kit_file_status(e->code) != 507)
                return resp_err(r, e);
        enum MHD_Result ret = resp_error(r, 507, "limit_exceeded", "%s", e->msg);
        ab_err_free(&e);
        return ret;
}
