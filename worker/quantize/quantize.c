/* quantize.c - the quantizer driver: one GGUF in, one GGUF out.
 *
 * 1. plan: every tensor's output type (quant_mix.c) and the output order
 *    (llama-quantize's: by layer, then name), checked before any byte is
 *    written - an unsupported input, a quantized input without
 *    --allow-requantize or a missing imatrix fail here, not halfway;
 * 2. metadata: every key of the input in its order, then
 *    general.quantization_version = 2 and general.file_type, moved to the
 *    end as gguf_set_val does, split keys removed, imatrix provenance added;
 * 3. data: each tensor is copied (same type) or converted in slabs of rows:
 *    the rows of a slab are split across the threads, each thread turns its
 *    rows into floats and quantizes them, then the slab is written;
 * 4. the file is written to OUT.tmp-XXXXXX and renamed over OUT only when
 *    complete and fsynced (sb_outfile), so a failure never leaves half a file.
 * With the same input and no imatrix the output is byte for byte the file
 * llama-quantize writes (tests/test_quantize.c).
 */
#include <stdio.h>
#include <string.h>

#include "worker/gguf/sb_gguf_write.h"
#include "worker/kernels/sb_kq.h"
#include "worker/engine/sb_pool.h"
#include "worker/quantize/sb_quantize.h"

#define MiB (1024.0 * 1024.0)
#define SLAB_MAX_BYTES (64u << 20)  /* output bytes per slab: bounds the buffer */
#define TASK_ELEMENTS 65536         /* elements per thread task: big enough to amortize */
#define IMATRIX_KEY_MAX 127         /* llama-quantize truncates its strings to this */

typedef struct {
    const sb_kq_traits *src_t, *dst_t;
    int dst_type, src_is_f32;
    const uint8_t *src;             /* first row of the slab */
    uint8_t *dst;
    int64_t n_per_row, rows, rows_per_task, first_row, rows_per_expert;
    const float *imatrix;           /* per expert: n_per_row values each */
    float **thread_buf;
} slab_job;

/* One task: rows [r0, r1) of the slab to floats, then to the output type,
 * in runs that do not cross an expert boundary (each has its own imatrix). */
static void convert_task(void *arg, int task, int thread) {
    const slab_job *j = arg;
    const int64_t r0 = (int64_t)task * j->rows_per_task;
    const int64_t r1 = SB_MIN(r0 + j->rows_per_task, j->rows);
    const size_t src_row = sb_kq_row_size(j->src_t, j->n_per_row);
    const size_t dst_row = sb_kq_row_size(j->dst_t, j->n_per_row);
    const float *f;
    if (j->src_is_f32) {
        f = (const float *)(j->src + (size_t)r0 * src_row);
    } else {
        j->src_t->to_float(j->src + (size_t)r0 * src_row, j->thread_buf[thread], (r1 - r0) * j->n_per_row);
        f = j->thread_buf[thread];
    }
    for (int64_t r = r0; r < r1;) {
        const int64_t global = j->first_row + r;
        const int64_t run = SB_MIN(r1 - r, j->rows_per_expert - global % j->rows_per_expert);
        const float *qw = j->imatrix ? j->imatrix + (global / j->rows_per_expert) * j->n_per_row : NULL;
        sb_quant_rows(j->dst_type, f + (r - r0) * j->n_per_row, j->dst + (size_t)r * dst_row, run, j->n_per_row, qw);
        r += run;
    }
}

static int64_t tensor_elements(const sb_gguf_tensor *t) {
    int64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) n *= t->ne[d];
    return n;
}

typedef struct {
    const sb_quant_params *p;
    sb_gguf *in;
    sb_imatrix *imatrix;
    sb_pool *pool;
    sb_outfile *out;
    uint8_t *slab;                  /* SLAB_MAX_BYTES (or one row, if bigger) */
    size_t slab_cap;
    float **thread_buf;
    size_t thread_buf_elems;
} quant_ctx;

static int grow_buffers(quant_ctx *q, size_t slab_bytes, size_t task_elems, char *err) {
    if (slab_bytes > q->slab_cap) {
        uint8_t *s = sb_realloc(q->slab, slab_bytes);
        if (!s) return sb_seterr(err, SB_ENOMEM, "out of memory for a %zu-byte slab", slab_bytes);
        q->slab = s;
        q->slab_cap = slab_bytes;
    }
    if (task_elems > q->thread_buf_elems) {
        for (int t = 0; t < q->p->n_threads; t++) {
            float *b = sb_realloc(q->thread_buf[t], task_elems * sizeof(float));
            if (!b) return sb_seterr(err, SB_ENOMEM, "out of memory for conversion buffers");
            q->thread_buf[t] = b;
        }
        q->thread_buf_elems = task_elems;
    }
    return 0;
}

