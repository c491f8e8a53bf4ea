/* aio.h - DeerFlow's front (docs/compat-deerflow.md) as the server sees it:
 * the route table of its provisioner and of the AIO sandbox API, registered
 * by `agentbox serve`. */
#ifndef AB_AIO_H
#define AB_AIO_H

#include "kit/server.h"

/* The default path prefix of the front's routes. */
#define AIO_DEFAULT_PREFIX "deerflow"

/* The front's route table under prefix (NULL: AIO_DEFAULT_PREFIX; one or
 * more path segments of letters, digits, '.', '_' and '-', no leading or
 * trailing '/'), built once into static storage: call it once, before the
 * server starts. NULL with AB_E_INVALID for a bad prefix. */
const ab_route_table *ab_aio_routes(const char *prefix, ab_err **err);

#endif
