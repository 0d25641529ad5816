/* The js runtime of the helper: QuickJS-ng, ES2023, no host APIs but
 * `console`, `input` and the structured result.
 *
 * A fresh runtime and context per job (about 50 us): nothing one program
 * defines is seen by the next.
 *
 * Limits:
 *   memory     our allocator counts every byte QuickJS asks for and refuses
 *              past the job's limit (the flag says the limit ended the run,
 *              whatever the exception looks like);
 *   stack      JS_SetMaxStackSize (RangeError, catchable as in any engine);
 *   time, cpu  the interrupt handler, which QuickJS calls from the bytecode
 *              loop, regexp backtracking and the job queue alike, checks the
 *              wall and thread-CPU clocks; its exception is uncatchable.
 *              Native built-ins that run long without calling it are stopped
 *              by the worker's watchdog, which replaces the helper;
 *   output     console.* into capped buffers.
 * Nothing else is reachable: no std/os modules, no fetch, no timers.
 */
#include "helper_int.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quickjs.h"

#define JS_STACK_BYTES (1u << 20)
#define DEFAULT_MEMORY (256LL << 20)
#define INPUT_MAX (64u << 20)
#define TEXT_MAX 4000

typedef struct js_job {
    helper_clock clock;
    size_t used, limit, peak;
    bool oom, timed_out, cpu_out;
    cf_embed_reply *reply;
} js_job;

/* ---- the allocator ---- */

static void *a_calloc(void *opaque, size_t count, size_t size)
{
    js_job *j = opaque;
    if (size && count > SIZE_MAX / size)
        return NULL;
    size_t n = count * size;
    if (j->used + n > j->limit) {
        j->oom = true;
        return NULL;
    }
    void *p = calloc(count, size);
    if (p && (j->used += malloc_usable_size(p)) > j->peak)
        j->peak = j->used;
    return p;
}

static void *a_malloc(void *opaque, size_t size)
{
    js_job *j = opaque;
    if (j->used + size > j->limit) {
        j->oom = true;
        return NULL;
    }
    void *p = malloc(size);
    if (p && (j->used += malloc_usable_size(p)) > j->peak)
        j->peak = j->used;
    return p;
}

static void a_free(void *opaque, void *ptr)
{
    js_job *j = opaque;
    if (!ptr)
        return;
    j->used -= malloc_usable_size(ptr);
    free(ptr);
}

static void *a_realloc(void *opaque, void *ptr, size_t size)
{
    js_job *j = opaque;
    size_t old = ptr ? malloc_usable_size(ptr) : 0;
    if (size > old && j->used - old + size > j->limit) {
        j->oom = true;
        return NULL;
    }
    void *p = realloc(ptr, size);
    if (!p)
        return size ? NULL : p;
    j->used = j->used - old + malloc_usable_size(p);
    if (j->used > j->peak)
        j->peak = j->used;
    return p;
}

static size_t a_usable(const void *ptr)
{
    return malloc_usable_size((void *)ptr);
}

static const JSMallocFunctions allocator = {a_calloc, a_malloc, a_free, a_realloc, a_usable};

/* ---- interrupts ---- */

static int on_interrupt(JSContext *ctx, void *opaque)
{
    (void)ctx;
    js_job *j = opaque;
    if (cf_mono_us() >= j->clock.deadline_us) {
        j->timed_out = true;
        return 1;
    }
    if (j->clock.cpu_limit_us > 0 && helper_thread_cpu_us() - j->clock.cpu_start_us > j->clock.cpu_limit_us) {
        j->cpu_out = true;
        return 1;
    }
    return 0;
}

/* ---- console ---- */

/* One argument as console.log shows it: strings as they are, other values
 * as JSON when they have a JSON form, else their string conversion. */
