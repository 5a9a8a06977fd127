/* quant_imatrix.c - importance matrices written by llama-imatrix.
 *
 * Two formats, told apart by the GGUF magic:
 *  - GGUF (llama-imatrix's default since 2025): for each weight W, the F32
 *    tensors "W.in_sum2" (sum of squared activations per input column, per
 *    expert) and "W.counts" (how many activations were summed, per expert),
 *    plus imatrix.datasets / imatrix.chunk_count / imatrix.chunk_size. The
 *    weight of a column is in_sum2 / count (1 where the count is 0).
 *  - legacy .dat: i32 n_entries, then per entry i32 name length, name, i32
 *    ncall, i32 nval, f32 values[nval] (already averaged per call, times
 *    ncall); optionally i32 chunk count, i32 length, dataset name. The
 *    weight is value / ncall.
 * Both become per-column means exactly as llama-quantize computes them (same
 * float operations), so a weighted quantization matches its bytes.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "worker/kernels/sb_kq.h"
#include "worker/quantize/sb_quantize.h"

typedef struct {
    char  *name;
    size_t name_len;
    float *values;
    size_t n;
} imatrix_entry;

struct sb_imatrix {
    imatrix_entry *e;
    size_t         n, cap;
    int            chunk_count;
    char          *dataset;
};

void sb_imatrix_free(sb_imatrix *m) {
    if (!m) return;
    for (size_t i = 0; i < m->n; i++) {
        sb_free(m->e[i].name);
        sb_free(m->e[i].values);
    }
    sb_free(m->e);
    sb_free(m->dataset);
    sb_free(m);
}

size_t sb_imatrix_n_entries(const sb_imatrix *m) { return m->n; }
int sb_imatrix_chunk_count(const sb_imatrix *m) { return m->chunk_count; }
const char *sb_imatrix_dataset(const sb_imatrix *m) { return m->dataset; }

const float *sb_imatrix_find(const sb_imatrix *m, const char *name, size_t name_len, size_t *n) {
    for (size_t i = 0; i < m->n; i++)
        if (m->e[i].name_len == name_len && !memcmp(m->e[i].name, name, name_len)) {
            *n = m->e[i].n;
            return m->e[i].values;
        }
    return NULL;
}

/* Append an entry with room for n values (returned through *values). */
static int add_entry(sb_imatrix *m, const char *name, size_t name_len, size_t n, float **values) {
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 64;
        imatrix_entry *ne = sb_realloc(m->e, cap * sizeof *ne);
        if (!ne) return SB_ENOMEM;
        m->e = ne;
        m->cap = cap;
    }
    imatrix_entry *e = &m->e[m->n];
    e->name = sb_malloc(name_len + 1);
    e->values = sb_malloc((n ? n : 1) * sizeof(float));
    if (!e->name || !e->values) {
        sb_free(e->name);
        sb_free(e->values);
        return SB_ENOMEM;
    }
    memcpy(e->name, name, name_len);
    e->name[name_len] = 0;
    e->name_len = name_len;
    e->n = n;
    m->n++;
    *values = e->values;
    return 0;
}

static int check_finite(const sb_imatrix *m, const char *path, char *err) {
    for (size_t i = 0; i < m->n; i++)
        for (size_t j = 0; j < m->e[i].n; j++)
            if (!isfinite(m->e[i].values[j]))
                return sb_seterr(err, SB_EFORMAT, "%s: imatrix entry %s has a non-finite value at %zu", path,
                                 m->e[i].name, j);
    return 0;
}

/* ---- GGUF format ----------------------------------------------------------- */

static int ends_with(sb_str s, const char *suffix, size_t *stem) {
    size_t k = strlen(suffix);
    if (s.len <= k || memcmp(s.ptr + s.len - k, suffix, k)) return 0;
    *stem = s.len - k;
    return 1;
}

