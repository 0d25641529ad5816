/* cf_cli_state: the `codefleet workspace ...` and `codefleet checkpoint ...`
 * commands, thin front ends to state/cf_workspace.h and
 * state/cf_checkpoint.h.  docs/CLI.md describes them.
 *
 * Input is checked before anything is sent: flags, local files, paths (with
 * the store's own rules) and JSON state are validated first, so bad input
 * gets exit code 2 and Redis is never written.  The Redis connection is made
 * by the first command that needs it. */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cf_checkpoint.h"
#include "cf_cli.h"
#include "cf_redis.h"
#include "cf_msgpack.h"
#include "cf_schema_json.h"
#include "cf_util.h"
#include "cf_workspace.h"

/* ---- shared helpers ------------------------------------------------------ */

int cf_cli_parse_redis_addr(const char *s, char *host, size_t hostcap, int *port, cf_error *err)
{
    if (!s || !*s)
        return cf_error_set(err, CF_E_INVALID, "--redis: empty address");
    if (s[0] == '/') { /* unix socket */
        if (strlen(s) >= hostcap)
            return cf_error_set(err, CF_E_INVALID, "--redis: socket path too long");
        cf_strlcpy(host, s, hostcap);
        *port = 0;
        return 0;
    }
    const char *hs = s, *he, *ps = NULL;
    if (s[0] == '[') {
        hs = s + 1;
        he = strchr(hs, ']');
        if (!he || (he[1] != '\0' && he[1] != ':'))
            return cf_error_set(err, CF_E_INVALID, "--redis: expected [ADDRESS]:PORT, got '%s'", s);
        if (he[1] == ':')
            ps = he + 2;
    } else {
        he = strrchr(s, ':');
        if (he && strchr(s, ':') != he)
            return cf_error_set(err, CF_E_INVALID, "--redis: IPv6 addresses go in brackets: [ADDRESS]:PORT");
        if (he)
            ps = he + 1;
        else
            he = s + strlen(s);
    }
    size_t hl = (size_t)(he - hs);
    if (hl == 0 || hl >= hostcap)
        return cf_error_set(err, CF_E_INVALID, "--redis: bad host in '%s'", s);
    memcpy(host, hs, hl);
    host[hl] = '\0';
    int64_t p = 6379;
    if (ps && cf_parse_i64(ps, 1, 65535, &p, "--redis port", err) < 0)
        return -1;
    *port = (int)p;
    return 0;
}

int cf_cli_state_from_json(const char *text, size_t len, const char *what, cf_bytes *out, cf_error *err)
{
    out->data = NULL;
    out->len = 0;
    json_error_t je;
    json_t *j = json_loadb(text, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!j)
        return cf_error_set(err, CF_E_INVALID, "%s: invalid JSON at line %d column %d: %s", what, je.line, je.column,
                            je.text);
    if (!json_is_object(j)) {
        json_decref(j);
        return cf_error_set(err, CF_E_INVALID, "%s: must be a JSON object (checkpoint state is a map)", what);
    }
    int rc = cf_json_to_msgpack(j, out, err);
    json_decref(j);
    return rc < 0 ? cf_error_wrap(err, "%s", what) : 0;
}

/* Prints s with control bytes replaced: names read back from Redis are
 * hostile and must not drive the terminal. */
static void print_safe(FILE *out, const char *s)
{
    for (; *s; s++)
        fputc(((unsigned char)*s < 0x20 || *s == 0x7f) ? '?' : *s, out);
}

/* cf_cli_report with control characters as '?' (print_safe's rule): a
 * path in the message may hold any byte. */
static int report_safe(const char *cmd, int exit_code, const char *msg)
{
    char clean[1300];
    size_t n = 0;
    for (; *msg && n + 1 < sizeof(clean); msg++)
        clean[n++] = ((unsigned char)*msg < 0x20 || *msg == 0x7f) ? '?' : *msg;
    clean[n] = '\0';
    return cf_cli_report(cmd, exit_code, clean);
}

static void emit_json(json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    if (s)
        printf("%s\n", s);
    else
        fputs("codefleet: out of memory formatting JSON\n", stderr);
    free(s);
    json_decref(o);
    fflush(stdout);
}

static int fail_state(const cf_error *err, const char *cmd)
{
    return cf_cli_report_error(cmd, NULL, err, cf_cli_exit_for_state_error(err));
}

static int usage(const char *cmd, const char *msg)
{
    return cf_cli_report_usage(cmd, cmd, msg);
}

static int bad_option(const char *cmd, int argc, char **argv)
{
    char msg[300];
    return usage(cmd, cf_cli_option_error(cmd, argc, argv, msg, sizeof(msg)));
}

/* msgpack value -> JSON, or {"base64": raw} under the _msgpack key. */
static void json_set_value(json_t *o, const char *key, const char *rawkey, const uint8_t *data, size_t len)
{
    if (!data || len == 0)
        return;
    json_t *j = cf_msgpack_to_json(data, len, NULL);
    if (j) {
        json_object_set_new(o, key, j);
        return;
    }
    char *b = cf_base64_encode(data, len, NULL);
    if (b)
        json_object_set_new(o, rawkey, json_pack("{s:s}", "base64", b));
    free(b);
}

typedef struct state_conn {
    cf_redis *r;
    cf_workspace_store *ws;
    cf_checkpoint_store *cs;
    size_t max_state, max_meta; /* the checkpoint store's caps */
} state_conn;

cf_redis *cf_cli_redis_open(const cf_cli_globals *g, cf_error *err)
{
    char host[4096];
    int port = 0;
    if (cf_cli_parse_redis_addr(g->redis, host, sizeof(host), &port, err) < 0)
        return NULL;
    cf_redis_config rc;
    cf_redis_config_init(&rc);
    rc.host = host;
    if (port)
        rc.port = port;
    rc.user = g->redis_user;
    rc.password = g->redis_password;
    return cf_redis_new(&rc, false, err);
}

