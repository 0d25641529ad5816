/* cf_schema_json: the JSON view of schema v1 (SPEC.md, "JSON form").
 *
 * Same field names as the msgpack form.  Byte fields are JSON strings when
 * their bytes are valid UTF-8, {"base64": "..."} otherwise.  input/output
 * are any JSON value, converted to/from one msgpack value; when a msgpack
 * value has no JSON equivalent (ext, non-string keys, integers beyond
 * int64) the raw msgpack travels as "input_msgpack"/"output_msgpack":
 * {"base64": ...} so nothing is lost.
 */
#include "cf_schema_json.h"

#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cf_schema_int.h"
#include "cf_util.h"

#define JPATH_MAX 96

/* ---- base64 (jansson has none) ------------------------------------------ */

static const char b64_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *cf_base64_encode(const uint8_t *data, size_t len, size_t *outlen)
{
    if (len > (SIZE_MAX - 1) / 4 * 3 - 3)
        return NULL;
    size_t n = (len + 2) / 3 * 4;
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)data[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)data[i + 1] << 8;
        if (i + 2 < len)
            v |= data[i + 2];
        out[o++] = b64_alphabet[(v >> 18) & 63];
        out[o++] = b64_alphabet[(v >> 12) & 63];
        out[o++] = i + 1 < len ? b64_alphabet[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? b64_alphabet[v & 63] : '=';
    }
    out[o] = '\0';
    if (outlen)
        *outlen = o;
    return out;
}

