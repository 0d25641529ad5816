/* The wasm runtime of the helper: wasmtime (Cranelift), WASI preview 1.
 *
 * One engine and one linker (WASI defined) for the helper's life; per job a
 * fresh store with its own WASI context, limiter and deadline, so nothing a
 * guest did survives into the next job.  Compiled modules are cached by the
 * SHA-256 of their bytes (bounded, least recently used first out).
 *
 * Limits:
 *   wall time and cpu_time  epoch interruption: a ticker thread bumps the
 *                           engine's epoch every TICK_US while a job runs;
 *                           the store's deadline callback, run at each tick,
 *                           checks the job's wall and thread-CPU clocks.
 *                           Host calls that block (WASI poll/sleep) are not
 *                           interrupted: the worker's watchdog replaces the
 *                           helper then.
 *   fuel                    optional (engine setting from the worker):
 *                           a deterministic budget of wasm instructions.
 *   memory                  the store limiter: memory.grow past the limit
 *                           returns -1; one linear memory, two tables of
 *                           200 000 elements at most (see MAX_*).
 *   stack                   max_wasm_stack.
 *   output                  WASI stdout/stderr go to capped buffers; bytes
 *                           past a cap are dropped and flagged, the guest
 *                           keeps running.
 *   filesystem              only the preopened directories: the work
 *                           directory (read-only or read-write), run/
 *                           (read-only) and run/out (read-write).
 *   network, processes      WASI preview 1 has no way to open a socket (no
 *                           socket is preopened) or to start a process.
 */
#include "helper_int.h"

#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <wasi.h>
#include <wasm.h>
#include <wasmtime.h>

#define TICK_US 2000
#define WASM_STACK_BYTES (1u << 20)
/* One linear memory (the limit applies to it; a module declaring more is
 * refused at instantiation) and at most two tables of 200 000 elements
 * (~3 MiB), so the memory limit bounds nearly all a guest can allocate. */
#define MAX_TABLE_ELEMENTS 200000
#define MAX_INSTANCES 1
#define MAX_TABLES 2
#define MAX_MEMORIES 1
#define DEFAULT_MEMORY (256LL << 20)
#define CACHE_DEFAULT_BYTES (64u << 20) /* of module bytes */
#define CACHE_MAX_ENTRIES 256

static wasm_engine_t *engine;
static wasmtime_linker_t *linker;
static bool fuel_enabled;

/* ---- the epoch ticker ---- */

static pthread_mutex_t tick_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t tick_cv = PTHREAD_COND_INITIALIZER;
static bool tick_active;

static void *ticker(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&tick_mu);
        while (!tick_active)
            pthread_cond_wait(&tick_cv, &tick_mu);
        pthread_mutex_unlock(&tick_mu);
        struct timespec ts = {0, TICK_US * 1000L};
        nanosleep(&ts, NULL);
        wasmtime_engine_increment_epoch(engine);
    }
    return NULL;
}

static void ticking(bool on)
{
    pthread_mutex_lock(&tick_mu);
    tick_active = on;
    if (on)
        pthread_cond_signal(&tick_cv);
    pthread_mutex_unlock(&tick_mu);
}

/* ---- the module cache ---- */

typedef struct cache_entry {
    uint8_t digest[32];
    wasmtime_module_t *module;
    size_t bytes;
    uint64_t used; /* LRU stamp */
} cache_entry;

static cache_entry cache[CACHE_MAX_ENTRIES];
static size_t cache_n, cache_bytes, cache_cap = CACHE_DEFAULT_BYTES;
static uint64_t cache_clock;

/* The cache key: SHA-256 of the scope (the request's profile), a NUL and
 * the module.  Scoped, so one tenant cannot learn from compile times what
 * another ran.  Returns false when hashing failed (then nothing is cached). */
static bool digest_of(const char *scope, const uint8_t *p, size_t n, uint8_t out[32])
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned len = 32;
    bool ok = md && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1 &&
              EVP_DigestUpdate(md, scope, strlen(scope) + 1) == 1 && EVP_DigestUpdate(md, p, n) == 1 &&
              EVP_DigestFinal_ex(md, out, &len) == 1;
    EVP_MD_CTX_free(md);
    return ok;
}

