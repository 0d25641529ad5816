/* session: a Python session's cell (SPEC.md section 3.6), the pipeline's
 * side of it.  The driver (harness/session_python.py) does the restoring,
 * running and saving inside the backend; here the program is put together
 * and the driver's report becomes the result's session fields. */
#include "session_int.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cf_msgpack.h"
#include "cf_schema_json.h"
#include "cf_util.h"

#define SESSION_LOST_MAX 256 /* names listed in session_lost, each with a warning */

/* One warning diagnostic (nothing when memory runs out: it is a remark). */
/* Drops a character vsnprintf cut in two at the end of s: the wire takes
 * valid UTF-8 only, and the cut text may be the tenant's. */
static void utf8_trim_cut(char *s)
{
    size_t n = strlen(s), i = n;
    while (i > 0 && ((unsigned char)s[i - 1] & 0xC0) == 0x80)
        i--;
    if (i == 0)
        return;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (n - (i - 1) < want)
        s[i - 1] = '\0';
}

void cf_result_add_warning(cf_result *res, const char *fmt, ...)
{
    cf_diagnostic *v = realloc(res->diagnostics, (res->n_diagnostics + 1) * sizeof(*v));
    if (!v)
        return;
    res->diagnostics = v;
    memset(&v[res->n_diagnostics], 0, sizeof(*v));
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    utf8_trim_cut(msg);
    cf_diagnostic *d = &v[res->n_diagnostics];
    if (cf_str_set(&d->level, "warning") == 0 && cf_str_set(&d->message, msg) == 0) {
        res->n_diagnostics++;
        return;
    }
    free(d->level);
    free(d->message);
}

/* A session cell (SPEC 3.6): two lines naming the cell (python: base64;
 * sh: single-quoted; so no byte of it is syntax here) and the state file,
 * then the driver, which compiles (python) or evals (shell) the cell on
 * its own. */
int cf_session_program(const char *driver, size_t driver_len, const cf_request *req, cf_bytes *out)
{
    /* Room for the cell as base64 (python), or as sh quotes it: at most 4
     * bytes for each of its bytes either way. */
    size_t b64 = 4 * req->code.len + 4;
    size_t hl = driver_len;
    size_t n = b64 + strlen(req->session) + hl + 128;
    char *buf = malloc(n + 1);
    if (!buf)
        return -1;
    size_t used;
    if (req->language == CF_LANG_SHELL) {
        /* sh: the cell single-quoted, each ' as '\'' (the driver then
         * needs no base64 and no fork to read it). */
        used = (size_t)snprintf(buf, n, "__codefleet_cell='");
        for (size_t i = 0; i < req->code.len; i++) {
            if (req->code.data[i] == '\'') {
                memcpy(buf + used, "'\\''", 4);
                used += 4;
            } else {
                buf[used++] = (char)req->code.data[i];
            }
        }
        buf[used++] = '\'';
    } else {
        used = (size_t)snprintf(buf, n, "__codefleet_cell=\"");
        size_t enc_len = 0;
        char *enc = cf_base64_encode(req->code.data ? req->code.data : (const uint8_t *)"", req->code.len, &enc_len);
        if (!enc || enc_len > b64) {
            free(enc);
            free(buf);
            return -1;
        }
        memcpy(buf + used, enc, enc_len);
        used += enc_len;
        free(enc);
        buf[used++] = '"';
    }
    used += (size_t)snprintf(buf + used, n - used, "\n__codefleet_state=\"" CF_SESSION_STATE_DIR "/%s.%s\"\n",
                             req->session, cf_language_name(req->language));
    memcpy(buf + used, driver, hl);
    out->data = (uint8_t *)buf;
    out->len = used + hl;
    return 0;
}

/* One figure of the report ({"path": "figure-1.png", "png": base64}) as a
 * file of the result.  0, or -1 when the report is malformed. */
static int add_figure(cf_mp_reader *r, cf_result *res, cf_error *e)
{
    uint32_t n;
    if (cf_mp_read_map(r, 3, &n, e) < 0)
        return -1;
    char path[80] = "figure.png";
    const uint8_t *png = NULL;
    size_t png_len = 0;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *k, *s;
        size_t kl, sl;
        if (cf_mp_read_str(r, 16, &k, &kl, e) < 0)
            return -1;
        if (cf_mp_peek(r) != CF_MP_STR) {
            if (cf_mp_skip(r, 4, e) < 0)
                return -1;
            continue;
        }
        if (cf_mp_read_str(r, 1u << 20, &s, &sl, e) < 0)
            return -1;
        if (kl == 4 && memcmp(k, "path", 4) == 0 && sl > 0 && sl < 64 && !memchr(s, '/', sl))
            cf_sanitize_text((const char *)s, sl, false, path, sizeof(path));
        else if (kl == 3 && memcmp(k, "png", 3) == 0) {
            png = s;
            png_len = sl;
        }
    }
    cf_bytes data = {0};
    cf_error derr;
    if (!png || cf_base64_decode((const char *)png, png_len, png_len, &data, &derr) < 0)
        return 0; /* not a figure: left out */
    cf_out_file *v = realloc(res->files, (res->n_files + 1) * sizeof(*v));
    char *name = v ? cf_strdup(path) : NULL;
    if (v)
        res->files = v;
    if (!name) {
        free(data.data);
        return 0;
    }
    v[res->n_files++] = (cf_out_file){.path = name, .size = (int64_t)data.len, .content = data};
    return 0;
}

/* The driver's report (its output.json: cell, restored, lost, lost_why,
 * error, value, figures) becomes the result's session fields, its output
 * (a last expression's JSON value) and files (the figures). */
