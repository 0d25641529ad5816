/* session_int: Python sessions in the pipeline (session.c).  Private to
 * backends/languages/. */
#ifndef CF_SESSION_INT_H
#define CF_SESSION_INT_H

#include <stddef.h>

#include "cf_schema.h"

/* The program a cell runs: the cell (base64) and its state file's path,
 * then the driver.  *out is malloc'd.  -1: out of memory. */
int cf_session_program(const char *driver, size_t driver_len, const cf_request *req, cf_bytes *out);
/* After the run: the driver's report (the result's output) becomes
 * session_cell, session_restored, session_lost and a warning per lost
 * name; output is cleared; a state that did not load makes it failed. */
void cf_session_outcome(const cf_request *req, cf_result *res);
/* Appends one warning diagnostic (nothing when memory runs out: it is a
 * remark, not the answer). */
void cf_result_add_warning(cf_result *res, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
