/* otel.c - each finished call as OpenTelemetry spans, one OTLP/JSON line
 * appended to console.otel_file (docs/router.md, "OpenTelemetry export").
 *
 * A line is one ExportTraceServiceRequest in the OTLP JSON encoding (the
 * JSON Lines file the Collector's file exporter writes and its
 * otlpjsonfile receiver reads): hex trace/span ids, 64-bit integers as
 * decimal strings, enums as integers, lowerCamelCase keys. One root span
 * per call (the pipeline), one child per stage that ran.
 *
 * The spans are made from the call's trace as the ring keeps it (trace.c),
 * already masked, so the file shows the caller's words exactly when GET
 * /v1/calls/ID does.
 *
 * Writing: the line is built in memory and appended with one write() on
 * an O_APPEND descriptor, so lines from several writers never interleave
 * and a file truncated by logrotate's copytruncate is continued at its new
 * end. A local file's write() lands in the page cache (microseconds); the
 * loop never waits on anything else. A failure (full disk, unwritable
 * path) never fails the call: the line is counted as dropped and logged
 * once until a line is written again. SIGHUP reopens the path (rotation
 * by rename).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "router/obs.h"

#define OTEL_SCOPE "switchboard.router"
/* The layout of the spans' attributes below; bumped when it changes. */
#define OTEL_SCOPE_VERSION "1"
/* String attributes are cut here: a span describes a call, the ring (and
 * GET /v1/calls/ID) has the whole text. */
#define OTEL_STR_MAX 1024
enum { KIND_INTERNAL = 1, KIND_SERVER = 2 };            /* Span.SpanKind */
enum { CODE_UNSET = 0, CODE_OK = 1, CODE_ERROR = 2 };   /* Status.StatusCode */

struct rt_otel {
    char *path;                     /* NULL: export off */
    int fd;                         /* -1: not open (off, or the open failed) */
    bool failing;                   /* the last line was not written (logged once) */
    uint64_t written, failed;
    char host[256];
    sb_jw line, scratch;            /* reused from call to call */
};

bool rt_otel_on(const rt_obs *o) { return o && o->otel && o->otel->path; }

static int open_file(struct rt_otel *t, char *err) {
    t->fd = open(t->path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0600);
    if (t->fd >= 0) return 0;
    t->failing = true;              /* the error below is the one log line */
    return sb_seterr(err, SB_EIO, "otel_file '%s': %s; calls are not exported (SIGHUP retries)", t->path,
                     strerror(errno));
}

int rt_otel_configure(rt_obs *o, const char *path, char *err) {
    struct rt_otel *t = o->otel;
    if (!path && !t) return 0;
    if (!t) {
        if (!(t = o->otel = sb_calloc(1, sizeof *t))) return sb_seterr(err, SB_ENOMEM, "otel_file: out of memory");
        t->fd = -1;
        sb_jw_init(&t->line);
        sb_jw_init(&t->scratch);
        if (gethostname(t->host, sizeof t->host - 1)) snprintf(t->host, sizeof t->host, "unknown");
    }
    if (t->fd >= 0) close(t->fd);   /* each reload reopens: rotation by rename */
    t->fd = -1;
    t->failing = false;
    sb_free(t->path);
    t->path = NULL;
    if (!path) return 0;
    if (!(t->path = sb_strdup(path))) return sb_seterr(err, SB_ENOMEM, "otel_file: out of memory");
    return open_file(t, err);
}

/* Copy every line match() does not claim from `in` to `out`; how many were
 * left out, or -1 (errno). */
static int copy_kept(FILE *in, FILE *out, rt_text_match_fn match, void *arg) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int dropped = 0;
    while ((n = getline(&line, &cap, in)) > 0) {
        if (match(arg, line, (size_t)n)) dropped++;
        else if (fwrite(line, 1, (size_t)n, out) != (size_t)n) { dropped = -1; break; }
    }
    free(line);
    return dropped >= 0 && ferror(in) ? -1 : dropped;
}

/* The kept lines go to a scratch file first, then back over the export
 * from its first byte, and the export is cut to their length: the erased
 * lines' bytes are overwritten in the file's own blocks (a rename would
 * only free them), and the O_APPEND descriptor continues at the new end. */