cf_workspace_store *cf_cli_workspace_store_new(const cf_cli_globals *g, cf_redis *r, cf_error *err)
{
    cf_workspace_config wc;
    cf_workspace_config_init(&wc);
    wc.key_prefix = g->redis_prefix;
    wc.id_prefix = g->state_prefix;
    return cf_workspace_store_new(r, &wc, err);
}

/* No I/O: the first command connects. */
static int state_open(const cf_cli_globals *g, state_conn *c, cf_error *err)
{
    memset(c, 0, sizeof(*c));
    c->r = cf_cli_redis_open(g, err);
    if (!c->r)
        return -1;
    cf_checkpoint_config cc;
    cf_checkpoint_config_init(&cc);
    cc.key_prefix = g->redis_prefix;
    cc.id_prefix = g->state_prefix;
    c->max_state = cc.max_state_bytes;
    c->max_meta = cc.max_meta_bytes;
    c->ws = cf_cli_workspace_store_new(g, c->r, err);
    c->cs = c->ws ? cf_checkpoint_store_new(c->r, &cc, err) : NULL;
    if (!c->cs) {
        cf_workspace_store_destroy(c->ws);
        cf_redis_destroy(c->r);
        memset(c, 0, sizeof(*c));
        return -1;
    }
    return 0;
}

static void state_close(state_conn *c)
{
    cf_checkpoint_store_destroy(c->cs);
    cf_workspace_store_destroy(c->ws);
    cf_redis_destroy(c->r);
    memset(c, 0, sizeof(*c));
}

/* Ids of workspaces and threads: the state library's alphabet. */
static bool state_id_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 128)
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
              ch == '_' || ch == '-'))
            return false;
    }
    return true;
}

/* ---- snapshot materialization -------------------------------------------- */

static int write_fully(int fd, const uint8_t *d, size_t n)
{
    while (n) {
        ssize_t w = write(fd, d, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        d += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Creates path below dirfd: directories with mkdirat + openat(O_NOFOLLOW),
 * the file with O_CREAT|O_EXCL|O_NOFOLLOW.  path is already checked. */
static int put_below(int dirfd, const char *path, const uint8_t *data, size_t len, cf_error *err)
{
    char *copy = cf_strdup(path);
    if (!copy)
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    int cur = dirfd, rc = -1;
    char *comp = copy, *slash;
    while ((slash = strchr(comp, '/'))) {
        *slash = '\0';
        if (mkdirat(cur, comp, 0755) < 0 && errno != EEXIST) {
            cf_error_set_errno(err, CF_E_SYSTEM, errno, "%s: creating directory '%s'", path, comp);
            goto out;
        }
        int nfd = openat(cur, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (nfd < 0) {
            int e = errno;
            cf_error_set_errno(err, e == ELOOP || e == ENOTDIR ? CF_E_INVALID : CF_E_SYSTEM, e,
                               "%s: '%s' is not a directory", path, comp);
            goto out;
        }
        if (cur != dirfd)
            close(cur);
        cur = nfd;
        comp = slash + 1;
    }
    int fd = openat(cur, comp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        cf_error_set_errno(err, e == EEXIST || e == ELOOP || e == EISDIR ? CF_E_INVALID : CF_E_SYSTEM, e,
                           "%s: cannot create", path);
        goto out;
    }
    if (write_fully(fd, data, len) < 0) {
        cf_error_set_errno(err, CF_E_SYSTEM, errno, "%s: write", path);
        close(fd);
        goto out;
    }
    if (close(fd) < 0) {
        cf_error_set_errno(err, CF_E_SYSTEM, errno, "%s: close", path);
        goto out;
    }
    rc = 0;
out:
    if (cur != dirfd)
        close(cur);
    free(copy);
    return rc;
}

int cf_cli_materialize(const char *dir, const cf_ws_listing *l, const cf_workspace_store *ws, cf_error *err)
{
    if (mkdir(dir, 0755) < 0 && errno != EEXIST)
        return cf_error_set_errno(err, CF_E_SYSTEM, errno, "%s", dir);
    /* O_NOFOLLOW: the target itself must not be a symlink either. */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) {
        int e = errno;
        return cf_error_set_errno(err, e == ELOOP || e == ENOTDIR ? CF_E_INVALID : CF_E_SYSTEM, e,
                                  "%s: not a directory (symlinks are refused)", dir);
    }
    int dup_fd = dup(dfd);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) {
        int e = errno;
        if (dup_fd >= 0)
            close(dup_fd);
        close(dfd);
        return cf_error_set_errno(err, CF_E_SYSTEM, e, "%s", dir);
    }
    struct dirent *de;
    bool empty = true;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0) {
            empty = false;
            break;
        }
    closedir(d);
    if (!empty) {
        close(dfd);
        return cf_error_set(err, CF_E_INVALID, "%s: directory is not empty", dir);
    }
    for (size_t i = 0; i < l->n; i++) {
        const cf_ws_entry *e = &l->entries[i];
        /* Entries come from Redis: hostile until checked. */
        if (!e->path || cf_workspace_path_check(ws, e->path, err) < 0 || (e->size && !e->data)) {
            if (!e->path || (e->size && !e->data))
                cf_error_set(err, CF_E_INVALID, "snapshot entry %zu: missing path or data", i);
            close(dfd);
            return cf_error_wrap(err, "snapshot entry %zu", i);
        }
        if (put_below(dfd, e->path, e->data, e->size, err) < 0) {
            close(dfd);
            return -1;
        }
    }
    close(dfd);
    return 0;
}

/* ---- workspace ---------------------------------------------------------- */

static const char workspace_help[] =
    "Usage: codefleet [GLOBAL OPTIONS] workspace SUBCOMMAND ...\n"
    "\n"
    "  create ID [--project P] [--session S]      new empty workspace (revision 0)\n"
    "  put ID [--expect-rev N] [--manifest FILE.json] [--delete REL]... [REL=LOCALPATH...]\n"
    "                                             write files (and deletes) as ONE new revision\n"
    "  get ID PATH [-o FILE]                      one file to stdout (or FILE)\n"
    "  ls ID                                      paths and sizes at the current revision\n"
    "  rm ID PATH... [--expect-rev N]             delete files (one revision)\n"
    "  snapshot ID -o DIR [--rev N]               write all files of a revision into DIR\n"
    "                                             (created; must be empty if it exists)\n"
    "  info ID                                    revision, counts, sizes, retention\n"
    "  delete ID                                  remove the workspace and its history\n"
    "\n"
    "--expect-rev N: compare-and-set (exit 8 if the workspace moved on).  A manifest is a\n"
    "JSON array of {\"path\": REL, \"file\": LOCALPATH} or {\"path\": REL, \"content\": TEXT}.\n"
    "Exit codes: 2 invalid input (nothing written), 6 Redis error, 7 not found, 8 conflict.\n";

typedef struct put_set {
    cf_ws_file *files;
    char **paths;
    uint8_t **datas;
    size_t n, cap;
    char **deletes;
    size_t ndel;
} put_set;

static void put_set_free(put_set *s)
{
    for (size_t i = 0; i < s->n; i++) {
        free(s->paths[i]);
        free(s->datas[i]);
    }
    for (size_t i = 0; i < s->ndel; i++)
        free(s->deletes[i]);
    free(s->files);
    free(s->paths);
    free(s->datas);
    free(s->deletes);
    memset(s, 0, sizeof(*s));
}

/* Takes ownership of path and content (freed on failure too). */
static int put_set_add(put_set *s, char *path, cf_bytes content, cf_error *err)
{
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 16;
        cf_ws_file *nf = realloc(s->files, nc * sizeof(*nf));
        if (nf)
            s->files = nf;
        char **np = realloc(s->paths, nc * sizeof(*np));
        if (np)
            s->paths = np;
        uint8_t **nd = realloc(s->datas, nc * sizeof(*nd));
        if (nd)
            s->datas = nd;
        if (!nf || !np || !nd) {
            free(path);
            free(content.data);
            return cf_error_set(err, CF_E_NOMEM, "out of memory");
        }
        s->cap = nc;
    }
    s->paths[s->n] = path;
    s->datas[s->n] = content.data;
    s->files[s->n].path = path;
    s->files[s->n].data = content.data ? (const void *)content.data : (const void *)"";
    s->files[s->n].len = content.len;
    s->n++;
    return 0;
}

