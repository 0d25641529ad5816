#include "cf_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

cf_log_level cf_log_current_level = CF_LOG_INFO;
static cf_log_format log_format = CF_LOG_TEXT;
static char log_program[64] = "codefleet";

static _Thread_local char log_trace[33];
static _Thread_local char log_span[17];

void cf_log_set_trace(const char *trace_id, const char *span_id)
{
    if (!trace_id || !span_id || strlen(trace_id) != 32 || strlen(span_id) != 16) {
        log_trace[0] = log_span[0] = '\0';
        return;
    }
    memcpy(log_trace, trace_id, 33);
    memcpy(log_span, span_id, 17);
}

static const char *const level_names[] = {"error", "warn", "info", "debug"};

void cf_log_setup(cf_log_level level, cf_log_format format, const char *program)
{
    cf_log_current_level = level;
    log_format = format;
    if (program)
        snprintf(log_program, sizeof(log_program), "%s", program);
}

int cf_log_level_parse(const char *name, cf_log_level *out)
{
    for (unsigned i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *out = (cf_log_level)i;
            return 0;
        }
    }
    return -1;
}

/* Appends s to out as JSON string content (without quotes). */
static size_t json_escape(char *out, size_t cap, const char *s)
{
    size_t n = 0;
    for (; *s && n + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = (char)c;
        } else if (c == '\n') {
            out[n++] = '\\';
            out[n++] = 'n';
        } else if (c < 0x20) {
            n += (size_t)snprintf(out + n, cap - n, "\\u%04x", c);
        } else {
            out[n++] = (char)c;
        }
    }
    out[n] = '\0';
    return n;
}

void cf_log_write(cf_log_level level, const char *subsystem, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char ts[40];
    size_t tl = strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + tl, sizeof(ts) - tl, ".%03ldZ", (long)(tv.tv_usec / 1000));

    const char *lname = level_names[level <= CF_LOG_DEBUG ? level : CF_LOG_DEBUG];
    char line[4096 + 256];
    if (log_format == CF_LOG_JSON) {
        char emsg[4096];
        char esub[64];
        json_escape(emsg, sizeof(emsg), msg);
        json_escape(esub, sizeof(esub), subsystem ? subsystem : "");
        char trace[96] = "";
        if (log_trace[0])
            snprintf(trace, sizeof(trace), ",\"trace_id\":\"%s\",\"span_id\":\"%s\"", log_trace, log_span);
        snprintf(line, sizeof(line),
                 "{\"ts\":\"%s\",\"level\":\"%s\",\"program\":\"%s\",\"pid\":%ld,\"sub\":\"%s\"%s,\"msg\":\"%s\"}\n",
                 ts, lname, log_program, (long)getpid(), esub, trace, emsg);
    } else {
        char trace[96] = "";
        if (log_trace[0])
            snprintf(trace, sizeof(trace), " trace=%s span=%s", log_trace, log_span);
        snprintf(line, sizeof(line), "%s %s[%ld] %-5s %s: %s%s\n", ts, log_program, (long)getpid(), lname,
                 subsystem ? subsystem : "-", msg, trace);
    }
    /* One write per line keeps lines from concurrent threads whole. */
    size_t len = strnlen(line, sizeof(line));
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}
