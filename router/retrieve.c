/* retrieve.c - retrieve stages: the agency's documents for a later prompt
 * (issue 21, docs/router.md "Retrieve stages", docs/KNOWLEDGE.md).
 *
 * run.c embeds the stage's rendered query through the base's embed_model
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

#include "router/router_internal.h"
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

/* A passage's score: what min_score is judged on - the cosine with the
 * query (vector, hybrid: the RRF sum has no absolute meaning), BM25 in bm25
 * mode. */
static double score_of(const sb_stage *s, const sb_kb_hit *h) {
    return s->kb_mode == SB_KB_BM25 ? h->score : h->cosine;
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

int rt_retrieve(rt_conf *c, const sb_stage *s, const char *query, size_t len, const float *qvec, int dim,
                sb_jw *text, sb_jw *json, bool *found, char *err) {
    *found = false;
    rt_kbh *h = NULL;
    int rc = open_kb(c, s, &h, err);
    if (rc) return rc;
    int kdim = 0;
    const char *id = sb_kb_embed_id(h->kb, &kdim);
    if (qvec && id && (kdim != dim || strcmp(id, h->embed_id)))
        return sb_seterr(err, SB_EINVAL, "knowledge base '%s' was built with %s, not with model '%s' (%s): re-add "
                         "its files", s->kb, id, s->model, h->embed_id);
    sb_kb_search_opts o = { .mode = (sb_kb_mode)s->kb_mode, .top_k = s->kb_top_k, .qvec = qvec };
    sb_kb_hit *hits;
    size_t n;
    if ((rc = sb_kb_search(h->kb, query, len, &o, &hits, &n, err))) return rc;
    *found = is_found(s, hits, n);
    size_t shown = *found ? n : 0;
    render_text(hits, shown, text);
    render_json(s, hits, shown, *found, json);
    sb_kb_hits_free(hits, n);
    return text->oom || json->oom ? sb_seterr(err, SB_ENOMEM, "out of memory") : 0;
}

void rt_retrieve_free_all(rt_conf *c) {
    for (rt_kbh *h = c->kbs, *n; h; h = n) {
        n = h->next;
        sb_kb_close(h->kb);
        sb_free(h);
    }
    c->kbs = NULL;
}
