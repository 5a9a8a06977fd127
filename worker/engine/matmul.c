/* matmul.c - weight matrices × a batch of activations (see matmul_impl.h).
 *
 * The f32 input is converted once to the weight type's vec_dot_type (Q8_K,
 * Q8_0, F16…), as llama.cpp does, and cached for the other matrices that
 * read the same input. Then:
 *   - one token (decode): tasks are blocks of rows, read as interleaved
 *     runs whose rows go two or four to a call (vec_dot2, vec_dot4) where
 *     the type has them, else one vec_dot each; numerics are exactly those
 *     of the 1×1 kernels either way; a few tokens that
 *     must keep those numerics (decode_kernels: a batch of sequences, an
 *     exact verify) take each row through vec_dotn for up to 16 at once;
 *   - several tokens (prompt): tasks are blocks of rows × blocks of tokens
 *     through the type's tiled kernel (traits .gemm), when it has one.
 * Several matrices that share an input go into one pool run.
 *
 * Weights that model.c re-laid in the x8 layout (8 interleaved rows) go
 * through the level's gemv8 for a few tokens; for a prompt each task first
 * unpacks its row block back to the file layout (a few % of the gemm's
 * time) and runs the tiled kernel on that.
 */
#include <string.h>

#include "worker/engine/matmul_impl.h"
#include "common/sb_common.h"

/* Rows per task, the task cap per thread and the gemm's row blocks come
 * from the kernels' plan (sb_kq_split: built-in 16 rows = one cache line of
 * output, 24 tasks per thread as each claim is an atomic CAS, 64 gemm rows,
 * a multiple of every tile's rows); `switchboard tune` may pick others. */
#define GEMM_TOKS 512           /* a packed weight panel serves this many tokens: packing it costs about as much as 64 tokens of compute */
#define X8_GEMM_MIN_TOKS 4      /* x8 weights: below this the tiled kernels would run vec_dot per pair anyway */

int sb_mm_init(sb_mm *mm, const sb_kq_kernels *kq, sb_pool *pool, size_t act_bytes, size_t x8_row_bytes) {
    memset(mm, 0, sizeof *mm);
    mm->kq = kq->row;
    mm->split = kq->split;
    mm->pool = pool;
    mm->gemm_min_toks = 2;
    for (int i = 0; i < SB_MM_ACT_SLOTS; i++)
        if (!(mm->act[i].buf = sb_aligned_alloc(act_bytes))) return SB_ENOMEM;
    if (x8_row_bytes) {
        mm->x8_rows_bytes = (size_t)mm->split.gemm_rows * x8_row_bytes;
        if (!(mm->x8_rows = sb_aligned_alloc(mm->x8_rows_bytes * (size_t)sb_pool_size(pool)))) return SB_ENOMEM;
    }
    return 0;
}

void sb_mm_free(sb_mm *mm) {
    for (int i = 0; i < SB_MM_ACT_SLOTS; i++) sb_aligned_free(mm->act[i].buf);
    sb_aligned_free(mm->il);
    sb_aligned_free(mm->x8_rows);
    memset(mm, 0, sizeof *mm);
}

void sb_mm_reset(sb_mm *mm) {
    for (int i = 0; i < SB_MM_ACT_SLOTS; i++) mm->act[i].src = NULL;
}

/* ---- activations ---------------------------------------------------------- */

typedef struct {
    const sb_kq_traits *tt;
    const float *src;
    void *dst;
    int64_t ne0;
    size_t row_bytes;
} quant_job;

static void quant_task(void *arg, int t, int thread) {
    const quant_job *j = arg;
    j->tt->from_float(j->src + (size_t)t * (size_t)j->ne0, (uint8_t *)j->dst + (size_t)t * j->row_bytes, j->ne0);
}

/* The input rows converted to `type`, converting only the first time a
 * given input is used with that type since the last reset. */
static const sb_act_slot *act_get(sb_mm *mm, const float *src, int n_tok, int64_t ne0, int type) {
    for (int i = 0; i < SB_MM_ACT_SLOTS; i++)
        if (mm->act[i].src == src && mm->act[i].type == type) return &mm->act[i];
    sb_act_slot *s = &mm->act[mm->act_next];
    mm->act_next = (mm->act_next + 1) % SB_MM_ACT_SLOTS;
    const sb_kq_traits *tt = &mm->kq[type];
    s->src = src;
    s->type = type;
    s->row_bytes = sb_kq_row_size(tt, ne0);
    quant_job j = { tt, src, s->buf, ne0, s->row_bytes };
    sb_pool_run(mm->pool, quant_task, &j, n_tok);
    sb_prof_mark(mm->prof, SB_OP_ACT_QUANT);
    return s;
}