static void append_value(JSContext *ctx, JSValueConst v, cf_buf *b, bool *trunc)
{
    const char *s = NULL;
    size_t n = 0;
    JSValue json = JS_UNDEFINED;
    if (JS_IsObject(v) && !JS_IsFunction(ctx, v)) {
        json = JS_JSONStringify(ctx, v, JS_UNDEFINED, JS_UNDEFINED);
        if (JS_IsException(json)) {
            JS_FreeValue(ctx, JS_GetException(ctx));
            json = JS_UNDEFINED;
        }
    }
    if (JS_IsString(json))
        s = JS_ToCStringLen(ctx, &n, json);
    else
        s = JS_ToCStringLen(ctx, &n, v);
    JS_FreeValue(ctx, json);
    if (!s) {
        /* A Symbol has no implicit string form; String(v) gives one. */
        JS_FreeValue(ctx, JS_GetException(ctx));
        JSValue global = JS_GetGlobalObject(ctx);
        JSValue fn = JS_GetPropertyStr(ctx, global, "String");
        JSValue str = JS_IsFunction(ctx, fn) ? JS_Call(ctx, fn, JS_UNDEFINED, 1, &v) : JS_EXCEPTION;
        JS_FreeValue(ctx, fn);
        JS_FreeValue(ctx, global);
        s = JS_IsString(str) ? JS_ToCStringLen(ctx, &n, str) : NULL;
        JS_FreeValue(ctx, str);
        if (!s) {
            if (JS_HasException(ctx))
                JS_FreeValue(ctx, JS_GetException(ctx));
            s = JS_ToCStringLen(ctx, &n, JS_UNDEFINED);
            if (!s)
                return;
        }
    }
    if (cf_buf_append_capped(b, s, n) < n)
        *trunc = true;
    JS_FreeCString(ctx, s);
}

static JSValue console_write(JSContext *ctx, JSValueConst this_val, int argc, JSValueConst *argv, int to_err)
{
    (void)this_val;
    js_job *j = JS_GetContextOpaque(ctx);
    cf_buf *b = to_err ? &j->reply->err : &j->reply->out;
    bool *trunc = to_err ? &j->reply->err_truncated : &j->reply->out_truncated;
    for (int i = 0; i < argc; i++) {
        if (i > 0 && cf_buf_append_capped(b, " ", 1) < 1)
            *trunc = true;
        append_value(ctx, argv[i], b, trunc);
    }
    if (cf_buf_append_capped(b, "\n", 1) < 1)
        *trunc = true;
    return JS_UNDEFINED;
}

static int install_globals(JSContext *ctx, const cf_embed_job *job, js_job *j, JSValue *input)
{
    JSValue global = JS_GetGlobalObject(ctx);
    JSValue console = JS_NewObject(ctx);
    static const struct {
        const char *name;
        int to_err;
    } fns[] = {{"log", 0}, {"info", 0}, {"debug", 0}, {"warn", 1}, {"error", 1}};
    for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++)
        JS_SetPropertyStr(ctx, console, fns[i].name,
                          JS_NewCFunctionMagic(ctx, console_write, fns[i].name, 1, JS_CFUNC_generic_magic,
                                               fns[i].to_err));
    JS_SetPropertyStr(ctx, global, "console", console);
    *input = JS_UNDEFINED;
    if (job->input_json || job->input_path) {
        cf_buf text;
        cf_buf_init(&text, 0);
        int got = job->input_json ? cf_buf_append(&text, job->input_json, strlen(job->input_json), NULL)
                                  : helper_read_file(job->input_path, INPUT_MAX, &text);
        if (got < 0) {
            cf_buf_free(&text);
            JS_FreeValue(ctx, global);
            helper_reason(j->reply, "cannot read input.json");
            return -1;
        }
        /* JS_ParseJSON wants a NUL after the text. */
        if (cf_buf_append(&text, "", 1, NULL) < 0) {
            cf_buf_free(&text);
            JS_FreeValue(ctx, global);
            return -1;
        }
        *input = JS_ParseJSON(ctx, (const char *)text.data, text.len - 1, "input.json");
        cf_buf_free(&text);
        if (JS_IsException(*input)) {
            JS_FreeValue(ctx, JS_GetException(ctx));
            *input = JS_UNDEFINED;
            JS_FreeValue(ctx, global);
            helper_reason(j->reply, "input.json is not JSON");
            return -1;
        }
    }
    JS_SetPropertyStr(ctx, global, "input", JS_DupValue(ctx, *input));
    JS_FreeValue(ctx, global);
    return 0;
}

