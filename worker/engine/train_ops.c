/* train_ops.c - the encoder's operations with their backward passes, in
 * F32 with double sums in the forward's dot products and row statistics,
 * which makes the loss smooth enough for finite differences (see
 * sb_encoder_train.h). Rows are tokens; every function is single-threaded
 * and depends only on its arguments. */
#include <math.h>
#include <string.h>

#include "worker/engine/sb_encoder_train.h"

void sb_op_ln_forward(const float *x, const float *w, const float *b, int n, int H, float eps, float *y, float *xhat,
                      float *rstd) {
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * H;
        double mean = 0, var = 0;
        for (int i = 0; i < H; i++) mean += xt[i];
        mean /= H;
        for (int i = 0; i < H; i++) var += (xt[i] - mean) * (xt[i] - mean);
        const float r = (float)(1.0 / sqrt(var / H + eps));
        rstd[t] = r;
        for (int i = 0; i < H; i++) {
            const float h = (float)(xt[i] - mean) * r;
            xhat[(size_t)t * H + i] = h;
            y[(size_t)t * H + i] = h * w[i] + b[i];
        }
    }
}

/* With g = dy·w: dx = rstd·(g - mean(g) - xhat·mean(g·xhat)). */
void sb_op_ln_backward(const float *dy, const float *xhat, const float *rstd, const float *w, int n, int H, float *dx,
                       float *dw, float *db) {
    for (int t = 0; t < n; t++) {
        const float *g = dy + (size_t)t * H, *h = xhat + (size_t)t * H;
        double mg = 0, mgh = 0;
        for (int i = 0; i < H; i++) {
            mg += g[i] * w[i];
            mgh += g[i] * w[i] * h[i];
            if (dw) dw[i] += g[i] * h[i];
            if (db) db[i] += g[i];
        }
        mg /= H;
        mgh /= H;
        for (int i = 0; i < H; i++) dx[(size_t)t * H + i] = rstd[t] * (float)(g[i] * w[i] - mg - h[i] * mgh);
    }
}

float sb_op_gelu(float u) {
    return 0.5f * u * (1.0f + erff(u * 0.70710678118654752f));
}

/* d/du 0.5·u·(1 + erf(u/√2)) = 0.5·(1 + erf(u/√2)) + u·φ(u) */
float sb_op_gelu_grad(float u) {
    return 0.5f * (1.0f + erff(u * 0.70710678118654752f)) + u * 0.39894228040143268f * expf(-0.5f * u * u);
}

void sb_op_attn_forward(const float *q, const float *k, const float *v, int n, int H, int NH, float *P, float *ctx) {
    const int hd = H / NH;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int h = 0; h < NH; h++)
        for (int i = 0; i < n; i++) {
            float *p = P + ((size_t)h * n + i) * n;
            const float *qi = q + (size_t)i * H + h * hd;
            float mx = -INFINITY;
            for (int j = 0; j < n; j++) {
                const float *kj = k + (size_t)j * H + h * hd;
                double s = 0;
                for (int d = 0; d < hd; d++) s += qi[d] * kj[d];
                p[j] = (float)s * scale;
                mx = fmaxf(mx, p[j]);
            }
            double sum = 0;
            for (int j = 0; j < n; j++) sum += (p[j] = expf(p[j] - mx));
            for (int j = 0; j < n; j++) p[j] = (float)(p[j] / sum);
            float *c = ctx + (size_t)i * H + h * hd;
            for (int d = 0; d < hd; d++) c[d] = 0;
            for (int j = 0; j < n; j++)
                for (int d = 0; d < hd; d++) c[d] += p[j] * v[(size_t)j * H + h * hd + d];
        }
}

/* dP_ij = dc_i·v_j; dv_j = Σ_i P_ij dc_i; ds_ij = P_ij (dP_ij - Σ_j' P_ij' dP_ij');
 * dq_i = Σ_j ds_ij k_j / √hd; dk_j = Σ_i ds_ij q_i / √hd. */