/* ---- the run ----------------------------------------------------------------- */

typedef struct {
    const sb_weight *w;
    sb_vec_dot_fn dot;
    sb_vec_dotr_fn dot4, dot2;  /* one-token path: four or two runs' rows in one call; NULL: not used */
    sb_vec_dotn_fn dotn;        /* several tokens, 1x1 path: one weight row for up to 16 of them; NULL: dot per token */
    sb_vec_dotn_il_fn dotn_il;  /* the same on interleaved activations (yil), rows in groups; NULL: dotn */
    const uint8_t *yil;         /* the segment's tokens interleaved (Q8_K or Q8_0), SB_KQ_IL_TOK per group */
    size_t yil_group;           /* bytes of one group of SB_KQ_IL_TOK tokens in yil */
    int yil_q8_0;               /* yil: Q8_0 interleaved (Q4_0/Q5_0/Q8_0 weights), else Q8_K */
    sb_gemv8_fn gemv8;          /* x8 weight, few tokens: 8 rows per call */
    sb_gemm_fn gemm;            /* NULL: the 1×1 path */
    const uint8_t *act;
    size_t act_stride;
    float *y;
    size_t y_stride;
    int rows;                   /* rows per task */
    int streams;                /* one-token vec_dot path: interleaved runs of a task's rows */
    int n_tok_blocks;           /* gemm path; 1 otherwise */
    int n_tok;                  /* tokens of this part's segment */
    int first_task;
} mm_part;

typedef struct {
    mm_part part[SB_MM_MAX_OUTS * (SB_MM_MAX_SEGS + 1)];
    int n_parts;
    const sb_mm *mm;
} mm_job;

/* Rows [r0, r1) against one token, read as p->streams runs side by side:
 * run k is rows r0 + k·len …, and step i takes row i of every run. A
 * decode dot alone keeps too few DRAM lines in flight; two streams keep
 * more (kq_tune.c), and runs' rows read block by block in one vec_dot2 or
 * vec_dot4 more again. Each row's result is its vec_dot's bit for bit
 * either way, so the reading order changes no number. */
static void dot_streams(const mm_part *p, int64_t r0, int64_t r1, const uint8_t *a, float *y) {
    const uint8_t *wd = p->w->data;
    const size_t rb = p->w->row_bytes;
    const int n = (int)p->w->ne0;
    const int64_t len = (r1 - r0 + p->streams - 1) / p->streams;
    const size_t step = (size_t)len * rb;
    for (int64_t i = 0; i < len; i++) {
        int64_t r = r0 + i;
        if (p->dot4)
            for (; r + 3 * len < r1; r += 4 * len) p->dot4(n, &y[r], (size_t)len, wd + (size_t)r * rb, step, a);
        if (p->dot2)
            for (; r + len < r1; r += 2 * len) p->dot2(n, &y[r], (size_t)len, wd + (size_t)r * rb, step, a);
        for (; r < r1; r += len) p->dot(n, &y[r], wd + (size_t)r * rb, a);
    }
}

/* Rows r0.. of every token, one vec_dot per row (or one gemv8 per 8 rows:
 * row blocks of x8 parts are multiples of 8). With several tokens and a
 * vec_dotn, rows go outer and each row meets up to 16 tokens in one call,
 * which unpacks its blocks once for all of them; every result is still the
 * lone token's vec_dot bit for bit (sb_kq.h). */
