/* job.c: the job record (job_int.h holds its lifecycle). */
#include "worker_int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cf_log.h"
#include "cf_util.h"

#define LOG_SUB "worker"

void job_out_clear(job_out *o)
{
    free(o->key);
    free(o->value.data);
    if (o->hdrs)
        rd_kafka_headers_destroy(o->hdrs);
    memset(o, 0, sizeof(*o));
}

void job_free(job *j)
{
    if (!j)
        return;
    cf_request_clear(&j->req);
    job_out_clear(&j->out);
    free(j->stream_topic);
    free(j->pj.key);
    free(j->key);
    free(j);
}

/* The end of a job: delivered (its offset is marked done if the partition
 * is still ours) or dropped with its partition (never marked: the next
 * owner reads it again).  Main thread only. */
void job_finished(cf_worker *w, job *j, bool delivered)
{
    part_state *ps = partitions_get(w, j->topic, j->partition, false);
    if (delivered && ps && ps->assigned && ps->gen == j->gen)
        cf_offset_tracker_done(ps->tracker, j->offset);
    if (!delivered)
        w->n_abandoned++;
    if (j->blocks_intake)
        w->intake_blocked--;
    w->inflight--;
    job_free(j);
}

