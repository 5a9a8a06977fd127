/* retrieve.c - retrieve stages: the agency's documents for a later prompt
 * (docs/router.md "Retrieve stages", docs/KNOWLEDGE.md).
 *
 * stage_retrieve.c embeds the stage's rendered query through the base's embed_model
 * worker (`embed`, kind query), asynchronously like every model call; this
 * file then searches the base (kb/sb_kb.h) and renders the passages.
 *
 * The search runs on the loop, synchronously: a brute-force dot product over
 * the base's vectors (held in memory by sb_kb) plus one FTS5 query and a few
 * row reads - measured at ~1-3 ms on the demo base and ~15 ms at 5,000 chunks
 * on 2 cores (docs/KNOWLEDGE.md), less than a worker round trip. Each base is
 * opened once per configuration generation, read-only, and used by the loop
 * thread only (sb_kb is one caller at a time); sb_kb reloads its vectors when
 * `kb add` changes the file underneath.
 */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "router/run/sb_run.h"
#include "kb/sb_kb.h"

struct rt_kbh {
    rt_kbh *next;
    const char *name;               /* the stage's kb (config memory) */
    sb_kb *kb;
    char embed_id[200];             /* what the embed_model's file would record */
};

/* The id `kb add` records for a model file: its base name and size. */
static void model_embed_id(const sb_config *cfg, const char *model, char *out, size_t n) {
    const sb_config_model *m = sb_config_find_model(cfg, model);
    const char *path = m && m->gguf ? m->gguf : "", *base = strrchr(path, '/');
    struct stat st;
    snprintf(out, n, "%s %lld", base ? base + 1 : path, stat(path, &st) ? 0LL : (long long)st.st_size);
}

static int open_kb(rt_conf *c, const sb_stage *s, rt_kbh **out, char *err) {
    for (rt_kbh *h = c->kbs; h; h = h->next)
        if (!strcmp(h->name, s->kb)) { *out = h; return 0; }
    const sb_config_kb *ck = sb_config_find_kb(c->cfg, s->kb);
    if (!ck) return sb_seterr(err, SB_ENOTFOUND, "no knowledge base named '%s'", s->kb);
    sb_kb_opts o = { .path = ck->path, .readonly = 1 };
    sb_kb *kb;
    int rc = sb_kb_open(&o, &kb, err);
    if (rc == SB_ENOTFOUND)
        return sb_seterr(err, rc, "knowledge base '%s' (%s) does not exist yet: run switchboard kb add", s->kb, ck->path);
    if (rc) return rc;
    rt_kbh *h = sb_calloc(1, sizeof *h);
    if (!h) { sb_kb_close(kb); return sb_seterr(err, SB_ENOMEM, "out of memory"); }
    *h = (rt_kbh){ .next = c->kbs, .name = s->kb, .kb = kb };
    model_embed_id(c->cfg, s->model, h->embed_id, sizeof h->embed_id);
    c->kbs = h;
    *out = h;
    return 0;
}

int rt_retrieve_version(rt_conf *c, const sb_stage *s, char out[65], char *err) {
    rt_kbh *h;
    int rc = open_kb(c, s, &h, err);
    return rc ? rc : sb_kb_version(h->kb, out, err);
}

/* The text form, for prompts: one block per passage, its source first so a
 * reply can cite it. */
static void render_text(const sb_kb_hit *h, size_t n, sb_jw *w) {
    for (size_t i = 0; i < n; i++) {
        char head[64];
        snprintf(head, sizeof head, "%s[%zu] ", i ? "\n\n" : "", i + 1);
        sb_jw_raw(w, head, strlen(head));
        sb_jw_raw(w, h[i].source, strlen(h[i].source));
        if (h[i].section && h[i].section[0]) {
            sb_jw_raw(w, " > ", 3);
            sb_jw_raw(w, h[i].section, strlen(h[i].section));
        }
        sb_jw_raw(w, "\n", 1);
        sb_jw_raw(w, h[i].text, strlen(h[i].text));
    }
}

/* A passage's score: what min_score is judged on - the reranker's P(yes)
 * when the stage reranks, else the cosine with the query (vector, hybrid:
 * the RRF sum has no absolute meaning), BM25 in bm25 mode. */
static double score_of(const sb_stage *s, const sb_kb_hit *h) {
    return s->rerank_model ? h->rerank : s->kb_mode == SB_KB_BM25 ? h->score : h->cosine;
}