static void run_1x1(const mm_part *p, int64_t r0, int n_tok) {
    const int64_t r1 = SB_MIN(r0 + p->rows, p->w->ne1);
    const uint8_t *wd = p->w->data;
    const int n = (int)p->w->ne0;
    if (p->dotn_il) {
        for (int t0 = 0; t0 < n_tok; t0 += SB_KQ_IL_TOK)
            p->dotn_il(n, (int)(r1 - r0), SB_MIN(SB_KQ_IL_TOK, n_tok - t0), p->y + (size_t)t0 * p->y_stride + r0,
                       p->y_stride, wd + (size_t)r0 * p->w->row_bytes, p->w->row_bytes,
                       p->yil + (size_t)(t0 / SB_KQ_IL_TOK) * p->yil_group);
        return;
    }
    if (n_tok > 1 && p->dotn && !p->gemv8) {
        for (int64_t r = r0; r < r1; r++)
            for (int t0 = 0; t0 < n_tok; t0 += SB_KQ_DOTN_MAX)
                p->dotn(n, SB_MIN(SB_KQ_DOTN_MAX, n_tok - t0), p->y + (size_t)t0 * p->y_stride + r, p->y_stride,
                        wd + (size_t)r * p->w->row_bytes, p->act + (size_t)t0 * p->act_stride, p->act_stride);
        return;
    }
    for (int t = 0; t < n_tok; t++) {
        const uint8_t *a = p->act + (size_t)t * p->act_stride;
        float *y = p->y + (size_t)t * p->y_stride;
        if (p->gemv8)
            for (int64_t r = r0; r < r1; r += 8) p->gemv8(n, &y[r], wd + (size_t)r * p->w->row_bytes, a);
        else
            dot_streams(p, r0, r1, a, y);
    }
}

/* One block of rows × one block of tokens through the tiled kernel. Tasks
 * are numbered token-block fastest and the pool gives each thread a
 * contiguous range of tasks, so one thread runs every token block of a row
 * block back to back while those rows are still in its L2. */
static void run_gemm(const mm_part *p, int local, int n_tok, uint8_t *x8_rows) {
    const int rb = local / p->n_tok_blocks, tb = local % p->n_tok_blocks;
    const int64_t r0 = (int64_t)rb * p->rows;
    const int nr = (int)SB_MIN((int64_t)p->rows, p->w->ne1 - r0);
    const int t0 = tb * GEMM_TOKS;
    const int nc = SB_MIN(GEMM_TOKS, n_tok - t0);
    const size_t rbytes = p->w->row_bytes;
    const uint8_t *x = (const uint8_t *)p->w->data + (size_t)r0 * rbytes;
    if (p->w->x8_buf) {         /* r0 and nr are multiples of 8 (gemm_rows, ne1) */
        for (int g = 0; g < nr / 8; g++)
            sb_kq_x8_unpack(p->w->type, p->w->ne0, x + (size_t)g * 8 * rbytes, x8_rows + (size_t)g * 8 * rbytes, rbytes);
        x = x8_rows;
    }
    p->gemm((int)p->w->ne0, nr, nc, x, rbytes, p->act + (size_t)t0 * p->act_stride, p->act_stride,
            p->y + (size_t)t0 * p->y_stride + r0, p->y_stride);
}

static void mm_task(void *arg, int task, int thread) {
    const mm_job *j = arg;
    int lo = 0, hi = j->n_parts - 1;         /* the last part with first_task <= task */
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (j->part[mid].first_task <= task) lo = mid;
        else hi = mid - 1;
    }
    const mm_part *p = &j->part[lo];
    const int local = task - p->first_task;
    if (p->gemm) run_gemm(p, local, p->n_tok, j->mm->x8_rows + (size_t)thread * j->mm->x8_rows_bytes);
    else run_1x1(p, (int64_t)local * p->rows, p->n_tok);
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Tasks of part p with `rows` rows per task. */
static int64_t part_tasks(const mm_part *p, int rows) { return ceil_div(p->w->ne1, rows) * p->n_tok_blocks; }

/* Tasks of a whole run with `rows` rows per task for its 1x1 parts (for
 * all of them when all are tiled). */
static int64_t run_tasks(const mm_job *j, int all_gemm, int rows, int gemm_rows) {
    int64_t n = 0;
    for (int i = 0; i < j->n_parts; i++) n += part_tasks(&j->part[i], j->part[i].gemm && !all_gemm ? gemm_rows : rows);
    return n;
}

/* The token segments of a run: {first token, tokens, one-token kernels}. */
typedef struct { int t0, n, one; } mm_seg;

static int mm_segments(const sb_mm *mm, int n_tok, mm_seg *seg) {
    int n = 0, t = 0;
    if (mm->n_one > 0) {
        seg[n++] = (mm_seg){ 0, mm->n_one, 1 };
        t = mm->n_one;
    }
    for (int i = 0; i < mm->n_seg; i++) {
        seg[n++] = (mm_seg){ t, mm->seg[i], 0 };
        t += mm->seg[i];
    }
    if (t < n_tok) seg[n++] = (mm_seg){ t, n_tok - t, 0 };   /* the default: one segment of all tokens */
    return n;
}