static int put_spec(put_set *s, const char *spec, cf_error *err)
{
    const char *eq = strchr(spec, '=');
    if (!eq || eq == spec || !eq[1])
        return cf_error_set(err, CF_E_INVALID, "expected REL=LOCALPATH, got '%s'", spec);
    char *path = cf_strndup(spec, (size_t)(eq - spec));
    if (!path)
        return cf_error_set(err, CF_E_NOMEM, "out of memory");
    cf_bytes b;
    if (cf_cli_read_file(eq + 1, CF_CLI_MAX_FILE_BYTES, &b, err) < 0) {
        free(path);
        /* A missing local file is the caller's input, not a missing workspace. */
        err->code = CF_E_INVALID;
        return -1;
    }
    return put_set_add(s, path, b, err);
}

static int load_manifest(put_set *s, const char *file, cf_error *err)
{
    cf_bytes text;
    if (cf_cli_read_file(file, CF_CLI_MAX_FILE_BYTES, &text, err) < 0) {
        err->code = CF_E_INVALID;
        return cf_error_wrap(err, "--manifest");
    }
    json_error_t je;
    /* JSON_ALLOW_NUL: a "\u0000" in a path must reach the check below and
     * be refused by name, not be cut short. */
    json_t *j = json_loadb((const char *)text.data, text.len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    free(text.data);
    if (!j)
        return cf_error_set(err, CF_E_INVALID, "%s:%d:%d: %s", file, je.line, je.column, je.text);
    int rc = 0;
    if (!json_is_array(j)) {
        rc = cf_error_set(err, CF_E_INVALID, "%s: expected a JSON array of {\"path\", \"file\"|\"content\"}", file);
        goto out;
    }
    size_t i;
    json_t *it;
    json_array_foreach(j, i, it)
    {
        json_t *p = json_object_get(it, "path");
        json_t *f = json_object_get(it, "file");
        json_t *c = json_object_get(it, "content");
        if (!json_is_string(p) || (!json_is_string(f) == !json_is_string(c))) {
            rc = cf_error_set(err, CF_E_INVALID, "%s[%zu]: expected {\"path\": REL, \"file\": LOCALPATH} or "
                                                 "{\"path\": REL, \"content\": TEXT}", file, i);
            goto out;
        }
        if (strlen(json_string_value(p)) != json_string_length(p)) {
            rc = cf_error_set(err, CF_E_INVALID, "%s[%zu].path: contains a NUL byte", file, i);
            goto out;
        }
        char *path = cf_strdup(json_string_value(p));
        cf_bytes b = {0};
        if (!path) {
            rc = cf_error_set(err, CF_E_NOMEM, "out of memory");
            goto out;
        }
        if (f) {
            if (strlen(json_string_value(f)) != json_string_length(f) ||
                cf_cli_read_file(json_string_value(f), CF_CLI_MAX_FILE_BYTES, &b, err) < 0) {
                if (strlen(json_string_value(f)) != json_string_length(f))
                    cf_error_set(err, CF_E_INVALID, "file contains a NUL byte");
                err->code = CF_E_INVALID;
                free(path);
                rc = cf_error_wrap(err, "%s[%zu].file", file, i);
                goto out;
            }
        } else if (cf_bytes_set(&b, json_string_value(c), json_string_length(c)) < 0) {
            free(path);
            rc = cf_error_set(err, CF_E_NOMEM, "out of memory");
            goto out;
        }
        if (put_set_add(s, path, b, err) < 0) {
            rc = -1;
            goto out;
        }
    }
out:
    json_decref(j);
    return rc;
}

static int parse_rev(const char *v, int64_t *out, const char *what, cf_error *err)
{
    return cf_parse_i64(v, 0, INT64_MAX, out, what, err);
}

static int ws_put(const cf_cli_globals *g, state_conn *c, int argc, char **argv, bool rm)
{
    static const struct option lo[] = {
        {"expect-rev", required_argument, NULL, 'e'},
        {"manifest", required_argument, NULL, 'm'},
        {"delete", required_argument, NULL, 'd'},
        {NULL, 0, NULL, 0},
    };
    const char *cmd = rm ? "workspace rm" : "workspace put";
    cf_error err = {0};
    int64_t expect = CF_WS_ANY_REV;
    put_set s = {0};
    int rc = CF_EXIT_USAGE, ch;
    opterr = 0;
    optind = 0;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (ch) {
        case 'e':
            if (parse_rev(optarg, &expect, "--expect-rev", &err) < 0) {
                usage(cmd, err.msg);
                goto out;
            }
            break;
        case 'm':
            if (rm || load_manifest(&s, optarg, &err) < 0) {
                usage(cmd, rm ? "--manifest is for put" : err.msg);
                goto out;
            }
            break;
        case 'd': {
            if (rm) {
                usage(cmd, "--delete is for put (rm takes paths)");
                goto out;
            }
            char **nd = realloc(s.deletes, (s.ndel + 1) * sizeof(*nd));
            if (!nd || !(nd[s.ndel] = cf_strdup(optarg))) {
                s.deletes = nd ? nd : s.deletes;
                fputs("codefleet: out of memory\n", stderr);
                goto out;
            }
            s.deletes = nd;
            s.ndel++;
            break;
        }
        default:
            bad_option(cmd, argc, argv);
            goto out;
        }
    }
    if (optind >= argc) {
        usage(cmd, "expected a workspace ID");
        goto out;
    }
    const char *id = argv[optind++];
    if (!state_id_ok(id)) {
        usage(cmd, "invalid workspace ID (1..128 characters of [A-Za-z0-9._-])");
        goto out;
    }
    for (; optind < argc; optind++) {
        if (rm) {
            char **nd = realloc(s.deletes, (s.ndel + 1) * sizeof(*nd));
            if (!nd || !(nd[s.ndel] = cf_strdup(argv[optind]))) {
                s.deletes = nd ? nd : s.deletes;
                fputs("codefleet: out of memory\n", stderr);
                goto out;
            }
            s.deletes = nd;
            s.ndel++;
        } else if (put_spec(&s, argv[optind], &err) < 0) {
            usage(cmd, err.msg);
            goto out;
        }
    }
    if (rm && s.ndel == 0) {
        usage(cmd, "expected at least one PATH");
        goto out;
    }
    if (!rm && s.n == 0 && s.ndel == 0) {
        usage(cmd, "nothing to write: give REL=LOCALPATH, --manifest or --delete");
        goto out;
    }
    /* Every path is checked with the store's rules before Redis is asked. */
    for (size_t i = 0; i < s.n + s.ndel; i++) {
        const char *p = i < s.n ? s.paths[i] : s.deletes[i - s.n];
        if (cf_workspace_path_check(c->ws, p, &err) < 0) {
            report_safe(cmd, CF_EXIT_USAGE, err.msg);
            goto out;
        }
    }
    int64_t new_rev = 0;
    if (rm && s.ndel == 1)
        rc = cf_workspace_delete_file(c->ws, id, expect, s.deletes[0], &new_rev, &err);
    else
        rc = cf_workspace_commit(c->ws, id, expect, s.files, s.n, (const char *const *)s.deletes, s.ndel, &new_rev,
                                 &err);
    if (rc < 0) {
        rc = fail_state(&err, cmd);
        goto out;
    }
    if (g->json)
        emit_json(json_pack("{s:s, s:I, s:I, s:I}", "workspace", id, "rev", (json_int_t)new_rev, "written",
                            (json_int_t)s.n, "deleted", (json_int_t)s.ndel));
    else
        printf("workspace %s: revision %" PRId64 "\n", id, new_rev);
    rc = CF_EXIT_OK;
out:
    put_set_free(&s);
    return rc;
}

