/* cli_eval.c - `switchboard privacy eval`: recall, false positives and
 * latency of the detectors over a labelled set (tests/data/pii/). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sb_common.h"
#include "common/sb_json.h"
#include "privacy/privacy_cli.h"

#define EXIT_BELOW 3
#define MAX_FILE (64u << 20)
#define MAX_EXPECTED 16

typedef struct { int type; size_t start, end; char value[SB_PII_VALUE_MAX]; } expected;

typedef struct {
    size_t mentions, found, exact;          /* exact: the detected value is the expected one */
    size_t by_type[SB_PII_N_BUILTIN][2];    /* mentions, found */
    size_t negatives, fp_lines, pos_lines, spurious;
    double *lat;                            /* microseconds, one per timed call */
    size_t n_lat, cap_lat;
} tally;

/* SPANS: TYPE@START-END=VALUE;... into e; the count, or -1 with err set. */
static int parse_spans(const char *s, size_t n, size_t text_len, expected *e, char *err) {
    int k = 0;
    size_t i = 0;
    while (i < n) {
        if (k == MAX_EXPECTED) return sb_seterr(err, SB_EFORMAT, "more than %d spans", MAX_EXPECTED), -1;
        const char *at = memchr(s + i, '@', n - i);
        if (!at) return sb_seterr(err, SB_EFORMAT, "span at byte %zu has no '@'", i), -1;
        char name[16];
        size_t nl = (size_t)(at - (s + i));
        if (nl >= sizeof name) return sb_seterr(err, SB_EFORMAT, "span at byte %zu: type too long", i), -1;
        memcpy(name, s + i, nl);
        name[nl] = 0;
        if ((e[k].type = sb_pii_type_parse(name)) < 0)
            return sb_seterr(err, SB_EFORMAT, "span at byte %zu: unknown type '%s'", i, name), -1;
        char *end;
        e[k].start = strtoul(at + 1, &end, 10);
        if (*end != '-') return sb_seterr(err, SB_EFORMAT, "span at byte %zu: START-END expected", i), -1;
        e[k].end = strtoul(end + 1, &end, 10);
        if (*end != '=' || e[k].end <= e[k].start || e[k].end > text_len)
            return sb_seterr(err, SB_EFORMAT, "span at byte %zu: bad range or no '=VALUE'", i), -1;
        const char *v = end + 1, *stop = memchr(v, ';', n - (size_t)(v - s));
        size_t vl = (size_t)((stop ? stop : s + n) - v);
        snprintf(e[k].value, sizeof e[k].value, "%.*s", (int)vl, v);
        k++;
        i = stop ? (size_t)(stop - s) + 1 : n;
    }
    return k;
}

static bool overlaps(size_t a0, size_t a1, size_t b0, size_t b1) { return a0 < b1 && b0 < a1; }

static int add_latency(tally *t, double us) {
    if (pii_grow((void **)&t->lat, &t->cap_lat, t->n_lat, sizeof *t->lat, 4096)) return SB_ENOMEM;
    t->lat[t->n_lat++] = us;
    return 0;
}