/* Bytes of one group of SB_KQ_IL_TOK tokens of a part's laid-out
 * activations: Q8_0 and Q8_K interleaved per group. */
static size_t il_group_bytes(const mm_part *p) {
    return p->yil_q8_0 ? sb_kq_q8_0_prep_bytes((int)p->w->ne0)
                       : (size_t)(p->w->ne0 / SB_QK_K) * SB_KQ_IL_BLOCK_BYTES;
}

static size_t il_bytes(const mm_part *p) { return (size_t)ceil_div(p->n_tok, SB_KQ_IL_TOK) * il_group_bytes(p); }

/* The activations of the parts that take vec_dotn_il, interleaved
 * (Q8_K or Q8_0) once per (input, segment): parts of one run that share
 * both share the copy. If the buffer cannot grow, those parts fall back to
 * vec_dotn (the same numbers). Runs on the calling thread: a few µs per
 * input, against a matrix pass of milliseconds. */
static void il_prepare(sb_mm *mm, mm_job *j) {
    size_t need = 0, off[SB_MM_MAX_OUTS * (SB_MM_MAX_SEGS + 1)];
    int owner[SB_MM_MAX_OUTS * (SB_MM_MAX_SEGS + 1)];
    for (int i = 0; i < j->n_parts; i++) {
        const mm_part *p = &j->part[i];
        owner[i] = -1;
        if (!p->dotn_il) continue;
        for (int k = 0; k < i && owner[i] < 0; k++)
            if (j->part[k].dotn_il && j->part[k].act == p->act && j->part[k].n_tok == p->n_tok &&
                j->part[k].yil_q8_0 == p->yil_q8_0)
                owner[i] = owner[k];
        if (owner[i] >= 0) continue;
        owner[i] = i;
        off[i] = need;
        need += il_bytes(p);
    }
    if (need > mm->il_cap) {
        sb_aligned_free(mm->il);
        mm->il_cap = 0;
        if (!(mm->il = sb_aligned_alloc(need))) {
            for (int i = 0; i < j->n_parts; i++) j->part[i].dotn_il = NULL;
            return;
        }
        mm->il_cap = need;
    }
    for (int i = 0; i < j->n_parts; i++) {
        mm_part *p = &j->part[i];
        if (!p->dotn_il) continue;
        p->yil = mm->il + off[owner[i]];
        p->yil_group = il_group_bytes(p);
        if (owner[i] != i) continue;
        for (int t0 = 0; t0 < p->n_tok; t0 += SB_KQ_IL_TOK) {
            const int nt = SB_MIN(SB_KQ_IL_TOK, p->n_tok - t0);
            const uint8_t *a = p->act + (size_t)t0 * p->act_stride;
            uint8_t *dst = (uint8_t *)p->yil + (size_t)(t0 / SB_KQ_IL_TOK) * p->yil_group;
            if (p->yil_q8_0) sb_kq_q8_0_prepare((int)p->w->ne0, nt, a, p->act_stride, dst);
            else sb_kq_q8_K_interleave((int)(p->w->ne0 / SB_QK_K), nt, a, p->act_stride, dst);
        }
    }
}

