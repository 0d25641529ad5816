/* metrics: see metrics.h. */
#include "metrics_int.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct series {
    char *key;      /* label values joined by \x1f, for lookup */
    char *labels;   /* rendered: a="x",b="y" (escaped), "" without labels */
    double value;   /* counter, gauge; histogram: sum */
    unsigned long long count;    /* histogram */
    unsigned long long *buckets; /* histogram: per bound, not cumulative */
} series;

struct cf_metric {
    cf_metrics *reg;
    cf_metric_type type;
    const char *name;
    const char *help;
    size_t n_labels;
    const char *labels[CF_METRICS_MAX_LABELS];
    double *bounds;
    size_t n_bounds;
    series *s;
    size_t n, cap;
    struct cf_metric *next;
};

struct cf_metrics {
    pthread_mutex_t mu;
    cf_metric *first, *last;
};

cf_metrics *cf_metrics_new(void)
{
    cf_metrics *m = calloc(1, sizeof(*m));
    if (m)
        pthread_mutex_init(&m->mu, NULL);
    return m;
}

static void series_free(series *s)
{
    free(s->key);
    free(s->labels);
    free(s->buckets);
}

void cf_metric_clear(cf_metric *f)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->reg->mu);
    for (size_t i = 0; i < f->n; i++)
        series_free(&f->s[i]);
    f->n = 0;
    pthread_mutex_unlock(&f->reg->mu);
}

void cf_metrics_destroy(cf_metrics *m)
{
    if (!m)
        return;
    for (cf_metric *f = m->first; f;) {
        cf_metric *next = f->next;
        for (size_t i = 0; i < f->n; i++)
            series_free(&f->s[i]);
        free(f->s);
        free(f->bounds);
        free(f);
        f = next;
    }
    pthread_mutex_destroy(&m->mu);
    free(m);
}

/* A growable string; on allocation failure it stays failed (NULL). */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool failed;
} sbuf;

static void sb_putn(sbuf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->len + n + 1 > cap)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_puts(sbuf *b, const char *s)
{
    sb_putn(b, s, strlen(s));
}

__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0)
        sb_putn(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

/* Label values: backslash, double quote and newline escaped (the text
 * format's rules); other bytes as they are. */
static void sb_label_value(sbuf *b, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\')
            sb_puts(b, "\\\\");
        else if (*v == '"')
            sb_puts(b, "\\\"");
        else if (*v == '\n')
            sb_puts(b, "\\n");
        else
            sb_putn(b, v, 1);
    }
}

static void sb_number(sbuf *b, double v)
{
    if (isnan(v))
        sb_puts(b, "NaN");
    else if (isinf(v))
        sb_puts(b, v > 0 ? "+Inf" : "-Inf");
    else if (v == floor(v) && fabs(v) < 1e15)
        sb_printf(b, "%.0f", v);
    else {
        /* The shortest form that reads back the same: le="0.1", not
         * "0.10000000000000001" (selectors compare the text). */
        char t[40];
        snprintf(t, sizeof(t), "%.15g", v);
        if (strtod(t, NULL) != v)
            snprintf(t, sizeof(t), "%.17g", v);
        sb_puts(b, t);
    }
}

cf_metric *cf_metrics_add(cf_metrics *m, cf_metric_type type, const char *name, const char *help, size_t n_labels,
                          const char *const *labels, const double *buckets, size_t n_buckets)
{
    if (!m || n_labels > CF_METRICS_MAX_LABELS)
        return NULL;
    cf_metric *f = calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    f->reg = m;
    f->type = type;
    f->name = name;
    f->help = help;
    f->n_labels = n_labels;
    for (size_t i = 0; i < n_labels; i++)
        f->labels[i] = labels[i];
    if (type == CF_METRIC_HISTOGRAM && n_buckets) {
        f->bounds = malloc(n_buckets * sizeof(double));
        if (!f->bounds) {
            free(f);
            return NULL;
        }
        memcpy(f->bounds, buckets, n_buckets * sizeof(double));
        f->n_bounds = n_buckets;
    }
    pthread_mutex_lock(&m->mu);
    if (m->last)
        m->last->next = f;
    else
        m->first = f;
    m->last = f;
    pthread_mutex_unlock(&m->mu);
    return f;
}

static const char other_values[CF_METRICS_MAX_LABELS][6] = {"other", "other", "other", "other"};

/* The series of values (created when new), NULL when out of memory.
 * Called with the registry's lock held. */
static series *series_of(cf_metric *f, const char *const *values, bool create)
{
    const char *v[CF_METRICS_MAX_LABELS];
    for (size_t i = 0; i < f->n_labels; i++)
        v[i] = values && values[i] ? values[i] : "";
    for (int pass = 0; pass < 2; pass++) {
        sbuf key = {0};
        for (size_t i = 0; i < f->n_labels; i++) {
            if (i)
                sb_putn(&key, "\x1f", 1);
            sb_puts(&key, v[i]);
        }
        if (key.failed)
            return NULL;
        const char *k = key.p ? key.p : "";
        for (size_t i = 0; i < f->n; i++) {
            if (strcmp(f->s[i].key, k) == 0) {
                free(key.p);
                return &f->s[i];
            }
        }
        if (!create) {
            free(key.p);
            return NULL;
        }
        if (f->n >= CF_METRICS_MAX_SERIES - 1 && pass == 0) {
            /* Full: fold into the "other" series (the last slot). */
            free(key.p);
            for (size_t i = 0; i < f->n_labels; i++)
                v[i] = other_values[i];
            continue;
        }
        if (f->n == f->cap) {
            size_t cap = f->cap ? f->cap * 2 : 8;
            series *s = realloc(f->s, cap * sizeof(*s));
            if (!s) {
                free(key.p);
                return NULL;
            }
            f->s = s;
            f->cap = cap;
        }
        sbuf lab = {0};
        for (size_t i = 0; i < f->n_labels; i++) {
            sb_printf(&lab, "%s%s=\"", i ? "," : "", f->labels[i]);
            sb_label_value(&lab, v[i]);
            sb_puts(&lab, "\"");
        }
        series *s = &f->s[f->n];
        memset(s, 0, sizeof(*s));
        s->key = key.p ? key.p : strdup("");
        s->labels = lab.p ? lab.p : strdup("");
        if (f->n_bounds)
            s->buckets = calloc(f->n_bounds, sizeof(*s->buckets));
        if (!s->key || !s->labels || lab.failed || (f->n_bounds && !s->buckets)) {
            series_free(s);
            return NULL;
        }
        f->n++;
        return s;
    }
    return NULL;
}

