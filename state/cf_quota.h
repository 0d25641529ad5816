/* cf_quota: how much one tenant (a profile) keeps in Redis of one kind of
 * expiring thing, so that one tenant cannot fill the store for every other
 * (issue 30, part 4).
 *
 * Things of a kind live a fixed ttl after they are written (stored results
 * for replay live idempotency-ttl).  Each write is charged, its bytes and
 * one item, to the time bucket it was made in; a bucket is 1/CF_QUOTA_BUCKETS
 * of the ttl long and expires ttl after its end, so it counts only things
 * that may still be alive.  The usage is never below what lives and above
 * it by at most one bucket's worth of things that have just expired: a
 * quota errs towards refusing, never towards overfilling.  All buckets of
 * one (kind, scope) share a hash tag (one slot of a Redis Cluster), and one
 * script reads and charges them, so concurrent writers on many workers
 * cannot together pass the quota.  Key layout: docs/STATE.md. */
#ifndef CF_QUOTA_H
#define CF_QUOTA_H

#include <stdbool.h>
#include <stdint.h>

#include "cf_error.h"
#include "cf_redis.h"

#define CF_QUOTA_BUCKETS 24

typedef struct cf_quota {
    int64_t max_bytes; /* 0: no cap on bytes */
    int64_t max_count; /* 0: no cap on items */
} cf_quota;

typedef struct cf_quota_usage {
    int64_t bytes;
    int64_t count;
} cf_quota_usage;

/* Charges `bytes` and one item of kind (e.g. "results") to scope (the
 * profile) when they fit under q, with things living ttl_ms from now_ms
 * (wall-clock ms).  *charged false, and nothing charged, when they do not
 * fit; *used is what was held before this charge.  One try: the caller
 * retries transient errors. */
int cf_quota_charge(cf_redis *r, const char *kind, const char *scope, int64_t ttl_ms, int64_t now_ms,
                    const cf_quota *q, int64_t bytes, bool *charged, cf_quota_usage *used, cf_error *err);

/* What scope holds of kind now (nothing charged). */
int cf_quota_usage_get(cf_redis *r, const char *kind, const char *scope, int64_t ttl_ms, int64_t now_ms,
                       cf_quota_usage *used, cf_error *err);

#endif
