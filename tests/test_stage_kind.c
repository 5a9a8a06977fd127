/* test_stage_kind.c - the stage-kind interface (router/run/stage_internal.h).
 *
 * A kind is its file plus a line in the table: this test adds one, `echo`,
 * from here alone - its keys, its check, its start - and runs pipelines of
 * it through the real loader and executor on a real event loop. It is
 * registered by the test rather than compiled into the router, because it
 * is no use to an operator and would change the list of kinds the loader's
 * messages name. echo's `ask: true` makes it wait on the caller, the one
 * outcome no built-in kind uses yet: the run suspends, its sink's ask gets
 * the question, and rt_run_resume's turn becomes the stage's output.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <event2/event.h>
#include <stdio.h>
#include <string.h>

#include "router/run/stage_internal.h"

/* ------------------------------------------------------ the echo kind */

typedef struct {
    sb_tmpl *text;
    bool ask;
} echo_conf;

/* Its keys, typed: the loader refuses any other, and reads ask itself. */
static const sb_cfg_key echo_keys[] = {
    RT_KEY("text"),
    { "ask", SB_KEY_BOOL, 0, 0, offsetof(echo_conf, ask), NULL },
    RT_KEYS_END
};

static int echo_check(vctx *c, const sb_config_node *n, sb_pipeline *p, size_t idx, const rt_tmpl_scope *scope) {
    sb_stage *s = &p->stages[idx];
    echo_conf *e = sb_calloc(1, sizeof *e);
    if (!(s->own = e)) return SB_ENOMEM;
    const sb_config_node *v = sb_config_node_get(n, "text");
    if (!v) return FAIL(c, n, "%s: missing 'text'", c->path);
    int rc = rt_pl_tmpl(c, v, "text", scope, &e->text);
    return rc ? rc : sb_cfg_keys_read(PL(c), n, echo_keys, e);
}

static void echo_free(sb_stage *s) {
    echo_conf *e = s->own;
    rt_tmpl_free(e->text);
    sb_free(e);
}

/* Its text; with ask, the text is a question and the caller's answer is
 * the output. */
static rt_stage_outcome echo_start(rt_run *run, const sb_stage *s) {
    const echo_conf *e = s->own;
    stage_res *sr = &run->res[run->cur];
    const char *turn = rt_run_turn(run);
    sb_free(sr->output);
    if (turn) {
        sr->output = sb_strdup(turn);
        return rt_stage_end(run, ST_OK, NULL);
    }
    sb_tmpl_env env = rt_run_env(run);
    sb_jw w;
    sb_jw_init(&w);
    sb_tmpl_render(e->text, &env, &w);
    sr->output = rt_trimmed(w.p ? w.p : "", w.len);
    sb_jw_free(&w);
    return e->ask ? RT_STAGE_WAIT_CALLER : rt_stage_end(run, ST_OK, NULL);
}

static const rt_stage_kind echo_kind = {
    .name = "echo", .keys = echo_keys, .check = echo_check, .start = echo_start, .free = echo_free,
};

/* ------------------------------------------------------------ loading */

#define HEAD "runtime: { dir: /tmp/sb-kind-test }\n" \
             "models:\n  m: { gguf: tiny-llama-spm-Q4_K_M.gguf }\n" \
             "pipelines:\n  p:\n    stages:\n"

static int load(const char *yaml, sb_config **cfg, sb_pipelines **ps, char *err) {
    *ps = NULL;
    int rc = sb_config_parse(yaml, strlen(yaml), "tests/data/kind.yaml", cfg, err);
    return rc ? rc : sb_pipelines_load(*cfg, ps, err);
}

static void expect_error(const char *yaml, const char *what) {
    sb_config *cfg = NULL;
    sb_pipelines *ps = NULL;
    char err[SB_ERR_LEN] = "";
    if (load(yaml, &cfg, &ps, err) != SB_EINVAL) fail_msg("accepted: %s", yaml);
    if (!strstr(err, what)) fail_msg("expected '%s', got: %s", what, err);
    sb_config_free(cfg);
}