void cf_metric_replace(cf_metric *f, size_t n, const char *const *values, const double *v)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->reg->mu);
    for (size_t i = 0; i < f->n; i++)
        series_free(&f->s[i]);
    f->n = 0;
    for (size_t i = 0; i < n; i++) {
        series *s = series_of(f, values + i * f->n_labels, true);
        if (s)
            s->value = v[i];
    }
    pthread_mutex_unlock(&f->reg->mu);
}

void cf_metric_inc(cf_metric *f, double by, const char *const *values)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->reg->mu);
    series *s = series_of(f, values, true);
    if (s)
        s->value += by;
    pthread_mutex_unlock(&f->reg->mu);
}

void cf_metric_set(cf_metric *f, double v, const char *const *values)
{
    if (!f)
        return;
    pthread_mutex_lock(&f->reg->mu);
    series *s = series_of(f, values, true);
    if (s)
        s->value = v;
    pthread_mutex_unlock(&f->reg->mu);
}

void cf_metric_observe(cf_metric *f, double v, const char *const *values)
{
    if (!f || isnan(v))
        return;
    pthread_mutex_lock(&f->reg->mu);
    series *s = series_of(f, values, true);
    if (s) {
        s->value += v;
        s->count++;
        for (size_t i = 0; i < f->n_bounds; i++) {
            if (v <= f->bounds[i]) {
                s->buckets[i]++;
                break;
            }
        }
    }
    pthread_mutex_unlock(&f->reg->mu);
}

double cf_metric_get(cf_metric *f, const char *const *values)
{
    if (!f)
        return 0;
    pthread_mutex_lock(&f->reg->mu);
    series *s = series_of(f, values, false);
    double v = s ? (f->type == CF_METRIC_HISTOGRAM ? (double)s->count : s->value) : 0;
    pthread_mutex_unlock(&f->reg->mu);
    return v;
}

static void render_sample(sbuf *b, const char *name, const char *suffix, const char *labels, const char *extra,
                          double v)
{
    sb_puts(b, name);
    sb_puts(b, suffix);
    if (*labels || extra) {
        sb_puts(b, "{");
        sb_puts(b, labels);
        if (extra) {
            if (*labels)
                sb_puts(b, ",");
            sb_puts(b, extra);
        }
        sb_puts(b, "}");
    }
    sb_puts(b, " ");
    sb_number(b, v);
    sb_puts(b, "\n");
}

static void render_family(sbuf *b, const cf_metric *f)
{
    static const char *const type_names[] = {"counter", "gauge", "histogram"};
    sb_printf(b, "# HELP %s ", f->name);
    /* HELP text: backslash and newline escaped. */
    for (const char *h = f->help; *h; h++)
        sb_puts(b, *h == '\\' ? "\\\\" : *h == '\n' ? "\\n" : (char[]){*h, 0});
    sb_printf(b, "\n# TYPE %s %s\n", f->name, type_names[f->type]);
    /* A family without labels always has its one series, at zero. */
    if (f->n == 0 && f->n_labels == 0 && f->type != CF_METRIC_HISTOGRAM) {
        render_sample(b, f->name, "", "", NULL, 0);
        return;
    }
    for (size_t i = 0; i < f->n; i++) {
        const series *s = &f->s[i];
        if (f->type != CF_METRIC_HISTOGRAM) {
            render_sample(b, f->name, "", s->labels, NULL, s->value);
            continue;
        }
        unsigned long long cum = 0;
        for (size_t k = 0; k < f->n_bounds; k++) {
            cum += s->buckets[k];
            sbuf le = {0};
            sb_puts(&le, "le=\"");
            sb_number(&le, f->bounds[k]);
            sb_puts(&le, "\"");
            if (!le.failed)
                render_sample(b, f->name, "_bucket", s->labels, le.p, (double)cum);
            free(le.p);
        }
        render_sample(b, f->name, "_bucket", s->labels, "le=\"+Inf\"", (double)s->count);
        render_sample(b, f->name, "_sum", s->labels, NULL, s->value);
        render_sample(b, f->name, "_count", s->labels, NULL, (double)s->count);
    }
}

char *cf_metrics_render(cf_metrics *m, size_t *len)
{
    sbuf b = {0};
    pthread_mutex_lock(&m->mu);
    for (const cf_metric *f = m->first; f; f = f->next)
        render_family(&b, f);
    pthread_mutex_unlock(&m->mu);
    if (b.failed || !b.p) {
        free(b.p);
        return NULL;
    }
    if (len)
        *len = b.len;
    return b.p;
}
