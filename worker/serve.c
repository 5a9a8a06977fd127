/* serve.c - `switchboard worker`: one model behind a Unix socket.
 *
 * Two threads. The loop thread runs libevent: it accepts, decodes, answers
 * the cheap methods (health, info, tokenize, detokenize) at once and queues
 * generate/score jobs (embed jobs when the model is an encoder: serve_embed.c).
 * The compute thread runs them on the engine (whose own pool spreads each
 * matmul over the cores): with --parallel 1 one job at a time (here), with
 * more as engine tasks batched into one forward pass per step
 * (serve_batch.c); requests are parsed and answered in serve_jobs.c. Tokens
 * and final responses go back through sb_ipc_reply_*, which is safe from
 * any thread. So a long generation never delays a health check, and a
 * cancel (or a client that disconnects) reaches the running job through its
 * atomic flag within one token (one step when batched).
 *
 * SIGTERM/SIGINT: stop accepting, let queued and running jobs finish until
 * the drain deadline, then exit 0. Exit 2 (SB_EXIT_CONFIG) when the model
 * cannot be loaded: the supervisor does not restart such a worker.
 */
#include <event2/event.h>
#ifdef __linux__
#include <malloc.h>
#endif
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/sb_cmd.h"
#include "common/sb_common.h"
#include "worker/engine/sb_engine.h"
#include "ipc/sb_ipc.h"
#include "worker/kernels/sb_kq.h"
#include "worker/engine/sb_lora.h"
#include "worker/engine/sb_spec.h"
#include "worker/serve_embed.h"
#include "worker/serve_impl.h"

/* --parallel default: see docs/BATCHING.md "Scheduling" for the measurement. */
#define DEFAULT_PARALLEL 4


/* The running job's final response is about to go out: its slot is free
 * from here on, not from when the compute thread gets back to the queue.
 * Otherwise a client that sends its next request the moment it reads the
 * answer is told 'busy' (the router keeps two calls at a worker, so with
 * max_queue 1 the second one found 1 running + 1 queued). */
static void job_answered(void *arg) {
    worker *w = arg;
    pthread_mutex_lock(&w->mu);
    w->running = 0;
    w->current = NULL;
    pthread_mutex_unlock(&w->mu);
}

static void *compute_main(void *arg) {
    worker *w = arg;
    sb_mp_writer *wr = NULL;
    if (sb_mp_writer_new(&wr)) return NULL;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        while (!w->head && !w->stopping) pthread_cond_wait(&w->cv, &w->mu);
        job *j = w->head;
        if (!j) { pthread_mutex_unlock(&w->mu); break; }
        w->head = j->next;
        if (!w->head) w->tail = NULL;
        w->n_queued--;
        w->running = 1;
        w->current = j;
        pthread_mutex_unlock(&w->mu);
        sb_ipc_reply_on_final(j->reply, job_answered, w);
        if (sb_ipc_reply_cancelled(j->reply)) sb_ipc_reply_error(j->reply, SB_IPC_CANCELLED, "cancelled before it started");
        else if (j->kind == JOB_SCORE) sb_serve_run_score(w, j, wr);
        else if (j->kind == JOB_EMBED) sb_serve_embed(w->encoder, &w->named, j->reply, j->params, &j->cancel, wr);
        else sb_serve_run_generate(w, j, wr);
        if (w->engine) sb_serve_publish_stats(w);
        pthread_mutex_lock(&w->mu);
        w->running = 0;
        w->current = NULL;
        pthread_mutex_unlock(&w->mu);
        sb_free(j);
    }
    sb_mp_writer_free(wr);
    return NULL;
}

/* ---- loop-thread handlers -------------------------------------------------- */

static void on_cancel(void *arg, sb_ipc_reply *r) {
    (void)r;
    atomic_store(&((job *)arg)->cancel, 1);
}