static int b64_val(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int cf_base64_decode(const char *s, size_t slen, size_t max, cf_bytes *out, cf_error *err)
{
    if (slen % 4 != 0)
        return cf_error_set(err, CF_E_INVALID, "invalid base64: length is not a multiple of 4");
    size_t pad = 0;
    if (slen >= 1 && s[slen - 1] == '=')
        pad++;
    if (slen >= 2 && s[slen - 2] == '=')
        pad++;
    size_t n = slen / 4 * 3 - pad;
    if (n > max)
        return cf_error_set(err, CF_E_LIMIT, "base64 value of %zu bytes exceeds the limit of %zu", n, max);
    uint8_t *d = malloc(n + 1);
    if (!d)
        return cf_error_set(err, CF_E_NOMEM, "out of memory decoding base64");
    size_t o = 0;
    for (size_t i = 0; i < slen; i += 4) {
        uint32_t v = 0;
        for (size_t k = 0; k < 4; k++) {
            char c = s[i + k];
            int x;
            if (c == '=' && i + 4 == slen && k >= 4 - pad) {
                x = 0;
            } else if ((x = b64_val(c)) < 0) {
                free(d);
                return cf_error_set(err, CF_E_INVALID, "invalid base64 character at offset %zu", i + k);
            }
            v = (v << 6) | (uint32_t)x;
        }
        size_t take = i + 4 == slen ? 3 - pad : 3;
        if (take >= 1)
            d[o++] = (uint8_t)(v >> 16);
        if (take >= 2)
            d[o++] = (uint8_t)(v >> 8);
        if (take >= 3)
            d[o++] = (uint8_t)v;
    }
    d[o] = '\0';
    free(out->data);
    out->data = d;
    out->len = o;
    return 0;
}

/* ---- msgpack <-> JSON values ------------------------------------------- */

static json_t *b64_object(const uint8_t *data, size_t len)
{
    char *b = cf_base64_encode(data, len, NULL);
    if (!b)
        return NULL;
    json_t *o = json_pack("{s:s}", "base64", b);
    free(b);
    return o;
}

static json_t *mp_to_json(cf_mp_reader *r, unsigned depth, cf_error *err)
{
    const uint8_t *s;
    size_t len;
    json_t *j = NULL;
    switch (cf_mp_peek(r)) {
    case CF_MP_END: cf_error_set(err, CF_E_INVALID, "truncated value"); return NULL;
    case CF_MP_NIL: r->p++; return json_null();
    case CF_MP_BOOL: {
        bool b;
        cf_mp_read_bool(r, &b, err);
        return json_boolean(b);
    }
    case CF_MP_UINT:
    case CF_MP_INT: {
        int64_t v;
        if (cf_mp_read_int(r, &v, err) < 0)
            return NULL;
        j = json_integer((json_int_t)v);
        break;
    }
    case CF_MP_FLOAT: {
        double v;
        if (cf_mp_read_float(r, &v, err) < 0)
            return NULL;
        if (!isfinite(v)) {
            cf_error_set(err, CF_E_INVALID, "non-finite float has no JSON form");
            return NULL;
        }
        j = json_real(v);
        break;
    }
    case CF_MP_STR:
        if (cf_mp_read_str(r, r->lim->max_bin_bytes, &s, &len, err) < 0)
            return NULL;
        if (!cf_utf8_valid(s, len)) {
            cf_error_set(err, CF_E_INVALID, "string is not valid UTF-8");
            return NULL;
        }
        j = json_stringn((const char *)s, len);
        break;
    case CF_MP_BIN:
        if (cf_mp_read_bin(r, r->lim->max_bin_bytes, &s, &len, err) < 0)
            return NULL;
        j = b64_object(s, len);
        break;
    case CF_MP_ARRAY: {
        uint32_t n;
        if (cf_mp_read_array(r, depth, &n, err) < 0)
            return NULL;
        if (!(j = json_array()))
            break;
        for (uint32_t i = 0; i < n; i++) {
            json_t *e = mp_to_json(r, depth + 1, err);
            if (!e || json_array_append_new(j, e) < 0) {
                json_decref(j);
                return NULL;
            }
        }
        return j;
    }
    case CF_MP_MAP: {
        uint32_t n;
        if (cf_mp_read_map(r, depth, &n, err) < 0)
            return NULL;
        if (!(j = json_object()))
            break;
        for (uint32_t i = 0; i < n; i++) {
            if (cf_mp_peek(r) != CF_MP_STR) {
                json_decref(j);
                cf_error_set(err, CF_E_INVALID, "map key is not a string (no JSON form)");
                return NULL;
            }
            if (cf_mp_read_str(r, r->lim->max_str_bytes, &s, &len, err) < 0) {
                json_decref(j);
                return NULL;
            }
            if (!cf_utf8_valid(s, len) || memchr(s, 0, len)) {
                json_decref(j);
                cf_error_set(err, CF_E_INVALID, "map key is not valid UTF-8 without NUL");
                return NULL;
            }
            char *key = cf_strndup((const char *)s, len);
            json_t *e = key ? mp_to_json(r, depth + 1, err) : NULL;
            if (!e || json_object_set_new(j, key, e) < 0) {
                free(key);
                json_decref(j);
                if (!e && key)
                    return NULL;
                cf_error_set(err, CF_E_NOMEM, "out of memory");
                return NULL;
            }
            free(key);
        }
        return j;
    }
    case CF_MP_EXT:
        cf_error_set(err, CF_E_INVALID, "msgpack ext values have no JSON form");
        return NULL;
    default:
        cf_error_set(err, CF_E_INVALID, "invalid msgpack byte 0xc1");
        return NULL;
    }
    if (!j)
        cf_error_set(err, CF_E_NOMEM, "out of memory");
    return j;
}

json_t *cf_msgpack_to_json(const void *buf, size_t len, cf_error *err)
{
    if (cf_msgpack_validate(buf, len, NULL, err) < 0)
        return NULL;
    cf_mp_reader r;
    cf_mp_reader_init(&r, buf, len, NULL);
    return mp_to_json(&r, 1, err);
}

static int j2m(msgpack_packer *pk, const json_t *v, unsigned depth, cf_error *err)
{
    if (depth > cf_decode_limits_default.max_depth)
        return cf_error_set(err, CF_E_LIMIT, "nesting deeper than %u levels", cf_decode_limits_default.max_depth);
    int rc = 0;
    switch (json_typeof(v)) {
    case JSON_NULL: rc = msgpack_pack_nil(pk); break;
    case JSON_TRUE: rc = msgpack_pack_true(pk); break;
    case JSON_FALSE: rc = msgpack_pack_false(pk); break;
    case JSON_INTEGER: rc = msgpack_pack_int64(pk, (int64_t)json_integer_value(v)); break;
    case JSON_REAL: rc = msgpack_pack_double(pk, json_real_value(v)); break;
    case JSON_STRING:
        rc = msgpack_pack_str_with_body(pk, json_string_value(v), json_string_length(v));
        break;
    case JSON_ARRAY: {
        size_t n = json_array_size(v);
        if (n > cf_decode_limits_default.max_elements)
            return cf_error_set(err, CF_E_LIMIT, "array of %zu entries exceeds the limit", n);
        rc = msgpack_pack_array(pk, n);
        for (size_t i = 0; rc == 0 && i < n; i++)
            if (j2m(pk, json_array_get(v, i), depth + 1, err) < 0)
                return -1;
        break;
    }
    case JSON_OBJECT: {
        size_t n = json_object_size(v);
        if (n > cf_decode_limits_default.max_elements)
            return cf_error_set(err, CF_E_LIMIT, "object of %zu entries exceeds the limit", n);
        rc = msgpack_pack_map(pk, n);
        const char *k;
        json_t *e;
        json_object_foreach((json_t *)v, k, e) {
            if (rc == 0)
                rc = msgpack_pack_str_with_body(pk, k, strlen(k));
            if (rc == 0 && j2m(pk, e, depth + 1, err) < 0)
                return -1;
        }
        break;
    }
    }
    if (rc != 0)
        return cf_error_set(err, CF_E_NOMEM, "out of memory converting JSON to msgpack");
    return 0;
}

int cf_json_to_msgpack(const json_t *value, cf_bytes *out, cf_error *err)
{
    out->data = NULL;
    out->len = 0;
    if (!value)
        return cf_error_set(err, CF_E_INVALID, "no JSON value");
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (j2m(&pk, value, 1, err) < 0) {
        msgpack_sbuffer_destroy(&sb);
        return -1;
    }
    out->len = sb.size;
    out->data = (uint8_t *)msgpack_sbuffer_release(&sb);
    return 0;
}

/* ---- struct -> JSON ----------------------------------------------------- */

/* Sticky-failure builder: set_* record ENOMEM in *ok and go on. */
static void jset(json_t *o, const char *k, json_t *v, bool *ok)
{
    if (!v || json_object_set_new(o, k, v) < 0)
        *ok = false;
}

static void jset_str(json_t *o, const char *k, const char *s, bool *ok)
{
    if (s)
        jset(o, k, json_string(s), ok);
}

static void jset_int(json_t *o, const char *k, int64_t v, bool *ok)
{
    if (v)
        jset(o, k, json_integer((json_int_t)v), ok);
}

static json_t *bytes_json(const cf_bytes *b)
{
    static const uint8_t empty;
    const uint8_t *d = b->data ? b->data : &empty;
    /* NUL is valid UTF-8 but many JSON consumers choke on \u0000. */
    if (cf_utf8_valid(d, b->len) && !memchr(d, 0, b->len))
        return json_stringn((const char *)d, b->len);
    return b64_object(d, b->len);
}

static json_t *strv_json(char *const *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_string(v[i])) < 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static json_t *strmap_json(const cf_strmap_entry *m, size_t n)
{
    json_t *o = json_object();
    for (size_t i = 0; o && i < n; i++)
        if (json_object_set_new(o, m[i].key, json_string(m[i].value)) < 0) {
            json_decref(o);
            return NULL;
        }
    return o;
}

/* input/output: JSON if it has a JSON form, raw msgpack otherwise. */
static void jset_value(json_t *o, const char *k, const char *rawk, const cf_bytes *v, bool *ok)
{
    if (v->len == 0)
        return;
    json_t *j = cf_msgpack_to_json(v->data, v->len, NULL);
    if (j)
        jset(o, k, j, ok);
    else
        jset(o, rawk, b64_object(v->data, v->len), ok);
}

json_t *cf_request_to_json(const cf_request *req)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    bool ok = true;
    jset_int(o, "v", CF_SCHEMA_VERSION, &ok);
    jset_str(o, "id", req->id, &ok);
    if (req->language != CF_LANG_NONE)
        jset_str(o, "language", cf_language_name(req->language), &ok);
    jset_str(o, "backend", req->backend, &ok);
    if (req->code.data)
        jset(o, "code", bytes_json(&req->code), &ok);
    if (req->argc)
        jset(o, "argv", strv_json(req->argv, req->argc), &ok);
    if (req->module.len)
        jset(o, "module", bytes_json(&req->module), &ok);
    if (req->stdin_data.len)
        jset(o, "stdin", bytes_json(&req->stdin_data), &ok);
    jset_value(o, "input", "input_msgpack", &req->input, &ok);
    if (req->n_env)
        jset(o, "env", strmap_json(req->env, req->n_env), &ok);
    if (req->n_files) {
        json_t *f = json_object();
        for (size_t i = 0; f && i < req->n_files; i++)
            jset(f, req->files[i].path, bytes_json(&req->files[i].content), &ok);
        jset(o, "files", f, &ok);
    }
    const cf_policy *p = &req->policy;
    json_t *pol = json_object(), *fs = json_object();
    if (pol && fs) {
        if (p->fs_mode != CF_FS_UNSPECIFIED)
            jset_str(fs, "mode", cf_fs_mode_name(p->fs_mode), &ok);
        if (p->n_fs_read_only)
            jset(fs, "read_only", strv_json(p->fs_read_only, p->n_fs_read_only), &ok);
        if (p->n_fs_read_write)
            jset(fs, "read_write", strv_json(p->fs_read_write, p->n_fs_read_write), &ok);
        if (p->network != CF_NET_UNSPECIFIED)
            jset_str(pol, "network", cf_network_name(p->network), &ok);
        if (json_object_size(fs))
            jset(pol, "filesystem", json_incref(fs), &ok);
        if (p->env_allow_set)
            jset(pol, "env_allow", strv_json(p->env_allow, p->n_env_allow), &ok);
        jset_int(pol, "timeout_us", p->timeout_us, &ok);
        jset_int(pol, "cpu_time_us", p->cpu_time_us, &ok);
        jset_int(pol, "memory_bytes", p->memory_bytes, &ok);
        jset_int(pol, "max_processes", p->max_processes, &ok);
        jset_int(pol, "max_stdout_bytes", p->max_stdout_bytes, &ok);
        jset_int(pol, "max_stderr_bytes", p->max_stderr_bytes, &ok);
        jset_int(pol, "max_file_size_bytes", p->max_file_size_bytes, &ok);
        jset_int(pol, "compile_timeout_us", p->compile_timeout_us, &ok);
        jset_int(pol, "compile_memory_bytes", p->compile_memory_bytes, &ok);
        if (json_object_size(pol))
            jset(o, "policy", json_incref(pol), &ok);
    } else {
        ok = false;
    }
    json_decref(fs);
    json_decref(pol);
    jset_str(o, "workspace", req->workspace, &ok);
    jset_str(o, "thread", req->thread, &ok);
    jset_str(o, "identity", req->identity, &ok);
    jset_str(o, "reply_to", req->reply_to, &ok);
    jset_str(o, "image", req->image, &ok);
    jset_int(o, "deadline_us", req->deadline_us, &ok);
    jset_int(o, "created_us", req->created_us, &ok);
    if (req->n_trace)
        jset(o, "trace", strmap_json(req->trace, req->n_trace), &ok);
    if (req->harness == CF_HARNESS_FUNCTION)
        jset_str(o, "harness", "function", &ok);
    if (req->n_compile_flags)
        jset(o, "compile_flags", strv_json(req->compile_flags, req->n_compile_flags), &ok);
    if (req->n_cases) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < req->n_cases; i++) {
            const cf_case *c = &req->cases[i];
            json_t *co = json_object();
            if (!co) {
                ok = false;
                break;
            }
            jset_str(co, "name", c->name, &ok);
            if (c->stdin_data.len)
                jset(co, "stdin", bytes_json(&c->stdin_data), &ok);
            jset_value(co, "input", "input_msgpack", &c->input, &ok);
            if (c->argc)
                jset(co, "argv", strv_json(c->argv, c->argc), &ok);
            if (c->has_expect)
                jset(co, "expect_stdout", bytes_json(&c->expect_stdout), &ok);
            if (json_array_append_new(a, co) < 0)
                ok = false;
        }
        jset(o, "cases", a, &ok);
    }
    if (req->stop_on_failure)
        jset(o, "stop_on_failure", json_true(), &ok);
    if (req->n_collect)
        jset(o, "collect", strv_json(req->collect, req->n_collect), &ok);
    if (req->stream)
        jset(o, "stream", json_true(), &ok);
    if (req->notify_start)
        jset(o, "notify_start", json_true(), &ok);
    if (req->workspace_op) {
        const cf_workspace_op *wo = req->workspace_op;
        json_t *oj = json_object();
        if (oj) {
            jset_str(oj, "op", cf_ws_op_name(wo->op), &ok);
            jset_str(oj, "path", wo->path, &ok);
            jset_str(oj, "pattern", wo->pattern, &ok);
            if (wo->has_content)
                jset(oj, "content", bytes_json(&wo->content), &ok);
            if (wo->old_str.data)
                jset(oj, "old_str", bytes_json(&wo->old_str), &ok);
            if (wo->has_new_str)
                jset(oj, "new_str", bytes_json(&wo->new_str), &ok);
            if (wo->has_insert_line)
                jset(oj, "insert_line", json_integer((json_int_t)wo->insert_line), &ok);
            if (wo->has_expected_revision)
                jset(oj, "expected_revision", json_integer((json_int_t)wo->expected_revision), &ok);
            if (wo->has_first_line)
                jset(oj, "first_line", json_integer((json_int_t)wo->first_line), &ok);
            if (wo->has_last_line)
                jset(oj, "last_line", json_integer((json_int_t)wo->last_line), &ok);
        }
        jset(o, "workspace_op", oj, &ok);
    }
    jset_str(o, "session", req->session, &ok);
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *diags_json(const cf_diagnostic *v, size_t n, bool with_children, bool *ok)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) {
        const cf_diagnostic *dg = &v[i];
        json_t *d = json_object();
        if (!d) {
            *ok = false;
            break;
        }
        jset_str(d, "level", dg->level, ok);
        jset_str(d, "message", dg->message, ok);
        jset_str(d, "file", dg->file, ok);
        jset_int(d, "line", dg->line, ok);
        jset_int(d, "column", dg->column, ok);
        jset_str(d, "code", dg->code, ok);
        jset_int(d, "end_line", dg->end_line, ok);
        jset_int(d, "end_column", dg->end_column, ok);
        if (with_children && dg->n_children)
            jset(d, "children", diags_json(dg->children, dg->n_children, false, ok), ok);
        if (json_array_append_new(a, d) < 0)
            *ok = false;
    }
    return a;
}