void sb_op_attn_backward(const float *dctx, const float *q, const float *k, const float *v, const float *P, int n, int H,
                         int NH, float *dq, float *dk, float *dv) {
    const int hd = H / NH;
    const float scale = 1.0f / sqrtf((float)hd);
    memset(dq, 0, (size_t)n * H * sizeof *dq);
    memset(dk, 0, (size_t)n * H * sizeof *dk);
    memset(dv, 0, (size_t)n * H * sizeof *dv);
    for (int h = 0; h < NH; h++)
        for (int i = 0; i < n; i++) {
            const float *p = P + ((size_t)h * n + i) * n, *dc = dctx + (size_t)i * H + h * hd;
            const float *qi = q + (size_t)i * H + h * hd;
            float *dqi = dq + (size_t)i * H + h * hd;
            double dot = 0;             /* Σ_j P_ij dP_ij; dP_ij is recomputed below rather than stored */
            for (int j = 0; j < n; j++) {
                const float *vj = v + (size_t)j * H + h * hd;
                float *dvj = dv + (size_t)j * H + h * hd;
                float s = 0;
                for (int d = 0; d < hd; d++) { s += dc[d] * vj[d]; dvj[d] += p[j] * dc[d]; }
                dot += p[j] * s;
            }
            for (int j = 0; j < n; j++) {
                const float *vj = v + (size_t)j * H + h * hd, *kj = k + (size_t)j * H + h * hd;
                float s = 0;
                for (int d = 0; d < hd; d++) s += dc[d] * vj[d];
                const float g = p[j] * (s - (float)dot) * scale;
                float *dkj = dk + (size_t)j * H + h * hd;
                for (int d = 0; d < hd; d++) { dqi[d] += g * kj[d]; dkj[d] += g * qi[d]; }
            }
        }
}

/* One output of the frozen product for token rows t..t+3 at once: four
 * independent sums (the double adds' latency overlaps) over a W row that
 * stays in cache; each sum runs in the order a single row's would, so the
 * bits do not depend on how rows are grouped. */
static void dot4(const float *w, const float *x, int in, int out, int o, float *y) {
    const float *x0 = x, *x1 = x + in, *x2 = x + 2 * (size_t)in, *x3 = x + 3 * (size_t)in;
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int i = 0; i < in; i++) {
        const float wi = w[i];
        s0 += wi * x0[i], s1 += wi * x1[i], s2 += wi * x2[i], s3 += wi * x3[i];
    }
    y[o] = (float)s0, y[out + o] = (float)s1, y[2 * (size_t)out + o] = (float)s2, y[3 * (size_t)out + o] = (float)s3;
}

/* The frozen product, then the adapter's term, then the bias: the order
 * sb_encoder's forward adds them in. The frozen product runs output by
 * output over all n rows, so a W row is read once per call, not per row. */
void sb_op_linear_forward(const float *x, int n, int in, int out, const float *W, const float *bias,
                          const sb_lora_mat *m, int rank, float scale, float *ax, float *y) {
    for (int o = 0; o < out && W; o++) {
        const float *w = W + (size_t)o * in;
        int t = 0;
        for (; t + 4 <= n; t += 4) dot4(w, x + (size_t)t * in, in, out, o, y + (size_t)t * out);
        for (; t < n; t++) {
            const float *xt = x + (size_t)t * in;
            double s = 0;
            for (int i = 0; i < in; i++) s += w[i] * xt[i];
            y[(size_t)t * out + o] = (float)s;
        }
    }
    for (int t = 0; t < n; t++) {
        const float *xt = x + (size_t)t * in;
        float *yt = y + (size_t)t * out;
        if (m) {
            float *at = ax + (size_t)t * rank;
            for (int r = 0; r < rank; r++) {
                const float *ar = m->a + (size_t)r * in;
                double s = 0;
                for (int i = 0; i < in; i++) s += ar[i] * xt[i];
                at[r] = scale * (float)s;
            }
            for (int o = 0; o < out; o++) {
                const float *bo = m->b + (size_t)o * rank;
                double s = 0;
                for (int r = 0; r < rank; r++) s += bo[r] * at[r];
                yt[o] += (float)s;
            }
        }
        if (bias)
            for (int o = 0; o < out; o++) yt[o] += bias[o];
    }
}

/* With a = scale·x·Aᵀ (kept in ax) and y = … + a·Bᵀ:
 * dB += dyᵀ·a; db = dy·B; dA += scale·dbᵀ·x; dx = dy·W + scale·db·A.
 * dy·W runs W row by W row over all n rows (each dx element sums in the
 * same order as row by row). */