static int ws_create(const cf_cli_globals *g, state_conn *c, int argc, char **argv)
{
    static const struct option lo[] = {
        {"project", required_argument, NULL, 'p'},
        {"session", required_argument, NULL, 's'},
        {NULL, 0, NULL, 0},
    };
    const char *project = NULL, *session = NULL;
    int ch;
    opterr = 0;
    optind = 0;
    while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        if (ch == 'p')
            project = optarg;
        else if (ch == 's')
            session = optarg;
        else
            return bad_option("workspace create", argc, argv);
    }
    if (optind + 1 != argc || !state_id_ok(argv[optind]))
        return usage("workspace create", "expected one valid workspace ID");
    cf_error err = {0};
    if (cf_workspace_create(c->ws, argv[optind], project, session, &err) < 0)
        return fail_state(&err, "workspace create");
    if (g->json)
        emit_json(json_pack("{s:s, s:I}", "workspace", argv[optind], "rev", (json_int_t)0));
    else
        printf("workspace %s created (revision 0)\n", argv[optind]);
    return CF_EXIT_OK;
}

static int ws_get(const cf_cli_globals *g, state_conn *c, int argc, char **argv)
{
    static const struct option lo[] = {
        {"output", required_argument, NULL, 'o'},
        {NULL, 0, NULL, 0},
    };
    const char *outpath = NULL;
    int ch;
    opterr = 0;
    optind = 0;
    while ((ch = getopt_long(argc, argv, "o:", lo, NULL)) != -1) {
        if (ch == 'o')
            outpath = optarg;
        else
            return bad_option("workspace get", argc, argv);
    }
    if (optind + 2 != argc || !state_id_ok(argv[optind]))
        return usage("workspace get", "expected a workspace ID and a PATH");
    const char *id = argv[optind], *path = argv[optind + 1];
    cf_error err = {0};
    if (cf_workspace_path_check(c->ws, path, &err) < 0)
        return fail_state(&err, "workspace get");
    uint8_t *data = NULL;
    size_t len = 0;
    int64_t rev = 0;
    if (cf_workspace_get(c->ws, id, path, &data, &len, &rev, &err) < 0)
        return fail_state(&err, "workspace get");
    int rc = CF_EXIT_OK;
    if (outpath) {
        int fd = open(outpath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0 || write_fully(fd, data, len) < 0 || close(fd) < 0) {
            char msg[1200];
            snprintf(msg, sizeof(msg), "%.1000s: %s", outpath, strerror(errno));
            rc = report_safe("workspace get", CF_EXIT_USAGE, msg);
        } else if (g->json) {
            emit_json(json_pack("{s:s, s:s, s:I, s:I, s:s}", "workspace", id, "path", path, "rev", (json_int_t)rev,
                                "size", (json_int_t)len, "output", outpath));
        }
    } else if (g->json) {
        json_t *o = json_pack("{s:s, s:s, s:I, s:I}", "workspace", id, "path", path, "rev", (json_int_t)rev, "size",
                              (json_int_t)len);
        cf_bytes b = {.data = data, .len = len};
        /* Text as a string, anything else as {"base64"} (SPEC.md bytes rule). */
        if (o && cf_utf8_valid(data, len) && !memchr(data, 0, len))
            json_object_set_new(o, "content", json_stringn((const char *)b.data, b.len));
        else if (o) {
            char *b64 = cf_base64_encode(data, len, NULL);
            json_object_set_new(o, "content", json_pack("{s:s}", "base64", b64 ? b64 : ""));
            free(b64);
        }
        emit_json(o);
    } else {
        if (len && fwrite(data, 1, len, stdout) != len)
            rc = CF_EXIT_TRANSPORT;
        fflush(stdout);
    }
    free(data);
    return rc;
}