void sb_mm_run(sb_mm *mm, const float *x, int n_tok, const sb_mm_out *outs, int n_outs) {
    mm_job j;
    mm_seg segs[SB_MM_MAX_SEGS + 2];
    const int n_segs = mm_segments(mm, n_tok, segs);
    j.n_parts = 0;
    j.mm = mm;
    const int n_threads = sb_pool_size(mm->pool);
    int all_gemm = 1, need_il = 0;
    for (int i = 0; i < n_outs; i++) {
        const sb_kq_traits *tt = &mm->kq[outs[i].w->type];
        const sb_act_slot *a = act_get(mm, x, n_tok, outs[i].w->ne0, tt->vec_dot_type);
        for (int sg = 0; sg < n_segs; sg++) {
            const mm_seg *g = &segs[sg];
            mm_part *p = &j.part[j.n_parts++];
            p->w = outs[i].w;
            p->dot = tt->vec_dot;
            p->dot2 = mm->split.dot_rows >= 2 ? tt->vec_dot2 : NULL;
            p->dot4 = mm->split.dot_rows >= 4 ? tt->vec_dot4 : NULL;
            p->dotn = tt->vec_dotn;
            const int min_toks = p->w->x8_buf ? SB_MAX(X8_GEMM_MIN_TOKS, mm->gemm_min_toks) : mm->gemm_min_toks;
            p->gemm = !g->one && g->n >= min_toks && !mm->decode_kernels ? tt->gemm : NULL;
            p->gemv8 = p->w->x8_buf && !p->gemm ? tt->gemv8 : NULL;
            p->yil_q8_0 = tt->vec_dot_type == SB_TYPE_Q8_0;
            p->dotn_il = !p->gemm && !p->gemv8 &&
                                 (tt->vec_dot_type == SB_TYPE_Q8_K ? g->n >= SB_KQ_IL_MIN_TOK
                                                                   : p->yil_q8_0 && g->n >= SB_KQ_P8_MIN_TOK)
                             ? tt->vec_dotn_il : NULL;
            need_il |= p->dotn_il != NULL;
            p->act_stride = a->row_bytes;
            p->act = (const uint8_t *)a->buf + (size_t)g->t0 * p->act_stride;
            p->y_stride = outs[i].y_stride;
            p->y = outs[i].y + (size_t)g->t0 * p->y_stride;
            p->n_tok = g->n;
            p->n_tok_blocks = p->gemm ? (int)ceil_div(g->n, GEMM_TOKS) : 1;
            all_gemm &= p->gemm != NULL;
        }
    }
    if (need_il) {
        il_prepare(mm, &j);
        sb_prof_mark(mm->prof, SB_OP_ACT_QUANT);
    }
    /* Rows per task (`rows` for the 1x1 parts, or for all parts when all
     * are tiled): enough tasks that every thread gets several and a
     * preempted thread's range can be stolen in small pieces; few enough
     * that claiming them (a CAS each; ~100 ns when another thread is
     * stealing from the same range) is not the cost: a decode step has
     * ~110 runs. */
    const int gemm_rows = mm->split.gemm_rows;
    int rows = all_gemm ? gemm_rows : mm->split.rows_per_task;
    const int min_rows = all_gemm ? 8 : 1;
    /* First coarser until the tasks fit the cap, then finer while there
     * are fewer than 4 a thread, never past the cap again: each loop moves
     * one way, so a cap below 4 a thread cannot make them undo each other. */
    const int64_t max_tasks = all_gemm ? INT64_MAX : (int64_t)mm->split.tasks_per_thread * n_threads;
    while (run_tasks(&j, all_gemm, rows, gemm_rows) > max_tasks && rows < (1 << 20)) rows *= 2;
    while (rows > min_rows && run_tasks(&j, all_gemm, rows, gemm_rows) < 4 * n_threads &&
           run_tasks(&j, all_gemm, rows / 2, gemm_rows) <= max_tasks)
        rows /= 2;
    /* Then coarser while a one-token task holds less than task_kib of
     * weights, keeping 2 tasks a thread to balance: each task starts its
     * runs' streams cold (their first lines miss before any prefetch
     * runs ahead), and a small model's tasks are short enough for those
     * starts to cost a tenth of its decode (docs/PERFORMANCE.md). */
    if (!all_gemm && mm->split.task_kib > 0) {
        double bytes = 0;
        for (int i = 0; i < j.n_parts; i++)
            if (!j.part[i].gemm) bytes += (double)j.part[i].w->row_bytes * (double)j.part[i].w->ne1;
        while (bytes < (double)mm->split.task_kib * 1024.0 * (double)run_tasks(&j, all_gemm, rows, gemm_rows) &&
               run_tasks(&j, all_gemm, rows * 2, gemm_rows) >= 2 * n_threads && rows < (1 << 20))
            rows *= 2;
    }
    int first = 0;
    for (int i = 0; i < j.n_parts; i++) {
        mm_part *p = &j.part[i];
        p->rows = p->gemm && !all_gemm ? gemm_rows : rows;
        p->streams = SB_MAX(1, mm->split.streams);
        if (p->gemv8) p->rows = SB_MAX(8, p->rows / 8 * 8);
        p->first_task = first;
        first += (int)part_tasks(p, p->rows);
    }
    sb_pool_run(mm->pool, mm_task, &j, first);
}