/* ---- the run ---- */

/* Runs queued jobs until p settles (or nothing is left to run).  Returns
 * the settled value (owned) or JS_EXCEPTION with the exception pending. */
static JSValue settle(JSContext *ctx, JSValue p)
{
    JSRuntime *rt = JS_GetRuntime(ctx);
    for (;;) {
        JSPromiseStateEnum st = JS_PromiseState(ctx, p);
        if (st == JS_PROMISE_NOT_A_PROMISE)
            return p;
        if (st == JS_PROMISE_FULFILLED) {
            JSValue v = JS_PromiseResult(ctx, p);
            JS_FreeValue(ctx, p);
            return v;
        }
        if (st == JS_PROMISE_REJECTED) {
            JSValue v = JS_PromiseResult(ctx, p);
            JS_FreeValue(ctx, p);
            return JS_Throw(ctx, v);
        }
        if (!JS_IsJobPending(rt)) {
            JS_FreeValue(ctx, p);
            return JS_ThrowInternalError(ctx, "the program's promise never settled (nothing left to run)");
        }
        JSContext *jctx;
        if (JS_ExecutePendingJob(rt, &jctx) < 0) {
            JS_FreeValue(ctx, p);
            return JS_EXCEPTION;
        }
    }
}

/* Reason and diagnostics from the pending exception. */
static void describe_exception(JSContext *ctx, cf_embed_reply *r)
{
    JSValue exc = JS_GetException(ctx);
    const char *msg = JS_ToCString(ctx, exc);
    if (!msg)
        JS_FreeValue(ctx, JS_GetException(ctx));
    helper_reason(r, "uncaught %.*s", TEXT_MAX, msg ? msg : "exception");
    if (JS_IsObject(exc)) {
        JSValue stack = JS_GetPropertyStr(ctx, exc, "stack");
        const char *s = JS_IsString(stack) ? JS_ToCString(ctx, stack) : NULL;
        if (s || msg) {
            char buf[TEXT_MAX * 2 + 8];
            snprintf(buf, sizeof(buf), "%.*s%s%.*s", TEXT_MAX, msg ? msg : "", s ? "\n" : "", TEXT_MAX, s ? s : "");
            free(r->diagnostics);
            r->diagnostics = cf_strdup(buf);
        }
        if (s)
            JS_FreeCString(ctx, s);
        JS_FreeValue(ctx, stack);
    }
    if (msg)
        JS_FreeCString(ctx, msg);
    JS_FreeValue(ctx, exc);
}

int helper_js_init(cf_error *err)
{
    (void)err;
    return 0;
}

/* The script, NUL-terminated, from the job or its file.  -1 with reply
 * filled (and code freed) when it cannot be read. */
static int read_script(const cf_embed_job *job, cf_buf *code, cf_embed_reply *reply)
{
    cf_buf_init(code, 0);
    int got = job->code ? cf_buf_append(code, job->code, job->code_len, NULL)
                        : helper_read_file(job->code_path, 64u << 20, code);
    if (got < 0 || cf_buf_append(code, "", 1, NULL) < 0) {
        reply->end = CF_EMBED_HELPER_ERROR;
        helper_reason(reply, "cannot read the script");
        cf_buf_free(code);
        return -1;
    }
    return 0;
}

/* A fresh runtime and context on the job's allocator, its stack size and
 * interrupt handler set.  NULL with reply filled (and nothing left) when
 * they cannot be made. */
static JSContext *new_context(js_job *j, cf_embed_reply *reply)
{
    JSRuntime *rt = JS_NewRuntime2(&allocator, j);
    JSContext *ctx = rt ? JS_NewContext(rt) : NULL;
    if (!ctx) {
        reply->end = j->oom ? CF_EMBED_MEMORY : CF_EMBED_HELPER_ERROR;
        helper_reason(reply, j->oom ? "the memory limit is too small for a JavaScript context"
                                    : "cannot create a JavaScript context");
        if (rt)
            JS_FreeRuntime(rt);
        return NULL;
    }
    JS_SetMaxStackSize(rt, JS_STACK_BYTES);
    JS_SetInterruptHandler(rt, on_interrupt, j);
    JS_SetContextOpaque(ctx, j);
    return ctx;
}

