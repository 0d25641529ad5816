/* metrics: the worker's Prometheus metrics (text exposition format 0.0.4).
 *
 * A registry of metric families (counter, gauge, histogram), each with a
 * fixed list of label names and a bounded number of series: label values
 * that would make a family grow past CF_METRICS_MAX_SERIES are folded into
 * one series whose values are all "other", so no sender can make the
 * registry grow without bound.  Label values are never taken from a
 * request unchecked: callers pass enum names or names from the worker's
 * own configuration.
 *
 * Thread-safe: one mutex guards the registry (updates are a few per
 * request; rendering copies nothing it does not print).
 */
#ifndef CF_METRICS_H
#define CF_METRICS_H

#include <stddef.h>

#define CF_METRICS_MAX_LABELS 4
#define CF_METRICS_MAX_SERIES 2000

typedef enum cf_metric_type {
    CF_METRIC_COUNTER,
    CF_METRIC_GAUGE,
    CF_METRIC_HISTOGRAM,
} cf_metric_type;

typedef struct cf_metrics cf_metrics;
typedef struct cf_metric cf_metric;

cf_metrics *cf_metrics_new(void);
void cf_metrics_destroy(cf_metrics *m); /* NULL-safe */

/* Declares a family.  name and help are borrowed (string literals);
 * labels: n_labels names (borrowed), at most CF_METRICS_MAX_LABELS.
 * Histograms take their upper bounds, ascending (+Inf is implied).
 * Returns NULL when out of memory (updates of a NULL family do nothing). */
cf_metric *cf_metrics_add(cf_metrics *m, cf_metric_type type, const char *name, const char *help, size_t n_labels,
                          const char *const *labels, const double *buckets, size_t n_buckets);

/* Updates the series of the given label values (n_labels of them, in the
 * family's order; NULL is taken as ""). */
void cf_metric_inc(cf_metric *f, double by, const char *const *values);
void cf_metric_set(cf_metric *f, double v, const char *const *values);
void cf_metric_observe(cf_metric *f, double v, const char *const *values);
/* Drops every series of a gauge family (to set a fresh picture, e.g. the
 * partitions' lag after a rebalance). */
void cf_metric_clear(cf_metric *f);
/* Replaces every series of a gauge family at once (a scrape sees the old
 * picture or the new one, never none): n series, values[i * n_labels + k]
 * the k-th label of series i, v[i] its value. */
void cf_metric_replace(cf_metric *f, size_t n, const char *const *values, const double *v);
/* The value of one series (counters and gauges; histograms: the count),
 * 0 when it does not exist.  For tests and `codefleet top`'s own use. */
double cf_metric_get(cf_metric *f, const char *const *values);

/* Renders every family: a malloc'd NUL-terminated text, NULL when out of
 * memory.  *len gets its length. */
char *cf_metrics_render(cf_metrics *m, size_t *len);

#endif
