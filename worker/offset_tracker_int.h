/* offset_tracker: which offsets of one partition may be committed.
 *
 * Requests of a partition finish out of order (several slots, key-ordered
 * scheduling), but Kafka commits a single position per partition.  The
 * tracker records every offset handed out and when its result was
 * delivered; the committable position is the lowest offset not yet done
 * (or one past the last offset when all are done).  Main thread only. */
#ifndef CF_OFFSET_TRACKER_H
#define CF_OFFSET_TRACKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cf_offset_tracker cf_offset_tracker;

/* At most max offsets are pending at once (the worker pauses its
 * partitions well before; the cap is the last line of defence). */
cf_offset_tracker *cf_offset_tracker_new(size_t max);
void cf_offset_tracker_destroy(cf_offset_tracker *t);

/* Records an offset taken for processing.  Offsets must increase; a
 * repeated or lower offset (a re-fetch after a seek) returns -1; a full
 * tracker (or no memory) returns -2 and records nothing. */
int cf_offset_tracker_add(cf_offset_tracker *t, int64_t offset);

/* Marks an offset finished (its result or dead letter was delivered).
 * Unknown offsets are ignored and return -1. */
int cf_offset_tracker_done(cf_offset_tracker *t, int64_t offset);

/* The position to commit (next offset to consume) if it moved since the
 * last call, else -1. */
int64_t cf_offset_tracker_take_committable(cf_offset_tracker *t);

/* The last position take_committable handed out (every offset below it is
 * done and stored for commit), or -1. */
int64_t cf_offset_tracker_stored(const cf_offset_tracker *t);

/* Offsets recorded but not yet done. */
size_t cf_offset_tracker_pending(const cf_offset_tracker *t);

#endif