json_t *cf_chunk_to_json(const cf_chunk *c)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    bool ok = true;
    jset_int(o, "v", CF_SCHEMA_VERSION, &ok);
    jset_str(o, "id", c->id, &ok);
    jset_str(o, "run", c->run, &ok);
    if (c->kind == CF_CHUNK_START) {
        jset_str(o, "event", "start", &ok);
        jset_str(o, "worker", c->worker, &ok);
        jset_int(o, "at_us", c->at_us, &ok);
        goto out;
    }
    jset(o, "seq", json_integer((json_int_t)c->seq), &ok);
    jset_str(o, "stream", cf_chunk_stream_name(c->stream), &ok);
    jset(o, "offset", json_integer((json_int_t)c->offset), &ok);
    jset(o, "data", bytes_json(&c->data), &ok);
    jset_int(o, "at_us", c->at_us, &ok);
out:
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *cf_result_to_json(const cf_result *res)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    bool ok = true;
    jset_int(o, "v", CF_SCHEMA_VERSION, &ok);
    jset_str(o, "id", res->id, &ok);
    jset_str(o, "status", cf_status_name(res->status), &ok);
    if (res->has_exit_code)
        jset(o, "exit_code", json_integer(res->exit_code), &ok);
    jset_int(o, "signal", res->signal, &ok);
    if (res->stdout_data.len)
        jset(o, "stdout", bytes_json(&res->stdout_data), &ok);
    if (res->stderr_data.len)
        jset(o, "stderr", bytes_json(&res->stderr_data), &ok);
    if (res->stdout_truncated)
        jset(o, "stdout_truncated", json_true(), &ok);
    if (res->stderr_truncated)
        jset(o, "stderr_truncated", json_true(), &ok);
    jset_value(o, "output", "output_msgpack", &res->output, &ok);
    if (res->n_diagnostics)
        jset(o, "diagnostics", diags_json(res->diagnostics, res->n_diagnostics, true, &ok), &ok);
    jset_int(o, "wall_time_us", res->wall_time_us, &ok);
    jset_int(o, "cpu_time_us", res->cpu_time_us, &ok);
    jset_int(o, "peak_memory_bytes", res->peak_memory_bytes, &ok);
    json_t *m = json_object();
    if (m) {
        jset_str(m, "backend", res->meta.backend, &ok);
        jset_str(m, "isolation", res->meta.isolation, &ok);
        jset_str(m, "language", res->meta.language, &ok);
        jset_str(m, "worker", res->meta.worker, &ok);
        jset_str(m, "identity", res->meta.identity, &ok);
        jset_int(m, "attempt", res->meta.attempt, &ok);
        if (res->meta.replay)
            jset(m, "replay", json_true(), &ok);
        jset_str(m, "toolchain", res->meta.toolchain, &ok);
        jset_str(m, "sandbox", res->meta.sandbox, &ok);
        jset_str(m, "run", res->meta.run, &ok);
        jset_str(m, "traceparent", res->meta.traceparent, &ok);
        if (json_object_size(m))
            jset(o, "metadata", json_incref(m), &ok);
        json_decref(m);
    } else {
        ok = false;
    }
    jset_str(o, "reason", res->reason, &ok);
    jset_str(o, "reply_to_error", res->reply_to_error, &ok);
    jset_int(o, "workspace_revision", res->workspace_revision, &ok);
    if (res->n_changed_paths)
        jset(o, "changed_paths", strv_json(res->changed_paths, res->n_changed_paths), &ok);
    if (res->workspace_conflict)
        jset(o, "workspace_conflict", json_true(), &ok);
    jset_str(o, "checkpoint_id", res->checkpoint_id, &ok);
    if (res->checkpoint_conflict)
        jset(o, "checkpoint_conflict", json_true(), &ok);
    jset_int(o, "finished_us", res->finished_us, &ok);
    if (res->compile.present) {
        json_t *c = json_object();
        if (c) {
            jset(c, "cached", json_boolean(res->compile.cached), &ok);
            jset_int(c, "wall_time_us", res->compile.wall_time_us, &ok);
            jset_int(c, "cpu_time_us", res->compile.cpu_time_us, &ok);
            jset_int(c, "peak_memory_bytes", res->compile.peak_memory_bytes, &ok);
        }
        jset(o, "compile", c, &ok);
    }
    if (res->n_cases) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < res->n_cases; i++) {
            const cf_case_result *c = &res->cases[i];
            json_t *co = json_object();
            if (!co) {
                ok = false;
                break;
            }
            jset_str(co, "name", c->name, &ok);
            jset_str(co, "status", cf_status_name(c->status), &ok);
            if (c->has_exit_code)
                jset(co, "exit_code", json_integer(c->exit_code), &ok);
            jset_int(co, "signal", c->signal, &ok);
            if (c->stdout_data.len)
                jset(co, "stdout", bytes_json(&c->stdout_data), &ok);
            if (c->stderr_data.len)
                jset(co, "stderr", bytes_json(&c->stderr_data), &ok);
            if (c->stdout_truncated)
                jset(co, "stdout_truncated", json_true(), &ok);
            if (c->stderr_truncated)
                jset(co, "stderr_truncated", json_true(), &ok);
            jset_value(co, "output", "output_msgpack", &c->output, &ok);
            jset_int(co, "wall_time_us", c->wall_time_us, &ok);
            jset_int(co, "cpu_time_us", c->cpu_time_us, &ok);
            jset_int(co, "peak_memory_bytes", c->peak_memory_bytes, &ok);
            if (c->match)
                jset(co, "match", json_boolean(c->match > 0), &ok);
            jset_str(co, "reason", c->reason, &ok);
            if (json_array_append_new(a, co) < 0)
                ok = false;
        }
        jset(o, "cases", a, &ok);
    }
    if (res->n_files) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < res->n_files; i++) {
            const cf_out_file *f = &res->files[i];
            json_t *fo = json_object();
            if (!fo) {
                ok = false;
                break;
            }
            jset_str(fo, "path", f->path, &ok);
            jset(fo, "size", json_integer(f->size), &ok);
            if (!f->listed)
                jset(fo, "content", bytes_json(&f->content), &ok);
            if (f->truncated)
                jset(fo, "truncated", json_true(), &ok);
            if (json_array_append_new(a, fo) < 0)
                ok = false;
        }
        jset(o, "files", a, &ok);
    }
    if (res->files_truncated)
        jset(o, "files_truncated", json_true(), &ok);
    jset_int(o, "chunks", res->chunks, &ok);
    jset_int(o, "session_cell", res->session_cell, &ok);
    if (res->session_restored)
        jset(o, "session_restored", json_true(), &ok);
    if (res->n_session_lost)
        jset(o, "session_lost", strv_json(res->session_lost, res->n_session_lost), &ok);
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* ---- JSON -> struct ----------------------------------------------------- */

