/* log.h - structured logs: one JSON object per line on stderr
 * {"ts":"...","level":"info","msg":"...", ...}. */
#ifndef AB_LOG_H
#define AB_LOG_H

#include "base/util.h"

typedef enum { AB_LOG_DEBUG, AB_LOG_INFO, AB_LOG_WARN, AB_LOG_ERROR } ab_log_level;

/* Messages below `min` are dropped. Default AB_LOG_WARN (the CLI stays quiet);
 * env AGENTBOX_LOG=debug|info|warn|error overrides. */
void ab_log_set_level(ab_log_level min);
void ab_log_init_from_env(void);

/* Logs msg with extra fields given as a NULL-terminated list of key, value
 * string pairs, e.g. ab_log(AB_LOG_INFO, "box started", "box", id, NULL). */
void ab_log(ab_log_level lvl, const char *msg, ...) __attribute__((sentinel));

#endif