static void test_loads(void **state) {
    expect_error(HEAD "      - { name: a, kind: echo, txt: hi }\n",
                 "kind.yaml:7:32: pipelines.p.stages[0](a): unknown key 'txt' (expected one of: name, kind, when, "
                 "text, ask)");
    expect_error(HEAD "      - { name: a, kind: echo }\n", "kind.yaml:7:9: pipelines.p.stages[0](a): missing 'text'");
    expect_error(HEAD "      - { name: a, kind: echo, text: '{{stages.b.output}}' }\n", "stages[0](a).text:");
    expect_error(HEAD "      - { name: a, kind: dance }\n", "expected intent, generate, tool, retrieve or echo");
    expect_error(HEAD "      - { name: a, kind: echo, text: x, ask: maybe }\n", "ask: expected true or false");
    assert_int_equal(rt_stage_kind_register(&echo_kind), SB_EINVAL);     /* one kind per name */
}

/* ------------------------------------------------------------ running */

typedef struct {
    int finished, failed, asked;
    int status;
    char text[256], result[2048];
    rt_run *run;
} seen;

static void on_finish(void *arg, const rt_answer *a) {
    seen *s = arg;
    s->finished++;
    snprintf(s->text, sizeof s->text, "%.*s", (int)a->len, a->text);
    sb_jw w;
    sb_jw_init(&w);
    rt_run_result_json(a->run, &w);
    snprintf(s->result, sizeof s->result, "%.*s", (int)w.len, w.p ? w.p : "");
    sb_jw_free(&w);
}

static void on_error(void *arg, const rt_failure *f) {
    seen *s = arg;
    s->failed++;
    s->status = f->status;
    snprintf(s->text, sizeof s->text, "%s", f->message);
}

static void on_ask(void *arg, const rt_answer *a) {
    seen *s = arg;
    s->asked++;
    snprintf(s->text, sizeof s->text, "%.*s", (int)a->len, a->text);
}

typedef struct {
    struct event_base *base;
    rt_exec ex;
} world;

static void world_up(world *w, const char *yaml) {
    char err[SB_ERR_LEN];
    memset(w, 0, sizeof *w);
    assert_non_null(w->base = event_base_new());
    w->ex.be.base = w->base;
    rt_conf *c = sb_calloc(1, sizeof *c);
    assert_non_null(c);
    c->refs = 1;
    if (load(yaml, &c->cfg, &c->pipes, err)) fail_msg("%s", err);
    w->ex.conf = c;
}

static void world_down(world *w) {
    rt_conf_release(w->ex.conf);
    event_base_free(w->base);
}

/* Start p on input with a sink that can (ask) or cannot take a next turn. */
static void start(world *w, seen *s, const char *input, bool turns) {
    char err[SB_ERR_LEN];
    memset(s, 0, sizeof *s);
    rt_sink sink = { NULL, on_finish, on_error, s, turns ? on_ask : NULL };
    if (rt_run_start(&w->ex, "p", input, &sink, &s->run, err)) fail_msg("%s", err);
    event_base_dispatch(w->base);
}

static void test_runs(void **state) {
    world w;
    seen s;
    world_up(&w, HEAD "      - { name: a, kind: echo, text: 'hi {{input}}' }\n"
                      "      - { name: b, kind: echo, text: '{{stages.a.output}}!' }\n");
    start(&w, &s, "you", true);
    assert_int_equal(s.finished, 1);
    assert_int_equal(s.asked + s.failed, 0);
    assert_string_equal(s.text, "hi you!");
    if (!strstr(s.result, "{\"name\":\"a\",\"kind\":\"echo\",\"status\":\"ok\",\"output\":\"hi you\""))
        fail_msg("%s", s.result);
    world_down(&w);
}