static int load_gguf(const char *path, sb_imatrix *m, char *err) {
    sb_gguf *g;
    int rc = sb_gguf_open(path, &g, err);
    if (rc) return rc;
    const size_t nt = sb_gguf_n_tensors(g);
    if (!nt) { rc = sb_seterr(err, SB_EFORMAT, "%s: imatrix has no entries", path); goto done; }
    const sb_gguf_kv *ds = sb_gguf_find(g, "imatrix.datasets");
    uint32_t chunk_count = 0, chunk_size = 0;
    int has_count = sb_gguf_get_u32(g, "imatrix.chunk_count", &chunk_count) == 0;
    int has_size = sb_gguf_get_u32(g, "imatrix.chunk_size", &chunk_size) == 0;
    if (!ds || !has_count || !has_size) {
        /* llama-quantize refuses such files too */
        rc = sb_seterr(err, SB_EFORMAT, "%s: missing imatrix metadata (imatrix.datasets, imatrix.chunk_count, "
                       "imatrix.chunk_size)", path);
        goto done;
    }
    m->chunk_count = (int)chunk_count;
    if (ds->type == SB_GGUF_ARRAY && ds->arr_type == SB_GGUF_STRING && ds->arr_n) {
        /* the first dataset goes into the output's metadata, as llama-quantize does */
        sb_str *strs;
        if ((rc = sb_gguf_arr_strings(ds, &strs, err))) goto done;
        m->dataset = sb_malloc(strs[0].len + 1);
        if (m->dataset) {
            memcpy(m->dataset, strs[0].ptr, strs[0].len);
            m->dataset[strs[0].len] = 0;
        }
        sb_free(strs);
        if (!m->dataset) { rc = sb_seterr(err, SB_ENOMEM, "out of memory"); goto done; }
    }
    for (size_t i = 0; i < nt && !rc; i++) {
        const sb_gguf_tensor *sums = sb_gguf_tensor_at(g, i);
        size_t stem;
        if (!ends_with(sums->name, ".in_sum2", &stem)) continue;
        const sb_gguf_tensor *counts = NULL;
        for (size_t j = 0; j < nt; j++) {
            const sb_gguf_tensor *c = sb_gguf_tensor_at(g, j);
            size_t cstem;
            if (ends_with(c->name, ".counts", &cstem) && cstem == stem && !memcmp(c->name.ptr, sums->name.ptr, stem))
                counts = c;
        }
        if (!counts) {
            rc = sb_seterr(err, SB_EFORMAT, "%s: %.*s has no matching .counts", path, (int)sums->name.len, sums->name.ptr);
            break;
        }
        if (sums->type != SB_TYPE_F32 || counts->type != SB_TYPE_F32) {
            rc = sb_seterr(err, SB_EFORMAT, "%s: sums and counts of %.*s must be F32", path, (int)stem, sums->name.ptr);
            break;
        }
        const size_t nval = sums->nbytes / 4, ncounts = counts->nbytes / 4;
        if (!ncounts || nval % ncounts) {
            rc = sb_seterr(err, SB_EFORMAT, "%s: %.*s: %zu sums do not split into %zu counts", path, (int)stem,
                           sums->name.ptr, nval, ncounts);
            break;
        }
        float *v;
        if ((rc = add_entry(m, sums->name.ptr, stem, nval, &v))) {
            sb_seterr(err, rc, "out of memory");
            break;
        }
        const size_t ne0 = nval / ncounts;
        for (size_t j = 0; j < ncounts; j++) {
            float c;
            memcpy(&c, (const uint8_t *)counts->data + 4 * j, 4);
            /* llama.cpp rounds the stored count to an integer first */
            const float count = (float)lround(c);
            for (size_t k = 0; k < ne0; k++) {
                float s;
                memcpy(&s, (const uint8_t *)sums->data + 4 * (j * ne0 + k), 4);
                v[j * ne0 + k] = count > 0.0f ? s / count : 1;
            }
        }
    }
    if (!rc && !m->n) rc = sb_seterr(err, SB_EFORMAT, "%s: no <tensor>.in_sum2 entries", path);
done:
    sb_gguf_close(g);
    return rc;
}

/* ---- legacy format --------------------------------------------------------- */

static int rd_i32(FILE *f, int32_t *v) { return fread(v, 4, 1, f) == 1 ? 0 : -1; }

static int load_legacy(FILE *f, const char *path, sb_imatrix *m, char *err) {
    int32_t n_entries;
    if (rd_i32(f, &n_entries) || n_entries < 1)
        return sb_seterr(err, SB_EFORMAT, "%s: no data (not an imatrix file?)", path);
    char name[512];
    for (int32_t i = 0; i < n_entries; i++) {
        int32_t len, ncall, nval;
        if (rd_i32(f, &len) || len < 1 || len >= (int32_t)sizeof name || fread(name, 1, (size_t)len, f) != (size_t)len)
            return sb_seterr(err, SB_EFORMAT, "%s: truncated or corrupt: cannot read the name of entry %d", path, i + 1);
        if (rd_i32(f, &ncall) || rd_i32(f, &nval) || nval < 1 || nval > (1 << 28))
            return sb_seterr(err, SB_EFORMAT, "%s: truncated or corrupt: bad value count for entry %d (%.*s)", path,
                             i + 1, (int)len, name);
        float *v;
        int rc = add_entry(m, name, (size_t)len, (size_t)nval, &v);
        if (rc) return sb_seterr(err, rc, "out of memory");
        if (fread(v, 4, (size_t)nval, f) != (size_t)nval)
            return sb_seterr(err, SB_EFORMAT, "%s: truncated or corrupt: entry %.*s has fewer than %d values", path,
                             (int)len, name, (int)nval);
        if (ncall > 0)
            for (int32_t k = 0; k < nval; k++) v[k] = v[k] / (float)ncall;
    }
    int32_t n_calls, dlen;
    if (!rd_i32(f, &n_calls)) {
        m->chunk_count = n_calls;
        if (!rd_i32(f, &dlen) && dlen > 0 && dlen < (1 << 20)) {
            m->dataset = sb_calloc(1, (size_t)dlen + 1);
            if (!m->dataset) return sb_seterr(err, SB_ENOMEM, "out of memory");
            if (fread(m->dataset, 1, (size_t)dlen, f) != (size_t)dlen) {
                sb_free(m->dataset);
                m->dataset = NULL;
            }
        }
    }
    return 0;
}

int sb_imatrix_load(const char *path, sb_imatrix **out, char *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return sb_seterr(err, SB_EIO, "%s: %s", path, strerror(errno));
    char magic[4] = { 0 };
    const int is_gguf = fread(magic, 1, 4, f) == 4 && !memcmp(magic, "GGUF", 4);
    sb_imatrix *m = sb_calloc(1, sizeof *m);
    int rc = m ? 0 : sb_seterr(err, SB_ENOMEM, "out of memory");
    if (!rc && is_gguf) {
        rc = load_gguf(path, m, err);
    } else if (!rc) {
        rewind(f);
        rc = load_legacy(f, path, m, err);
    }
    fclose(f);
    if (!rc) rc = check_finite(m, path, err);
    if (rc) {
        sb_imatrix_free(m);
        return rc;
    }
    *out = m;
    return 0;
}