static int ws_ls(const cf_cli_globals *g, state_conn *c, int argc, char **argv)
{
    if (argc != 2 || !state_id_ok(argv[1]))
        return usage("workspace ls", "expected one valid workspace ID");
    cf_error err = {0};
    cf_ws_listing l = {0};
    if (cf_workspace_list(c->ws, argv[1], &l, &err) < 0)
        return fail_state(&err, "workspace ls");
    if (g->json) {
        json_t *files = json_array();
        for (size_t i = 0; files && i < l.n; i++)
            json_array_append_new(files, json_pack("{s:s, s:I}", "path", l.entries[i].path, "size",
                                                   (json_int_t)l.entries[i].size));
        emit_json(json_pack("{s:s, s:I, s:o}", "workspace", argv[1], "rev", (json_int_t)l.rev, "files", files));
    } else {
        printf("workspace %s, revision %" PRId64 ", %zu file(s)\n", argv[1], l.rev, l.n);
        for (size_t i = 0; i < l.n; i++) {
            printf("%10zu  ", l.entries[i].size);
            print_safe(stdout, l.entries[i].path);
            putchar('\n');
        }
    }
    cf_ws_listing_clear(&l);
    return CF_EXIT_OK;
}

static int ws_snapshot(const cf_cli_globals *g, state_conn *c, int argc, char **argv)
{
    static const struct option lo[] = {
        {"output", required_argument, NULL, 'o'},
        {"rev", required_argument, NULL, 'r'},
        {NULL, 0, NULL, 0},
    };
    const char *dir = NULL;
    int64_t rev = CF_WS_ANY_REV;
    cf_error err = {0};
    int ch;
    opterr = 0;
    optind = 0;
    while ((ch = getopt_long(argc, argv, "o:", lo, NULL)) != -1) {
        if (ch == 'o')
            dir = optarg;
        else if (ch == 'r') {
            if (parse_rev(optarg, &rev, "--rev", &err) < 0)
                return usage("workspace snapshot", err.msg);
        } else
            return bad_option("workspace snapshot", argc, argv);
    }
    if (optind + 1 != argc || !state_id_ok(argv[optind]))
        return usage("workspace snapshot", "expected one valid workspace ID");
    if (!dir)
        return usage("workspace snapshot", "-o DIR is required");
    const char *id = argv[optind];
    cf_ws_listing l = {0};
    if (cf_workspace_snapshot(c->ws, id, rev, &l, &err) < 0)
        return fail_state(&err, "workspace snapshot");
    int rc = CF_EXIT_OK;
    if (cf_cli_materialize(dir, &l, c->ws, &err) < 0) {
        rc = report_safe("workspace snapshot", err.code == CF_E_INVALID ? CF_EXIT_USAGE : CF_EXIT_TRANSPORT,
                         err.msg);
    } else if (g->json) {
        emit_json(json_pack("{s:s, s:I, s:s, s:I}", "workspace", id, "rev", (json_int_t)l.rev, "dir", dir, "files",
                            (json_int_t)l.n));
    } else {
        printf("workspace %s revision %" PRId64 ": %zu file(s) written to %s\n", id, l.rev, l.n, dir);
    }
    cf_ws_listing_clear(&l);
    return rc;
}

