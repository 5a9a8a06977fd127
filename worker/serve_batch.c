/* serve_batch.c - the worker's compute thread when --parallel > 1.
 *
 * One loop: admit queued jobs (highest priority first) as engine tasks
 * while sb_engine_submit_* accepts them, run one sb_engine_step (a forward
 * pass that advances every running task), answer the tasks that finished,
 * repeat. A job the pool cannot take now (SB_EBUSY) stays queued, in
 * order, until a finished task frees room (score jobs behind it may start);
 * one it can never take gets an error. Pieces stream from inside the step (sb_ipc_reply_event is safe
 * from this thread); health and info stay on the loop thread and read the
 * figures published after each step. Cancel (or a client gone, or the
 * drain deadline) ends a task within one step, its blocks back in the pool.
 */
#include <stdio.h>
#include <string.h>

#include "common/sb_common.h"
#include "worker/serve_impl.h"

typedef struct {
    job *j;
    sb_task *t;
} active;

static void *req_new(worker *w, job *j, sb_mp_writer *wr) {
    if (j->kind == JOB_SCORE) {
        score_req *s = sb_malloc(sizeof *s);
        if (s && sb_serve_score_prepare(w, j, s)) { sb_free(s); return NULL; }
        if (!s) sb_ipc_reply_error(j->reply, SB_IPC_INTERNAL, "out of memory");
        return s;
    }
    gen_req *g = sb_malloc(sizeof *g);
    if (g && sb_serve_gen_prepare(w, j, wr, g)) { sb_free(g); return NULL; }
    if (!g) sb_ipc_reply_error(j->reply, SB_IPC_INTERNAL, "out of memory");
    return g;
}

static void req_free(job *j) {
    if (!j->req) return;
    if (j->kind == JOB_SCORE) sb_serve_score_free(j->req);
    else sb_serve_gen_free(j->req);
    sb_free(j->req);
    j->req = NULL;
}

static int submit(worker *w, job *j, sb_task **t, char *err) {
    if (j->kind == JOB_SCORE) {
        score_req *s = j->req;
        return sb_engine_submit_score(w->engine, s->ids, (int)s->n_ids, (const int32_t *const *)s->ctoks, s->clen,
                                      (int)s->nc, j->priority, t, err);
    }
    gen_req *g = j->req;
    return sb_engine_submit_generate(w->engine, g->ids, (int)g->n_ids, &g->o, j->priority, t, err);
}

static void unlink_job(worker *w, job *j) {
    job **at = &w->head, *prev = NULL;
    while (*at && *at != j) { prev = *at; at = &(*at)->next; }
    if (!*at) return;
    *at = j->next;
    if (w->tail == j) w->tail = prev;
    w->n_queued--;
}

/* Admit from the head of the queue while tasks are accepted. A job the
 * engine cannot take yet (SB_EBUSY) keeps its place, and the generations
 * behind it wait too (no overtaking); score jobs behind it are still tried:
 * they are short and take few blocks. Returns the new number of active
 * tasks. Only this thread removes jobs, so a job it left queued stays a
 * valid cursor while the loop thread inserts others. */
static int admit(worker *w, active *act, int n_act, sb_mp_writer *wr) {
    job *cur = NULL;            /* the last job left queued: go on after it */
    int blocked = 0;
    while (n_act < w->parallel) {
        pthread_mutex_lock(&w->mu);
        job *j = cur ? cur->next : w->head;
        while (j && blocked && j->kind != JOB_SCORE) j = (cur = j)->next;
        pthread_mutex_unlock(&w->mu);
        if (!j) break;
        char err[SB_ERR_LEN];
        sb_task *t = NULL;
        int rc = 1;             /* > 0: answered already */
        if (sb_ipc_reply_cancelled(j->reply) || atomic_load(&j->cancel))
            sb_ipc_reply_error(j->reply, SB_IPC_CANCELLED, "cancelled before it started");
        else if (j->req || (j->req = req_new(w, j, wr)))
            rc = submit(w, j, &t, err);
        if (rc == SB_EBUSY) {   /* stays queued, in its place */
            cur = j;
            blocked = 1;
            continue;
        }
        pthread_mutex_lock(&w->mu);
        unlink_job(w, j);
        if (rc == 0) w->running++;
        pthread_mutex_unlock(&w->mu);
        if (rc == 0) {
            act[n_act++] = (active){ j, t };
            continue;
        }
        if (rc < 0) {       /* can never run: too long for the pool or the context, bad tokens */
            if (j->kind == JOB_SCORE) sb_serve_score_reply(j, j->req, rc, err, wr);
            else sb_serve_gen_reply(j, j->req, rc, NULL, err, wr);
        }
        req_free(j);
        sb_free(j);
    }
    return n_act;
}