static void enqueue(worker *w, sb_ipc_reply *r, const sb_mp_obj *params, int kind) {
    /* Each kind of model does one kind of work; say which, rather than a
     * crash or an empty answer. */
    if ((kind == JOB_EMBED) != (w->encoder != NULL)) {
        sb_ipc_reply_error(r, SB_IPC_INVALID_REQUEST,
                           w->encoder ? "model '%s' is an encoder (embedding) model: it answers 'embed', not "
                                        "'generate' or 'score'"
                                      : "model '%s' is a generative (decoder) model: 'embed' needs an encoder "
                                        "model such as multilingual-e5-small",
                           w->name);
        return;
    }
    pthread_mutex_lock(&w->mu);
    if (w->stopping) {
        pthread_mutex_unlock(&w->mu);
        sb_ipc_reply_error(r, SB_IPC_BUSY, "worker '%s' is shutting down", w->name);
        return;
    }
    /* max_queue counts requests waiting behind the running ones, so 0 still
     * serves `parallel` requests at once instead of refusing everything. */
    if (w->n_queued + w->running >= w->max_queue + w->parallel) {
        int q = w->n_queued;
        pthread_mutex_unlock(&w->mu);
        sb_ipc_reply_error(r, SB_IPC_BUSY, "worker '%s' queue is full (%d waiting); retry later", w->name, q);
        return;
    }
    job *j = sb_calloc(1, sizeof *j);
    if (!j) {
        pthread_mutex_unlock(&w->mu);
        sb_ipc_reply_error(r, SB_IPC_INTERNAL, "out of memory");
        return;
    }
    j->reply = r;
    j->params = params;
    j->kind = kind;
    /* A bad value is reported when the job is parsed; here it only orders. */
    int64_t prio = 0;
    if (sb_mp_as_i64(sb_mp_map_get(params, "priority"), &prio) == 0) j->priority = (int)SB_MAX(-1000, SB_MIN(1000, prio));
    sb_ipc_reply_on_cancel(r, on_cancel, j);
    /* Higher priority first, FIFO among equals. */
    job **at = &w->head;
    while (*at && (*at)->priority >= j->priority) at = &(*at)->next;
    j->next = *at;
    *at = j;
    if (!j->next) w->tail = j;
    w->n_queued++;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static void h_generate(void *ud, sb_ipc_reply *r, const char *m, const sb_mp_obj *p) { enqueue(ud, r, p, JOB_GENERATE); }
static void h_score(void *ud, sb_ipc_reply *r, const char *m, const sb_mp_obj *p) { enqueue(ud, r, p, JOB_SCORE); }
static void h_embed(void *ud, sb_ipc_reply *r, const char *m, const sb_mp_obj *p) { enqueue(ud, r, p, JOB_EMBED); }

/* tokenize/detokenize read the decoder's vocabulary. */
static bool no_vocab(worker *w, sb_ipc_reply *r) {
    if (!w->encoder) return false;
    sb_ipc_reply_error(r, SB_IPC_INVALID_REQUEST, "model '%s' is an encoder (embedding) model: 'embed' reports "
                       "token counts; tokenize and detokenize serve generative models", w->name);
    return true;
}

/* The batching figures health and info share (a router's /metrics reads
 * them): sequences, KV blocks, prefix cache, speculative tokens. 9 keys. */
static void put_load(sb_mp_writer *wr, const worker *w, int running, const sb_engine_stats *st) {
    sb_mp_kv_i64(wr, "parallel", w->parallel);
    sb_mp_kv_i64(wr, "running", running);
    sb_mp_kv_i64(wr, "kv_blocks_total", st->blocks_total);
    sb_mp_kv_i64(wr, "kv_blocks_free", st->blocks_free);
    sb_mp_kv_u64(wr, "prefix_hits", st->prefix_hits);
    sb_mp_kv_u64(wr, "prefix_misses", st->prefix_misses);
    sb_mp_kv_u64(wr, "prefix_tokens_reused", st->prefix_tokens_reused);
    sb_mp_kv_u64(wr, "spec_drafted", st->spec_drafted);
    sb_mp_kv_u64(wr, "spec_accepted", st->spec_accepted);
}

void sb_serve_publish_stats(worker *w) {
    sb_engine_stats st;
    sb_engine_stats_get(w->engine, &st);
    pthread_mutex_lock(&w->mu);
    w->stats = st;
    pthread_mutex_unlock(&w->mu);
}

static void h_health(void *ud, sb_ipc_reply *r, const char *m, const sb_mp_obj *p) {
    worker *w = ud;
    sb_mp_writer *wr;
    if (sb_mp_writer_new(&wr)) { sb_ipc_reply_error(r, SB_IPC_INTERNAL, "out of memory"); return; }
    pthread_mutex_lock(&w->mu);
    int queued = w->n_queued, running = w->running, stopping = w->stopping;
    sb_engine_stats st = w->stats;
    pthread_mutex_unlock(&w->mu);
    sb_mp_map(wr, 15);
    sb_mp_kv_str(wr, "status", stopping ? "draining" : "ok");
    sb_mp_kv_str(wr, "kind", w->encoder ? "encoder" : "decoder");
    sb_mp_kv_str(wr, "name", w->name);
    sb_mp_kv_i64(wr, "pid", getpid());
    sb_mp_kv_i64(wr, "queued", queued);
    sb_mp_kv_bool(wr, "busy", running != 0);
    put_load(wr, w, running, &st);
    sb_ipc_reply_ok(r, wr);
    sb_mp_writer_free(wr);
}

static void h_info(void *ud, sb_ipc_reply *r, const char *m, const sb_mp_obj *p) {
    worker *w = ud;
    if (w->encoder) {
        sb_mp_writer *wr;
        if (sb_mp_writer_new(&wr)) { sb_ipc_reply_error(r, SB_IPC_INTERNAL, "out of memory"); return; }
        sb_serve_encoder_info(w->encoder, w->name, w->model_path, wr);
        sb_ipc_reply_ok(r, wr);
        sb_mp_writer_free(wr);
        return;
    }
    const sb_model *model = sb_engine_model(w->engine);
    const sb_hparams *hp = sb_model_hparams(model);
    const sb_gguf *g = sb_model_gguf(model);
    uint64_t ft = 0;
    sb_gguf_get_u64(g, "general.file_type", &ft);
    sb_str gname = { "", 0 };
    sb_gguf_get_str(g, "general.name", &gname);
    sb_mp_writer *wr;
    if (sb_mp_writer_new(&wr)) { sb_ipc_reply_error(r, SB_IPC_INTERNAL, "out of memory"); return; }
    pthread_mutex_lock(&w->mu);
    int running = w->running;
    sb_engine_stats st = w->stats;
    pthread_mutex_unlock(&w->mu);
    sb_mp_map(wr, 18 + 9);
    put_load(wr, w, running, &st);
    sb_mp_kv_str(wr, "name", w->name);
    sb_mp_kv_str(wr, "model", w->model_path);
    sb_mp_kv_str(wr, "kind", "decoder");
    sb_mp_str(wr, "model_name");
    sb_mp_strn(wr, gname.ptr, gname.len);
    sb_mp_kv_str(wr, "architecture", hp->arch_name);
    sb_mp_kv_u64(wr, "file_size", sb_gguf_file_size(g));
    sb_mp_kv_u64(wr, "file_type", ft);
    sb_mp_kv_i64(wr, "n_vocab", hp->n_vocab);
    sb_mp_kv_i64(wr, "n_ctx", sb_engine_n_ctx(w->engine));
    sb_mp_kv_i64(wr, "n_ctx_train", hp->n_ctx_train);
    sb_mp_kv_i64(wr, "n_embd", hp->n_embd);
    sb_mp_kv_i64(wr, "n_layer", hp->n_layer);
    sb_mp_kv_i64(wr, "n_head", hp->n_head);
    sb_mp_kv_i64(wr, "n_head_kv", hp->n_head_kv);
    sb_mp_kv_str(wr, "chat_template", sb_chat_name(sb_engine_chat_kind(w->engine)));
    sb_mp_kv_str(wr, "tool_format", sb_chat_tools_name(sb_engine_tools_format(w->engine)));
    sb_mp_kv_str(wr, "kernels", sb_kq_level_name(sb_kq_best_level()));
    sb_mp_kv_i64(wr, "pid", getpid());
    sb_ipc_reply_ok(r, wr);
    sb_mp_writer_free(wr);
}

static void h_tokenize(void *ud, sb_ipc_reply *r, const char *m, const sb_mp_obj *p) {
    worker *w = ud;
    char err[SB_ERR_LEN];
    size_t n = 0;
    bool bos = true, special = true;
    int32_t *ids = NULL;
    int rc = 0;
    /* messages are formatted here on the loop thread: the engine's chat
     * template and vocab are read-only after load. */
    static const char *const allowed[] = { "text", "segments", "messages", "add_bos", "special", NULL };
    if (no_vocab(w, r)) return;
    if (sb_mp_check_keys(p, allowed, err) || sb_mp_get_bool(p, "add_bos", SB_MP_OPTIONAL, &bos, err) ||
        sb_mp_get_bool(p, "special", SB_MP_OPTIONAL, &special, err) ||
        (rc = sb_serve_request_tokens(w, p, "text", special, bos, &ids, &n, err))) {
        if (rc == SB_ENOMEM) sb_ipc_reply_error(r, SB_IPC_INTERNAL, "%s", err);
        else sb_serve_reply_invalid(r, err);
        return;
    }
    sb_mp_writer *wr;
    if (sb_mp_writer_new(&wr)) { sb_free(ids); sb_ipc_reply_error(r, SB_IPC_INTERNAL, "out of memory"); return; }
    sb_mp_map(wr, 1);
    sb_mp_str(wr, "tokens");
    sb_mp_array(wr, (uint32_t)n);
    for (size_t i = 0; i < n; i++) sb_mp_i64(wr, ids[i]);
    sb_ipc_reply_ok(r, wr);
    sb_mp_writer_free(wr);
    sb_free(ids);
}

static void h_detokenize(void *ud, sb_ipc_reply *r, const char *m, const sb_mp_obj *p) {
    worker *w = ud;
    char err[SB_ERR_LEN];
    const sb_mp_obj *toks;
    bool special = false;
    static const char *const allowed[] = { "tokens", "special", NULL };
    if (no_vocab(w, r)) return;
    if (sb_mp_check_keys(p, allowed, err) ||
        sb_mp_get_container(p, "tokens", SB_MP_REQUIRED, SB_MP_ARRAY, &toks, err) ||
        sb_mp_get_bool(p, "special", SB_MP_OPTIONAL, &special, err)) {
        sb_serve_reply_invalid(r, err);
        return;
    }
    const sb_vocab *v = sb_engine_vocab(w->engine);
    uint32_t n = sb_mp_count(toks);
    size_t cap = (size_t)n * 16 + 1, len = 0;
    char *buf = sb_malloc(cap);
    if (!buf) { sb_ipc_reply_error(r, SB_IPC_INTERNAL, "out of memory"); return; }
    for (uint32_t i = 0; i < n; i++) {
        int64_t t;
        char piece[256];
        if (sb_mp_as_i64(sb_mp_array_at(toks, i), &t) || t < 0 || t >= sb_vocab_n_tokens(v)) {
            sb_free(buf);
            sb_ipc_reply_error(r, SB_IPC_INVALID_REQUEST, "'tokens'[%u]: expected a token id in [0, %d)", i, sb_vocab_n_tokens(v));
            return;
        }
        int pl = sb_token_to_piece(v, (int32_t)t, piece, sizeof piece, special);
        if (pl < 0) pl = 0;
        if (len + (size_t)pl + 1 > cap) {
            char *nb = sb_realloc(buf, cap = (len + (size_t)pl + 1) * 2);
            if (!nb) { sb_free(buf); sb_ipc_reply_error(r, SB_IPC_INTERNAL, "out of memory"); return; }
            buf = nb;
        }
        memcpy(buf + len, piece, (size_t)pl);
        len += (size_t)pl;
    }
    sb_mp_writer *wr;
    if (sb_mp_writer_new(&wr)) { sb_free(buf); sb_ipc_reply_error(r, SB_IPC_INTERNAL, "out of memory"); return; }
    sb_mp_map(wr, 1);
    sb_mp_str(wr, "text");
    sb_mp_strn(wr, buf, len);
    sb_ipc_reply_ok(r, wr);
    sb_mp_writer_free(wr);
    sb_free(buf);
}

/* ---- shutdown ---------------------------------------------------------------- */

static void drain_check(evutil_socket_t fd, short ev, void *arg) {
    worker *w = arg;
    pthread_mutex_lock(&w->mu);
    int idle = !w->head && !w->running;
    pthread_mutex_unlock(&w->mu);
    if (idle && sb_ipc_server_inflight(w->server) == 0) event_base_loopexit(w->base, NULL);
}

static void on_signal(evutil_socket_t sig, short ev, void *arg) {
    worker *w = arg;
    if (w->stopping) {              /* second signal: leave now */
        sb_warn("worker '%s': second signal, exiting without draining", w->name);
        event_base_loopexit(w->base, NULL);
        return;
    }
    sb_info("worker '%s': signal %d, draining (up to %d ms)", w->name, (int)sig, w->drain_ms);
    pthread_mutex_lock(&w->mu);
    w->stopping = 1;
    pthread_mutex_unlock(&w->mu);
    sb_ipc_server_stop_listening(w->server);
    struct timeval poll = { 0, 20000 }, deadline = { w->drain_ms / 1000, (w->drain_ms % 1000) * 1000 };
    w->drain_timer = event_new(w->base, -1, EV_PERSIST, drain_check, w);
    event_add(w->drain_timer, &poll);
    event_base_loopexit(w->base, &deadline);
}

/* ---- command ----------------------------------------------------------------- */

static void usage(FILE *f) {
    fprintf(f,
            "usage: switchboard worker --model FILE.gguf --socket PATH [options]\n\n"
            "Serve one model over the msgpack socket protocol (docs/ipc.md). Normally\n"
            "started by `switchboard run`; handy by hand for tests.\n\n"
            "  --name NAME        name in logs and replies (default: the file's basename)\n"
            "  --model FILE       GGUF model\n"
            "  --socket PATH      Unix socket to listen on (created 0600)\n"
            "  -t, --threads N    compute threads (default 2)\n"
            "  -c, --ctx N        context size (default min(trained, 4096))\n"
            "  --kv f16|f32       KV cache type (default f16)\n"
            "  --max-queue N      queued generate/score requests before 'busy' (default 16)\n"
            "  --max-tokens N     cap on max_tokens per request (default 4096)\n"
            "  --lookup N         prompt-lookup speculative decoding, N drafted tokens (default 0 = off)\n"
            "  --draft FILE       speculative decoding with a draft model of the same vocabulary\n"
            "                     (checked at start; per request, lookup wins when both apply)\n"
            "  --n-draft N        tokens the draft model proposes per step (default 4)\n"
            "  --adapter FILE     an encoder's LoRA adapter (GGUF, route train's output), applied\n"
            "                     to every text a request does not give another (\"adapter\")\n"
            "  --named-adapter NAME=FILE  another adapter, used for a request's \"adapter\": NAME\n"
            "                     (repeatable, up to 16; \"none\" is the frozen encoder)\n"
            "  --drain-ms N       how long SIGTERM waits for running requests (default 10000)\n"
            "  --deadline-ms N    deadline of a generate without its own deadline_ms (default 0 = none)\n"
            "  --batch N          prompt tokens per forward pass (default 128; scratch memory grows with it)\n"
            "  --parallel N       requests run at once, batched in one forward pass per step (default %d;\n"
            "                     1: one at a time, as before batching)\n"
            "  --kv-mb M          KV pool shared by those requests, MiB (default: one whole context plus\n"
            "                     1024 positions per further request; at least one context)\n\n"
            "Exit status: 0 after a clean drain, 2 when the model or options are bad\n"
            "(a supervisor should not restart it), 1 on other failures.\n\n"
            "Test hook: with SB_TEST_WORKER_ABORT=NAME[,NAME...] in the environment, a\n"
            "worker whose --name is listed aborts (SIGABRT) before loading its model, so\n"
            "tests can make a model crash-loop under the supervisor.\n", DEFAULT_PARALLEL);
}

static int arg_int(const char *opt, const char *v, int lo, int hi, int *out) {
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || *end || end == v || x < lo || x > hi) {
        fprintf(stderr, "worker: %s expects an integer in [%d, %d]\n", opt, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

/* A decoder with room for `parallel` tasks; a --kv-mb below one context is
 * raised to it (a request must always be able to reach n_ctx). */
static int open_engine(worker *w, sb_ctx_params *cp, char *err) {
    cp->n_seq = w->parallel > 1 ? w->parallel : 0;   /* 1: sb_engine_generate alone, no task sequences */
    int rc = sb_engine_open_kv(w->model_path, cp, w->kv_mb, &w->engine, err);
    if (rc || w->kv_mb <= 0) return rc;
    int min = sb_engine_kv_mb_min(w->engine, cp->kv_f32);
    if (w->kv_mb >= min) return 0;
    sb_warn("--kv-mb %d is less than one context (%d MiB): using %d", w->kv_mb, min, min);
    sb_engine_free(w->engine);
    w->engine = NULL;
    w->kv_mb = min;
    return sb_engine_open_kv(w->model_path, cp, min, &w->engine, err);
}

/* The draft model: one sequence with the model's context, so it can draft
 * wherever the model generates; refused unless its token list is the
 * model's (sb_engine_check_draft). */
static int open_draft(worker *w, const sb_ctx_params *cp, char *err) {
    if (!w->engine) return sb_seterr(err, SB_EINVAL, "--draft: '%s' is an encoder model", w->name);
    sb_ctx_params dp = *cp;
    dp.n_seq = 0;
    dp.kv_blocks = 0;
    dp.n_ctx = sb_engine_n_ctx(w->engine);
    char why[SB_ERR_LEN];
    int rc = sb_engine_open(w->draft_path, &dp, &w->draft, why);
    if (!rc) rc = sb_engine_check_draft(w->engine, w->draft, why);
    if (rc) return sb_seterr(err, rc, "draft model %s cannot draft for '%s' (%s): %s", w->draft_path, w->name,
                             w->model_path, why);
    sb_info("draft model %s: %d tokens per draft", w->draft_path, w->n_draft);
    return 0;
}

/* The supervisor's crash-loop handling needs a worker that dies at start-up
 * every time; a crash that a real model file would cause is not on demand. */
static bool test_abort_requested(const char *name) {
    const char *list = getenv("SB_TEST_WORKER_ABORT");
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return true;
        p = end ? end + 1 : NULL;
    }
    return false;
}

/* --named-adapter NAME=FILE (NAME before the first '='; the path may hold more). */
static int arg_named_adapter(worker *w, char *v) {
    char *eq = strchr(v, '=');
    if (!eq || eq == v || !eq[1] || w->named.n == SB_SERVE_MAX_ADAPTERS) {
        fprintf(stderr, "worker: --named-adapter expects NAME=FILE, at most %d times\n", SB_SERVE_MAX_ADAPTERS);
        return 1;
    }
    *eq = '\0';
    w->named.names[w->named.n] = v;
    w->named_paths[w->named.n++] = eq + 1;
    return 0;
}

/* The command line into w and cp. -1: go on; else the exit code. */
static int parse_args(int argc, char **argv, worker *w, sb_ctx_params *cp) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return SB_EXIT_OK; }
        else if (!strcmp(a, "--name") && v) { w->name = v; i++; }
        else if (!strcmp(a, "--model") && v) { w->model_path = v; i++; }
        else if (!strcmp(a, "--socket") && v) { w->socket_path = v; i++; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { bad = arg_int(a, v, 1, 256, &cp->n_threads); i++; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) { bad = arg_int(a, v, 16, 1 << 20, &cp->n_ctx); i++; }
        else if (!strcmp(a, "--max-queue")) { bad = arg_int(a, v, 0, 1 << 16, &w->max_queue); i++; }
        else if (!strcmp(a, "--max-tokens")) { bad = arg_int(a, v, 1, 1 << 20, &w->max_tokens_cap); i++; }
        else if (!strcmp(a, "--lookup")) { bad = arg_int(a, v, 0, SB_SPEC_MAX_DRAFT, &w->lookup); i++; }
        else if (!strcmp(a, "--draft") && v) { w->draft_path = v; i++; }
        else if (!strcmp(a, "--adapter") && v) { w->adapter_path = v; i++; }
        else if (!strcmp(a, "--named-adapter") && v) { bad = arg_named_adapter(w, argv[i + 1]); i++; }
        else if (!strcmp(a, "--n-draft")) { bad = arg_int(a, v, 1, SB_SPEC_MAX_DRAFT, &w->n_draft); i++; }
        else if (!strcmp(a, "--drain-ms")) { bad = arg_int(a, v, 0, 3600000, &w->drain_ms); i++; }
        else if (!strcmp(a, "--deadline-ms")) { bad = arg_int(a, v, 0, 86400000, &w->deadline_ms); i++; }
        else if (!strcmp(a, "--parallel")) { bad = arg_int(a, v, 1, 64, &w->parallel); i++; }
        else if (!strcmp(a, "--kv-mb")) { bad = arg_int(a, v, 0, 1 << 20, &w->kv_mb); i++; }
        else if (!strcmp(a, "--batch")) { bad = arg_int(a, v, 1, 4096, &cp->n_batch); i++; }
        else if (!strcmp(a, "--kv") && v) {
            if (!strcmp(v, "f16")) cp->kv_f32 = 0;
            else if (!strcmp(v, "f32")) cp->kv_f32 = 1;
            else { fprintf(stderr, "worker: --kv expects f16 or f32\n"); bad = 1; }
            i++;
        } else { fprintf(stderr, "worker: unknown or incomplete option '%s'\n", a); usage(stderr); return SB_EXIT_CONFIG; }
        if (bad) return SB_EXIT_CONFIG;
    }
    if (!w->model_path || !w->socket_path) { usage(stderr); return SB_EXIT_CONFIG; }
    return -1;
}