static wasmtime_module_t *cache_get(const uint8_t d[32])
{
    for (size_t i = 0; i < cache_n; i++)
        if (memcmp(cache[i].digest, d, 32) == 0) {
            cache[i].used = ++cache_clock;
            return cache[i].module;
        }
    return NULL;
}

/* Keeps m when it fits (the cache owns it then); false: the caller keeps it. */
static bool cache_put(const uint8_t d[32], wasmtime_module_t *m, size_t bytes)
{
    if (bytes > cache_cap)
        return false;
    while (cache_n > 0 && (cache_n == CACHE_MAX_ENTRIES || cache_bytes + bytes > cache_cap)) {
        size_t old = 0;
        for (size_t i = 1; i < cache_n; i++)
            if (cache[i].used < cache[old].used)
                old = i;
        wasmtime_module_delete(cache[old].module);
        cache_bytes -= cache[old].bytes;
        cache[old] = cache[--cache_n];
    }
    cache[cache_n] = (cache_entry){.module = m, .bytes = bytes, .used = ++cache_clock};
    memcpy(cache[cache_n].digest, d, 32);
    cache_n++;
    cache_bytes += bytes;
    return true;
}

/* ---- init ---- */

int helper_wasm_init(cf_error *err)
{
    const char *fuel = getenv("CODEFLEET_WASM_FUEL");
    fuel_enabled = fuel && strcmp(fuel, "1") == 0;
    const char *cc = getenv("CODEFLEET_WASM_CACHE_BYTES");
    if (cc && *cc) {
        char *end;
        unsigned long long v = strtoull(cc, &end, 10);
        if (*end == '\0')
            cache_cap = (size_t)v;
    }
    wasm_config_t *config = wasm_config_new();
    if (!config)
        return cf_error_set(err, CF_E_NOMEM, "wasm_config_new");
    wasmtime_config_epoch_interruption_set(config, true);
    wasmtime_config_consume_fuel_set(config, fuel_enabled);
    wasmtime_config_max_wasm_stack_set(config, WASM_STACK_BYTES);
    engine = wasm_engine_new_with_config(config);
    if (!engine)
        return cf_error_set(err, CF_E_SANDBOX, "wasm_engine_new failed");
    linker = wasmtime_linker_new(engine);
    wasmtime_error_t *e = wasmtime_linker_define_wasi(linker);
    if (e) {
        wasm_byte_vec_t msg;
        wasmtime_error_message(e, &msg);
        cf_error_set(err, CF_E_SANDBOX, "defining WASI: %.*s", (int)msg.size, msg.data);
        wasm_byte_vec_delete(&msg);
        wasmtime_error_delete(e);
        return -1;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, ticker, NULL) != 0)
        return cf_error_set(err, CF_E_SYSTEM, "starting the epoch ticker");
    pthread_detach(t);
    return 0;
}

/* ---- per job ---- */

typedef struct run_state {
    helper_clock clock;
    bool timed_out, cpu_out;
    cf_embed_reply *reply;
} run_state;

static wasmtime_error_t *on_epoch(wasmtime_context_t *ctx, void *data, uint64_t *delta,
                                  wasmtime_update_deadline_kind_t *kind)
{
    (void)ctx;
    run_state *rs = data;
    int64_t now = cf_mono_us();
    if (now >= rs->clock.deadline_us) {
        rs->timed_out = true;
        return wasmtime_error_new("codefleet: wall-clock deadline");
    }
    if (rs->clock.cpu_limit_us > 0 && helper_thread_cpu_us() - rs->clock.cpu_start_us > rs->clock.cpu_limit_us) {
        rs->cpu_out = true;
        return wasmtime_error_new("codefleet: cpu time limit");
    }
    *delta = 1;
    *kind = WASMTIME_UPDATE_DEADLINE_CONTINUE;
    return NULL;
}

static ptrdiff_t capture(cf_buf *b, bool *trunc, const unsigned char *p, size_t n)
{
    size_t kept = cf_buf_append_capped(b, p, n);
    if (kept < n)
        *trunc = true;
    return (ptrdiff_t)n; /* the guest's write succeeds: past the cap, bytes are dropped */
}

static ptrdiff_t on_stdout(void *data, const unsigned char *p, size_t n)
{
    cf_embed_reply *r = data;
    return capture(&r->out, &r->out_truncated, p, n);
}

static ptrdiff_t on_stderr(void *data, const unsigned char *p, size_t n)
{
    cf_embed_reply *r = data;
    return capture(&r->err, &r->err_truncated, p, n);
}

