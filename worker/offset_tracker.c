#include "offset_tracker_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct entry {
    int64_t offset;
    bool done;
} entry;

/* A ring of entries in offset order; done entries are popped from the head. */
struct cf_offset_tracker {
    entry *ring;
    size_t cap;
    size_t head;
    size_t count;
    size_t max;           /* most entries ever held */
    int64_t last_added;   /* -1: none yet */
    int64_t position;     /* next offset to commit; -1: unknown */
    int64_t reported;     /* last position handed out by take_committable */
};

cf_offset_tracker *cf_offset_tracker_new(size_t max)
{
    cf_offset_tracker *t = calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->max = max ? max : 1;
    t->last_added = -1;
    t->position = -1;
    t->reported = -1;
    return t;
}

void cf_offset_tracker_destroy(cf_offset_tracker *t)
{
    if (!t)
        return;
    free(t->ring);
    free(t);
}

static entry *at(cf_offset_tracker *t, size_t i)
{
    return &t->ring[(t->head + i) % t->cap];
}

static int grow(cf_offset_tracker *t)
{
    size_t ncap = t->cap ? t->cap * 2 : 64;
    if (ncap > t->max)
        ncap = t->max;
    entry *n = malloc(ncap * sizeof(*n));
    if (!n)
        return -1;
    for (size_t i = 0; i < t->count; i++)
        n[i] = *at(t, i);
    free(t->ring);
    t->ring = n;
    t->cap = ncap;
    t->head = 0;
    return 0;
}

int cf_offset_tracker_add(cf_offset_tracker *t, int64_t offset)
{
    if (offset < 0 || offset <= t->last_added)
        return -1;
    if (t->count >= t->max)
        return -2;
    if (t->count == t->cap && grow(t) < 0)
        return -2;
    t->ring[(t->head + t->count) % t->cap] = (entry){.offset = offset, .done = false};
    t->count++;
    if (t->count == 1)
        t->position = offset;
    t->last_added = offset;
    return 0;
}

int cf_offset_tracker_done(cf_offset_tracker *t, int64_t offset)
{
    /* Binary search: entries are in increasing offset order. */
    size_t lo = 0, hi = t->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int64_t o = at(t, mid)->offset;
        if (o == offset) {
            at(t, mid)->done = true;
            while (t->count > 0 && at(t, 0)->done) {
                t->position = at(t, 0)->offset + 1;
                t->head = (t->head + 1) % t->cap;
                t->count--;
            }
            if (t->count > 0)
                t->position = at(t, 0)->offset;
            return 0;
        }
        if (o < offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

int64_t cf_offset_tracker_take_committable(cf_offset_tracker *t)
{
    if (t->position < 0 || t->position == t->reported)
        return -1;
    t->reported = t->position;
    return t->position;
}

int64_t cf_offset_tracker_stored(const cf_offset_tracker *t)
{
    return t->reported;
}

size_t cf_offset_tracker_pending(const cf_offset_tracker *t)
{
    return t->count;
}