/* The adapter is applied on the fly (y += scale·B·(A·x) after each
 * quantized product) rather than merged: merging would need the adapted
 * matrices in F32 (4x the Q4_0 bytes to stream per token) or requantized
 * (the update rounded away), while the two rank-r products cost r·(in +
 * out) multiply-adds against in·out for the matrix: 3 % of an adapted
 * e5-small layer's at rank 8, nothing for the layers without one. */
static int open_adapter(worker *w, char *err) {
    if (!w->encoder) return sb_seterr(err, SB_EINVAL, "--adapter: '%s' is not an encoder model", w->name);
    char why[SB_ERR_LEN];
    for (int i = 0; i <= w->named.n; i++) {         /* the named ones, then --adapter */
        const char *path = i < w->named.n ? w->named_paths[i] : w->adapter_path;
        struct sb_lora **slot = i < w->named.n ? &w->named.loras[i] : &w->adapter;
        if (!path) continue;
        int rc = sb_encoder_adapter_load(w->encoder, path, slot, why);
        if (rc) return sb_seterr(err, rc, "adapter %s for '%s': %s", path, w->name, why);
        sb_info("adapter %s%s%s: rank %d, alpha %g", path, i < w->named.n ? " as " : "",
                i < w->named.n ? w->named.names[i] : "", (*slot)->rank, (double)(*slot)->alpha);
    }
    return sb_encoder_set_adapter(w->encoder, w->adapter, err);
}

