/* stage_tool.c - kind: tool. A command (a child process, no shell) or an
 * HTTP request (tool.c runs either, with its limits) gets the stage's
 * input - an earlier stage's JSON (args_from), or a template - and its
 * answer is the stage's output, and its JSON when it is an object. A tool
 * that fails is an error on its stage; the run goes on.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "router/run/stage_internal.h"

/* ------------------------------------------------------------ loading */

#define S(f) offsetof(sb_stage, f)
static const sb_cfg_key tool_keys[] = {
    RT_KEY("command"), RT_KEY("stdin"), RT_KEY("url"), RT_KEY("method"), RT_KEY("body"), RT_KEY("args_from"),
    { "timeout_ms", SB_KEY_INT, 1, 3600000, S(timeout_ms), NULL },
    RT_KEY("env"),
    { "max_concurrent", SB_KEY_INT, 1, 1024, S(max_concurrent), NULL },
    { "max_queue", SB_KEY_INT, 0, 100000, S(max_queue), NULL },
    RT_KEYS_END
};

/* env: {NAME: value}: what a command tool gets on top of the allowlist
 * (tool.c); the router's own environment (its API key...) never reaches it. */
static int load_env(vctx *c, const sb_config_node *n, sb_stage *s) {
    if (n->kind != SB_CFG_MAP || n->n_pairs > SB_PIPE_MAX_ENV)
        return FAIL(c, n, "%s.env: expected a mapping of at most %d NAME: value pairs", c->path, SB_PIPE_MAX_ENV);
    for (size_t i = 0; i < n->n_pairs; i++) {
        const sb_config_node *k = n->pairs[i].key, *v = n->pairs[i].value;
        bool ok = k->len && !(k->value[0] >= '0' && k->value[0] <= '9') && strlen(k->value) == k->len;
        for (const char *q = k->value; ok && *q; q++)
            ok = (*q >= 'A' && *q <= 'Z') || (*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') || *q == '_';
        if (!ok) return FAIL(c, k, "%s.env: '%s' is not a variable name ([A-Za-z_][A-Za-z0-9_]*)", c->path, k->value);
        if (v->kind != SB_CFG_SCALAR || sb_config_node_is_null(v) || strlen(v->value) != v->len)
            return FAIL(c, v, "%s.env.%s: expected a string without NUL characters", c->path, k->value);
        size_t len = k->len + 1 + v->len + 1;
        if (!(s->env[s->n_env] = sb_malloc(len))) return SB_ENOMEM;
        snprintf(s->env[s->n_env++], len, "%s=%s", k->value, v->value);
    }
    return 0;
}


/* args_from: an earlier stage that produces JSON. */
static int load_args_from(vctx *c, const sb_config_node *v, sb_pipeline *p, size_t idx, sb_stage *s) {
    if (v->kind != SB_CFG_SCALAR) return FAIL(c, v, "%s.args_from: expected a stage name", c->path);
    for (size_t j = 0; j < idx; j++)
        if (!strcmp(p->stages[j].name, v->value)) s->args_from = (int)j;
    if (s->args_from < 0) return FAIL(c, v, "%s.args_from: no earlier stage named '%s'", c->path, v->value);
    if (!p->stages[s->args_from].json && !(rt_stage_kind_of(&p->stages[s->args_from])->traits & RT_KIND_JSON))
        return FAIL(c, v, "%s.args_from: stage '%s' does not produce JSON (set json: true on it)", c->path, v->value);
    return 0;
}

/* A command tool: argv templates (no shell) and its environment. */
static int load_command(vctx *c, const sb_config_node *n, const sb_config_node *cmd, sb_stage *s,
                        const rt_tmpl_scope *scope) {
    int rc;
    size_t k = cmd->kind == SB_CFG_SEQ ? cmd->n_items : 0;
    if (!k || k > SB_PIPE_MAX_ARGS)
        return FAIL(c, cmd, "%s.command: expected a list of 1-%d strings (program and arguments; no shell)", c->path,
                    SB_PIPE_MAX_ARGS);
    for (size_t i = 0; i < k; i++) {
        if ((rc = rt_pl_tmpl(c, cmd->items[i], "command", scope, &s->argv[i]))) return rc;
        s->n_argv++;
    }
    const sb_config_node *v = sb_config_node_get(n, "env");
    return v ? load_env(c, v, s) : 0;
}

/* An HTTP tool: url, method, body. */
static int load_http_tool(vctx *c, const sb_config_node *n, const sb_config_node *url, sb_stage *s,
                          const rt_tmpl_scope *scope) {
    const sb_config_node *v;
    int rc;
    if ((v = sb_config_node_get(n, "env"))) return FAIL(c, v, "%s.env: only a command tool has an environment", c->path);
    if ((rc = sb_cfg_str(PL(c), url, "url", false, &s->url))) return rc;
    if (strncmp(s->url, "http://", 7)) return FAIL(c, url, "%s.url: only http:// URLs are supported", c->path);
    if ((v = sb_config_node_get(n, "method"))) {
        if (v->kind != SB_CFG_SCALAR || (strcmp(v->value, "GET") && strcmp(v->value, "POST")))
            return FAIL(c, v, "%s.method: expected GET or POST", c->path);
        s->http_post = !strcmp(v->value, "POST");
    } else {
        s->http_post = true;
    }
    if ((v = sb_config_node_get(n, "body")) && (rc = rt_pl_tmpl(c, v, "body", scope, &s->body))) return rc;
    return 0;
}

static int load_tool(vctx *c, const sb_config_node *n, sb_pipeline *p, size_t idx, const rt_tmpl_scope *scope) {
    sb_stage *s = &p->stages[idx];
    const sb_config_node *cmd = sb_config_node_get(n, "command"), *url = sb_config_node_get(n, "url"), *v;
    int rc;
    if (!cmd == !url) return FAIL(c, n, "%s: a tool stage needs exactly one of 'command' or 'url'", c->path);
    if ((v = sb_config_node_get(n, "args_from")) && (rc = load_args_from(c, v, p, idx, s))) return rc;
    s->timeout_ms = 10000;
    s->max_concurrent = SB_TOOL_CONCURRENT;
    s->max_queue = SB_TOOL_QUEUE;
    if ((rc = sb_cfg_keys_read(PL(c), n, tool_keys, s))) return rc;
    if ((v = sb_config_node_get(n, "stdin")) && (rc = rt_pl_tmpl(c, v, "stdin", scope, &s->stdin_tmpl))) return rc;
    return cmd ? load_command(c, n, cmd, s, scope) : load_http_tool(c, n, url, s, scope);
}

/* ------------------------------------------------------------ running */

static void on_tool_done(void *arg, int rc, const char *out, size_t len, const char *err) {
    rt_run *run = arg;
    run->tool = NULL;
    stage_res *sr = &run->res[run->cur];
    sr->output = rt_trimmed(out ? out : "", out ? len : 0);
    if (sr->output && sr->output[0] == '{') {
        sb_json_doc *d;
        if (sb_json_parse(sr->output, strlen(sr->output), &d, NULL) == 0) {
            if (sb_json_type_of(sb_json_root(d)) == SB_JSON_OBJECT) { sr->doc = d; sr->json = sb_json_root(d); }
            else sb_json_doc_free(d);
            rt_json_fits(sr);       /* too deep: the stage keeps its text only */
        }
    }
    rt_run_report(run, rt_stage_end(run, rc ? ST_ERROR : ST_OK, rc ? err : NULL));
}

static rt_stage_outcome tool_start(rt_run *run, const sb_stage *s) {
    sb_tmpl_env env = rt_run_env(run);
    sb_jw in, args[SB_PIPE_MAX_ARGS];
    char *argv[SB_PIPE_MAX_ARGS + 1] = {0};
    char err[SB_ERR_LEN];
    sb_jw_init(&in);
    const sb_tmpl *src = s->url ? s->body : s->stdin_tmpl;
    if (src) sb_tmpl_render(src, &env, &in);
    else if (s->args_from >= 0 && run->res[s->args_from].json) sb_jw_value(&in, run->res[s->args_from].json);
    else if (!s->url && s->args_from < 0) sb_jw_raw(&in, run->input, strlen(run->input));  /* the default stdin */
    int oom = in.oom;
    rt_run_keep_input(run, in.p, in.len);
    for (size_t i = 0; i < s->n_argv; i++) {
        sb_jw_init(&args[i]);
        sb_tmpl_render(s->argv[i], &env, &args[i]);
        sb_jw_raw(&args[i], "", 0);
        oom |= args[i].oom;
        argv[i] = args[i].p;
    }
    char gate[2 * SB_CONFIG_MAX_NAME + 8];
    snprintf(gate, sizeof gate, "%s/%s", run->p->name, s->name);
    rt_tool_spec spec = { s->url ? NULL : argv, s->env, s->url, s->http_post, gate, s->max_concurrent,
                          s->max_queue, s->timeout_ms };
    int rc = oom ? sb_seterr(err, SB_ENOMEM, "out of memory")
                 : rt_tool_start(run->ex, &spec, in.p ? in.p : "", in.len, on_tool_done, run, &run->tool, err);
    for (size_t i = 0; i < s->n_argv; i++) sb_jw_free(&args[i]);
    sb_jw_free(&in);
    /* A full tool queue is load, not a broken tool: the caller gets 503 +
     * Retry-After, as for a model's full queue. */
    if (rc == SB_EBUSY) return rt_stage_fail(run, 503, "server_busy", "stage '%s': %s", s->name, err);
    return rc ? rt_stage_end(run, ST_ERROR, err) : RT_STAGE_WAIT_BACKEND;
}

static void tool_stop(rt_run *run) {
    rt_tool_cancel(run->tool);
    run->tool = NULL;
}

const rt_stage_kind rt_kind_tool = {
    .name = "tool",
    .keys = tool_keys,
    .traits = RT_KIND_JSON,
    .check = load_tool,
    .start = tool_start,
    .stop = tool_stop,
};