/* The first line of an error's message (the rest is a backtrace). */
static void error_text(wasmtime_error_t *e, char *buf, size_t size)
{
    wasm_byte_vec_t msg;
    wasmtime_error_message(e, &msg);
    size_t n = msg.size;
    const char *nl = memchr(msg.data, '\n', n);
    if (nl)
        n = (size_t)(nl - msg.data);
    snprintf(buf, size, "%.*s", (int)n, msg.data);
    wasm_byte_vec_delete(&msg);
}

static void trap_text(wasm_trap_t *t, char *buf, size_t size)
{
    wasm_message_t msg;
    wasm_trap_message(t, &msg);
    size_t n = msg.size;
    if (n && msg.data[n - 1] == '\0')
        n--;
    /* wasmtime's message starts with a generic line; the cause is last. */
    const char *start = msg.data, *p = msg.data;
    for (size_t i = 0; i + 1 < n; i++)
        if (p[i] == '\n')
            start = p + i + 1;
    snprintf(buf, size, "%.*s", (int)(msg.data + n - start), start);
    wasm_byte_vec_delete(&msg);
}

static const char *trap_name(wasmtime_trap_code_t c)
{
    switch (c) {
    case WASMTIME_TRAP_CODE_STACK_OVERFLOW: return "stack overflow";
    case WASMTIME_TRAP_CODE_MEMORY_OUT_OF_BOUNDS: return "out-of-bounds memory access";
    case WASMTIME_TRAP_CODE_HEAP_MISALIGNED: return "misaligned memory access";
    case WASMTIME_TRAP_CODE_TABLE_OUT_OF_BOUNDS: return "undefined table element";
    case WASMTIME_TRAP_CODE_INDIRECT_CALL_TO_NULL: return "uninitialized table element";
    case WASMTIME_TRAP_CODE_BAD_SIGNATURE: return "indirect call type mismatch";
    case WASMTIME_TRAP_CODE_INTEGER_OVERFLOW: return "integer overflow";
    case WASMTIME_TRAP_CODE_INTEGER_DIVISION_BY_ZERO: return "integer divide by zero";
    case WASMTIME_TRAP_CODE_BAD_CONVERSION_TO_INTEGER: return "invalid conversion to integer";
    case WASMTIME_TRAP_CODE_UNREACHABLE_CODE_REACHED: return "unreachable";
    case WASMTIME_TRAP_CODE_INTERRUPT: return "interrupt";
    case WASMTIME_TRAP_CODE_OUT_OF_FUEL: return "out of fuel";
    default: return "trap";
    }
}

/* The size of the guest's exported linear memory (it never shrinks: its
 * size at the end is its peak), or 0. */
static int64_t memory_size(wasmtime_context_t *ctx, const wasmtime_instance_t *inst)
{
    wasmtime_extern_t item;
    if (!wasmtime_instance_export_get(ctx, inst, "memory", 6, &item))
        return 0;
    int64_t size = item.kind == WASMTIME_EXTERN_MEMORY ? (int64_t)wasmtime_memory_data_size(ctx, &item.of.memory) : 0;
    wasmtime_extern_delete(&item);
    return size;
}

/* Whether a memory the module exports or imports declares an initial size
 * above limit (instantiation then fails on the limiter). */
static bool memory_min_over(const wasmtime_module_t *module, int64_t limit)
{
    bool over = false;
    wasm_exporttype_vec_t ex;
    wasmtime_module_exports(module, &ex);
    for (size_t i = 0; i < ex.size; i++) {
        const wasm_externtype_t *t = wasm_exporttype_type(ex.data[i]);
        const wasm_memorytype_t *m = t ? wasm_externtype_as_memorytype_const(t) : NULL;
        if (m && wasmtime_memorytype_minimum(m) > (uint64_t)limit / 65536)
            over = true;
    }
    wasm_exporttype_vec_delete(&ex);
    wasm_importtype_vec_t im;
    wasmtime_module_imports(module, &im);
    for (size_t i = 0; i < im.size; i++) {
        const wasm_externtype_t *t = wasm_importtype_type(im.data[i]);
        const wasm_memorytype_t *m = t ? wasm_externtype_as_memorytype_const(t) : NULL;
        if (m && wasmtime_memorytype_minimum(m) > (uint64_t)limit / 65536)
            over = true;
    }
    wasm_importtype_vec_delete(&im);
    return over;
}