int rt_otel_erase(rt_obs *o, rt_text_match_fn match, void *arg, char *err) {
    struct rt_otel *t = o ? o->otel : NULL;
    if (!t || !t->path) return 0;
    char scratch[4096];
    snprintf(scratch, sizeof scratch, "%s.erase", t->path);
    FILE *in = fopen(t->path, "rb"), *tmp = NULL;
    int fd = -1, n = -1;
    if (!in) return errno == ENOENT ? 0 : sb_seterr(err, SB_EIO, "otel_file '%s': %s", t->path, strerror(errno));
    int sfd = open(scratch, O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (sfd >= 0 && !(tmp = fdopen(sfd, "w+b"))) close(sfd);
    if (tmp) n = copy_kept(in, tmp, match, arg);
    fclose(in);
    if (n > 0 && (fd = open(t->path, O_WRONLY | O_CLOEXEC)) >= 0 && !fflush(tmp) && !fseeko(tmp, 0, SEEK_SET)) {
        char buf[1 << 16];
        size_t got;
        off_t at = 0;
        while (n >= 0 && (got = fread(buf, 1, sizeof buf, tmp)) > 0)
            if (pwrite(fd, buf, got, at) != (ssize_t)got) n = -1;
            else at += (off_t)got;
        if (n >= 0 && (ftruncate(fd, at) || fsync(fd))) n = -1;
    } else if (n > 0) {
        n = -1;
    }
    int saved = errno;
    if (fd >= 0) close(fd);
    if (tmp) fclose(tmp);
    unlink(scratch);
    if (n < 0) return sb_seterr(err, SB_EIO, "otel_file '%s': erase: %s", t->path, strerror(saved));
    return n;
}

void rt_otel_free(rt_obs *o) {
    struct rt_otel *t = o->otel;
    if (!t) return;
    if (t->fd >= 0) close(t->fd);
    sb_free(t->path);
    sb_jw_free(&t->line);
    sb_jw_free(&t->scratch);
    sb_free(t);
    o->otel = NULL;
}

void rt_otel_render(rt *r, sb_jw *w) {
    const struct rt_otel *t = r->obs ? r->obs->otel : NULL;
    char b[400];
    int n = snprintf(b, sizeof b,
                     "# HELP switchboard_otel_lines_total Calls exported to console.otel_file, by result.\n"
                     "# TYPE switchboard_otel_lines_total counter\n"
                     "switchboard_otel_lines_total{result=\"written\"} %llu\n"
                     "switchboard_otel_lines_total{result=\"failed\"} %llu\n",
                     (unsigned long long)(t ? t->written : 0), (unsigned long long)(t ? t->failed : 0));
    sb_jw_raw(w, b, (size_t)n);
}

/* -------------------------------------------------------------- values */

static void attr_key(sb_jw *w, const char *key, const char *type) {
    sb_jw_obj(w);
    sb_jw_key(w, "key"); sb_jw_str(w, key);
    sb_jw_key(w, "value");
    sb_jw_obj(w);
    sb_jw_key(w, type);
}
static void attr_end(sb_jw *w) { sb_jw_obj_end(w); sb_jw_obj_end(w); }

static void attr_str(sb_jw *w, const char *key, const char *s) {
    if (!s) return;
    size_t n = strlen(s);
    attr_key(w, key, "stringValue");
    sb_jw_strn(w, s, n > OTEL_STR_MAX ? OTEL_STR_MAX : n);     /* a cut character becomes U+FFFD */
    attr_end(w);
}
static void attr_int(sb_jw *w, const char *key, int64_t v) {
    char b[24];
    snprintf(b, sizeof b, "%lld", (long long)v);
    attr_key(w, key, "intValue"); sb_jw_str(w, b); attr_end(w);
}
static void attr_num(sb_jw *w, const char *key, const sb_json *v) {
    if (sb_json_type_of(v) != SB_JSON_NUMBER) return;
    attr_key(w, key, "doubleValue"); sb_jw_num(w, sb_json_num(v)); attr_end(w);
}
static void attr_bool(sb_jw *w, const char *key, bool v) {
    attr_key(w, key, "boolValue"); sb_jw_bool(w, v); attr_end(w);
}
/* The trace's string field, when it has one. */
static void attr_of(sb_jw *w, const char *key, const sb_json *obj, const char *field) {
    attr_str(w, key, sb_json_str(sb_json_get(obj, field)));
}
static void usage_attrs(sb_jw *w, const sb_json *usage) {
    const sb_json *pt = sb_json_get(usage, "prompt_tokens"), *ct = sb_json_get(usage, "completion_tokens");
    if (sb_json_num(pt) > 0) attr_int(w, "gen_ai.usage.input_tokens", (int64_t)sb_json_num(pt));
    if (sb_json_num(ct) > 0) attr_int(w, "gen_ai.usage.output_tokens", (int64_t)sb_json_num(ct));
}

static void nanos(sb_jw *w, const char *key, int64_t ns) {
    char b[24];
    snprintf(b, sizeof b, "%lld", (long long)ns);
    sb_jw_key(w, key);
    sb_jw_str(w, b);
}

/* --------------------------------------------------------------- ids */

typedef struct {
    char trace[33], root[17];
    uint64_t root_id;
} otel_ids;

static bool is_hex32(const char *s) {
    size_t n = strspn(s, "0123456789abcdefABCDEF");
    return n == 32 && !s[32] && strspn(s, "0") < 32;      /* all zeros is not a valid trace id */
}

/* splitmix64's finaliser: a bijection of 64-bit values that scatters
 * neighbours, so distinct inputs give distinct, unrelated-looking ids. */
static uint64_t mix64(uint64_t x) {
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void span_hex(uint64_t v, char out[17]) { snprintf(out, 17, "%016llx", (unsigned long long)v); }

/* The trace id is the call id when that is already one (a caller's own
 * X-Call-Id of 32 hex digits, lower-cased: its spans join the caller's
 * trace), else the first 16 bytes of SHA-256(call id), so any tool can
 * find a call's trace from its X-Call-Id. Span ids mix the trace id with
 * the call's start (a caller's id used twice gives distinct spans) and the
 * stage's index; one SHA-256 per call at most (OpenSSL's costs ~8 µs). */
static void make_ids(const char *call_id, int64_t start_ns, otel_ids *id) {
    if (is_hex32(call_id)) {
        for (int i = 0; i < 32; i++) id->trace[i] = (char)(call_id[i] | 0x20);   /* ASCII lower case */
        id->trace[32] = '\0';
    } else {
        uint8_t d[SB_SHA256_LEN];
        sb_sha256(call_id, strlen(call_id), d);
        sb_hex_encode(d, 16, id->trace);
    }
    uint64_t h = (uint64_t)start_ns;
    for (int i = 0; i < 32; i++) h = mix64(h ^ (uint64_t)(unsigned char)id->trace[i]);
    id->root_id = h ? h : 1;        /* all zeros is not a valid span id */
    span_hex(id->root_id, id->root);
}

/* Stage k: distinct from each other (mix64 is a bijection) and, but for a
 * 2^-64 chance, from the root. */
static void stage_span_id(const otel_ids *id, size_t k, char out[17]) {
    uint64_t v = mix64(id->root_id + 1 + (uint64_t)k);
    span_hex(v ? v : 2, out);
}

/* --------------------------------------------------------------- spans */

static void span_head(sb_jw *w, const otel_ids *id, const char *span, const char *parent, const char *name,
                      int kind, int64_t t0, int64_t t1) {
    sb_jw_obj(w);
    sb_jw_key(w, "traceId"); sb_jw_str(w, id->trace);
    sb_jw_key(w, "spanId"); sb_jw_str(w, span);
    if (parent) { sb_jw_key(w, "parentSpanId"); sb_jw_str(w, parent); }
    sb_jw_key(w, "name"); sb_jw_str(w, name);
    sb_jw_key(w, "kind"); sb_jw_int(w, kind);
    nanos(w, "startTimeUnixNano", t0);
    nanos(w, "endTimeUnixNano", t1);
}

static void span_status(sb_jw *w, int code, const char *message) {
    sb_jw_key(w, "status");
    sb_jw_obj(w);
    if (code == CODE_ERROR && message) { sb_jw_key(w, "message"); sb_jw_str(w, message); }
    sb_jw_key(w, "code"); sb_jw_int(w, code);
    sb_jw_obj_end(w);
}

/* The time window of one call: the root's [t0, t1] in Unix ns, and where
 * the run started (stage start_ms counts from there). */
typedef struct {
    int64_t t0, t1, run0;
    const char *error;              /* the call's (masked) failure */
} window;

static int64_t clamp(int64_t v, const window *win) { return v < win->t0 ? win->t0 : v > win->t1 ? win->t1 : v; }

/* A stage that started: ok, error, or (not_run) still running when the call
 * failed, which then ends with the call. A skipped stage has no span. */
static void stage_span(sb_jw *w, const otel_ids *id, size_t k, const sb_json *st, const window *win) {
    const sb_json *start = sb_json_get(st, "start_ms");
    const char *status = sb_json_str(sb_json_get(st, "status")), *kind = sb_json_str(sb_json_get(st, "kind"));
    if (sb_json_type_of(start) != SB_JSON_NUMBER || !status || !strcmp(status, "skipped")) return;
    bool ran = !strcmp(status, "ok") || !strcmp(status, "error");
    int64_t s0 = clamp(win->run0 + (int64_t)(sb_json_num(start) * 1e6), win);
    int64_t s1 = ran ? clamp(s0 + (int64_t)(sb_json_num(sb_json_get(st, "ms")) * 1e6), win) : win->t1;
    char span[17], name[2 * SB_CONFIG_MAX_NAME + 2];
    stage_span_id(id, k, span);
    snprintf(name, sizeof name, "%s %s", kind ? kind : "stage", sb_json_str(sb_json_get(st, "name")));
    span_head(w, id, span, id->root, name, KIND_INTERNAL, s0, s1);
    sb_jw_key(w, "attributes");
    sb_jw_arr(w);
    attr_of(w, "switchboard.stage", st, "name");
    attr_of(w, "switchboard.stage.kind", st, "kind");
    attr_str(w, "switchboard.stage.status", status);
    attr_of(w, "gen_ai.request.model", st, "model");
    usage_attrs(w, sb_json_get(st, "usage"));
    attr_of(w, "switchboard.stage.output", st, "output");
    sb_jw_arr_end(w);
    const char *err = ran ? sb_json_str(sb_json_get(st, "error")) : win->error;
    span_status(w, !strcmp(status, "ok") ? CODE_OK : CODE_ERROR, err ? err : "did not finish");
    sb_jw_obj_end(w);
}

/* HTTP server conventions: a 4xx is the caller's doing (unset), a 5xx
 * the call's failure (error). */
static void root_span(sb_jw *w, const otel_ids *id, const sb_json *tr, const rt_call_info *ci, const window *win) {
    const sb_json *res = sb_json_get(tr, "result");
    char name[SB_CONFIG_MAX_NAME + 16];
    snprintf(name, sizeof name, "pipeline %s", ci->pipeline);
    span_head(w, id, id->root, NULL, name, KIND_SERVER, win->t0, win->t1);
    sb_jw_key(w, "attributes");
    sb_jw_arr(w);
    attr_str(w, "switchboard.call_id", ci->call_id);
    attr_str(w, "switchboard.pipeline", ci->pipeline);
    attr_str(w, "switchboard.source", ci->source);
    attr_str(w, "switchboard.cache", ci->cache);
    attr_int(w, "switchboard.status", ci->status);
    if (!strcmp(ci->source, "http")) attr_int(w, "http.response.status_code", ci->status);
    attr_of(w, "switchboard.caller", tr, "caller");
    attr_bool(w, "switchboard.caller_masked", sb_json_bool(sb_json_get(tr, "caller_masked")));
    attr_of(w, "switchboard.intent", res, "intent");
    attr_num(w, "switchboard.confidence", sb_json_get(res, "confidence"));
    if (sb_json_str(sb_json_get(res, "intent")))
        attr_bool(w, "switchboard.fallback", sb_json_bool(sb_json_get(res, "fallback")));
    usage_attrs(w, sb_json_get(res, "usage"));
    sb_jw_arr_end(w);
    const sb_json *ttft = sb_json_get(res, "ttft_ms");
    if (sb_json_type_of(ttft) == SB_JSON_NUMBER) {      /* the answer's first streamed token */
        sb_jw_key(w, "events");
        sb_jw_arr(w);
        sb_jw_obj(w);
        nanos(w, "timeUnixNano", clamp(win->run0 + (int64_t)(sb_json_num(ttft) * 1e6), win));
        sb_jw_key(w, "name"); sb_jw_str(w, "first_token");
        sb_jw_obj_end(w);
        sb_jw_arr_end(w);
    }
    span_status(w, ci->status >= 500 ? CODE_ERROR : ci->status >= 400 ? CODE_UNSET : CODE_OK, win->error);
    sb_jw_obj_end(w);
}

static void resource(sb_jw *w, const struct rt_otel *t) {
    sb_jw_key(w, "resource");
    sb_jw_obj(w);
    sb_jw_key(w, "attributes");
    sb_jw_arr(w);
    attr_str(w, "service.name", "switchboard");
    attr_str(w, "host.name", t->host);
    attr_int(w, "process.pid", (int64_t)getpid());
    sb_jw_arr_end(w);
    sb_jw_obj_end(w);
}

/* The line for one call: {"resourceSpans": [{resource, scopeSpans: [{scope,
 * spans}]}]} and its newline. */
static void request_json(sb_jw *w, const struct rt_otel *t, const sb_json *tr, const rt_call_info *ci,
                         const window *win) {
    otel_ids id;
    make_ids(ci->call_id, win->t0, &id);
    sb_jw_obj(w);
    sb_jw_key(w, "resourceSpans");
    sb_jw_arr(w);
    sb_jw_obj(w);
    resource(w, t);
    sb_jw_key(w, "scopeSpans");
    sb_jw_arr(w);
    sb_jw_obj(w);
    sb_jw_key(w, "scope");
    sb_jw_obj(w);
    sb_jw_key(w, "name"); sb_jw_str(w, OTEL_SCOPE);
    sb_jw_key(w, "version"); sb_jw_str(w, OTEL_SCOPE_VERSION);
    sb_jw_obj_end(w);
    sb_jw_key(w, "spans");
    sb_jw_arr(w);
    root_span(w, &id, tr, ci, win);
    const sb_json *stages = sb_json_get(sb_json_get(tr, "result"), "stages");
    for (size_t k = 0; k < sb_json_len(stages); k++) stage_span(w, &id, k, sb_json_at(stages, k), win);
    sb_jw_arr_end(w);
    sb_jw_obj_end(w);
    sb_jw_arr_end(w);
    sb_jw_obj_end(w);
    sb_jw_arr_end(w);
    sb_jw_obj_end(w);
    sb_jw_raw(w, "\n", 1);
}

/* ------------------------------------------------------------- writing */

static void write_line(struct rt_otel *t, const char *p, size_t n) {
    ssize_t k = -1;
    int e = EBADF;
    if (t->fd >= 0) {
        do k = write(t->fd, p, n); while (k < 0 && errno == EINTR);
        e = k < 0 ? errno : ENOSPC;                     /* a short write: the disk filled up */
    }
    if (k == (ssize_t)n) {
        t->written++;
        if (t->failing) sb_info("otel_file '%s': writing again", t->path);
        t->failing = false;
        return;
    }
    /* A partial line is ended, so the next one starts on its own line
     * (readers skip the broken one). */
    if (k > 0 && write(t->fd, "\n", 1) < 0) e = errno;
    t->failed++;
    if (!t->failing && t->fd >= 0)
        sb_warn("otel_file '%s': %s; calls are not exported until it works again (counted in /metrics)", t->path,
                strerror(e));
    t->failing = true;
}

void rt_otel_export(rt *r, const rt_call_info *ci, const char *trace, size_t len) {
    struct rt_otel *t = r->obs ? r->obs->otel : NULL;
    if (!t || !t->path) return;
    sb_jw *s = &t->scratch, *w = &t->line;
    sb_jw_reset(s);
    sb_jw_reset(w);
    sb_jw_raw(s, trace, len);       /* the ring's trace has no closing brace */
    sb_jw_raw(s, "}", 1);
    sb_json_doc *d = NULL;
    if (s->oom || sb_json_parse(s->p, s->len, &d, NULL)) {
        t->failed++;
        sb_warn("call %s: not exported (out of memory)", ci->call_id);
        return;
    }
    const sb_json *tr = sb_json_root(d);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    window win;
    win.t1 = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    double mono = sb_now_s();
    win.t0 = win.t1 - (int64_t)((mono - ci->t0) * 1e9);
    win.run0 = win.t0 + (ci->run ? (int64_t)((rt_run_t0(ci->run) - ci->t0) * 1e9) : 0);
    win.error = sb_json_str(sb_json_get(tr, "error"));
    request_json(w, t, tr, ci, &win);
    if (w->oom) {
        t->failed++;
        sb_warn("call %s: not exported (out of memory)", ci->call_id);
    } else {
        write_line(t, w->p, w->len);
    }
    sb_json_doc_free(d);
    /* Memory back after an unusually large call. */
    if (s->cap > (1u << 20)) { sb_jw_free(s); sb_jw_init(s); }
    if (w->cap > (1u << 20)) { sb_jw_free(w); sb_jw_init(w); }
}