/* Optional members: absent or null leave *out alone. */
static const json_t *jget(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    return json_is_null(v) ? NULL : v;
}

static int jstr(const json_t *o, const char *parent, const char *k, char **out, cf_error *err)
{
    const json_t *v = jget(o, k);
    char path[JPATH_MAX];
    cf_field_path(path, sizeof(path), parent, k);
    return v ? cf_json_str_of(v, path, out, err) : 0;
}

static int jnonneg(const json_t *o, const char *parent, const char *k, int64_t *out, cf_error *err)
{
    const json_t *v = jget(o, k);
    if (!v)
        return 0;
    char path[JPATH_MAX];
    cf_field_path(path, sizeof(path), parent, k);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return cf_error_set(err, CF_E_INVALID, "%s: expected non-negative integer", path);
    *out = (int64_t)json_integer_value(v);
    return 0;
}

static int jbool(const json_t *o, const char *k, bool *out, cf_error *err)
{
    const json_t *v = jget(o, k);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return cf_error_set(err, CF_E_INVALID, "%s: expected bool", k);
    *out = json_is_true(v);
    return 0;
}

static int jbytes_of(const json_t *v, const char *path, cf_bytes *out, cf_error *err)
{
    size_t max = cf_decode_limits_default.max_bin_bytes;
    if (json_is_string(v)) {
        size_t len = json_string_length(v);
        if (len > max)
            return cf_error_set(err, CF_E_LIMIT, "%s: %zu bytes exceed the limit of %zu", path, len, max);
        if (cf_bytes_set(out, json_string_value(v), len) < 0)
            return cf_error_set(err, CF_E_NOMEM, "%s: out of memory", path);
        return 0;
    }
    const json_t *b = json_is_object(v) && json_object_size(v) == 1 ? json_object_get(v, "base64") : NULL;
    if (!json_is_string(b))
        return cf_error_set(err, CF_E_INVALID, "%s: expected string or {\"base64\": string}", path);
    if (cf_base64_decode(json_string_value(b), json_string_length(b), max, out, err) < 0)
        return cf_error_wrap(err, "%s", path);
    return 0;
}