/* The imatrix for tensor t, or NULL; errors as llama-quantize's do. */
static int imatrix_for(quant_ctx *q, const sb_gguf_tensor *t, const sb_quant_plan_entry *e, const float **out,
                       char *err) {
    *out = NULL;
    if (q->imatrix) {
        size_t n;
        const float *v = sb_imatrix_find(q->imatrix, t->name.ptr, t->name.len, &n);
        const size_t want = (size_t)t->ne[0] * (size_t)(t->n_dims > 2 ? t->ne[2] : 1);
        if (v && n == want) *out = v;
        else if (v && !sb_str_eq(t->name, "token_embd.weight"))
            return sb_seterr(err, SB_EFORMAT, "imatrix has %zu values for %.*s, which needs %zu", n,
                             (int)t->name.len, t->name.ptr, want);
        else if (!v && !q->p->quiet)
            fprintf(stderr, "quantize: no imatrix entry for %.*s\n", (int)t->name.len, t->name.ptr);
    }
    if (!*out && e->requires_imatrix)
        return sb_seterr(err, SB_EINVAL, "%.*s: Q2_K in a Q2_K_S file needs importance matrix data",
                         (int)t->name.len, t->name.ptr);
    return 0;
}

static int write_tensor(quant_ctx *q, const sb_gguf_tensor *t, const sb_quant_plan_entry *e, char *err) {
    int rc;
    if ((int)t->type == e->type) return sb_outfile_write(q->out, t->data, t->nbytes, err);
    const float *imatrix;
    if ((rc = imatrix_for(q, t, e, &imatrix, err))) return rc;
    const sb_kq_traits *tab = sb_kq_table(SB_KQ_REF);
    /* F16/BF16 -> F32 is exact whatever the kernel level, so those take the
     * SIMD conversion; a quantized input is dequantized by the reference
     * kernels, whose float operations are ggml's own. */
    const int exact = t->type == SB_TYPE_F16 || t->type == SB_TYPE_BF16;
    slab_job j = { .src_t = exact ? &sb_kq_table(sb_kq_best_level())[t->type] : &tab[t->type],
                   .dst_t = &tab[e->type], .dst_type = e->type,
                   .src_is_f32 = t->type == SB_TYPE_F32,
                   .n_per_row = t->ne[0], .imatrix = imatrix,
                   .rows_per_expert = t->n_dims > 1 ? t->ne[1] : 1 };
    const int64_t rows_total = tensor_elements(t) / t->ne[0];
    if (j.rows_per_expert < 1) j.rows_per_expert = 1;
    const size_t src_row = sb_kq_row_size(j.src_t, j.n_per_row), dst_row = sb_kq_row_size(j.dst_t, j.n_per_row);
    const int64_t slab_rows = SB_MAX((int64_t)1, (int64_t)(SLAB_MAX_BYTES / dst_row));
    j.rows_per_task = SB_MAX((int64_t)1, TASK_ELEMENTS / j.n_per_row);
    if ((rc = grow_buffers(q, (size_t)SB_MIN(slab_rows, rows_total) * dst_row,
                           (size_t)(j.rows_per_task * j.n_per_row), err)))
        return rc;
    j.thread_buf = q->thread_buf;
    for (int64_t r = 0; r < rows_total; r += slab_rows) {
        j.rows = SB_MIN(slab_rows, rows_total - r);
        j.first_row = r;
        j.src = (const uint8_t *)t->data + (size_t)r * src_row;
        j.dst = q->slab;
        const int n_tasks = (int)((j.rows + j.rows_per_task - 1) / j.rows_per_task);
        sb_pool_run(q->pool, convert_task, &j, n_tasks);
        if ((rc = sb_outfile_write(q->out, q->slab, (size_t)j.rows * dst_row, err))) return rc;
    }
    return 0;
}

static void format_shape(const sb_gguf_tensor *t, char *buf, size_t n) {
    int k = snprintf(buf, n, "[%lld", (long long)t->ne[0]);
    for (uint32_t d = 1; d < t->n_dims && k > 0 && (size_t)k < n; d++)
        k += snprintf(buf + k, n - (size_t)k, " x %lld", (long long)t->ne[d]);
    if (k > 0 && (size_t)k < n) snprintf(buf + k, n - (size_t)k, "]");
}