static int ws_info(const cf_cli_globals *g, state_conn *c, int argc, char **argv)
{
    if (argc != 2 || !state_id_ok(argv[1]))
        return usage("workspace info", "expected one valid workspace ID");
    cf_error err = {0};
    cf_ws_info in = {0};
    if (cf_workspace_info(c->ws, argv[1], &in, &err) < 0)
        return fail_state(&err, "workspace info");
    if (g->json) {
        emit_json(json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "workspace", argv[1],
                            "project", in.project ? in.project : "", "session", in.session ? in.session : "", "rev",
                            (json_int_t)in.rev, "oldest_rev", (json_int_t)in.oldest_rev, "files",
                            (json_int_t)in.nfiles, "bytes", (json_int_t)in.total_bytes, "created_us",
                            (json_int_t)in.created_us, "updated_us", (json_int_t)in.updated_us, "ttl_us",
                            (json_int_t)in.ttl_us, "history", (json_int_t)in.history));
    } else {
        char size[32], created[40], updated[40], ttl[32];
        cf_format_size((int64_t)in.total_bytes, size, sizeof(size));
        cf_format_time(in.created_us, created, sizeof(created));
        cf_format_time(in.updated_us, updated, sizeof(updated));
        cf_format_span(in.ttl_us, ttl, sizeof(ttl));
        printf("workspace:  %s\nrevision:   %" PRId64 " (oldest readable %" PRId64 ")\nfiles:      %zu, %s\n",
               argv[1], in.rev, in.oldest_rev, in.nfiles, size);
        fputs("project:    ", stdout);
        print_safe(stdout, in.project ? in.project : "");
        fputs("\nsession:    ", stdout);
        print_safe(stdout, in.session ? in.session : "");
        printf("\ncreated:    %s\nupdated:    %s\nexpires:    %s%s\nhistory:    %u revisions kept\n", created,
               updated, in.ttl_us ? "after " : "never", in.ttl_us ? ttl : "", in.history);
        if (in.ttl_us)
            fputs("            (idle: each write starts the time again)\n", stdout);
    }
    cf_ws_info_clear(&in);
    return CF_EXIT_OK;
}

static int ws_delete(const cf_cli_globals *g, state_conn *c, int argc, char **argv)
{
    if (argc != 2 || !state_id_ok(argv[1]))
        return usage("workspace delete", "expected one valid workspace ID");
    cf_error err = {0};
    if (cf_workspace_delete(c->ws, argv[1], &err) < 0)
        return fail_state(&err, "workspace delete");
    if (g->json)
        emit_json(json_pack("{s:s, s:b}", "workspace", argv[1], "deleted", 1));
    else
        printf("workspace %s deleted\n", argv[1]);
    return CF_EXIT_OK;
}

int cf_cli_cmd_workspace(const cf_cli_globals *g, int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(workspace_help, argc < 2 ? stderr : stdout);
        return argc < 2 ? CF_EXIT_USAGE : CF_EXIT_OK;
    }
    for (int i = 2; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(workspace_help, stdout);
            return CF_EXIT_OK;
        }
    const char *sub = argv[1];
    static const char *const subs[] = {"create", "put", "get", "ls", "rm", "snapshot", "info", "delete"};
    bool known = false;
    for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
        known |= strcmp(sub, subs[i]) == 0;
    if (!known)
        return usage("workspace", "unknown subcommand (create|put|get|ls|rm|snapshot|info|delete)");
    state_conn c;
    cf_error err = {0};
    if (state_open(g, &c, &err) < 0)
        return usage("workspace", err.msg);
    int sargc = argc - 1;
    char **sargv = argv + 1;
    int rc;
    if (strcmp(sub, "create") == 0)
        rc = ws_create(g, &c, sargc, sargv);
    else if (strcmp(sub, "put") == 0)
        rc = ws_put(g, &c, sargc, sargv, false);
    else if (strcmp(sub, "rm") == 0)
        rc = ws_put(g, &c, sargc, sargv, true);
    else if (strcmp(sub, "get") == 0)
        rc = ws_get(g, &c, sargc, sargv);
    else if (strcmp(sub, "ls") == 0)
        rc = ws_ls(g, &c, sargc, sargv);
    else if (strcmp(sub, "snapshot") == 0)
        rc = ws_snapshot(g, &c, sargc, sargv);
    else if (strcmp(sub, "info") == 0)
        rc = ws_info(g, &c, sargc, sargv);
    else
        rc = ws_delete(g, &c, sargc, sargv);
    state_close(&c);
    return rc;
}

/* ---- checkpoint ----------------------------------------------------------- */

static const char checkpoint_help[] =
    "Usage: codefleet [GLOBAL OPTIONS] checkpoint SUBCOMMAND THREAD ...\n"
    "\n"
    "  save THREAD (--state JSON | --state-file PATH) [--meta JSON] [--parent ID | --root]\n"
    "       [--expect-latest ID | --expect-empty] [--writer-seq N]\n"
    "                                   new checkpoint (state: a JSON object); prints its id\n"
    "  load THREAD [ID]                 the state (default: of the latest) as JSON\n"
    "  list THREAD [--limit N] [--before EPOCH_US] [--after EPOCH_US]\n"
    "                                   checkpoints, newest first\n"
    "  history THREAD [--from ID] [--limit N]\n"
    "                                   the parent chain from ID (default: the latest)\n"
    "  rollback THREAD TARGET_ID [--expect-latest ID] [--writer-seq N]\n"
    "                                   new latest checkpoint with TARGET_ID's state\n"
    "  rm THREAD (ID | --thread-all)    delete one checkpoint, or the whole thread\n"
    "\n"
    "Exit codes: 2 invalid input (nothing written), 6 Redis error, 7 not found,\n"
    "8 conflict (--expect-latest did not match, or an older --writer-seq).\n";

static json_t *checkpoint_json(const cf_checkpoint *cp, bool with_state)
{
    json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:I}", "thread", cp->thread, "id", cp->id, "parent", cp->parent,
                          "created_us", (json_int_t)cp->created_us, "writer_seq", (json_int_t)cp->writer_seq);
    if (o && with_state) {
        json_set_value(o, "state", "state_msgpack", cp->state, cp->state_len);
        json_set_value(o, "meta", "meta_msgpack", cp->meta, cp->meta_len);
    }
    return o;
}

static int print_checkpoints(const cf_cli_globals *g, const char *thread, const cf_checkpoints *l)
{
    if (g->json) {
        json_t *a = json_array();
        for (size_t i = 0; a && i < l->n; i++)
            json_array_append_new(a, checkpoint_json(&l->items[i], false));
        emit_json(json_pack("{s:s, s:o}", "thread", thread, "checkpoints", a));
        return CF_EXIT_OK;
    }
    for (size_t i = 0; i < l->n; i++) {
        const cf_checkpoint *cp = &l->items[i];
        char when[40];
        cf_format_time(cp->created_us, when, sizeof(when));
        printf("%s  created %s  parent %s", cp->id, when, cp->parent[0] ? cp->parent : "-");
        if (cp->writer_seq)
            printf("  writer_seq %" PRId64, cp->writer_seq);
        putchar('\n');
    }
    if (l->n == 0)
        printf("thread %s: no checkpoints\n", thread);
    return CF_EXIT_OK;
}