static int jbytes(const json_t *o, const char *k, cf_bytes *out, cf_error *err)
{
    const json_t *v = jget(o, k);
    return v ? jbytes_of(v, k, out, err) : 0;
}

/* An array (or object) member with at most max_elements entries: allocates
 * that many zeroed elements of elsize bytes (one when empty). */
static void *jlist(const json_t *v, const char *path, bool object, const char *what, size_t elsize, size_t *n,
                   cf_error *err)
{
    if (object ? !json_is_object(v) : !json_is_array(v)) {
        cf_error_set(err, CF_E_INVALID, "%s: expected %s", path, what);
        return NULL;
    }
    *n = object ? json_object_size(v) : json_array_size(v);
    if (*n > cf_decode_limits_default.max_elements) {
        cf_error_set(err, CF_E_LIMIT, "%s: %zu entries exceed the limit", path, *n);
        return NULL;
    }
    void *a = calloc(*n ? *n : 1, elsize);
    if (!a)
        cf_error_set(err, CF_E_NOMEM, "%s: out of memory", path);
    return a;
}

static int jstrv(const json_t *o, const char *parent, const char *k, char ***out, size_t *n_out, bool *set,
                 cf_error *err)
{
    const json_t *v = jget(o, k);
    if (!v)
        return 0;
    char path[JPATH_MAX];
    cf_field_path(path, sizeof(path), parent, k);
    size_t n;
    char **a = jlist(v, path, false, "array of strings", sizeof(*a), &n, err);
    if (!a)
        return -1;
    *out = a;
    *n_out = n;
    if (set)
        *set = true;
    for (size_t i = 0; i < n; i++) {
        char ip[JPATH_MAX + 32];
        snprintf(ip, sizeof(ip), "%s[%zu]", path, i);
        if (cf_json_str_of(json_array_get(v, i), ip, &a[i], err) < 0)
            return -1;
    }
    return 0;
}

static int jstrmap(const json_t *o, const char *k, cf_strmap_entry **out, size_t *n_out, cf_error *err)
{
    const json_t *v = jget(o, k);
    if (!v)
        return 0;
    size_t n;
    cf_strmap_entry *m = jlist(v, k, true, "object of strings", sizeof(*m), &n, err);
    if (!m)
        return -1;
    *out = m;
    *n_out = n;
    size_t i = 0;
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)v, key, val) {
        char ip[JPATH_MAX + 32];
        snprintf(ip, sizeof(ip), "%s[%zu]", k, i);
        if (cf_str_set(&m[i].key, key) < 0)
            return cf_error_set(err, CF_E_NOMEM, "%s: out of memory", ip);
        if (cf_json_str_of(val, ip, &m[i].value, err) < 0)
            return -1;
        i++;
    }
    return 0;
}

/* input/output: a JSON value, or the raw msgpack escape. */
static int jvalue(const json_t *o, const char *k, const char *rawk, cf_bytes *out, cf_error *err)
{
    const json_t *v = json_object_get(o, k); /* null is a value here */
    const json_t *raw = jget(o, rawk);
    if (v && raw)
        return cf_error_set(err, CF_E_INVALID, "%s: give either %s or %s", k, k, rawk);
    if (raw) {
        if (jbytes_of(raw, rawk, out, err) < 0)
            return -1;
        return 0;
    }
    if (!v)
        return 0;
    if (cf_json_to_msgpack(v, out, err) < 0)
        return cf_error_wrap(err, "%s", k);
    return 0;
}

static int workspace_op_from_json(const json_t *wo, cf_request *r, cf_error *err)
{
    if (!wo)
        return 0;
    if (!json_is_object(wo))
        return cf_error_set(err, CF_E_INVALID, "workspace_op: expected object");
    cf_workspace_op *op = r->workspace_op = calloc(1, sizeof(*op));
    if (!op)
        return cf_error_set(err, CF_E_NOMEM, "workspace_op: out of memory");
    const json_t *name = jget(wo, "op");
    if (name && (!json_is_string(name) || cf_ws_op_parse(json_string_value(name), &op->op) < 0))
        return cf_error_set(err, CF_E_INVALID, "workspace_op.op: unknown value (expected one of list, read, "
                                               "write, delete, grep, str_replace, insert, apply_patch)");
    op->has_content = jget(wo, "content") != NULL;
    op->has_new_str = jget(wo, "new_str") != NULL;
    op->has_insert_line = jget(wo, "insert_line") != NULL;
    op->has_expected_revision = jget(wo, "expected_revision") != NULL;
    op->has_first_line = jget(wo, "first_line") != NULL;
    op->has_last_line = jget(wo, "last_line") != NULL;
    if (jstr(wo, "workspace_op", "path", &op->path, err) < 0 ||
        jstr(wo, "workspace_op", "pattern", &op->pattern, err) < 0 ||
        jbytes(wo, "content", &op->content, err) < 0 || jbytes(wo, "old_str", &op->old_str, err) < 0 ||
        jbytes(wo, "new_str", &op->new_str, err) < 0 ||
        jnonneg(wo, "workspace_op", "insert_line", &op->insert_line, err) < 0 ||
        jnonneg(wo, "workspace_op", "expected_revision", &op->expected_revision, err) < 0 ||
        jnonneg(wo, "workspace_op", "first_line", &op->first_line, err) < 0 ||
        jnonneg(wo, "workspace_op", "last_line", &op->last_line, err) < 0)
        return cf_error_wrap(err, "workspace_op");
    /* An empty old_str is said as such, not as a missing one. */
    if (jget(wo, "old_str") && !op->old_str.data && cf_bytes_set(&op->old_str, "", 0) < 0)
        return cf_error_set(err, CF_E_NOMEM, "workspace_op: out of memory");
    return 0;
}

