/* run_internal.h - the run's state, which run.c drives and the stage kinds
 * (stage_*.c, through stage_internal.h) read and fill. Private to
 * router/run/; everything else uses the rt_run_* API in sb_run.h.
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
    char *reply;                    /* what it said to the caller, when that is the turn's answer (rt_stage_reply) */
    sb_json_doc *doc;
    const sb_json *json;
    char *error;
    char *input;                    /* what the stage was given, kept for call traces only */
    int prompt_tokens, completion_tokens;
    bool found;                     /* retrieve: passages at or above min_score */
    int retries_used;               /* ask: times the slot now asked was asked again */
    unsigned declined;              /* ask: the optional slots (bits) the caller would not give */
    sb_clarify_state clarify;       /* intent: its questions to the caller (clarify.c) */
    bool turn_read;                 /* intent: this turn's answer was read (a poll starts the stage again) */
    int confirm_noes;               /* confirm: noes (or answers that were neither) to the readback */
    bool confirm_change;            /* confirm: the pending question is "what should I change?" */
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
    rt_job *job;                    /* the running stage's model call */
    rt_tool *tool;                  /* the running tool stage's process or request */
    rt_rr *rr;                      /* the running retrieve stage's passages */
    double t0, t_stage, model_s, t_first;    /* t_first: the answer's first streamed token */
    bool fell_back;                 /* the intent is the fallback label */
    int fail_status;
    int retry_after;                /* a model's queue was full: seconds for Retry-After (0: none) */
    const char *fail_type;
    char fail_msg[SB_ERR_LEN + 64];
    int last_ran;
    int until;                      /* stop after this stage; -1: run all */
    bool calibrating;               /* the running score call measures the prior */
    bool polling;                   /* the stage starts again (rt_stage_poll): its clock keeps running */
    bool suspended;                 /* waits on the caller's next turn (RT_STAGE_WAIT_CALLER) */
    char *turn;                     /* the caller's answer to the running stage, or NULL */
    char *awaiting;                 /* JSON: what the asking stage awaits (rt_run_set_awaiting), or NULL */
    const char *handoff;            /* why the call goes to a person (a static string), or NULL */
    int slots_stage;                /* the stage whose JSON holds the call's slots (a generate with ask:); -1 */
    struct event *timer, *kick;
    bool done;
    sb_pii_table *pii;              /* the call's placeholders (rt_run_set_privacy), or NULL */
    bool uncacheable;               /* rt_run_uncacheable */
    /* Conversations: slots carried in (a session's, or a topic's the call
     * left), and those of them the stages of the run's intent gather. */
    sb_json_doc *carried, *kept;
    char *history;                  /* {{history}}: the session's last turns (rt_run_set_history), or NULL */
    struct {                        /* routing a caller's answer (RT_STAGE_REROUTE) */
        bool on;                    /* the intent stage runs on the answer now */
        bool done;                  /* this turn was routed: the asking stage handles it itself */
        size_t back;                /* the stage that asked */
        char *input, *intent;       /* the run's own, put back when the topic stays */
        char *turn;                 /* the answer, for the stage that asked when the topic stays */
        double confidence;
        double probs[SB_PIPE_MAX_LABELS];
        bool fell_back;
        char *intent_output;        /* the intent stage's output */
    } topic;
};

/* topic.c: the run's topic across turns. keep_slots: after an intent
 * stage decided, the carried slots its stages gather are kept. reroute:
 * the running stage's answer goes to the intent stage before it (true:
 * out of memory, the run fails). routed: that stage decided: a new topic
 * goes on after it, else the stage that asked gets its answer back. */
void rt_topic_keep_slots(rt_run *run);
bool rt_topic_reroute(rt_run *run);
void rt_topic_routed(rt_run *run);
void rt_topic_free(rt_run *run);

/* The calibration prior measured for intent stage s, or NULL. */
rt_prior *rt_run_prior(rt_run *run, const sb_stage *s);
/* The template environment: the input, the intent and the outputs so far. */
sb_tmpl_env rt_run_env(rt_run *run);
/* What the running stage was given, kept for the call's trace. */
void rt_run_keep_input(rt_run *run, const char *p, size_t n);
/* An `embed` reply's first vector into out[0..max): its dimension, 0 if
 * there is none or it is longer. */
uint32_t rt_run_first_vector(const rt_reply *res, float *out, uint32_t max);

#endif