/* The model: a decoder, or an encoder (embedding) model. 0, or the exit
 * code. */
static int load_model(worker *w, sb_ctx_params *cp) {
    char err[SB_ERR_LEN];
    double t0 = sb_now_s();
    /* An encoder (embedding) model is served like any other; only its
     * methods differ. --ctx, --kv and --batch do not apply to it. */
    int rc_open = sb_serve_is_encoder_file(w->model_path)
                      ? sb_encoder_open(w->model_path, cp->n_threads, -1, &w->encoder, err)
                      : open_engine(w, cp, err);
    if (!rc_open && w->draft_path) rc_open = open_draft(w, cp, err);
    if (!rc_open && (w->adapter_path || w->named.n)) rc_open = open_adapter(w, err);
    if (rc_open) {
        sb_error("%s", err);
        sb_engine_free(w->draft);       /* a refused draft leaves both engines open */
        sb_engine_free(w->engine);
        w->draft = NULL;
        w->engine = NULL;
        return SB_EXIT_CONFIG;
    }
    /* Loading freed its temporaries (the GGUF's string arrays, the
     * tokenizer's growing buffers) inside the heap, where they stay
     * resident for the worker's life unless given back. */
#ifdef __GLIBC__
    malloc_trim(0);
#endif
    /* An encoder runs its embed jobs one at a time: say so, so the router
     * sends it no more than that and its queue bound stays max_queue. */
    if (w->encoder) w->parallel = 1;
    if (w->engine) {
        sb_engine_stats st;
        sb_engine_stats_get(w->engine, &st);
        sb_info("parallel %d: KV pool of %d blocks of %d positions", w->parallel, st.blocks_total, SB_KV_BLOCK);
    }
    char desc[256];
    if (w->encoder) sb_encoder_describe(w->encoder, desc, sizeof desc);
    else sb_model_describe(sb_engine_model(w->engine), desc, sizeof desc);
    sb_info("loaded %s in %.2f s: %s; %s %d, %d threads, kernels %s", w->model_path, sb_now_s() - t0, desc,
            w->encoder ? "encoder, window" : "context", w->encoder ? sb_encoder_n_ctx(w->encoder) : sb_engine_n_ctx(w->engine),
            cp->n_threads, sb_kq_level_name(sb_kq_best_level()));
    return 0;
}