enum {
    CO_STATE = 256,
    CO_STATE_FILE,
    CO_META,
    CO_PARENT,
    CO_ROOT,
    CO_EXPECT_LATEST,
    CO_EXPECT_EMPTY,
    CO_WRITER_SEQ,
    CO_LIMIT,
    CO_BEFORE,
    CO_AFTER,
    CO_FROM,
    CO_THREAD_ALL,
};

static const struct option cp_opts[] = {
    {"state", required_argument, NULL, CO_STATE},
    {"state-file", required_argument, NULL, CO_STATE_FILE},
    {"meta", required_argument, NULL, CO_META},
    {"parent", required_argument, NULL, CO_PARENT},
    {"root", no_argument, NULL, CO_ROOT},
    {"expect-latest", required_argument, NULL, CO_EXPECT_LATEST},
    {"expect-empty", no_argument, NULL, CO_EXPECT_EMPTY},
    {"writer-seq", required_argument, NULL, CO_WRITER_SEQ},
    {"limit", required_argument, NULL, CO_LIMIT},
    {"before", required_argument, NULL, CO_BEFORE},
    {"after", required_argument, NULL, CO_AFTER},
    {"from", required_argument, NULL, CO_FROM},
    {"thread-all", no_argument, NULL, CO_THREAD_ALL},
    {NULL, 0, NULL, 0},
};

/* Which options each subcommand accepts. */
static bool cp_opt_allowed(const char *sub, int opt)
{
    switch (opt) {
    case CO_STATE:
    case CO_STATE_FILE:
    case CO_META:
    case CO_PARENT:
    case CO_ROOT:
    case CO_EXPECT_EMPTY:
        return strcmp(sub, "save") == 0;
    case CO_EXPECT_LATEST:
    case CO_WRITER_SEQ:
        return strcmp(sub, "save") == 0 || strcmp(sub, "rollback") == 0;
    case CO_LIMIT:
        return strcmp(sub, "list") == 0 || strcmp(sub, "history") == 0;
    case CO_BEFORE:
    case CO_AFTER:
        return strcmp(sub, "list") == 0;
    case CO_FROM:
        return strcmp(sub, "history") == 0;
    case CO_THREAD_ALL:
        return strcmp(sub, "rm") == 0;
    default:
        return false;
    }
}

typedef struct cp_args {
    cf_bytes state, meta;
    bool have_state, root, expect_empty, thread_all;
    const char *parent, *expect_latest, *from;
    int64_t writer_seq, limit, before, after;
} cp_args;

static int cp_parse(const char *sub, int argc, char **argv, cp_args *a, cf_error *err)
{
    int ch;
    opterr = 0;
    optind = 0;
    while ((ch = getopt_long(argc, argv, "", cp_opts, NULL)) != -1) {
        if (ch == '?' || ch == ':') {
            char msg[300], cmd[64];
            snprintf(cmd, sizeof(cmd), "checkpoint %s", sub);
            return cf_error_set(err, CF_E_INVALID, "%s", cf_cli_option_error(cmd, argc, argv, msg, sizeof(msg)));
        }
        if (!cp_opt_allowed(sub, ch))
            return cf_error_set(err, CF_E_INVALID, "option --%s does not apply to checkpoint %s", cf_cli_opt_name(cp_opts, ch),
                                sub);
        switch (ch) {
        case CO_STATE:
        case CO_STATE_FILE: {
            if (a->have_state)
                return cf_error_set(err, CF_E_INVALID, "give the state once (--state or --state-file)");
            cf_bytes text = {0};
            if (ch == CO_STATE_FILE) {
                if (cf_cli_read_file(optarg, CF_CLI_MAX_FILE_BYTES, &text, err) < 0) {
                    err->code = CF_E_INVALID;
                    return cf_error_wrap(err, "--state-file");
                }
            }
            int rc = ch == CO_STATE ? cf_cli_state_from_json(optarg, strlen(optarg), "--state", &a->state, err)
                                    : cf_cli_state_from_json((const char *)text.data, text.len, "--state-file",
                                                             &a->state, err);
            free(text.data);
            if (rc < 0)
                return -1;
            a->have_state = true;
            break;
        }
        case CO_META:
            free(a->meta.data);
            if (cf_cli_state_from_json(optarg, strlen(optarg), "--meta", &a->meta, err) < 0)
                return -1;
            break;
        case CO_PARENT: a->parent = optarg; break;
        case CO_ROOT: a->root = true; break;
        case CO_EXPECT_LATEST: a->expect_latest = optarg; break;
        case CO_EXPECT_EMPTY: a->expect_empty = true; break;
        case CO_WRITER_SEQ:
            if (cf_parse_i64(optarg, 1, INT64_MAX, &a->writer_seq, "--writer-seq", err) < 0)
                return -1;
            break;
        case CO_LIMIT:
            if (cf_parse_i64(optarg, 1, 1000, &a->limit, "--limit", err) < 0)
                return -1;
            break;
        case CO_BEFORE:
            if (cf_parse_i64(optarg, 1, INT64_MAX, &a->before, "--before", err) < 0)
                return -1;
            break;
        case CO_AFTER:
            if (cf_parse_i64(optarg, 0, INT64_MAX, &a->after, "--after", err) < 0)
                return -1;
            break;
        case CO_FROM: a->from = optarg; break;
        case CO_THREAD_ALL: a->thread_all = true; break;
        default: return cf_error_set(err, CF_E_INVALID, "unknown option");
        }
    }
    if (a->root && a->parent)
        return cf_error_set(err, CF_E_INVALID, "--root and --parent exclude each other");
    if (a->expect_empty && a->expect_latest)
        return cf_error_set(err, CF_E_INVALID, "--expect-empty and --expect-latest exclude each other");
    return 0;
}