/* Whether the guest's linear memory stands at the limit (a failed run
 * there is taken as the memory limit ending it: the C API reports no
 * failed memory.grow). */
static bool memory_at_limit(wasmtime_context_t *ctx, const wasmtime_instance_t *inst, int64_t limit)
{
    int64_t slack = limit / 8 > (1 << 20) ? limit / 8 : (1 << 20);
    return memory_size(ctx, inst) > limit - slack;
}

/* The job's module, from the cache or compiled (and cached when it fits:
 * *owned says whether the caller deletes it).  NULL with reply filled
 * when there is none. */
static wasmtime_module_t *load_module(const cf_embed_job *job, const run_state *rs, cf_embed_reply *reply,
                                      bool *owned)
{
    cf_buf code;
    cf_buf_init(&code, 0);
    *owned = false;
    if (!job->code_path || !job->work_dir || !job->run_dir || !job->out_dir) {
        reply->end = CF_EMBED_HELPER_ERROR;
        helper_reason(reply, "a wasm job needs its module file and directories");
        return NULL;
    }
    if (helper_read_file(job->code_path, 256u << 20, &code) < 0) {
        reply->end = CF_EMBED_HELPER_ERROR;
        helper_reason(reply, "cannot read the module: %s", strerror(errno));
        cf_buf_free(&code);
        return NULL;
    }
    uint8_t digest[32];
    bool keyed = digest_of(job->cache_scope ? job->cache_scope : "", code.data, code.len, digest);
    wasmtime_module_t *module = keyed ? cache_get(digest) : NULL;
    reply->cached = module != NULL;
    if (!module) {
        wasmtime_error_t *ce = wasmtime_module_new(engine, code.data, code.len, &module);
        if (ce) {
            char text[1024];
            error_text(ce, text, sizeof(text));
            wasmtime_error_delete(ce);
            reply->end = CF_EMBED_BAD_PROGRAM;
            helper_reason(reply, "invalid WebAssembly module: %s", text);
            cf_buf_free(&code);
            reply->wall_us = cf_mono_us() - rs->clock.start_us;
            return NULL;
        }
        *owned = !keyed || !cache_put(digest, module, code.len);
    }
    cf_buf_free(&code);
    return module;
}

/* A fresh store for one job: its memory limiter, the deadline check at
 * each epoch tick, its fuel budget. */
static wasmtime_store_t *job_store_new(const cf_embed_job *job, int64_t limit, run_state *rs)
{
    wasmtime_store_t *store = wasmtime_store_new(engine, NULL, NULL);
    wasmtime_context_t *ctx = wasmtime_store_context(store);
    wasmtime_store_limiter(store, limit, MAX_TABLE_ELEMENTS, MAX_INSTANCES, MAX_TABLES, MAX_MEMORIES);
    wasmtime_store_epoch_deadline_callback(store, on_epoch, rs, NULL);
    wasmtime_context_set_epoch_deadline(ctx, 1);
    if (fuel_enabled) {
        wasmtime_error_t *fe = wasmtime_context_set_fuel(ctx, job->fuel > 0 ? (uint64_t)job->fuel : UINT64_MAX);
        if (fe)
            wasmtime_error_delete(fe);
    }
    return store;
}

/* The job's environment into wasi: set_env takes names and values apart,
 * so each "K=V" is split (entries without '=' are left out). */
static void wasi_env_set(wasi_config_t *wasi, const cf_embed_job *job)
{
    const char **names = calloc(job->envc + 1, sizeof(char *));
    const char **values = calloc(job->envc + 1, sizeof(char *));
    char **copies = calloc(job->envc + 1, sizeof(char *));
    size_t n = 0;
    for (size_t i = 0; names && values && copies && i < job->envc; i++) {
        char *c = cf_strdup(job->env[i]);
        char *eq = c ? strchr(c, '=') : NULL;
        if (!eq) {
            free(c);
            continue;
        }
        *eq = '\0';
        copies[n] = c;
        names[n] = c;
        values[n] = eq + 1;
        n++;
    }
    wasi_config_set_env(wasi, n, names, values);
    for (size_t i = 0; i < n; i++)
        free(copies[i]);
    free(names);
    free(values);
    free(copies);
}