void sb_op_linear_backward(const float *dy, const float *x, int n, int in, int out, const float *W,
                           const sb_lora_mat *m, int rank, float scale, const float *ax, float *dx, float *ga,
                           float *gb) {
    float db[SB_LORA_MAX_RANK];
    if (dx && W) {
        memset(dx, 0, (size_t)n * (size_t)in * sizeof *dx);
        for (int o = 0; o < out; o++) {
            const float *w = W + (size_t)o * in;
            for (int t = 0; t < n; t++) {
                const float d = dy[(size_t)t * out + o];
                float *dxt = dx + (size_t)t * in;
                for (int i = 0; i < in; i++) dxt[i] += d * w[i];
            }
        }
    }
    for (int t = 0; t < n && m; t++) {
        const float *dyt = dy + (size_t)t * out, *xt = x + (size_t)t * in;
        float *dxt = dx ? dx + (size_t)t * in : NULL;
        const float *at = ax + (size_t)t * rank;
        for (int r = 0; r < rank; r++) db[r] = 0;
        for (int o = 0; o < out; o++) {
            const float *bo = m->b + (size_t)o * rank;
            for (int r = 0; r < rank; r++) db[r] += dyt[o] * bo[r];
            if (gb)
                for (int r = 0; r < rank; r++) gb[(size_t)o * rank + r] += dyt[o] * at[r];
        }
        for (int r = 0; r < rank; r++) {
            const float g = scale * db[r];
            const float *ar = m->a + (size_t)r * in;
            if (ga)
                for (int i = 0; i < in; i++) ga[(size_t)r * in + i] += g * xt[i];
            if (dxt)
                for (int i = 0; i < in; i++) dxt[i] += g * ar[i];
        }
    }
}

float sb_op_pool_forward(const float *x, int n, int H, float *vec) {
    double norm = 0;
    for (int i = 0; i < H; i++) {
        double s = 0;
        for (int t = 0; t < n; t++) s += x[(size_t)t * H + i];
        vec[i] = (float)(s / n);
        norm += (double)vec[i] * vec[i];
    }
    const float nm = (float)sqrt(norm > 1e-24 ? norm : 1e-24);
    for (int i = 0; i < H; i++) vec[i] /= nm;
    return nm;
}

/* v = m/|m|: dm = (dv - v·(v·dv)) / |m|, and each row gets dm/n. */
void sb_op_pool_backward(const float *dvec, const float *vec, float norm, int n, int H, float *dx) {
    double dot = 0;
    for (int i = 0; i < H; i++) dot += (double)vec[i] * dvec[i];
    for (int i = 0; i < H; i++) {
        const float dm = (float)((dvec[i] - vec[i] * dot) / norm / n);
        for (int t = 0; t < n; t++) dx[(size_t)t * H + i] = dm;
    }
}

/* With s_ia = v_i·v_a / tau and q_ia the softmax over a ≠ i:
 * dL_i/ds_ia = q_ia - [a ∈ P(i)]/|P(i)|, and s_ia feeds both v_i and v_a. */
double sb_op_supcon(const float *V, const int *labels, int B, int H, float tau, float *dV) {
    memset(dV, 0, (size_t)B * H * sizeof *dV);
    double total = 0;
    int anchors = 0;
    for (int i = 0; i < B; i++)
        for (int j = 0; j < B; j++)
            if (j != i && labels[j] == labels[i]) { anchors++; break; }
    if (!anchors) return 0;
    for (int i = 0; i < B; i++) {
        int np = 0;
        double mx = -INFINITY, sum = 0, pos = 0;
        const float *vi = V + (size_t)i * H;
        for (int a = 0; a < B; a++) {
            if (a == i) continue;
            np += labels[a] == labels[i];
            double s = 0;
            for (int d = 0; d < H; d++) s += (double)vi[d] * V[(size_t)a * H + d];
            mx = fmax(mx, s / tau);
        }
        if (!np) continue;
        for (int a = 0; a < B; a++) {
            if (a == i) continue;
            double s = 0;
            for (int d = 0; d < H; d++) s += (double)vi[d] * V[(size_t)a * H + d];
            sum += exp(s / tau - mx);
            if (labels[a] == labels[i]) pos += s / tau;
        }
        const double lse = mx + log(sum);
        total += lse - pos / np;
        for (int a = 0; a < B; a++) {
            if (a == i) continue;
            const float *va = V + (size_t)a * H;
            double s = 0;
            for (int d = 0; d < H; d++) s += (double)vi[d] * va[d];
            const double g = (exp(s / tau - lse) - (labels[a] == labels[i] ? 1.0 / np : 0.0)) / tau / anchors;
            for (int d = 0; d < H; d++) {
                dV[(size_t)i * H + d] += (float)(g * va[d]);
                dV[(size_t)a * H + d] += (float)(g * vi[d]);
            }
        }
    }
    return total / anchors;
}