/* One line: timed redactions, then its detections against what was expected. */
static int score_line(const sb_privacy *p, const pii_eval_opts *o, const char *path, int lineno,
                      bool pos, const char *text, size_t len, const expected *e, int ne,
                      sb_pii_spans *spans, tally *t) {
    for (int r = 0; r < o->repeat; r++) {
        sb_pii_table table = {0};
        char *out;
        size_t n;
        uint64_t t0 = sb_now_ns();
        int rc = sb_privacy_redact(p, text, len, SB_PII_PSEUDONYMIZE, &table, spans, &out, &n);
        uint64_t t1 = sb_now_ns();
        sb_pii_table_free(&table);
        if (rc) return rc;
        sb_free(out);
        if ((rc = add_latency(t, (double)(t1 - t0) / 1e3))) return rc;
    }
    if (!pos) {
        t->negatives++;
        if (spans->n) {
            t->fp_lines++;
            if (o->misses)
                fprintf(stderr, "%s:%d: false positive %s '%.*s' in: %.*s\n", path, lineno,
                        sb_pii_type_name(spans->v[0].type), (int)(spans->v[0].end - spans->v[0].start),
                        text + spans->v[0].start, (int)len, text);
        }
        return 0;
    }
    t->pos_lines++;
    for (int k = 0; k < ne; k++) {
        t->mentions++;
        t->by_type[e[k].type][0]++;
        const sb_pii_span *hit = NULL;
        for (size_t i = 0; i < spans->n && !hit; i++)
            if ((int)spans->v[i].type == e[k].type && overlaps(spans->v[i].start, spans->v[i].end, e[k].start, e[k].end))
                hit = &spans->v[i];
        if (hit) {
            t->found++;
            t->by_type[e[k].type][1]++;
            t->exact += !strcmp(hit->value, e[k].value);
        } else if (o->misses) {
            fprintf(stderr, "%s:%d: missed %s '%.*s' in: %.*s\n", path, lineno, sb_pii_type_name(e[k].type),
                    (int)(e[k].end - e[k].start), text + e[k].start, (int)len, text);
        }
    }
    for (size_t i = 0; i < spans->n; i++) {
        bool known = false;
        for (int k = 0; k < ne && !known; k++) known = overlaps(spans->v[i].start, spans->v[i].end, e[k].start, e[k].end);
        if (!known) {
            t->spurious++;
            if (o->misses)
                fprintf(stderr, "%s:%d: spurious %s '%.*s' in: %.*s\n", path, lineno, sb_pii_type_name(spans->v[i].type),
                        (int)(spans->v[i].end - spans->v[i].start), text + spans->v[i].start, (int)len, text);
        }
    }
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const tally *t, const pii_eval_opts *o, const char *path) {
    double recall = t->mentions ? (double)t->found / (double)t->mentions : 0;
    double fp = t->negatives ? (double)t->fp_lines / (double)t->negatives : 0;
    double p50 = sb_percentile(t->lat, t->n_lat, 0.50), p95 = sb_percentile(t->lat, t->n_lat, 0.95), p99 = sb_percentile(t->lat, t->n_lat, 0.99);
    double mx = t->n_lat ? t->lat[t->n_lat - 1] : 0;
    if (o->json) {
        sb_jw w;
        sb_jw_init(&w);
        sb_jw_obj(&w);
        sb_jw_key(&w, "file"), sb_jw_str(&w, path);
        sb_jw_key(&w, "mentions"), sb_jw_int(&w, (int64_t)t->mentions);
        sb_jw_key(&w, "found"), sb_jw_int(&w, (int64_t)t->found);
        sb_jw_key(&w, "recall"), sb_jw_fixed(&w, recall, 5);
        sb_jw_key(&w, "value_exact"), sb_jw_int(&w, (int64_t)t->exact);
        sb_jw_key(&w, "by_type"), sb_jw_obj(&w);
        for (int k = 0; k < SB_PII_N_BUILTIN; k++) {
            if (!t->by_type[k][0]) continue;
            sb_jw_key(&w, sb_pii_type_name(k)), sb_jw_arr(&w);
            sb_jw_int(&w, (int64_t)t->by_type[k][1]), sb_jw_int(&w, (int64_t)t->by_type[k][0]);
            sb_jw_arr_end(&w);
        }
        sb_jw_obj_end(&w);
        sb_jw_key(&w, "negatives"), sb_jw_int(&w, (int64_t)t->negatives);
        sb_jw_key(&w, "false_positive_lines"), sb_jw_int(&w, (int64_t)t->fp_lines);
        sb_jw_key(&w, "false_positive_rate"), sb_jw_fixed(&w, fp, 5);
        sb_jw_key(&w, "spurious_in_positive_lines"), sb_jw_int(&w, (int64_t)t->spurious);
        sb_jw_key(&w, "calls"), sb_jw_int(&w, (int64_t)t->n_lat);
        sb_jw_key(&w, "latency_us"), sb_jw_obj(&w);
        sb_jw_key(&w, "p50"), sb_jw_fixed(&w, p50, 2);
        sb_jw_key(&w, "p95"), sb_jw_fixed(&w, p95, 2);
        sb_jw_key(&w, "p99"), sb_jw_fixed(&w, p99, 2);
        sb_jw_key(&w, "max"), sb_jw_fixed(&w, mx, 2);
        sb_jw_obj_end(&w);
        sb_jw_obj_end(&w);
        if (!w.oom) printf("%s\n", w.p);
        sb_jw_free(&w);
        return;
    }
    printf("%s: %zu lines with %zu identifiers, %zu without\n", path, t->pos_lines, t->mentions, t->negatives);
    printf("recall          %6.2f %%  (%zu of %zu; value exactly right: %zu)\n", 100 * recall, t->found,
           t->mentions, t->exact);
    for (int k = 0; k < SB_PII_N_BUILTIN; k++)
        if (t->by_type[k][0])
            printf("  %-9s     %6.2f %%  (%zu of %zu)\n", sb_pii_type_name(k),
                   100.0 * (double)t->by_type[k][1] / (double)t->by_type[k][0], t->by_type[k][1], t->by_type[k][0]);
    printf("false positives %6.2f %%  (%zu of %zu lines without identifiers)\n", 100 * fp, t->fp_lines, t->negatives);
    printf("spurious        %zu detections in lines with identifiers that overlap none of them\n", t->spurious);
    printf("latency         p50 %.1f us, p95 %.1f us, p99 %.1f us, max %.1f us (%zu calls: detect + pseudonymize)\n",
           p50, p95, p99, mx, t->n_lat);
}