/* The job's WASI context in ctx: arguments, environment, stdin, captured
 * stdout and stderr, the preopened directories.  -1 with reply filled when
 * it cannot be made. */
static int wasi_setup(wasmtime_context_t *ctx, const cf_embed_job *job, cf_embed_reply *reply)
{
    wasi_config_t *wasi = wasi_config_new();
    wasi_config_set_argv(wasi, job->argc, (const char **)job->argv);
    wasi_env_set(wasi, job);
    wasm_byte_vec_t in;
    wasm_byte_vec_new(&in, job->stdin_len, (const char *)job->stdin_data);
    wasi_config_set_stdin_bytes(wasi, &in);
    wasi_config_set_stdout_custom(wasi, on_stdout, reply, NULL);
    wasi_config_set_stderr_custom(wasi, on_stderr, reply, NULL);
    bool ok = wasi_config_preopen_dir(wasi, job->work_dir, "/work", job->work_rw) &&
              wasi_config_preopen_dir(wasi, job->work_dir, ".", job->work_rw) &&
              wasi_config_preopen_dir(wasi, job->run_dir, "/run/codefleet", false) &&
              wasi_config_preopen_dir(wasi, job->out_dir, "/run/codefleet/out", true);
    if (!ok) {
        wasi_config_delete(wasi);
        reply->end = CF_EMBED_HELPER_ERROR;
        helper_reason(reply, "cannot preopen the execution's directories");
        return -1;
    }
    wasmtime_error_t *e = wasmtime_context_set_wasi(ctx, wasi); /* takes wasi */
    if (e) {
        char text[1024];
        error_text(e, text, sizeof(text));
        reply->end = CF_EMBED_HELPER_ERROR;
        helper_reason(reply, "WASI setup: %s", text);
        wasmtime_error_delete(e);
        return -1;
    }
    return 0;
}

/* An instantiation that failed before any deadline: proc_exit in a start
 * function, an initial memory over the limit, or a link error. */
static void instantiate_failed(wasmtime_error_t *e, const wasmtime_module_t *module, int64_t limit,
                               cf_embed_reply *reply)
{
    int start_status;
    if (wasmtime_error_exit_status(e, &start_status)) {
        reply->end = CF_EMBED_EXITED; /* proc_exit inside a start function */
        reply->exit_code = start_status;
        return;
    }
    if (memory_min_over(module, limit)) {
        reply->end = CF_EMBED_MEMORY;
        char lim[32];
        cf_format_size(limit, lim, sizeof(lim));
        helper_reason(reply, "the module's initial memory exceeds the memory limit of %s", lim);
        return;
    }
    char text[1024];
    error_text(e, text, sizeof(text));
    reply->end = CF_EMBED_LINK_FAILED;
    helper_reason(reply, "cannot instantiate the module: %s", text);
}

/* Calls the module's _start (a WASI command's entry point): its error
 * or trap into *e and *trap.  -1 with reply filled when there is none. */
static int call_start(wasmtime_context_t *ctx, const wasmtime_instance_t *instance, wasmtime_error_t **e,
                      wasm_trap_t **trap, cf_embed_reply *reply)
{
    wasmtime_extern_t start;
    bool found = wasmtime_instance_export_get(ctx, instance, "_start", 6, &start);
    if (!found || start.kind != WASMTIME_EXTERN_FUNC) {
        if (found)
            wasmtime_extern_delete(&start);
        reply->end = CF_EMBED_LINK_FAILED;
        helper_reason(reply, "the module exports no _start function (a WASI command is expected)");
        return -1;
    }
    *e = wasmtime_func_call(ctx, &start.of.func, NULL, 0, NULL, 0, trap);
    wasmtime_extern_delete(&start);
    return 0;
}

/* A run that ended in a trap: fuel out, an interrupt, or the program's
 * fault (the memory limit when its memory stands at it). */
