/* stage_generate.c - kind: generate. A model writes text from the stage's
 * prompt (and system) template: the answer, or with json: true /
 * json_schema a JSON object later stages and tools read. The answer stage's
 * tokens stream to a caller who asked for SSE.
 *
 * With `ask:` the JSON object holds the call's slots: a required slot the
 * extraction left empty is asked for, in the caller's language, and the
 * caller's next turn fills it (stage_ask.c).
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "router/run/stage_internal.h"
#include "worker/engine/sb_grammar.h"

/* ------------------------------------------------------------ loading */

#define S(f) offsetof(sb_stage, f)
static const sb_cfg_key generate_keys[] = {
    RT_KEY("model"), RT_KEY("system"), RT_KEY("chat"), RT_KEY("prompt"),
    { "temperature", SB_KEY_NUM, 0, 2, S(sampling.temperature), NULL },
    { "top_p", SB_KEY_NUM, 0, 1, S(sampling.top_p), NULL },
    { "top_k", SB_KEY_INT, 0, 1 << 20, S(sampling.top_k), NULL },
    { "min_p", SB_KEY_NUM, 0, 1, S(sampling.min_p), NULL },
    { "repeat_penalty", SB_KEY_NUM, 0.01, 100, S(sampling.repeat_penalty), NULL },
    RT_KEY("seed"),                 /* 64 bits */
    RT_KEY("max_tokens"),           /* bounded by its model's max_tokens */
    RT_KEY("stop"),
    { "json", SB_KEY_BOOL, 0, 0, S(json), NULL },
    RT_KEY("json_schema"),          /* after json: a schema implies it */
    RT_KEY("priority"),
    RT_KEY("ask"),                  /* slot -> {language: question}: stage_ask.c */
    RT_KEY("handoff"),              /* {language: text}: the reply when ask: hands the call off */
    RT_KEYS_END
};

static int load_sampling(vctx *c, const sb_config_node *n, sb_stage *s, const sb_config *cfg) {
    sb_sampling *sp = &s->sampling;
    /* Pipelines are deterministic unless asked otherwise: the same call gets
     * the same answer, and answers can be cached. */
    *sp = (sb_sampling){ .temperature = 0, .top_p = -1, .min_p = -1, .repeat_penalty = -1, .top_k = -1,
                         .max_tokens = -1, .seed = -1 };
    const sb_config_node *v;
    long long iv;
    int rc = sb_cfg_keys_read(PL(c), n, generate_keys, s);
    if (!rc && (v = sb_config_node_get(n, "seed")) && !(rc = sb_cfg_int(PL(c), v, "seed", 0, INT64_MAX, &iv))) sp->seed = iv;
    const sb_config_model *m = sb_config_find_model(cfg, s->model);
    if (!rc && (v = sb_config_node_get(n, "max_tokens")) &&
        !(rc = sb_cfg_int(PL(c), v, "max_tokens", 1, m ? m->max_tokens : 1 << 20, &iv)))
        sp->max_tokens = (int)iv;
    return rc;
}

/* json_schema: inline JSON text (a YAML block scalar starting with '{'), or
 * a file path relative to the config. Compiled here so an unsupported
 * keyword is a config error at its line; the text goes to the worker with
 * every call and into the pipeline's digest (a file's content included). */
static int load_json_schema(vctx *c, const sb_config_node *v, sb_stage *s) {
    if (v->kind != SB_CFG_SCALAR) return FAIL(c, v, "%s.json_schema: expected JSON text or a file path", c->path);
    const sb_config_model *m = sb_config_find_model(c->cfg, s->model);
    if (m && m->upstream)
        return FAIL(c, v, "%s.json_schema: constrained decoding needs a local model; '%s' is an upstream", c->path, s->model);
    char path[1024], err[SB_ERR_LEN];
    const char *arg = v->value;
    if (arg[strspn(arg, " \t\r\n")] != '{' && arg[0] != '/') {
        snprintf(path, sizeof path, "%s/%s", c->cfg->base_dir, arg);
        arg = path;
    }
    size_t len;
    if (sb_json_schema_load(arg, &s->json_schema, &len, err)) return FAIL(c, v, "%s.json_schema: %s", c->path, err);
    sb_grammar *g = NULL;
    if (sb_json_schema_compile(s->json_schema, len, &g, err)) return FAIL(c, v, "%s.json_schema: %s", c->path, err);
    sb_grammar_free(g);
    s->json = true;
    return 0;
}