/* Metadata of the output: the input's keys, then llama-quantize's. */
static int build_metadata(quant_ctx *q, sb_gguf_writer *w, char *err) {
    int rc;
    for (size_t i = 0; i < sb_gguf_n_kv(q->in); i++)
        if ((rc = sb_gguf_writer_copy_kv(w, q->in, sb_gguf_kv_at(q->in, i), err))) return rc;
    if ((rc = sb_gguf_writer_set_u32(w, "general.quantization_version", 2)) ||
        (rc = sb_gguf_writer_set_u32(w, "general.file_type", (uint32_t)q->p->ftype)))
        return sb_seterr(err, rc, "out of memory");
    sb_gguf_writer_remove(w, "split.no");
    sb_gguf_writer_remove(w, "split.count");
    sb_gguf_writer_remove(w, "split.tensors.count");
    if (q->imatrix) {
        char buf[IMATRIX_KEY_MAX + 1];
        snprintf(buf, sizeof buf, "%s", q->p->imatrix_path);
        rc = sb_gguf_writer_set_str(w, "quantize.imatrix.file", buf);
        if (!rc && sb_imatrix_dataset(q->imatrix)) {
            snprintf(buf, sizeof buf, "%s", sb_imatrix_dataset(q->imatrix));
            rc = sb_gguf_writer_set_str(w, "quantize.imatrix.dataset", buf);
        }
        if (!rc) rc = sb_gguf_writer_set_u32(w, "quantize.imatrix.entries_count", (uint32_t)sb_imatrix_n_entries(q->imatrix));
        if (!rc && sb_imatrix_chunk_count(q->imatrix) > 0)
            rc = sb_gguf_writer_set_u32(w, "quantize.imatrix.chunks_count", (uint32_t)sb_imatrix_chunk_count(q->imatrix));
        if (rc) return sb_seterr(err, rc, "out of memory");
    }
    return 0;
}

/* Everything that can be refused is refused here, before writing. */
static int check_plan(quant_ctx *q, const sb_quant_plan_entry *plan, size_t n, char *err) {
    const sb_kq_traits *tab = sb_kq_table(SB_KQ_REF);
    for (size_t i = 0; i < n; i++) {
        const sb_gguf_tensor *t = sb_gguf_tensor_at(q->in, plan[i].src_index);
        if ((int)t->type == plan[i].type) continue;
        const sb_kq_traits *src = &tab[t->type];
        if (src->is_quantized && !q->p->allow_requantize)
            return sb_seterr(err, SB_EUNSUP, "%s: tensor %.*s is already %s; requantizing loses quality, "
                             "pass --allow-requantize to do it anyway", sb_gguf_path(q->in),
                             (int)t->name.len, t->name.ptr, src->name);
        if (!src->to_float)
            return sb_seterr(err, SB_EUNSUP, "%s: tensor %.*s has type %s, which cannot be converted",
                             sb_gguf_path(q->in), (int)t->name.len, t->name.ptr, src->name);
        if (plan[i].requires_imatrix && !q->imatrix)
            return sb_seterr(err, SB_EINVAL, "%s needs an importance matrix (--imatrix): tensor %.*s gets Q2_K",
                             sb_ftype_by_id(q->p->ftype)->name, (int)t->name.len, t->name.ptr);
    }
    return 0;
}