/* source and section at the top are the best passage's, and cite lists
 * every passage as "SOURCE, SECTION; ...", for a citation
 * ({{stages.NAME.json.cite}}: templates reach one level down). */
static void put_cite(const sb_kb_hit *h, size_t n, sb_jw *w) {
    sb_jw c;
    sb_jw_init(&c);
    for (size_t i = 0; i < n; i++) {
        if (i) sb_jw_raw(&c, "; ", 2);
        sb_jw_raw(&c, h[i].source, strlen(h[i].source));
        if (h[i].section && h[i].section[0]) {
            sb_jw_raw(&c, ", ", 2);
            sb_jw_raw(&c, h[i].section, strlen(h[i].section));
        }
    }
    sb_jw_key(w, "cite");
    sb_jw_strn(w, c.p ? c.p : "", c.len);
    w->oom |= c.oom;
    sb_jw_free(&c);
}

static void render_json(const sb_stage *s, const sb_kb_hit *h, size_t n, bool found, sb_jw *w) {
    sb_jw_obj(w);
    sb_jw_key(w, "found"); sb_jw_bool(w, found);
    if (n) {
        sb_jw_key(w, "source"); sb_jw_str(w, h[0].source);
        sb_jw_key(w, "section"); sb_jw_str(w, h[0].section);
        put_cite(h, n, w);
    }
    sb_jw_key(w, "passages");
    sb_jw_arr(w);
    for (size_t i = 0; i < n; i++) {
        sb_jw_obj(w);
        sb_jw_key(w, "source"); sb_jw_str(w, h[i].source);
        sb_jw_key(w, "section"); sb_jw_str(w, h[i].section);
        sb_jw_key(w, "score"); sb_jw_num(w, (double)(int64_t)(score_of(s, &h[i]) * 1e4) / 1e4);
        sb_jw_key(w, "text"); sb_jw_str(w, h[i].text);
        sb_jw_obj_end(w);
    }
    sb_jw_arr_end(w);
    sb_jw_obj_end(w);
}

static bool is_found(const sb_stage *s, const sb_kb_hit *h, size_t n) {
    double best = 0;
    for (size_t i = 0; i < n; i++)
        if (score_of(s, &h[i]) > best) best = score_of(s, &h[i]);
    return n > 0 && (s->min_score < 0 || best >= s->min_score);
}

/* A retrieve stage in progress: its hits and, with rerank, how many the
 * reranker has judged. */
struct rt_rr {
    rt_exec *ex;
    const sb_stage *s;
    sb_kb_hit *hits;
    size_t n, next;             /* next: the passage being judged */
    char *query;
    size_t qlen;
    rt_job **job;               /* the run's: cancelling the run cancels the score call */
    rt_retrieve_fn done;
    void *arg;
};

static int search(rt_conf *c, const sb_stage *s, rt_rr *rr, const float *qvec, int dim, char *err) {
    rt_kbh *h = NULL;
    int rc = open_kb(c, s, &h, err);
    if (rc) return rc;
    int kdim = 0;
    const char *id = sb_kb_embed_id(h->kb, &kdim);
    if (qvec && id && (kdim != dim || strcmp(id, h->embed_id)))
        return sb_seterr(err, SB_EINVAL, "knowledge base '%s' was built with %s, not with model '%s' (%s): re-add "
                         "its files", s->kb, id, s->model, h->embed_id);
    /* A reranked stage fetches top_n candidates and keeps the best top_k. */
    sb_kb_search_opts o = { .mode = (sb_kb_mode)s->kb_mode, .top_k = s->rerank_model ? s->rerank_top_n : s->kb_top_k,
                            .qvec = qvec };
    return sb_kb_search(h->kb, rr->query, rr->qlen, &o, &rr->hits, &rr->n, err);
}

static void rerank_next(rt_rr *rr);

static void on_judged(void *arg, const rt_reply *res) {
    rt_rr *rr = arg;
    *rr->job = NULL;
    if (!res->ok || res->score.n_logprobs != 2) {
        char err[SB_ERR_LEN];
        sb_seterr(err, SB_EIO, "rerank model '%s': %s", rr->s->rerank_model,
                  res->ok ? "no log-probabilities in its answer" : res->message ? res->message : "failed");
        rr->done(rr->arg, SB_EIO, err);
        return;
    }
    rr->hits[rr->next++].rerank = sb_kb_rerank_prob(res->score.logprobs[0], res->score.logprobs[1]);
    rerank_next(rr);
}