static int load_generate(vctx *c, const sb_config_node *n, sb_stage *s, const rt_tmpl_scope *scope) {
    const sb_config_node *v;
    int rc;
    if (!(v = sb_config_node_get(n, "prompt"))) return FAIL(c, n, "%s: missing 'prompt'", c->path);
    if ((rc = rt_pl_tmpl(c, v, "prompt", scope, &s->prompt))) return rc;
    if ((rc = load_sampling(c, n, s, c->cfg))) return rc;
    if ((v = sb_config_node_get(n, "stop"))) {
        char **stops;
        if ((rc = sb_cfg_strs(PL(c), v, "stop", SB_PIPE_MAX_STOPS, &stops, &s->n_stops))) {
            for (size_t i = 0; stops && stops[i] && i < SB_PIPE_MAX_STOPS; i++) sb_free(stops[i]);
            sb_free(stops);
            return rc;
        }
        memcpy(s->stops, stops, s->n_stops * sizeof *stops);
        sb_free(stops);
    }
    if ((v = sb_config_node_get(n, "json_schema")) && (rc = load_json_schema(c, v, s))) return rc;
    const sb_config_node *handoff = sb_config_node_get(n, "handoff");
    if ((v = sb_config_node_get(n, "ask")) && (rc = rt_ask_load(c, v, s, handoff))) return rc;
    if (handoff && !v) return FAIL(c, handoff, "%s.handoff: only a stage with ask: hands a call off", c->path);
    return 0;
}

static int generate_check(vctx *c, const sb_config_node *n, sb_pipeline *p, size_t idx, const rt_tmpl_scope *scope) {
    sb_stage *s = &p->stages[idx];
    int rc = rt_pl_model_keys(c, n, s, scope);
    return rc ? rc : load_generate(c, n, s, scope);
}

/* ------------------------------------------------------------ running */

/* What a generate stage asks of its model, besides the prompt. */
static void gen_from_stage(rt_gen_req *g, const sb_stage *s, bool stream) {
    g->stream = stream;
    g->priority = s->priority;
    g->sampling = s->sampling;
    g->has_seed = s->sampling.seed >= 0;
    for (size_t i = 0; i < s->n_stops && i < RT_GEN_MAX_STOPS; i++) {
        g->stops[i] = s->stops[i];
        g->stop_lens[i] = strlen(s->stops[i]);
        g->n_stops++;
    }
    g->json_schema = s->json_schema;
    g->json_schema_len = s->json_schema ? strlen(s->json_schema) : 0;
}

static rt_stage_outcome generate_start(rt_run *run, const sb_stage *s) {
    if (s->own && rt_run_turn(run)) return rt_ask_answered(run, s);     /* the caller's answer: no model call */
    sb_tmpl_env env = rt_run_env(run);
    sb_segs sys, prompt;
    sb_segs_init(&sys);
    sb_segs_init(&prompt);
    if (s->system) sb_tmpl_render_segs(s->system, &env, &sys);
    sb_tmpl_render_segs(s->prompt, &env, &prompt);
    rt_run_keep_input(run, prompt.text.p, prompt.text.len);
    rt_gen_req g;
    rt_gen_init(&g);
    gen_from_stage(&g, s, rt_run_streams(run));
    char err[SB_ERR_LEN];
    int rc = rt_gen_set_prompt(&g, s->chat, s->system != NULL, &sys, &prompt);
    if (rc) rc = sb_seterr(err, SB_ENOMEM, "out of memory");
    else rc = rt_run_generate(run, s, &g, err);
    rt_gen_free(&g);
    /* An upstream refuses what only a local model does: 501. */
    return rc ? rt_stage_refused(run, s, rc, rc == SB_EUNSUP ? 501 : 500, err) : RT_STAGE_WAIT_BACKEND;
}

static rt_stage_outcome generate_reply(rt_run *run, const sb_stage *s, const rt_reply *res) {
    stage_res *sr = &run->res[run->cur];
    if (!res->ok) {
        const char *type;
        int st = rt_worker_error_status(res->code, &type);
        return rt_stage_fail(run, st, type, "stage '%s': %s", s->name, res->message ? res->message : "failed");
    }
    const char *text = res->gen.text;
    size_t len = res->gen.len;
    int64_t pt = res->gen.prompt_tokens <= INT32_MAX ? res->gen.prompt_tokens : 0;
    int64_t ct = res->gen.completion_tokens <= INT32_MAX ? res->gen.completion_tokens : 0;
    run->model_s += (res->gen.prompt_ms + res->gen.gen_ms) / 1e3;
    sr->prompt_tokens = (int)pt;
    sr->completion_tokens = (int)ct;
    sr->output = rt_trimmed(text, len);
    if (s->json) {
        sr->json = sb_json_extract_object(text, len, &sr->doc);
        /* With slots to ask for, nothing extracted is every slot empty. */
        if (!sr->json && s->own) return rt_ask_next(run, s);
        if (!sr->json) return rt_stage_end(run, ST_ERROR, "the model's output holds no valid JSON object");
        if (!rt_json_fits(sr)) return rt_stage_end(run, ST_ERROR, "the model's JSON object is nested too deeply");
    }
    return s->own ? rt_ask_next(run, s) : rt_stage_end(run, ST_OK, NULL);
}

const rt_stage_kind rt_kind_generate = {
    .name = "generate",
    .keys = generate_keys,
    .check = generate_check,
    .start = generate_start,
    .on_reply = generate_reply,
    .free = rt_ask_free,
    .gathers = rt_ask_gathers,
};