static int run(quant_ctx *q, const char *out_path, sb_quant_stats *st, char *err) {
    const sb_quant_params *p = q->p;
    const double t0 = sb_now_s();
    sb_quant_hparams hp;
    int rc = sb_quant_hparams_read(q->in, &hp, err);
    if (rc) return rc;
    const size_t n = sb_gguf_n_tensors(q->in);
    sb_quant_plan_entry *plan = sb_calloc(n ? n : 1, sizeof *plan);
    sb_gguf_writer *w = NULL;
    uint8_t *header = NULL;
    if (!plan || sb_gguf_writer_new(&w)) { rc = sb_seterr(err, SB_ENOMEM, "out of memory"); goto done; }
    const sb_quant_mix_params mp = { .ftype = p->ftype, .pure = p->pure, .has_imatrix = q->imatrix != NULL };
    if ((rc = sb_quant_plan(q->in, &hp, &mp, plan, err)) || (rc = check_plan(q, plan, n, err)) ||
        (rc = build_metadata(q, w, err)))
        goto done;
    for (size_t i = 0; i < n && !rc; i++) {
        const sb_gguf_tensor *t = sb_gguf_tensor_at(q->in, plan[i].src_index);
        rc = sb_gguf_writer_add_tensor(w, t->name.ptr, t->name.len, t->n_dims, t->ne, (uint32_t)plan[i].type, err);
    }
    size_t header_len;
    if (rc || (rc = sb_gguf_writer_header(w, &header, &header_len, err))) goto done;
    if ((rc = sb_outfile_open(out_path, &q->out, err)) || (rc = sb_outfile_write(q->out, header, header_len, err)))
        goto done;
    memset(st, 0, sizeof *st);
    st->n_tensors = n;
    for (size_t i = 0; i < n && !rc; i++) {
        const sb_gguf_tensor *t = sb_gguf_tensor_at(q->in, plan[i].src_index);
        const size_t out_bytes = sb_gguf_writer_tensor_nbytes(w, i);
        const double ts = sb_now_s();
        rc = write_tensor(q, t, &plan[i], err);
        if (!rc && sb_outfile_offset(q->out) != header_len + sb_gguf_writer_tensor_offset(w, i) + out_bytes)
            rc = sb_seterr(err, SB_EINVAL, "internal error: tensor %.*s wrote the wrong number of bytes",
                           (int)t->name.len, t->name.ptr);
        /* zero padding up to where the next tensor (or the file) ends */
        const uint64_t next = header_len + (i + 1 < n ? sb_gguf_writer_tensor_offset(w, i + 1) : sb_gguf_writer_data_size(w));
        if (!rc) rc = sb_outfile_write_zeros(q->out, (size_t)(next - sb_outfile_offset(q->out)), err);
        st->n_elements += (uint64_t)tensor_elements(t);
        st->bytes_in += t->nbytes;
        st->bytes_out += out_bytes;
        st->n_quantized += (int)t->type != plan[i].type;
        st->n_fallback += (size_t)plan[i].fallback;
        if (!rc && !p->quiet) {
            const double dt = sb_now_s() - ts;
            char shape[64];
            format_shape(t, shape, sizeof shape);
            fprintf(stderr, "[%4zu/%4zu] %-32.*s %-16s %5s -> %-5s %8.2f -> %8.2f MiB", i + 1, n,
                    (int)t->name.len, t->name.ptr, shape, sb_kq_table(SB_KQ_REF)[t->type].name,
                    sb_kq_table(SB_KQ_REF)[plan[i].type].name, t->nbytes / MiB, out_bytes / MiB);
            if ((int)t->type != plan[i].type && dt > 0) fprintf(stderr, "  %7.1f MB/s", t->nbytes / 1e6 / dt);
            fprintf(stderr, "%s\n", plan[i].fallback ? "  (row length forced a fallback)" : "");
        }
    }
    if (!rc) {
        rc = sb_outfile_commit(q->out, err);
        q->out = NULL;
    }
    st->seconds = sb_now_s() - t0;
done:
    sb_free(header);
    sb_gguf_writer_free(w);
    sb_free(plan);
    return rc;
}

int sb_quantize_file(const char *in_path, const char *out_path, const sb_quant_params *p, sb_quant_stats *stats,
                     char *err) {
    sb_quant_stats local;
    if (!stats) stats = &local;
    memset(stats, 0, sizeof *stats);
    if (!sb_ftype_by_id(p->ftype)) return sb_seterr(err, SB_EUNSUP, "unsupported file type %d", p->ftype);
    if (p->n_threads < 1) return sb_seterr(err, SB_EINVAL, "threads must be >= 1");
    quant_ctx q = { .p = p };
    int rc = sb_gguf_open(in_path, &q.in, err);
    if (rc) return rc;
    if (p->imatrix_path && (rc = sb_imatrix_load(p->imatrix_path, &q.imatrix, err))) goto done;
    q.thread_buf = sb_calloc((size_t)p->n_threads, sizeof *q.thread_buf);
    if (!q.thread_buf || sb_pool_new(p->n_threads, &q.pool)) {
        rc = sb_seterr(err, SB_ENOMEM, "cannot start %d threads", p->n_threads);
        goto done;
    }
    rc = run(&q, out_path, stats, err);
done:
    sb_outfile_abort(q.out);        /* a failure never leaves OUT behind */
    if (q.pool) sb_pool_free(q.pool);
    if (q.thread_buf)
        for (int t = 0; t < p->n_threads; t++) sb_free(q.thread_buf[t]);
    sb_free(q.thread_buf);
    sb_free(q.slab);
    sb_imatrix_free(q.imatrix);
    sb_gguf_close(q.in);
    return rc;
}
