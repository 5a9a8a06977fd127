/* stage_tool.c - kind: tool. A command (a child process, no shell) or an
 * HTTP request (tool.c runs either, with its limits) gets the stage's
 * input - an earlier stage's JSON (args_from), or a template - and its
 * answer is the stage's output, and its JSON when it is an object. A tool
 * that fails is an error on its stage; the run goes on. With `confirm:
 * true` it acts only after the caller heard what it will do and said yes,
 * and with `reply` the caller hears what it did (stage_confirm.c).
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
    RT_KEY("privacy"),
    RT_KEY("confirm"), RT_KEY("readback"), RT_KEY("change"), RT_KEY("handoff"), RT_KEY("reply"),  /* stage_confirm.c */
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

/* privacy: reveal - this command is given the real values behind the
 * call's placeholders. Only a command: it runs here, where the values are;
 * an HTTP tool's request leaves the box. */
static int load_reveal(vctx *c, const sb_config_node *v, const sb_pipeline *p, sb_stage *s, bool command) {
    if (v->kind != SB_CFG_SCALAR || strcmp(v->value, "reveal"))
        return FAIL(c, v, "%s.privacy: expected reveal", c->path);
    if (!command) return FAIL(c, v, "%s.privacy: only a command tool (run on this box) may be given real values", c->path);
    if (p->privacy_mode != SB_PRIVACY_PSEUDONYMIZE)
        return FAIL(c, v, "%s.privacy: reveal needs the pipeline's privacy mode pseudonymize (there are no values to reveal)",
                    c->path);
    s->privacy_reveal = true;
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
    if ((v = sb_config_node_get(n, "privacy")) && (rc = load_reveal(c, v, p, s, cmd != NULL))) return rc;
    if ((rc = rt_confirm_load(c, n, s, scope))) return rc;
    return cmd ? load_command(c, n, cmd, s, scope) : load_http_tool(c, n, url, s, scope);
}

/* ------------------------------------------------------ personal data */

/* w's text with the call's placeholders put back; the run is then not cached. 0 or SB_ENOMEM. */
static int reveal(rt_run *run, sb_jw *w) {
    char *out;
    size_t n;
    if (!w->p) return 0;
    if (sb_privacy_restore(run->pii, w->p, w->len, false, &out, &n)) return SB_ENOMEM;
    if (n != w->len || memcmp(out, w->p, n)) run->uncacheable = true;
    w->len = 0;
    sb_jw_raw(w, out, n);
    sb_jw_raw(w, "", 0);    /* the NUL argv needs; not counted */
    sb_free(out);
    return w->oom ? SB_ENOMEM : 0;
}

/* A tool's answer (or error) under the pipeline's privacy policy: what
 * it says of anyone is replaced as the caller's words were, before any
 * later stage, trace or cache sees it - pseudonymized into the call's
 * table (restored in the reply), else masked. A value the table did not
 * have makes the result depend on more than its input: not cached.
 * NULL when out of memory. */
static char *redact_tool_text(rt_run *run, const char *text, size_t len) {
    const sb_privacy *pv = run->p->privacy;
    if (!pv) return rt_trimmed(text, len);
    bool pseudo = run->pii && run->p->privacy_mode == SB_PRIVACY_PSEUDONYMIZE;
    size_t had = pseudo ? run->pii->n : 0;
    char *red;
    size_t n;
    if (sb_privacy_redact(pv, text, len, pseudo ? SB_PII_PSEUDONYMIZE : SB_PII_MASK, pseudo ? run->pii : NULL, NULL,
                          &red, &n))
        return NULL;
    if (pseudo && run->pii->n != had) run->uncacheable = true;
    char *t = rt_trimmed(red, n);
    sb_free(red);
    return t;
}

/* ------------------------------------------------------------ running */

static void on_tool_done(void *arg, int rc, const char *out, size_t len, const char *err) {
    rt_run *run = arg;
    run->tool = NULL;
    stage_res *sr = &run->res[run->cur];
    char *safe_err = err ? redact_tool_text(run, err, strlen(err)) : NULL;
    if (err) err = safe_err ? safe_err : "out of memory";
    sr->output = redact_tool_text(run, out ? out : "", out ? len : 0);
    if (sr->output && sr->output[0] == '{') {
        sb_json_doc *d;
        if (sb_json_parse(sr->output, strlen(sr->output), &d, NULL) == 0) {
            if (sb_json_type_of(sb_json_root(d)) == SB_JSON_OBJECT) { sr->doc = d; sr->json = sb_json_root(d); }
            else sb_json_doc_free(d);
            rt_json_fits(sr);       /* too deep: the stage keeps its text only */
        }
    }
    rt_run_report(run, rt_tool_end(run, &run->p->stages[run->cur], rc ? (err ? err : "failed") : NULL));
    sb_free(safe_err);
}

static rt_stage_outcome tool_start(rt_run *run, const sb_stage *s) {
    bool go;
    rt_stage_outcome asked = rt_confirm_gate(run, s, &go);
    if (!go) return asked;
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
    if (s->privacy_reveal && run->pii && run->pii->n && !oom) {
        oom |= reveal(run, &in);
        for (size_t i = 0; i < s->n_argv; i++) oom |= reveal(run, &args[i]);
        for (size_t i = 0; i < s->n_argv; i++) argv[i] = args[i].p;
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
    return rc ? rt_tool_end(run, s, err) : RT_STAGE_WAIT_BACKEND;
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
    .free = rt_confirm_free,
};