int pii_eval(const sb_privacy *p, const char *path, const pii_eval_opts *o) {
    char *buf, err[SB_ERR_LEN];
    size_t len;
    if (sb_read_file(path, MAX_FILE, &buf, &len, err)) {
        fprintf(stderr, "privacy eval: %s\n", err);
        return SB_EXIT_CONFIG;
    }
    tally t = {0};
    sb_pii_spans spans = {0};
    int rc = 0, lineno = 0, exit_code = SB_EXIT_OK;
    for (size_t at = 0; at < len && rc == 0;) {
        const char *nl = memchr(buf + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - buf) : len;
        char *line = buf + at;
        size_t n = end - at;
        at = end + 1;
        lineno++;
        if (n == 0 || line[0] == '#') continue;
        char *tab1 = memchr(line, '\t', n), *tab2 = tab1 ? memchr(tab1 + 1, '\t', n - (size_t)(tab1 + 1 - line)) : NULL;
        bool pos = tab1 && tab1 - line == 3 && !memcmp(line, "pos", 3);
        if (!tab2 || (!pos && !(tab1 - line == 3 && !memcmp(line, "neg", 3)))) {
            fprintf(stderr, "privacy eval: %s:%d: expected pos|neg<TAB>TEXT<TAB>SPANS\n", path, lineno);
            exit_code = SB_EXIT_CONFIG;
            break;
        }
        const char *text = tab1 + 1;
        size_t tl = (size_t)(tab2 - text);
        expected e[MAX_EXPECTED];
        int ne = parse_spans(tab2 + 1, n - (size_t)(tab2 + 1 - line), tl, e, err);
        if (ne < 0 || (pos && ne == 0) || (!pos && ne > 0)) {
            fprintf(stderr, "privacy eval: %s:%d: spans: %s\n", path, lineno,
                    ne < 0 ? err : pos ? "a pos line needs spans" : "a neg line has none");
            exit_code = SB_EXIT_CONFIG;
            break;
        }
        rc = score_line(p, o, path, lineno, pos, text, tl, e, ne, &spans, &t);
    }
    if (rc) {
        fprintf(stderr, "privacy eval: %s\n", sb_strerror(rc));
        exit_code = SB_EXIT_FAIL;
    }
    if (exit_code == SB_EXIT_OK) {
        qsort(t.lat, t.n_lat, sizeof *t.lat, cmp_double);
        report(&t, o, path);
        double recall = t.mentions ? (double)t.found / (double)t.mentions : 0;
        double fp = t.negatives ? (double)t.fp_lines / (double)t.negatives : 0;
        if (o->min_recall >= 0 && recall < o->min_recall) {
            fprintf(stderr, "privacy eval: recall %.4f is below --min-recall %.4f\n", recall, o->min_recall);
            exit_code = EXIT_BELOW;
        }
        if (o->max_fp >= 0 && fp > o->max_fp) {
            fprintf(stderr, "privacy eval: false-positive rate %.4f is above --max-fp %.4f\n", fp, o->max_fp);
            exit_code = EXIT_BELOW;
        }
    }
    sb_pii_spans_free(&spans);
    sb_free(t.lat);
    sb_free(buf);
    return exit_code;
}
