/* stage_retrieve.c - kind: retrieve. The stage's query (a template) is
 * embedded with its knowledge base's encoder and searched there
 * (retrieve.c: BM25, vectors or both, and an optional rerank by a
 * generative model); its output is the passages as text, its JSON
 * {"found", "passages"}, and `when: {found: NAME}` reads its verdict. A
 * missing base or a failed search is an error on its stage, as for a tool:
 * the pipeline goes on with found false and can hand the call off.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "router/run/stage_internal.h"
#include "kb/sb_kb.h"

/* ------------------------------------------------------------ loading */

#define S(f) offsetof(sb_stage, f)
static const sb_cfg_key retrieve_keys[] = {
    RT_KEY("kb"), RT_KEY("query"),
    { "top_k", SB_KEY_INT, 1, SB_PIPE_MAX_TOP_K, S(kb_top_k), NULL },
    { "min_score", SB_KEY_NUM, 0, 1e9, S(min_score), NULL },
    RT_KEY("mode"), RT_KEY("rerank"), RT_KEY("priority"),
    RT_KEYS_END
};

/* rerank: {model, top_n, prompt, chat, fuse} - a generative model of the config judges
 * each of the top_n passages (retrieve.c); min_score is then its P(yes). */
static const sb_cfg_key rerank_keys[] = {
    RT_KEY("model"), RT_KEY("top_n"), RT_KEY("prompt"), RT_KEY("chat"), RT_KEY("fuse"), RT_KEYS_END
};

static int load_rerank(vctx *c, const sb_config_node *n, sb_stage *s) {
    const sb_config_node *v;
    int rc;
    if (n->kind != SB_CFG_MAP) return FAIL(c, n, "%s.rerank: expected a mapping {model, top_n, prompt, chat, fuse}", c->path);
    if ((rc = sb_cfg_keys_check(PL(c), n, rerank_keys))) return rc;
    if (!(v = sb_config_node_get(n, "model"))) return FAIL(c, n, "%s.rerank: missing 'model'", c->path);
    if ((rc = sb_cfg_str(PL(c), v, "rerank.model", false, &s->rerank_model))) return rc;
    if (!sb_config_find_model(c->cfg, s->rerank_model))
        return FAIL(c, v, "%s.rerank.model: no model named '%s' under models:", c->path, s->rerank_model);
    long long k = SB_MAX(5, s->kb_top_k);
    if ((v = sb_config_node_get(n, "top_n")) && (rc = sb_cfg_int(PL(c), v, "rerank.top_n", 1, SB_PIPE_MAX_TOP_K, &k)))
        return rc;
    if (k < s->kb_top_k) return FAIL(c, v, "%s.rerank.top_n: must be at least top_k (%d)", c->path, s->kb_top_k);
    if ((v = sb_config_node_get(n, "chat")) && (rc = sb_cfg_bool(PL(c), v, "rerank.chat", &s->rerank_chat))) return rc;
    if ((v = sb_config_node_get(n, "fuse")) && (rc = sb_cfg_bool(PL(c), v, "rerank.fuse", &s->rerank_fuse))) return rc;
    s->rerank_top_n = (int)k;
    if ((v = sb_config_node_get(n, "prompt"))) {
        if ((rc = sb_cfg_str(PL(c), v, "rerank.prompt", false, &s->rerank_prompt))) return rc;
        if (!strstr(s->rerank_prompt, "{{passage}}"))
            return FAIL(c, v, "%s.rerank.prompt: must contain {{passage}} (and usually {{query}})", c->path);
    }
    return 0;
}

/* kind: retrieve - kb, query, top_k, mode, min_score. The stage embeds
 * with the base's embed_model, so that is its model (and the pipeline's
 * cache fingerprint covers it). */
static int load_retrieve(vctx *c, const sb_config_node *n, sb_stage *s, const rt_tmpl_scope *scope) {
    const sb_config_node *v = sb_config_node_get(n, "kb");
    int rc;
    if (!v) return FAIL(c, n, "%s: missing 'kb' (a knowledge base of knowledge:)", c->path);
    if ((rc = sb_cfg_str(PL(c), v, "kb", false, &s->kb))) return rc;
    const sb_config_kb *kb = sb_config_find_kb(c->cfg, s->kb);
    if (!kb) return FAIL(c, v, "%s.kb: no knowledge base named '%s' under knowledge:", c->path, s->kb);
    if (!(s->model = sb_strdup(kb->embed_model))) return SB_ENOMEM;
    if (kb->adapter && !(s->kb_adapter = sb_strdup(kb->adapter))) return SB_ENOMEM;
    s->kb_top_k = 3;
    s->min_score = -1;
    if ((rc = sb_cfg_keys_read(PL(c), n, retrieve_keys, s))) return rc;
    s->kb_mode = SB_KB_HYBRID;
    if ((v = sb_config_node_get(n, "mode"))) {
        s->kb_mode = v->kind == SB_CFG_SCALAR ? sb_kb_mode_parse(v->value) : -1;
        if (s->kb_mode < 0) return FAIL(c, v, "%s.mode: expected bm25, vector or hybrid", c->path);
    }
    if ((v = sb_config_node_get(n, "rerank")) && (rc = load_rerank(c, v, s))) return rc;
    return (v = sb_config_node_get(n, "query")) ? rt_pl_tmpl(c, v, "query", scope, &s->query)
                                                 : rt_tmpl_compile("{{input}}", scope, &s->query, NULL, 0);
}

