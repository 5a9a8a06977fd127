/* run_internal.h - what run.c and the intent stage (run_intent.c) share:
 * the run's state and the steps a stage uses to report back. Private to
 * router/run/run*.c; everything else uses the rt_run_* API in sb_run.h.
 */
#ifndef SB_RUN_INTERNAL_H
#define SB_RUN_INTERNAL_H

#include <event2/event.h>

#include "router/run/sb_run.h"


enum { ST_PENDING, ST_OK, ST_SKIPPED, ST_ERROR };

typedef struct {
    int status;
    double ms;
    double t_start;                 /* sb_now_s() when it started; 0: never started */
    char *output;
    sb_json_doc *doc;
    const sb_json *json;
    char *error;
    char *input;                    /* what the stage was given, kept for call traces only */
    int prompt_tokens, completion_tokens;
    bool found;                     /* retrieve: passages at or above min_score */
} stage_res;

struct rt_run {
    rt_exec *ex;
    rt_conf *conf;
    const sb_pipeline *p;
    char *input;
    rt_sink sink;                   /* where the reply goes (sb_run.h) */
    size_t cur;
    stage_res *res;
    const char **outputs;           /* views for templates */
    const sb_json **json;
    char *intent;
    double confidence;
    double probs[SB_PIPE_MAX_LABELS];
    int intent_stage;               /* the last intent stage that ran, or -1 */
    rt_job *job;
    rt_tool *tool;
    rt_rr *rr;                      /* the running retrieve stage's passages */
    sb_jw text;                     /* the running generate stage's tokens */
    double t0, t_stage, model_s, t_first;    /* t_first: the answer's first streamed token */
    bool fell_back;                 /* the intent is the fallback label */
    int fail_status;
    int retry_after;                /* a model's queue was full: seconds for Retry-After (0: none) */
    const char *fail_type;
    char fail_msg[SB_ERR_LEN + 64];
    int last_ran;
    int until;                      /* stop after this stage; -1: run all */
    bool calibrating;               /* the running score call measures the prior */
    bool index_wait;                /* polling for an embedding stage's index */
    struct event *timer, *kick;
    bool done;
};

/* Stage s's calls to a model (its own, or model): a score over r, an embed
 * of one "query: " text. A full queue leaves the Retry-After the caller is
 * answered with. */
int rt_run_score(rt_run *run, const sb_stage *s, const char *model, rt_score_req *r, rt_done_fn on_done, char *err);
int rt_run_embed(rt_run *run, const sb_stage *s, const char *text, size_t len, rt_done_fn on_done, char *err);
/* The calibration prior measured for intent stage s, or NULL. */
rt_prior *rt_run_prior(rt_run *run, const sb_stage *s);
/* The template environment: the input, the intent and the outputs so far. */
sb_tmpl_env rt_run_env(rt_run *run);
/* Ends the run with an error reply (fmt takes two strings). */
void rt_run_fail(rt_run *run, int status, const char *type, const char *fmt, const char *a, const char *b);
/* Records the running stage's result and schedules the next step. */
void rt_run_stage_done(rt_run *run, int status, const char *error);
/* What the running stage was given, kept for the call's trace. */
void rt_run_keep_input(rt_run *run, const char *p, size_t n);
/* An `embed` result's first vector into out[0..max): its dimension, 0 if
 * there is none or it is longer. */
uint32_t rt_run_first_vector(const rt_reply *res, float *out, uint32_t max);

/* The intent stage (run_intent.c): a score call over the labels, or the
 * embedding classifier (1: its index is still being built). */
int rt_run_start_intent(rt_run *run, const sb_stage *s, char *err);
int rt_run_start_intent_embed(rt_run *run, const sb_stage *s, char *err);

#endif
