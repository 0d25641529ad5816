/* run_report: what a child tells the runner over its report pipe.
 *
 * Shared by the runner (its children and their init) and the zygote
 * (codefleet-zygote's per-request init and program), so cf_run and
 * cf_run_adopt read one format.  Fixed size, below PIPE_BUF: a record
 * arrives whole or not at all.  A setup failure or an execve failure ends
 * the writer; an init adds the program's wait status when the program
 * ended. */
#ifndef CF_RUN_REPORT_H
#define CF_RUN_REPORT_H

#include <stdint.h>

enum {
    CF_REPORT_SETUP = 0,  /* setting up the child failed (err, msg): the sandbox broke */
    CF_REPORT_EXEC = 1,   /* execve of the program failed (err): the program chosen */
    CF_REPORT_STATUS = 2, /* the program ended (status, maxrss_kb, cpu_us) */
    CF_REPORT_READY = 3,  /* a prepared child waits for its request */
};

typedef struct cf_run_report {
    int32_t kind;
    int32_t err;       /* errno (SETUP, EXEC) */
    int32_t status;    /* wait status of the program (STATUS) */
    int32_t pad;
    int64_t maxrss_kb; /* largest RSS of the program and its descendants (STATUS) */
    int64_t cpu_us;    /* user + system CPU of the program and its reaped descendants (STATUS), -1 unknown */
    char msg[104];
} cf_run_report;

#endif