static int retrieve_check(vctx *c, const sb_config_node *n, sb_pipeline *p, size_t idx, const rt_tmpl_scope *scope) {
    return load_retrieve(c, n, &p->stages[idx], scope);
}

/* ------------------------------------------------------------ running */

/* The search (and rerank) is over: render its passages and end the stage. */
static void on_retrieved(void *arg, int rc, const char *err) {
    rt_run *run = arg;
    stage_res *sr = &run->res[run->cur];
    char e[SB_ERR_LEN] = "";
    sb_jw text, json;
    sb_jw_init(&text);
    sb_jw_init(&json);
    if (!rc && !(rc = rt_retrieve_render(&run->p->stages[run->cur], run->rr, &text, &json, &sr->found, e))) {
        sr->output = rt_trimmed(text.p ? text.p : "", text.len);
        if (sb_json_parse(json.p, json.len, &sr->doc, NULL) == 0) sr->json = sb_json_root(sr->doc);
        rt_json_fits(sr);
    } else if (rc && err) {
        snprintf(e, sizeof e, "%s", err);
    }
    sb_jw_free(&text);
    sb_jw_free(&json);
    rt_retrieve_free(run->rr);
    run->rr = NULL;
    rt_run_report(run, rt_stage_end(run, rc ? ST_ERROR : ST_OK, rc ? e : NULL));
}

/* Search with the query vector (NULL in bm25 mode); the search reports
 * through on_retrieved, maybe before this returns. */
static void retrieve_with(rt_run *run, const sb_stage *s, const float *qvec, int dim) {
    sb_tmpl_env env = rt_run_env(run);
    sb_jw q;
    sb_jw_init(&q);
    sb_tmpl_render(s->query, &env, &q);
    if (q.oom) on_retrieved(run, SB_ENOMEM, "out of memory");
    else rt_retrieve_start(run->ex, run->conf, s, q.p ? q.p : "", q.len, qvec, dim, &run->job, on_retrieved, run,
                           &run->rr);
    sb_jw_free(&q);
}

/* The query's vector came (or did not). */
static rt_stage_outcome retrieve_reply(rt_run *run, const sb_stage *s, const rt_reply *res) {
    float vec[4096];
    uint32_t dim = rt_run_first_vector(res, vec, 4096);
    run->model_s += sb_now_s() - run->t_stage;
    if (!dim)
        return rt_stage_end(run, ST_ERROR, res->ok ? "the encoder returned no vector"
                                           : res->message ? res->message : "the encoder failed");
    retrieve_with(run, s, vec, (int)dim);
    return RT_STAGE_WAIT_BACKEND;
}

static rt_stage_outcome retrieve_start(rt_run *run, const sb_stage *s) {
    if (s->kb_mode == SB_KB_BM25) {
        retrieve_with(run, s, NULL, 0);
        return RT_STAGE_WAIT_BACKEND;
    }
    sb_tmpl_env env = rt_run_env(run);
    sb_jw q;
    char err[SB_ERR_LEN];
    sb_jw_init(&q);
    sb_tmpl_render(s->query, &env, &q);
    rt_run_keep_input(run, q.p, q.len);
    int rc = q.oom ? sb_seterr(err, SB_ENOMEM, "out of memory") : rt_run_embed(run, s, q.p ? q.p : "", q.len, err);
    sb_jw_free(&q);
    return rc ? rt_stage_end(run, ST_ERROR, err) : RT_STAGE_WAIT_BACKEND;
}

static void retrieve_stop(rt_run *run) {
    rt_retrieve_free(run->rr);
    run->rr = NULL;
}

/* An answer made from a knowledge base is only as fresh as the base: its
 * content version is part of the key, so `kb add` or a pulled snapshot
 * makes the old answers unreachable. A base that cannot be read makes the
 * call uncacheable. */
static bool retrieve_cache_key(rt_conf *c, const sb_stage *s, sb_sha256_ctx *h) {
    char ver[65], err[SB_ERR_LEN];
    if (rt_retrieve_version(c, s, ver, err)) return false;
    sb_sha256_update(h, ver, sizeof ver);
    return true;
}

const rt_stage_kind rt_kind_retrieve = {
    .name = "retrieve",
    .keys = retrieve_keys,
    .traits = RT_KIND_FOUND,
    .check = retrieve_check,
    .start = retrieve_start,
    .on_reply = retrieve_reply,
    .stop = retrieve_stop,
    .cache_key = retrieve_cache_key,
};