int cf_cli_cmd_checkpoint(const cf_cli_globals *g, int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(checkpoint_help, argc < 2 ? stderr : stdout);
        return argc < 2 ? CF_EXIT_USAGE : CF_EXIT_OK;
    }
    for (int i = 2; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(checkpoint_help, stdout);
            return CF_EXIT_OK;
        }
    const char *sub = argv[1];
    static const char *const subs[] = {"save", "load", "list", "history", "rollback", "rm"};
    bool known = false;
    for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
        known |= strcmp(sub, subs[i]) == 0;
    if (!known)
        return usage("checkpoint", "unknown subcommand (save|load|list|history|rollback|rm)");
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "checkpoint %s", sub);

    cp_args a = {0};
    cf_error err = {0};
    state_conn c = {0};
    int rc = CF_EXIT_USAGE;
    int sargc = argc - 1;
    char **sargv = argv + 1;
    if (cp_parse(sub, sargc, sargv, &a, &err) < 0) {
        usage(cmd, err.msg);
        goto out;
    }
    int npos = sargc - optind;
    char **pos = sargv + optind;
    if (npos < 1 || !state_id_ok(pos[0])) {
        usage(cmd, "expected a valid THREAD id (1..128 characters of [A-Za-z0-9._-])");
        goto out;
    }
    const char *thread = pos[0];
    int want_pos = strcmp(sub, "load") == 0 ? -1 /* 1 or 2 */
                   : strcmp(sub, "rollback") == 0 ? 2
                   : strcmp(sub, "rm") == 0       ? (a.thread_all ? 1 : 2)
                                                  : 1;
    if ((want_pos < 0 && npos > 2) || (want_pos > 0 && npos != want_pos)) {
        usage(cmd, strcmp(sub, "rm") == 0 ? "expected THREAD and an ID, or THREAD --thread-all"
                                          : "wrong number of arguments");
        goto out;
    }
    if (strcmp(sub, "save") == 0 && !a.have_state) {
        usage(cmd, "--state JSON or --state-file PATH is required");
        goto out;
    }
    if (state_open(g, &c, &err) < 0) {
        usage(cmd, err.msg);
        goto out;
    }
    /* Validate the state with the store's own rules before sending. */
    if (a.have_state && (cf_checkpoint_state_check(c.cs, a.state.data, a.state.len, c.max_state, &err) < 0 ||
                         (a.meta.len && cf_checkpoint_state_check(c.cs, a.meta.data, a.meta.len, c.max_meta, &err) < 0))) {
        rc = fail_state(&err, cmd);
        goto out;
    }

    char id[CF_CHECKPOINT_ID_MAX + 1] = "";
    cf_checkpoint_save_opts so = {
        .parent = a.root ? "" : a.parent,
        .expected_latest = a.expect_empty ? "" : a.expect_latest,
        .writer_seq = a.writer_seq,
        .meta = a.meta.len ? a.meta.data : NULL,
        .meta_len = a.meta.len,
    };
    if (strcmp(sub, "save") == 0 || strcmp(sub, "rollback") == 0) {
        int r = strcmp(sub, "save") == 0
                    ? cf_checkpoint_save(c.cs, thread, a.state.data, a.state.len, &so, id, &err)
                    : cf_checkpoint_rollback(c.cs, thread, pos[1], &so, id, &err);
        if (r < 0) {
            rc = fail_state(&err, cmd);
            goto out;
        }
        if (g->json)
            emit_json(json_pack("{s:s, s:s}", "thread", thread, "id", id));
        else
            printf("%s\n", id);
        rc = CF_EXIT_OK;
    } else if (strcmp(sub, "load") == 0) {
        cf_checkpoint cp = {0};
        int r = npos == 2 ? cf_checkpoint_get(c.cs, thread, pos[1], &cp, &err)
                          : cf_checkpoint_latest(c.cs, thread, &cp, &err);
        if (r < 0) {
            rc = fail_state(&err, cmd);
            goto out;
        }
        if (g->json) {
            emit_json(checkpoint_json(&cp, true));
        } else {
            json_t *st = cf_msgpack_to_json(cp.state, cp.state_len, NULL);
            char *s = st ? json_dumps(st, JSON_INDENT(2) | JSON_ENSURE_ASCII | JSON_PRESERVE_ORDER) : NULL;
            printf("%s\n", s ? s : "(state not representable as JSON; use --json)");
            free(s);
            json_decref(st);
        }
        cf_checkpoint_clear(&cp);
        rc = CF_EXIT_OK;
    } else if (strcmp(sub, "list") == 0 || strcmp(sub, "history") == 0) {
        cf_checkpoints l = {0};
        cf_checkpoint_query q = {.limit = (size_t)a.limit, .before_us = a.before, .after_us = a.after};
        int r = strcmp(sub, "list") == 0 ? cf_checkpoint_list(c.cs, thread, &q, &l, &err)
                                         : cf_checkpoint_history(c.cs, thread, a.from, (size_t)a.limit, false, &l, &err);
        if (r < 0) {
            rc = fail_state(&err, cmd);
            goto out;
        }
        rc = print_checkpoints(g, thread, &l);
        cf_checkpoints_clear(&l);
    } else { /* rm */
        int r = a.thread_all ? cf_checkpoint_delete_thread(c.cs, thread, &err)
                             : cf_checkpoint_delete(c.cs, thread, pos[1], &err);
        if (r < 0) {
            rc = fail_state(&err, cmd);
            goto out;
        }
        if (g->json)
            emit_json(a.thread_all ? json_pack("{s:s, s:b}", "thread", thread, "deleted", 1)
                                   : json_pack("{s:s, s:s, s:b}", "thread", thread, "id", pos[1], "deleted", 1));
        else if (a.thread_all)
            printf("thread %s deleted\n", thread);
        else
            printf("checkpoint %s deleted\n", pos[1]);
        rc = CF_EXIT_OK;
    }
out:
    state_close(&c);
    free(a.state.data);
    free(a.meta.data);
    return rc;
}
