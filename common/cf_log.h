/* cf_log: leveled logging to stderr as text or JSON lines.
 *
 * The level is checked before anything is formatted (CF_LOG macro), so debug
 * logging in hot paths costs one comparison when disabled.  Libraries return
 * errors; programs decide what to log.
 */
#ifndef CF_LOG_H
#define CF_LOG_H

#include <stdbool.h>

typedef enum cf_log_level {
    CF_LOG_ERROR = 0,
    CF_LOG_WARN,
    CF_LOG_INFO,
    CF_LOG_DEBUG,
} cf_log_level;

typedef enum cf_log_format {
    CF_LOG_TEXT = 0,
    CF_LOG_JSON,
} cf_log_format;

extern cf_log_level cf_log_current_level;

void cf_log_setup(cf_log_level level, cf_log_format format, const char *program);
/* Parses "error|warn|info|debug"; returns -1 on an unknown name. */
int cf_log_level_parse(const char *name, cf_log_level *out);

/* The calling thread's trace context: while set, its lines carry
 * trace_id and span_id (JSON fields; " trace=... span=..." in text), so a
 * request's lines can be found from its trace.  Hex strings of 32 and 16
 * digits; NULL clears. */
void cf_log_set_trace(const char *trace_id, const char *span_id);

/* subsystem: a short tag ("kafka", "exec", "config"). */
void cf_log_write(cf_log_level level, const char *subsystem, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define CF_LOG(level, subsystem, ...)                                                     \
    do {                                                                                  \
        if ((level) <= cf_log_current_level)                                              \
            cf_log_write((level), (subsystem), __VA_ARGS__);                              \
    } while (0)

#define cf_log_error(sub, ...) CF_LOG(CF_LOG_ERROR, sub, __VA_ARGS__)
#define cf_log_warn(sub, ...) CF_LOG(CF_LOG_WARN, sub, __VA_ARGS__)
#define cf_log_info(sub, ...) CF_LOG(CF_LOG_INFO, sub, __VA_ARGS__)
#define cf_log_debug(sub, ...) CF_LOG(CF_LOG_DEBUG, sub, __VA_ARGS__)

#endif