/* When the program defines a function run: run(input), settled, takes
 * value's place (value is freed). */
static JSValue call_run(JSContext *ctx, JSValue value, JSValue input)
{
    JSValue global = JS_GetGlobalObject(ctx);
    JSValue run = JS_GetPropertyStr(ctx, global, "run");
    if (JS_IsException(run)) { /* a getter on run that throws */
        JS_FreeValue(ctx, value);
        value = JS_EXCEPTION;
    } else if (JS_IsFunction(ctx, run)) {
        JS_FreeValue(ctx, value);
        value = JS_Call(ctx, run, global, 1, (JSValueConst *)&input);
        if (!JS_IsException(value))
            value = settle(ctx, value);
    }
    JS_FreeValue(ctx, run);
    JS_FreeValue(ctx, global);
    return value;
}

/* Whatever is still queued runs too (a program may finish its work in
 * callbacks after its last expression), within the same limits; a job
 * that throws turns value into JS_EXCEPTION. */
static JSValue run_pending(JSContext *ctx, JSValue value)
{
    JSRuntime *rt = JS_GetRuntime(ctx);
    JSContext *jctx;
    int r;
    while ((r = JS_ExecutePendingJob(rt, &jctx)) > 0)
        ;
    if (r < 0) {
        JS_FreeValue(ctx, value);
        value = JS_EXCEPTION;
    }
    return value;
}

/* The program's value: the script's (settled), run(input)'s when it
 * defines run, after the queue ran dry.  Owned, or JS_EXCEPTION. */
static JSValue run_script(JSContext *ctx, const cf_buf *code, JSValue input)
{
    JSValue value = JS_Eval(ctx, (const char *)code->data, code->len - 1, "main.js", JS_EVAL_TYPE_GLOBAL);
    if (!JS_IsException(value))
        value = settle(ctx, value);
    if (!JS_IsException(value))
        value = call_run(ctx, value, input);
    if (!JS_IsException(value))
        value = run_pending(ctx, value);
    return value;
}

/* *value as JSON text into *output (malloc'd; stays NULL for undefined
 * and for what JSON has no text for).  A failure turns *value into
 * JS_EXCEPTION; returns whether it was the stringifying that threw. */
static bool result_json(JSContext *ctx, JSValue *value, char **output, size_t *output_len)
{
    bool not_json = false;
    if (JS_IsException(*value) || JS_IsUndefined(*value))
        return false;
    JSValue json = JS_JSONStringify(ctx, *value, JS_UNDEFINED, JS_UNDEFINED);
    if (JS_IsException(json)) {
        not_json = true;
        JS_FreeValue(ctx, *value);
        *value = JS_EXCEPTION;
    } else if (JS_IsString(json)) {
        const char *str = JS_ToCStringLen(ctx, output_len, json);
        *output = str ? cf_strndup(str, *output_len) : NULL;
        if (str)
            JS_FreeCString(ctx, str);
        if (!*output) {
            JS_FreeValue(ctx, *value);
            *value = JS_EXCEPTION;
        }
    }
    JS_FreeValue(ctx, json);
    return not_json;
}

/* A successful run's result: inline in the reply when the worker asked
 * so, otherwise into the job's output file. */
static void deliver_result(const cf_embed_job *job, const char *output, size_t output_len, cf_embed_reply *reply)
{
    if (output && !job->output_path) {
        /* inline, as the worker asked: no file at all */
        if (output_len > (size_t)job->max_output) {
            reply->output_too_big = true;
        } else if (cf_buf_append(&reply->output, output, output_len, NULL) == 0) {
            reply->has_output = true;
        } else {
            reply->end = CF_EMBED_HELPER_ERROR;
            helper_reason(reply, "out of memory copying the result");
        }
    } else if (output && helper_write_file(job->output_path, output, output_len) < 0) {
        /* the execution's capped work space is full: the program's doing */
        reply->end = CF_EMBED_FAILED;
        reply->exit_code = 1;
        char size[32];
        cf_format_size((int64_t)output_len, size, sizeof(size));
        helper_reason(reply, "the result (%s of JSON) does not fit the execution's work space", size);
    }
}