/* After the loop: cancel what the drain deadline left, queued or running. */
static void cancel_unfinished(worker *w) {
    pthread_mutex_lock(&w->mu);
    w->stopping = 2;             /* the batch loop cancels its running tasks */
    int abandoned = w->n_queued + w->running;
    for (job *j = w->head; j; j = j->next) atomic_store(&j->cancel, 1);
    /* The running job left the queue: without this it would run to its end. */
    if (w->current) atomic_store(&w->current->cancel, 1);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (abandoned) sb_warn("drain deadline passed with %d request(s) unfinished; cancelling them", abandoned);
}

int sb_cmd_worker(int argc, char **argv) {
    worker w = { .max_queue = 16, .max_tokens_cap = 4096, .drain_ms = 10000, .parallel = DEFAULT_PARALLEL,
                 .n_draft = 4 };
    sb_ctx_params cp;
    sb_ctx_params_default(&cp);
    cp.n_threads = 2;
    /* Scratch buffers scale with the batch: 512 tokens cost ~70 MiB on a
     * 0.5B model and ~180 MiB on an 8B one, per worker. 128 keeps a worker
     * within its memory budget and still fills the prompt tiles. */
    cp.n_batch = 128;
    int rc = parse_args(argc, argv, &w, &cp);
    if (rc >= 0) return rc;
    if (!w.name) {
        const char *b = strrchr(w.model_path, '/');
        w.name = b ? b + 1 : w.model_path;
    }
    char role[96];
    snprintf(role, sizeof role, "worker/%s", w.name);
    sb_log_setup(role, SB_LOG_INFO);
    if (test_abort_requested(w.name)) {
        sb_error("SB_TEST_WORKER_ABORT names '%s': aborting at start-up (test hook)", w.name);
        abort();
    }
    if ((rc = load_model(&w, &cp))) return rc;
    char err[SB_ERR_LEN];
    static const sb_ipc_method methods[] = {
        { "health", h_health }, { "info", h_info }, { "tokenize", h_tokenize }, { "detokenize", h_detokenize },
        { "generate", h_generate }, { "score", h_score }, { "embed", h_embed },
    };
    rc = SB_EXIT_FAIL;
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    w.base = sb_ipc_base_new();
    sb_ipc_server_opts so = { .path = w.socket_path, .methods = methods, .n_methods = SB_ARRAY_LEN(methods), .ud = &w };
    if (!w.base || sb_ipc_server_new(w.base, &so, &w.server, err)) {
        sb_error("cannot serve on %s: %s", w.socket_path, w.base ? err : "no event base");
        rc = SB_EXIT_CONFIG;
        goto out;
    }
    if (w.engine) sb_serve_publish_stats(&w);
    void *(*loop)(void *) = w.engine && w.parallel > 1 ? sb_serve_batch_main : compute_main;
    if (pthread_create(&w.compute, NULL, loop, &w) != 0) { sb_error("cannot start the compute thread"); goto out; }
    w.sig_term = evsignal_new(w.base, SIGTERM, on_signal, &w);
    w.sig_int = evsignal_new(w.base, SIGINT, on_signal, &w);
    event_add(w.sig_term, NULL);
    event_add(w.sig_int, NULL);
    sb_info("ready on %s", w.socket_path);
    event_base_dispatch(w.base);
    cancel_unfinished(&w);
    /* Queued jobs are answered 'cancelled' by the compute thread; the running
     * one stops within a token. Then nothing touches the engine any more. */
    pthread_join(w.compute, NULL);
    sb_info("stopped");
    rc = SB_EXIT_OK;
out:
    if (w.drain_timer) event_free(w.drain_timer);
    if (w.sig_term) event_free(w.sig_term);
    if (w.sig_int) event_free(w.sig_int);
    if (w.server) sb_ipc_server_free(w.server);
    if (w.base) event_base_free(w.base);
    sb_engine_free(w.draft);
    sb_engine_free(w.engine);
    sb_encoder_free(w.encoder);
    sb_lora_free(w.adapter);
    for (int i = 0; i < w.named.n; i++) sb_lora_free(w.named.loras[i]);
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    return rc;
}