static void trap_verdict(wasm_trap_t *trap, wasmtime_context_t *ctx, const wasmtime_instance_t *instance,
                         bool instantiated, const cf_embed_job *job, int64_t limit, cf_embed_reply *reply)
{
    char text[1024];
    wasmtime_trap_code_t tcode;
    bool has_code = wasmtime_trap_code(trap, &tcode);
    trap_text(trap, text, sizeof(text));
    if (has_code && tcode == WASMTIME_TRAP_CODE_OUT_OF_FUEL) {
        reply->end = CF_EMBED_CPU_EXCEEDED;
        helper_reason(reply, "fuel budget of %lld exhausted", (long long)job->fuel);
    } else if (has_code && tcode == WASMTIME_TRAP_CODE_INTERRUPT) {
        reply->end = CF_EMBED_TIMEOUT;
    } else {
        reply->end = instantiated && memory_at_limit(ctx, instance, limit) ? CF_EMBED_MEMORY : CF_EMBED_FAILED;
        helper_reason(reply, "wasm trap: %s (%s)", has_code ? trap_name(tcode) : "trap", text);
    }
}

/* How the run ended: a limit the epoch check hit, proc_exit, an error, a
 * trap, or a plain return. */
static void run_verdict(wasmtime_context_t *ctx, const wasmtime_instance_t *instance, bool instantiated,
                        wasmtime_error_t *e, wasm_trap_t *trap, const cf_embed_job *job, int64_t limit,
                        const run_state *rs, cf_embed_reply *reply)
{
    int status;
    if (rs->timed_out) {
        reply->end = CF_EMBED_TIMEOUT;
    } else if (rs->cpu_out) {
        reply->end = CF_EMBED_CPU_EXCEEDED;
    } else if (e && wasmtime_error_exit_status(e, &status)) {
        reply->end = CF_EMBED_EXITED;
        reply->exit_code = status;
    } else if (e) {
        char text[1024];
        error_text(e, text, sizeof(text));
        reply->end = instantiated && memory_at_limit(ctx, instance, limit) ? CF_EMBED_MEMORY : CF_EMBED_FAILED;
        helper_reason(reply, "%s", text);
    } else if (trap) {
        trap_verdict(trap, ctx, instance, instantiated, job, limit, reply);
    } else {
        reply->end = CF_EMBED_EXITED;
        reply->exit_code = 0;
    }
}

/* Instantiates the module and runs its _start with the epoch ticking;
 * reply says how it ended. */
static void run_module(wasmtime_context_t *ctx, wasmtime_module_t *module, const cf_embed_job *job, int64_t limit,
                       run_state *rs, cf_embed_reply *reply)
{
    ticking(true);
    wasmtime_instance_t instance;
    wasm_trap_t *trap = NULL;
    wasmtime_error_t *e = wasmtime_linker_instantiate(linker, ctx, module, &instance, &trap);
    bool instantiated = !e && !trap;
    if (e && !rs->timed_out && !rs->cpu_out) {
        /* (a start function stopped by the deadline is a timeout) */
        instantiate_failed(e, module, limit, reply);
    } else if (!instantiated || call_start(ctx, &instance, &e, &trap, reply) == 0) {
        run_verdict(ctx, &instance, instantiated, e, trap, job, limit, rs, reply);
        /* A host call may return past the deadline without an epoch tick
         * seeing it: the run still did not finish in time. */
        if ((reply->end == CF_EMBED_EXITED || reply->end == CF_EMBED_FAILED) &&
            cf_mono_us() > rs->clock.deadline_us) {
            reply->end = CF_EMBED_TIMEOUT;
            free(reply->reason);
            reply->reason = NULL;
        }
        if (instantiated)
            reply->peak_memory_bytes = memory_size(ctx, &instance);
    }
    ticking(false);
    if (trap)
        wasm_trap_delete(trap);
    if (e)
        wasmtime_error_delete(e);
}

void helper_wasm_run(const cf_embed_job *job, cf_embed_reply *reply)
{
    run_state rs = {.reply = reply};
    helper_clock_start(&rs.clock, job);
    int64_t limit = job->memory_bytes > 0 ? job->memory_bytes : DEFAULT_MEMORY;
    bool module_owned;
    wasmtime_module_t *module = load_module(job, &rs, reply, &module_owned);
    if (!module)
        return;
    wasmtime_store_t *store = job_store_new(job, limit, &rs);
    if (wasi_setup(wasmtime_store_context(store), job, reply) == 0)
        run_module(wasmtime_store_context(store), module, job, limit, &rs, reply);
    wasmtime_store_delete(store);
    if (module_owned)
        wasmtime_module_delete(module);
    reply->wall_us = cf_mono_us() - rs.clock.start_us;
    reply->cpu_us = helper_thread_cpu_us() - rs.clock.cpu_start_us;
}