void cf_session_outcome(const cf_request *req, cf_result *res)
{
    cf_mp_reader r;
    cf_error e;
    cf_error_clear(&e);
    uint32_t n = 0;
    cf_mp_reader_init(&r, res->output.data, res->output.len, NULL);
    if (!res->output.len || cf_mp_read_map(&r, 1, &n, &e) < 0)
        n = 0;
    char **why = NULL;
    size_t n_why = 0;
    char error[600] = "";
    bool reported = false; /* the driver got to its report */
    cf_bytes value = {0};  /* the last expression's value, msgpack */
    int64_t more = 0;      /* lost names it did not list */
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *k;
        size_t kl;
        if (cf_mp_read_str(&r, 64, &k, &kl, &e) < 0)
            break;
        char key[65];
        memcpy(key, k, kl);
        key[kl] = '\0';
        cf_mp_kind kind = cf_mp_peek(&r);
        if (strcmp(key, "cell") == 0 && kind == CF_MP_UINT) {
            int64_t v;
            if (cf_mp_read_int(&r, &v, &e) == 0 && v > 0)
                res->session_cell = v;
            reported = true;
        } else if (strcmp(key, "lost_more") == 0 && kind == CF_MP_UINT) {
            if (cf_mp_read_int(&r, &more, &e) < 0)
                more = 0;
        } else if (strcmp(key, "restored") == 0 && kind == CF_MP_BOOL) {
            cf_mp_read_bool(&r, &res->session_restored, &e);
        } else if ((strcmp(key, "lost") == 0 || strcmp(key, "lost_why") == 0) && kind == CF_MP_ARRAY) {
            bool names = key[4] == '\0';
            uint32_t m;
            if (cf_mp_read_array(&r, 2, &m, &e) < 0)
                break;
            char **v = m ? calloc(m, sizeof(char *)) : NULL;
            size_t got = 0;
            for (uint32_t j = 0; j < m; j++) {
                const uint8_t *s;
                size_t sl;
                if (cf_mp_read_str(&r, 4096, &s, &sl, &e) < 0)
                    break;
                if (v && (v[got] = malloc(sl + 1))) {
                    memcpy(v[got], s, sl);
                    v[got++][sl] = '\0';
                }
            }
            if (names) {
                res->session_lost = v;
                res->n_session_lost = got;
            } else {
                why = v;
                n_why = got;
            }
        } else if (strcmp(key, "value") == 0) {
            const uint8_t *at = r.p;
            if (cf_mp_skip(&r, 2, &e) < 0)
                break;
            free(value.data);
            value = (cf_bytes){0};
            if (cf_bytes_set(&value, at, (size_t)(r.p - at)) < 0)
                value = (cf_bytes){0};
        } else if (strcmp(key, "figures") == 0 && kind == CF_MP_ARRAY) {
            uint32_t m;
            if (cf_mp_read_array(&r, 2, &m, &e) < 0)
                break;
            uint32_t j = 0;
            while (j < m && add_figure(&r, res, &e) == 0)
                j++;
            if (j < m)
                break;
        } else if (strcmp(key, "figures_dropped") == 0 && kind == CF_MP_UINT) {
            int64_t dropped = 0;
            if (cf_mp_read_int(&r, &dropped, &e) == 0 && dropped > 0)
                cf_result_add_warning(res, "session '%s': %" PRId64 " figure(s) left out: the figures of a cell "
                                           "come back up to 384 KiB", req->session, dropped);
        } else if (strcmp(key, "error") == 0 && kind == CF_MP_STR) {
            const uint8_t *s;
            size_t sl;
            if (cf_mp_read_str(&r, 4096, &s, &sl, &e) == 0)
                cf_sanitize_text((const char *)s, sl, false, error, sizeof(error));
        } else if (cf_mp_skip(&r, 2, &e) < 0) {
            break;
        }
    }
    /* The report is the cell's to write: a few hundred names are told one
     * by one, the rest in one line (a result must stay a Kafka message). */
    if (res->n_session_lost > SESSION_LOST_MAX) {
        more += (int64_t)(res->n_session_lost - SESSION_LOST_MAX);
        for (size_t i = SESSION_LOST_MAX; i < res->n_session_lost; i++)
            free(res->session_lost[i]);
        res->n_session_lost = SESSION_LOST_MAX;
    }
    if (more > 0)
        cf_result_add_warning(res, "session '%s': %" PRId64 " more names were not saved (not listed)", req->session,
                              more);
    for (size_t i = 0; i < res->n_session_lost; i++)
        cf_result_add_warning(res, "session '%s': '%s' was not saved: %s", req->session, res->session_lost[i],
                         i < n_why && why[i] ? why[i] : "it cannot be pickled");
    for (size_t i = 0; i < n_why; i++)
        free(why[i]);
    free(why);
    free(res->output.data);
    res->output = value;
    if (error[0]) {
        res->status = CF_STATUS_FAILED;
        cf_result_set_reason(res, "session '%s': %s", req->session, error);
    } else if (!reported && res->status == CF_STATUS_SUCCESS) {
        /* It exited 0 without the driver's last word (os._exit, exec, a
         * replaced EXIT trap): its names were not saved, so neither are its
         * files (a cell is all or nothing). */
        res->status = CF_STATUS_FAILED;
        cf_result_set_reason(res, "session '%s': the cell ended without the session driver (os._exit, exec, a "
                                  "replaced EXIT trap, or a report over the output cap): nothing of it was saved",
                             req->session);
    }
}