static int request_from_json(const json_t *o, cf_request *r, cf_error *err)
{
    if (!json_is_object(o))
        return cf_error_set(err, CF_E_INVALID, "message: expected a JSON object");
    if (cf_json_version_check(o, err) < 0 || jstr(o, "", "id", &r->id, err) < 0)
        return -1;
    const json_t *lang = jget(o, "language");
    if (lang) {
        if (!json_is_string(lang) || cf_language_parse(json_string_value(lang), &r->language) < 0)
            return cf_error_set(err, CF_E_INVALID,
                                "language: unknown value (expected one of command, shell, python, javascript, wasm, "
                                "c, cpp, rust, go, typescript)");
    }
    if (jstr(o, "", "backend", &r->backend, err) < 0 || jbytes(o, "code", &r->code, err) < 0 ||
        jstrv(o, "", "argv", &r->argv, &r->argc, NULL, err) < 0 || jbytes(o, "module", &r->module, err) < 0 ||
        jbytes(o, "stdin", &r->stdin_data, err) < 0 || jvalue(o, "input", "input_msgpack", &r->input, err) < 0 ||
        jstrmap(o, "env", &r->env, &r->n_env, err) < 0)
        return -1;
    const json_t *files = jget(o, "files");
    if (files) {
        size_t n;
        r->files = jlist(files, "files", true, "object of path to bytes", sizeof(*r->files), &n, err);
        if (!r->files)
            return -1;
        r->n_files = n;
        size_t i = 0;
        const char *path;
        json_t *val;
        json_object_foreach((json_t *)files, path, val) {
            char ip[JPATH_MAX + 32];
            snprintf(ip, sizeof(ip), "files[%zu]", i);
            if (cf_str_set(&r->files[i].path, path) < 0)
                return cf_error_set(err, CF_E_NOMEM, "files: out of memory");
            if (jbytes_of(val, ip, &r->files[i].content, err) < 0)
                return -1;
            i++;
        }
    }
    const json_t *pol = jget(o, "policy");
    if (pol) {
        cf_policy *p = &r->policy;
        if (!json_is_object(pol))
            return cf_error_set(err, CF_E_INVALID, "policy: expected object");
        const json_t *net = jget(pol, "network");
        if (net) {
            const char *s = json_string_value(net);
            if (s && strcmp(s, "disabled") == 0)
                p->network = CF_NET_DISABLED;
            else if (s && strcmp(s, "enabled") == 0)
                p->network = CF_NET_ENABLED;
            else
                return cf_error_set(err, CF_E_INVALID, "policy.network: unknown value (expected one of disabled, enabled)");
        }
        const json_t *fs = jget(pol, "filesystem");
        if (fs) {
            if (!json_is_object(fs))
                return cf_error_set(err, CF_E_INVALID, "policy.filesystem: expected object");
            const json_t *mode = jget(fs, "mode");
            if (mode) {
                const char *s = json_string_value(mode);
                int m = -1;
                for (int i = CF_FS_NONE; s && i <= CF_FS_PATHS; i++)
                    if (strcmp(s, cf_fs_mode_name((cf_fs_mode)i)) == 0)
                        m = i;
                if (m < 0)
                    return cf_error_set(err, CF_E_INVALID, "policy.filesystem.mode: unknown value "
                                                           "(expected one of none, workspace_ro, workspace_rw, paths)");
                p->fs_mode = (cf_fs_mode)m;
            }
            if (jstrv(fs, "policy.filesystem", "read_only", &p->fs_read_only, &p->n_fs_read_only, NULL, err) < 0 ||
                jstrv(fs, "policy.filesystem", "read_write", &p->fs_read_write, &p->n_fs_read_write, NULL, err) < 0)
                return -1;
        }
        if (jstrv(pol, "policy", "env_allow", &p->env_allow, &p->n_env_allow, &p->env_allow_set, err) < 0 ||
            jnonneg(pol, "policy", "timeout_us", &p->timeout_us, err) < 0 ||
            jnonneg(pol, "policy", "cpu_time_us", &p->cpu_time_us, err) < 0 ||
            jnonneg(pol, "policy", "memory_bytes", &p->memory_bytes, err) < 0 ||
            jnonneg(pol, "policy", "max_processes", &p->max_processes, err) < 0 ||
            jnonneg(pol, "policy", "max_stdout_bytes", &p->max_stdout_bytes, err) < 0 ||
            jnonneg(pol, "policy", "max_stderr_bytes", &p->max_stderr_bytes, err) < 0 ||
            jnonneg(pol, "policy", "max_file_size_bytes", &p->max_file_size_bytes, err) < 0 ||
            jnonneg(pol, "policy", "compile_timeout_us", &p->compile_timeout_us, err) < 0 ||
            jnonneg(pol, "policy", "compile_memory_bytes", &p->compile_memory_bytes, err) < 0)
            return -1;
    }
    if (jstr(o, "", "workspace", &r->workspace, err) < 0 || jstr(o, "", "thread", &r->thread, err) < 0 ||
        jstr(o, "", "identity", &r->identity, err) < 0 || jstr(o, "", "reply_to", &r->reply_to, err) < 0 || jstr(o, "", "image", &r->image, err) < 0 ||
        jstr(o, "", "session", &r->session, err) < 0 ||
        jnonneg(o, "", "deadline_us", &r->deadline_us, err) < 0 ||
        jnonneg(o, "", "created_us", &r->created_us, err) < 0 ||
        jstrmap(o, "trace", &r->trace, &r->n_trace, err) < 0)
        return -1;
    const json_t *h = jget(o, "harness");
    if (h) {
        if (!json_is_string(h) || strcmp(json_string_value(h), "function") != 0)
            return cf_error_set(err, CF_E_INVALID, "harness: unknown value (expected function)");
        r->harness = CF_HARNESS_FUNCTION;
    }
    if (jstrv(o, "", "compile_flags", &r->compile_flags, &r->n_compile_flags, NULL, err) < 0 ||
        jbool(o, "stop_on_failure", &r->stop_on_failure, err) < 0 ||
        jstrv(o, "", "collect", &r->collect, &r->n_collect, NULL, err) < 0 ||
        jbool(o, "stream", &r->stream, err) < 0 || jbool(o, "notify_start", &r->notify_start, err) < 0)
        return -1;
    if (workspace_op_from_json(jget(o, "workspace_op"), r, err) < 0)
        return -1;
    const json_t *cases = jget(o, "cases");
    if (cases) {
        size_t n;
        r->cases = jlist(cases, "cases", false, "array of objects", sizeof(*r->cases), &n, err);
        if (!r->cases)
            return -1;
        r->n_cases = n;
        for (size_t i = 0; i < n; i++) {
            const json_t *e = json_array_get(cases, i);
            cf_case *c = &r->cases[i];
            char ip[JPATH_MAX + 32];
            snprintf(ip, sizeof(ip), "cases[%zu]", i);
            if (!json_is_object(e))
                return cf_error_set(err, CF_E_INVALID, "%s: expected object", ip);
            if (jstr(e, ip, "name", &c->name, err) < 0 || jbytes(e, "stdin", &c->stdin_data, err) < 0 ||
                jvalue(e, "input", "input_msgpack", &c->input, err) < 0 ||
                jstrv(e, ip, "argv", &c->argv, &c->argc, NULL, err) < 0)
                return cf_error_wrap(err, "%s", ip);
            if (jget(e, "expect_stdout")) {
                c->has_expect = true;
                if (jbytes(e, "expect_stdout", &c->expect_stdout, err) < 0)
                    return cf_error_wrap(err, "%s", ip);
            }
        }
    }
    return cf_request_check(r, err);
}