static void test_waits_on_the_caller(void **state) {
    world w;
    seen s;
    char err[SB_ERR_LEN];
    world_up(&w, HEAD "      - { name: q, kind: echo, ask: true, text: 'which colour, {{input}}?' }\n"
                      "      - { name: r, kind: echo, text: 'got {{stages.q.output}}' }\n");
    start(&w, &s, "Ann", true);
    /* The loop ran dry: the run is suspended, holding its state. */
    assert_int_equal(s.asked, 1);
    assert_int_equal(s.finished + s.failed, 0);
    assert_string_equal(s.text, "which colour, Ann?");
    assert_int_equal(rt_run_resume(s.run, "blue", err), 0);
    assert_int_equal(rt_run_resume(s.run, "red", err), SB_EINVAL);     /* it waits no more */
    event_base_dispatch(w.base);
    assert_int_equal(s.finished, 1);
    assert_string_equal(s.text, "got blue");
    assert_non_null(strstr(s.result, "\"output\":\"blue\""));
    /* Dropped while it waits: no callback, nothing leaks (ASan). */
    start(&w, &s, "Bo", true);
    assert_int_equal(s.asked, 1);
    rt_run_cancel(s.run);
    assert_int_equal(s.finished + s.failed, 0);
    /* A door without a next turn gets an error, not a hang. */
    start(&w, &s, "Cy", false);
    assert_int_equal(s.failed, 1);
    assert_int_equal(s.status, 501);
    assert_non_null(strstr(s.text, "stage 'q'"));
    world_down(&w);
}

/* The next turn comes by another request: the run answers its sink. And
 * after a restart the run is gone: one started at the stage that asked,
 * with the answer and the kept intent, goes on from there. */
static void test_next_turn_elsewhere(void **state) {
    world w;
    seen s, s2, s3;
    char err[SB_ERR_LEN];
    world_up(&w, HEAD "      - { name: q, kind: echo, ask: true, text: 'which colour, {{input}}?' }\n"
                      "      - { name: r, kind: echo, text: 'got {{stages.q.output}}' }\n");
    start(&w, &s, "Ann", true);
    assert_int_equal(s.asked, 1);
    assert_int_equal(rt_run_waiting_stage(s.run), 0);
    sb_jw j;
    sb_jw_init(&j);
    rt_run_awaiting_json(s.run, &j);
    assert_string_equal(j.p, "{\"kind\":\"slot\",\"slot\":\"q\"}");
    sb_jw_free(&j);
    memset(&s2, 0, sizeof s2);
    rt_sink next = { NULL, on_finish, on_error, &s2, on_ask };
    assert_int_equal(rt_run_resume_to(s.run, "blue", &next, err), 0);
    assert_int_equal(rt_run_waiting_stage(s.run), -1);
    event_base_dispatch(w.base);
    assert_int_equal(s.finished + s.failed, 0);
    assert_int_equal(s2.finished, 1);
    assert_string_equal(s2.text, "got blue");

    rt_pipeline_ref ref;
    assert_int_equal(rt_pipeline_resolve(&w.ex, "p", NULL, &ref, err), 0);
    memset(&s3, 0, sizeof s3);
    rt_sink again = { NULL, on_finish, on_error, &s3, on_ask };
    assert_int_equal(rt_run_start_at(&w.ex, &ref, 0, "paint", NULL, "green", &again, &s3.run, err), 0);
    event_base_dispatch(w.base);
    assert_int_equal(s3.asked + s3.failed, 0);
    assert_int_equal(s3.finished, 1);
    assert_string_equal(s3.text, "got green");
    assert_non_null(strstr(s3.result, "\"intent\":\"paint\""));
    world_down(&w);
}

int main(void) {
    if (rt_stage_kind_register(&echo_kind)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loads),
        cmocka_unit_test(test_runs),
        cmocka_unit_test(test_waits_on_the_caller),
        cmocka_unit_test(test_next_turn_elsewhere),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