/* Ask the rerank model about the next passage, one `score` call at a time
 * (consecutive prompts share the question's prefix in the worker's KV
 * cache); after the last, reorder and finish. */
static void rerank_next(rt_rr *rr) {
    char err[SB_ERR_LEN];
    if (rr->next >= rr->n) {
        if (rr->s->rerank_fuse) sb_kb_rerank_fuse(rr->hits, rr->n);
        else sb_kb_rerank_sort(rr->hits, rr->n);
        rr->done(rr->arg, 0, NULL);
        return;
    }
    rt_model *m = rt_model_find(&rr->ex->be, rr->s->rerank_model);
    size_t len;
    char *prompt = sb_kb_rerank_prompt(rr->s->rerank_prompt, rr->query, rr->qlen, &rr->hits[rr->next], &len);
    int rc = !m ? sb_seterr(err, SB_EIO, "model '%s' is not configured in this router", rr->s->rerank_model)
             : !prompt ? sb_seterr(err, SB_ENOMEM, "out of memory") : 0;
    if (!rc) {
        /* The passage is agency text: never parsed for special tokens (a
         * message's string content never is, nor a prompt of plain pieces).
         * In chat form the answer starts the assistant's turn: "yes", not
         * " yes". */
        bool chat = rr->s->rerank_chat;
        rt_gen_msg msg = { .role = "user" };
        sb_segs_init(&msg.content);
        sb_segs_add(&msg.content, prompt, len, false);
        const char *cands[2] = { SB_KB_RERANK_YES + chat, SB_KB_RERANK_NO + chat };
        rt_score_req r = { .kind = chat ? RT_KIND_CHAT : RT_KIND_COMPLETION, .msgs = &msg, .n_msgs = 1,
                           .prompt = &msg.content, .candidates = cands, .n_candidates = 2,
                           .priority = rr->s->priority };
        rc = msg.content.oom ? sb_seterr(err, SB_ENOMEM, "out of memory")
                             : rt_model_submit_score(m, &r, m->deadline_ms, on_judged, rr, rr->job, err);
        sb_segs_free(&msg.content);
    }
    sb_free(prompt);
    if (rc) rr->done(rr->arg, rc, err);
}

void rt_retrieve_start(rt_exec *ex, rt_conf *c, const sb_stage *s, const char *query, size_t len, const float *qvec,
                       int dim, rt_job **job, rt_retrieve_fn done, void *arg, rt_rr **out) {
    char err[SB_ERR_LEN];
    rt_rr *rr = sb_calloc(1, sizeof *rr);
    char *q = sb_malloc(len + 1);
    *out = rr;
    if (!rr || !q) {
        sb_free(q);
        done(arg, sb_seterr(err, SB_ENOMEM, "out of memory"), err);
        return;
    }
    memcpy(q, query, len);
    q[len] = '\0';
    *rr = (rt_rr){ .ex = ex, .s = s, .query = q, .qlen = len, .job = job, .done = done, .arg = arg };
    int rc = search(c, s, rr, qvec, dim, err);
    if (rc) done(arg, rc, err);
    else if (s->rerank_model && rr->n) rerank_next(rr);
    else done(arg, 0, NULL);
}

int rt_retrieve_render(const sb_stage *s, rt_rr *rr, sb_jw *text, sb_jw *json, bool *found, char *err) {
    size_t n = SB_MIN(rr->n, (size_t)s->kb_top_k);
    *found = is_found(s, rr->hits, n);
    size_t shown = *found ? n : 0;
    render_text(rr->hits, shown, text);
    render_json(s, rr->hits, shown, *found, json);
    return text->oom || json->oom ? sb_seterr(err, SB_ENOMEM, "out of memory") : 0;
}

void rt_retrieve_free(rt_rr *rr) {
    if (!rr) return;
    sb_kb_hits_free(rr->hits, rr->n);
    sb_free(rr->query);
    sb_free(rr);
}

void rt_retrieve_free_all(rt_conf *c) {
    for (rt_kbh *h = c->kbs, *n; h; h = n) {
        n = h->next;
        sb_kb_close(h->kb);
        sb_free(h);
    }
    c->kbs = NULL;
}