int cf_request_from_json(const json_t *obj, cf_request *out, cf_error *err)
{
    memset(out, 0, sizeof(*out));
    if (request_from_json(obj, out, err) < 0) {
        cf_request_clear(out);
        return -1;
    }
    return 0;
}

static int diags_from_json(const json_t *dg, const char *path, bool children, cf_diagnostic **out, size_t *n_out,
                           cf_error *err)
{
    size_t n;
    cf_diagnostic *v = jlist(dg, path, false, "array of objects", sizeof(*v), &n, err);
    if (!v)
        return -1;
    *out = v;
    *n_out = n;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(dg, i);
        cf_diagnostic *d = &v[i];
        char ip[JPATH_MAX + 32];
        snprintf(ip, sizeof(ip), "%s[%zu]", path, i);
        if (!json_is_object(e))
            return cf_error_set(err, CF_E_INVALID, "%s: expected object", ip);
        if (jstr(e, ip, "level", &d->level, err) < 0 || jstr(e, ip, "message", &d->message, err) < 0 ||
            jstr(e, ip, "file", &d->file, err) < 0 || jnonneg(e, ip, "line", &d->line, err) < 0 ||
            jnonneg(e, ip, "column", &d->column, err) < 0 || jstr(e, ip, "code", &d->code, err) < 0 ||
            jnonneg(e, ip, "end_line", &d->end_line, err) < 0 || jnonneg(e, ip, "end_column", &d->end_column, err) < 0)
            return -1;
        const json_t *ch = jget(e, "children");
        if (ch) {
            if (!children)
                return cf_error_set(err, CF_E_INVALID, "%s.children: nested children", ip);
            char cp[JPATH_MAX + 48];
            snprintf(cp, sizeof(cp), "%s.children", ip);
            if (diags_from_json(ch, cp, false, &d->children, &d->n_children, err) < 0)
                return -1;
        }
    }
    return 0;
}