/* Answer a finished (or failed, or cancelled) task and forget its job. */
static void finish(worker *w, active *a, int st, const sb_gen_result *res, const char *err, sb_mp_writer *wr) {
    job *j = a->j;
    pthread_mutex_lock(&w->mu);
    w->running--;
    pthread_mutex_unlock(&w->mu);
    if (j->kind == JOB_SCORE) {
        if (st == 0) sb_ipc_reply_error(j->reply, SB_IPC_CANCELLED, "cancelled");
        else sb_serve_score_reply(j, j->req, st < 0 ? st : 0, err, wr);
    } else {
        sb_serve_gen_reply(j, j->req, st < 0 ? st : 0, res, err, wr);
    }
    sb_task_free(w->engine, a->t);
    req_free(j);
    sb_free(j);
}

/* Poll every task after a step; the finished ones leave act. */
static int reap(worker *w, active *act, int n_act, int abandon, sb_mp_writer *wr) {
    for (int i = n_act - 1; i >= 0; i--) {
        active *a = &act[i];
        char err[SB_ERR_LEN] = "";
        sb_gen_result res;
        if (abandon) atomic_store(&a->j->cancel, 1);
        int st = 0;
        if (a->j->kind == JOB_SCORE) {
            score_req *s = a->j->req;
            st = sb_task_poll(a->t, &res, s->lp, err);
            /* The engine has no cancel flag for scoring: dropping the task
             * frees its blocks at once. */
            if (st == 0 && !atomic_load(&a->j->cancel) && !sb_ipc_reply_cancelled(a->j->reply)) continue;
        } else if ((st = sb_task_poll(a->t, &res, NULL, err)) == 0) {
            continue;
        }
        finish(w, a, st, &res, err, wr);
        act[i] = act[--n_act];
    }
    return n_act;
}

void *sb_serve_batch_main(void *arg) {
    worker *w = arg;
    sb_mp_writer *wr = NULL;
    active *act = sb_calloc((size_t)w->parallel, sizeof *act);
    if (!act || sb_mp_writer_new(&wr)) {
        sb_error("compute thread: out of memory");
        sb_free(act);
        return NULL;
    }
    int n_act = 0;
    for (;;) {
        pthread_mutex_lock(&w->mu);
        while (!w->head && !n_act && !w->stopping) pthread_cond_wait(&w->cv, &w->mu);
        const int stopping = w->stopping, idle = !w->head && !n_act;
        pthread_mutex_unlock(&w->mu);
        if (idle && stopping) break;
        n_act = admit(w, act, n_act, wr);
        if (!n_act) {
            /* Queued work that cannot start with nothing running would spin:
             * only a bug in admission gets here. Wait for news instead. */
            pthread_mutex_lock(&w->mu);
            if (w->head && !w->stopping) pthread_cond_wait(&w->cv, &w->mu);
            pthread_mutex_unlock(&w->mu);
            if (stopping == 2) break;
            continue;
        }
        char err[SB_ERR_LEN];
        int rc = sb_engine_step(w->engine, err);
        if (rc < 0) sb_error("forward pass failed, %d request(s) fail with it: %s", n_act, err);
        n_act = reap(w, act, n_act, stopping == 2, wr);
        sb_serve_publish_stats(w);
    }
    /* Drain deadline passed: whatever is still queued is answered. */
    for (;;) {
        pthread_mutex_lock(&w->mu);
        job *j = w->head;
        if (j) unlink_job(w, j);
        pthread_mutex_unlock(&w->mu);
        if (!j) break;
        sb_ipc_reply_error(j->reply, SB_IPC_CANCELLED, "cancelled: the worker is stopping");
        req_free(j);
        sb_free(j);
    }
    sb_mp_writer_free(wr);
    sb_free(act);
    return NULL;
}