/* How the run ended (a limit first: its reason and diagnostics are not
 * the program's), and a successful run's result delivered. */
static void judge(const js_job *j, const cf_embed_job *job, bool exception, bool not_json, const char *output,
                  size_t output_len, cf_embed_reply *reply)
{
    if (j->timed_out || cf_mono_us() > j->clock.deadline_us) {
        /* also a native call that returned past the deadline */
        reply->end = CF_EMBED_TIMEOUT;
    } else if (j->cpu_out) {
        reply->end = CF_EMBED_CPU_EXCEEDED;
    } else if (j->oom && exception) {
        reply->end = CF_EMBED_MEMORY;
        char lim[32];
        cf_format_size((int64_t)j->limit, lim, sizeof(lim));
        helper_reason(reply, "memory limit of %s exceeded", lim);
    } else if (exception) {
        reply->end = CF_EMBED_FAILED;
        reply->exit_code = 1;
        if (not_json) {
            char why[TEXT_MAX + 64];
            snprintf(why, sizeof(why), "the result is not JSON: %s", reply->reason ? reply->reason : "");
            helper_reason(reply, "%s", why);
        }
    } else {
        reply->end = CF_EMBED_EXITED;
        reply->exit_code = 0;
        deliver_result(job, output, output_len, reply);
    }
    if (reply->end == CF_EMBED_TIMEOUT || reply->end == CF_EMBED_CPU_EXCEEDED) {
        free(reply->reason);
        reply->reason = NULL;
        free(reply->diagnostics);
        reply->diagnostics = NULL;
    }
}

void helper_js_run(const cf_embed_job *job, cf_embed_reply *reply)
{
    js_job j = {.reply = reply};
    helper_clock_start(&j.clock, job);
    j.limit = job->memory_bytes > 0 ? (size_t)job->memory_bytes : (size_t)DEFAULT_MEMORY;

    cf_buf code;
    if (read_script(job, &code, reply) < 0)
        return;
    JSContext *ctx = new_context(&j, reply);
    if (!ctx) {
        cf_buf_free(&code);
        return;
    }
    JSRuntime *rt = JS_GetRuntime(ctx);

    JSValue input = JS_UNDEFINED, value = JS_UNDEFINED;
    if (install_globals(ctx, job, &j, &input) < 0) {
        reply->end = j.oom ? CF_EMBED_MEMORY : CF_EMBED_HELPER_ERROR;
    } else {
        value = run_script(ctx, &code, input);
        /* Everything that runs JavaScript happens before the run is
         * judged: turning the result into JSON (a toJSON or a getter) and
         * describing an exception (its toString, its stack) are guest code
         * under the same limits. */
        char *output = NULL;
        size_t output_len = 0;
        bool not_json = result_json(ctx, &value, &output, &output_len);
        if (JS_IsException(value) && !j.timed_out && !j.cpu_out && !j.oom)
            describe_exception(ctx, reply);
        judge(&j, job, JS_IsException(value), not_json, output, output_len, reply);
        free(output);
    }
    if (JS_HasException(ctx))
        JS_FreeValue(ctx, JS_GetException(ctx));
    JS_FreeValue(ctx, value);
    JS_FreeValue(ctx, input);
    /* After an out-of-memory error the collector must run before the
     * context goes, or the next runtime may fail to start.  Otherwise
     * freeing the runtime collects anyway: a second pass costs ~15% of a
     * trivial execution. */
    if (j.oom)
        JS_RunGC(rt);
    JS_FreeContext(ctx);
    JS_FreeRuntime(rt);
    cf_buf_free(&code);
    reply->wall_us = cf_mono_us() - j.clock.start_us;
    reply->cpu_us = helper_thread_cpu_us() - j.clock.cpu_start_us;
    reply->peak_memory_bytes = (int64_t)j.peak;
}