static int result_from_json(const json_t *o, cf_result *r, cf_error *err)
{
    if (!json_is_object(o))
        return cf_error_set(err, CF_E_INVALID, "message: expected a JSON object");
    if (cf_json_version_check(o, err) < 0 || jstr(o, "", "id", &r->id, err) < 0)
        return -1;
    const json_t *st = jget(o, "status");
    if (!st)
        return cf_error_set(err, CF_E_INVALID, "missing required field \"status\"");
    if (!json_is_string(st) || cf_status_parse(json_string_value(st), &r->status) < 0)
        return cf_error_set(err, CF_E_INVALID, "status: unknown value");
    const json_t *ec = jget(o, "exit_code");
    if (ec) {
        if (!json_is_integer(ec) || json_integer_value(ec) < INT32_MIN || json_integer_value(ec) > INT32_MAX)
            return cf_error_set(err, CF_E_INVALID, "exit_code: expected 32-bit integer");
        r->has_exit_code = true;
        r->exit_code = (int)json_integer_value(ec);
    }
    int64_t sig = 0;
    if (jnonneg(o, "", "signal", &sig, err) < 0)
        return -1;
    if (sig > INT32_MAX)
        return cf_error_set(err, CF_E_INVALID, "signal: out of range");
    r->signal = (int)sig;
    if (jbytes(o, "stdout", &r->stdout_data, err) < 0 || jbytes(o, "stderr", &r->stderr_data, err) < 0 ||
        jbool(o, "stdout_truncated", &r->stdout_truncated, err) < 0 ||
        jbool(o, "stderr_truncated", &r->stderr_truncated, err) < 0 ||
        jvalue(o, "output", "output_msgpack", &r->output, err) < 0)
        return -1;
    const json_t *dg = jget(o, "diagnostics");
    if (dg && diags_from_json(dg, "diagnostics", true, &r->diagnostics, &r->n_diagnostics, err) < 0)
        return -1;
    if (jnonneg(o, "", "wall_time_us", &r->wall_time_us, err) < 0 ||
        jnonneg(o, "", "cpu_time_us", &r->cpu_time_us, err) < 0 ||
        jnonneg(o, "", "peak_memory_bytes", &r->peak_memory_bytes, err) < 0)
        return -1;
    const json_t *m = jget(o, "metadata");
    if (m) {
        if (!json_is_object(m))
            return cf_error_set(err, CF_E_INVALID, "metadata: expected object");
        if (jstr(m, "metadata", "backend", &r->meta.backend, err) < 0 ||
            jstr(m, "metadata", "isolation", &r->meta.isolation, err) < 0 ||
            jstr(m, "metadata", "language", &r->meta.language, err) < 0 ||
            jstr(m, "metadata", "worker", &r->meta.worker, err) < 0 ||
            jstr(m, "metadata", "identity", &r->meta.identity, err) < 0 ||
            jnonneg(m, "metadata", "attempt", &r->meta.attempt, err) < 0 ||
            jbool(m, "replay", &r->meta.replay, err) < 0 ||
            jstr(m, "metadata", "toolchain", &r->meta.toolchain, err) < 0 ||
            jstr(m, "metadata", "sandbox", &r->meta.sandbox, err) < 0 ||
            jstr(m, "metadata", "run", &r->meta.run, err) < 0 ||
            jstr(m, "metadata", "traceparent", &r->meta.traceparent, err) < 0)
            return -1;
    }
    if (jstr(o, "", "reason", &r->reason, err) < 0 || jstr(o, "", "reply_to_error", &r->reply_to_error, err) < 0 ||
        jnonneg(o, "", "workspace_revision", &r->workspace_revision, err) < 0 ||
        jstrv(o, "", "changed_paths", &r->changed_paths, &r->n_changed_paths, NULL, err) < 0 ||
        jbool(o, "workspace_conflict", &r->workspace_conflict, err) < 0 ||
        jstr(o, "", "checkpoint_id", &r->checkpoint_id, err) < 0 ||
        jbool(o, "checkpoint_conflict", &r->checkpoint_conflict, err) < 0 ||
        jnonneg(o, "", "finished_us", &r->finished_us, err) < 0 ||
        jbool(o, "files_truncated", &r->files_truncated, err) < 0 ||
        jnonneg(o, "", "chunks", &r->chunks, err) < 0 ||
        jnonneg(o, "", "session_cell", &r->session_cell, err) < 0 ||
        jbool(o, "session_restored", &r->session_restored, err) < 0 ||
        jstrv(o, "", "session_lost", &r->session_lost, &r->n_session_lost, NULL, err) < 0)
        return -1;
    const json_t *cp = jget(o, "compile");
    if (cp) {
        if (!json_is_object(cp))
            return cf_error_set(err, CF_E_INVALID, "compile: expected object");
        r->compile.present = true;
        if (jbool(cp, "cached", &r->compile.cached, err) < 0 ||
            jnonneg(cp, "compile", "wall_time_us", &r->compile.wall_time_us, err) < 0 ||
            jnonneg(cp, "compile", "cpu_time_us", &r->compile.cpu_time_us, err) < 0 ||
            jnonneg(cp, "compile", "peak_memory_bytes", &r->compile.peak_memory_bytes, err) < 0)
            return -1;
    }
    const json_t *cases = jget(o, "cases");
    if (cases) {
        size_t n;
        r->cases = jlist(cases, "cases", false, "array of objects", sizeof(*r->cases), &n, err);
        if (!r->cases)
            return -1;
        r->n_cases = n;
        for (size_t i = 0; i < n; i++) {
            const json_t *e = json_array_get(cases, i);
            cf_case_result *c = &r->cases[i];
            char ip[JPATH_MAX + 32];
            snprintf(ip, sizeof(ip), "cases[%zu]", i);
            if (!json_is_object(e))
                return cf_error_set(err, CF_E_INVALID, "%s: expected object", ip);
            const json_t *cs = jget(e, "status");
            if (!json_is_string(cs) || cf_status_parse(json_string_value(cs), &c->status) < 0)
                return cf_error_set(err, CF_E_INVALID, "%s.status: missing or unknown", ip);
            const json_t *cec = jget(e, "exit_code");
            if (cec) {
                if (!json_is_integer(cec) || json_integer_value(cec) < INT32_MIN || json_integer_value(cec) > INT32_MAX)
                    return cf_error_set(err, CF_E_INVALID, "%s.exit_code: expected 32-bit integer", ip);
                c->has_exit_code = true;
                c->exit_code = (int)json_integer_value(cec);
            }
            int64_t csig = 0;
            bool match = false;
            if (jnonneg(e, ip, "signal", &csig, err) < 0)
                return -1;
            if (csig > INT32_MAX)
                return cf_error_set(err, CF_E_INVALID, "%s.signal: out of range", ip);
            if (jstr(e, ip, "name", &c->name, err) < 0 || jbytes(e, "stdout", &c->stdout_data, err) < 0 ||
                jbytes(e, "stderr", &c->stderr_data, err) < 0 ||
                jbool(e, "stdout_truncated", &c->stdout_truncated, err) < 0 ||
                jbool(e, "stderr_truncated", &c->stderr_truncated, err) < 0 ||
                jvalue(e, "output", "output_msgpack", &c->output, err) < 0 ||
                jnonneg(e, ip, "wall_time_us", &c->wall_time_us, err) < 0 ||
                jnonneg(e, ip, "cpu_time_us", &c->cpu_time_us, err) < 0 ||
                jnonneg(e, ip, "peak_memory_bytes", &c->peak_memory_bytes, err) < 0 ||
                jstr(e, ip, "reason", &c->reason, err) < 0 || jbool(e, "match", &match, err) < 0)
                return cf_error_wrap(err, "%s", ip);
            c->signal = (int)csig;
            if (jget(e, "match"))
                c->match = match ? 1 : -1;
        }
    }
    const json_t *files = jget(o, "files");
    if (files) {
        size_t n;
        r->files = jlist(files, "files", false, "array of objects", sizeof(*r->files), &n, err);
        if (!r->files)
            return -1;
        r->n_files = n;
        for (size_t i = 0; i < n; i++) {
            const json_t *e = json_array_get(files, i);
            cf_out_file *f = &r->files[i];
            char ip[JPATH_MAX + 32];
            snprintf(ip, sizeof(ip), "files[%zu]", i);
            if (!json_is_object(e))
                return cf_error_set(err, CF_E_INVALID, "%s: expected object", ip);
            if (jstr(e, ip, "path", &f->path, err) < 0 || jnonneg(e, ip, "size", &f->size, err) < 0 ||
                jbytes(e, "content", &f->content, err) < 0 || jbool(e, "truncated", &f->truncated, err) < 0)
                return -1;
            f->listed = !jget(e, "content");
        }
    }
    return cf_result_check(r, err);
}

int cf_result_from_json(const json_t *obj, cf_result *out, cf_error *err)
{
    memset(out, 0, sizeof(*out));
    if (result_from_json(obj, out, err) < 0) {
        cf_result_clear(out);
        return -1;
    }
    return 0;
}
