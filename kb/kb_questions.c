/* kb_questions.c - short texts written by a local generative model: the
 * questions a caller might ask of each chunk of a base (`kb adapt`,
 * docs/KNOWLEDGE.md "Adapting the encoder to a base") and, through the same
 * writer, the paraphrases of a hotline's examples (`route train
 * --paraphrases`, docs/ROUTING.md). The prompt is in the source text's
 * language, so the answer is too; the model's lines are cleaned of numbering
 * and kept only when they look like one text in that language.
 */
#include "kb/kb_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/engine/sb_encoder.h"
#include "worker/gguf/sb_gguf.h"

#include "worker/engine/sb_engine.h"

struct sb_kb_writer {
    sb_engine *e;
    uint64_t seed;
};

int sb_kb_writer_open(const char *gguf, int threads, uint64_t seed, sb_kb_writer **out, char *err) {
    *out = NULL;
    sb_kb_writer *g = sb_calloc(1, sizeof *g);
    if (!g) return sb_seterr(err, SB_ENOMEM, "out of memory");
    sb_ctx_params cp;
    sb_ctx_params_default(&cp);
    cp.n_threads = threads > 0 ? threads : 1;
    cp.n_ctx = 2048;                    /* a chunk of a few hundred tokens, the instructions and the answer */
    int rc = sb_engine_open(gguf, &cp, &g->e, err);
    if (rc) { sb_free(g); return rc; }
    g->seed = seed;
    *out = g;
    return 0;
}

void sb_kb_writer_close(sb_kb_writer *g) {
    if (!g) return;
    sb_engine_free(g->e);
    sb_free(g);
}

/* Chinese when CJK characters are at least a fifth of the letters: a
 * Chinese note still holds digits and the odd Latin word. */
int sb_kb_text_is_zh(const char *s) {
    size_t n = strlen(s), cjk = 0, latin = 0;
    for (size_t i = 0; i < n;) {
        size_t used;
        uint32_t cp = kb_cp_at(s, n, i, &used);
        cjk += kb_is_cjk(cp) && cp < 0xFF00;        /* full-width punctuation is not a letter */
        latin += (cp | 32) >= 'a' && (cp | 32) <= 'z';
        i += used;
    }
    return cjk && 5 * cjk >= cjk + latin;
}

/* The instructions, in the chunk's language (docs/KNOWLEDGE.md quotes them). */
#define PROMPT_EN \
    "Here is a passage from the policy notes of a public service hotline.\n\n%s%s%s\n\n" \
    "Write %d different questions that callers might ask which this passage answers. Use the everyday " \
    "words a caller would use, not the passage's own wording. Write one question per line, in English, " \
    "without numbering."
#define PROMPT_ZH \
    "以下是政务服务热线政策说明中的一段。\n\n%s%s%s\n\n" \
    "请写出%d个来电群众可能会问、而这段内容能够回答的不同问题。用群众平时的口语说法，不要照抄原文的措辞。" \
    "每行一个问题，用中文，不要编号。"

typedef struct { sb_bytes out; } collect;

static int on_piece(void *ud, const char *text, size_t len, int32_t token) {
    (void)token;
    return sb_bytes_put(&((collect *)ud)->out, text, len) ? 1 : 0;
}

static int skip_prefix(const char *s, const char *p) {
    size_t n = strlen(p);
    return !strncmp(s, p, n) ? (int)n : 0;
}

/* p past a numbered label ("Q1:" "Question 2." "问题3："), or p. */
static char *after_label(char *p) {
    static const char *const labels[] = { "Question ", "Q", "\xE9\x97\xAE\xE9\xA2\x98" };
    for (size_t i = 0; i < SB_ARRAY_LEN(labels); i++) {
        char *q = p + skip_prefix(p, labels[i]);
        if (q == p || *q < '0' || *q > '9') continue;
        while (*q >= '0' && *q <= '9') q++;
        if (*q == ':' || *q == '.') return q + 1;
        if (!strncmp(q, "\xEF\xBC\x9A", 3)) return q + 3;
    }
    return p;
}

/* One line of the model's answer as a question, or NULL: numbering
 * ("1." "2)" "3、" "Q1:" "问题1："), bullets and quotes dropped; a line that
 * introduces the list (ends with a colon) or is in the other language is
 * not a question. */
static char *clean_line(const char *line, size_t len, int zh) {
    char *s = sb_malloc(len + 1);
    if (!s) return NULL;
    memcpy(s, line, len);
    s[len] = '\0';
    char *p = s;
    for (int again = 1; again;) {
        again = 0;
        while (*p == ' ' || *p == '\t' || *p == '-' || *p == '*' || *p == '"' || *p == '#') p++, again = 1;
        int k;
        static const char *const marks[] = { "\xE2\x80\xA2", "\xE2\x80\x9C", "\xE3\x80\x8C", "Q:", "Q\xEF\xBC\x9A",
                                             "Question:", "\xE9\x97\xAE\xE9\xA2\x98\xEF\xBC\x9A", "\xE9\x97\xAE\xEF\xBC\x9A" };
        for (size_t i = 0; i < SB_ARRAY_LEN(marks); i++)
            if ((k = skip_prefix(p, marks[i]))) p += k, again = 1;
        char *past = after_label(p);
        if (past != p) p = past, again = 1;
        if (*p >= '0' && *p <= '9') {
            char *q = p;
            while (*q >= '0' && *q <= '9') q++;
            if (*q == '.' || *q == ')' || *q == ':') p = q + 1, again = 1;
            else if (!strncmp(q, "\xE3\x80\x81", 3) || !strncmp(q, "\xEF\xBC\x8E", 3) || !strncmp(q, "\xEF\xBC\x9A", 3))
                p = q + 3, again = 1;                                         /* 、 ． ： */
        }
    }
    for (char *t = p; *t; t++)
        if (*t == '\t') *t = ' ';                     /* the saved questions are tab-separated */
    size_t n = strlen(p);
    while (n && (p[n - 1] == ' ' || p[n - 1] == '\t' || p[n - 1] == '"' || p[n - 1] == '\r')) n--;
    p[n] = '\0';
    const int colon = (n && p[n - 1] == ':') || (n >= 3 && !strcmp(p + n - 3, "\xEF\xBC\x9A"));
    size_t chars = 0;
    for (size_t i = 0; i < n;) {
        size_t used;
        (void)kb_cp_at(p, n, i, &used);
        i += used, chars++;
    }
    const int ok = !colon && chars >= 4 && n <= 400 && sb_kb_text_is_zh(p) == zh;
    if (!ok) { sb_free(s); return NULL; }
    memmove(s, p, n + 1);
    return s;
}

static int add_question(char ***q, size_t *nq, char *s) {
    for (size_t i = 0; i < *nq; i++)
        if (!strcmp((*q)[i], s)) { sb_free(s); return 0; }         /* the model repeated itself */
    char **v = sb_realloc(*q, (*nq + 1) * sizeof *v);
    if (!v) { sb_free(s); return SB_ENOMEM; }
    *q = v;
    v[(*nq)++] = s;
    return 0;
}

/* One generation; its questions appended to *q. */
static int ask_once(sb_kb_writer *g, const char *prompt, int zh, int n, uint64_t seed, char ***q, size_t *nq, char *err) {
    sb_chat_msg m = { .role = "user", .content = prompt };
    sb_prompt p = { 0 };
    int32_t *ids = NULL;
    size_t n_ids = 0;
    int rc = sb_engine_chat_prompt(g->e, &m, 1, &p, err);
    if (!rc) rc = sb_engine_tokenize_prompt(g->e, &p, &ids, &n_ids, err);
    sb_prompt_free(&p);
    if (rc) return rc;
    sb_gen_opts o;
    sb_gen_opts_default(&o);
    o.max_tokens = 48 * n + 32;                 /* a question or a call is 10-40 tokens */
    sb_sampling_defaults(&o.sampling);
    o.sampling.temp = 0.7f;                     /* varied wording; seeded, so a run repeats */
    o.sampling.top_p = 0.9f;
    o.sampling.seed = seed;
    collect c = { { 0 } };
    o.on_piece = on_piece;
    o.ud = &c;
    sb_gen_result res;
    if (n_ids + (size_t)o.max_tokens > (size_t)sb_engine_n_ctx(g->e))
        rc = sb_seterr(err, SB_ERANGE, "the prompt (%zu tokens) leaves no room in the model's context",
                       n_ids);
    if (!rc) rc = sb_engine_generate(g->e, ids, (int)n_ids, &o, &res, err);
    sb_free(ids);
    for (size_t i = 0; !rc && i < c.out.n;) {
        size_t j = i;
        while (j < c.out.n && c.out.p[j] != '\n') j++;
        char *s = clean_line(c.out.p + i, j - i, zh);
        if (s) rc = add_question(q, nq, s);
        i = j + 1;
    }
    sb_free(c.out.p);
    return rc == SB_ENOMEM ? sb_seterr(err, SB_ENOMEM, "out of memory") : rc;
}

#define ATTEMPTS 3              /* a model that keeps giving fewer lines than asked is let be */

int sb_kb_writer_lines(sb_kb_writer *g, const char *prompt, int zh, int n, uint64_t salt, char ***out, size_t *n_out,
                       char *err) {
    *out = NULL;
    *n_out = 0;
    int rc = 0;
    for (int a = 0; a < ATTEMPTS && !rc && *n_out < (size_t)n; a++)
        rc = ask_once(g, prompt, zh, n, g->seed * 1000003u + salt * 31u + (uint64_t)a, out, n_out, err);
    if (rc) {
        sb_kb_lines_free(*out, *n_out);
        *out = NULL;
        *n_out = 0;
    }
    return rc;
}

int kb_qgen_ask(sb_kb_writer *g, const char *section, const char *text, int n, uint64_t salt, char ***out,
                size_t *n_out, char *err) {
    *out = NULL;
    *n_out = 0;
    const int zh = sb_kb_text_is_zh(text);
    const char *sep = section && *section ? "\n" : "";
    const char *fmt = zh ? PROMPT_ZH : PROMPT_EN;
    size_t cap = strlen(fmt) + (section ? strlen(section) : 0) + strlen(text) + 32;
    char *prompt = sb_malloc(cap);
    if (!prompt) return sb_seterr(err, SB_ENOMEM, "out of memory");
    snprintf(prompt, cap, fmt, section ? section : "", sep, text, n);
    int rc = sb_kb_writer_lines(g, prompt, zh, n, salt, out, n_out, err);
    sb_free(prompt);
    return rc;
}

void sb_kb_lines_free(char **q, size_t n) {
    for (size_t i = 0; q && i < n; i++) sb_free(q[i]);
    sb_free(q);
}

int sb_kb_writer_pick(const sb_config *cfg, const char *name, const char *file_opt, const sb_config_model **out,
                      char *err) {
    *out = NULL;
    for (size_t i = 0; i < cfg->n_models && !*out; i++) {
        const sb_config_model *m = &cfg->models[i];
        if ((name && strcmp(m->name, name)) || !m->gguf) continue;
        sb_gguf *gg = NULL;
        int rc = sb_gguf_open(m->gguf, &gg, err);
        int enc = !rc && sb_encoder_file_is_encoder(gg);
        sb_gguf_close(gg);
        if (rc) return rc;
        if (!enc) *out = m;
        else if (name)
            return sb_seterr(err, SB_EINVAL, "--model %s: %s is an encoder; the writer needs a generative model",
                             name, m->gguf);
    }
    if (!*out) {
        if (name) return sb_seterr(err, SB_ENOTFOUND, "--model %s: not a local (gguf) model of models:", name);
        return sb_seterr(err, SB_ENOTFOUND, "no local generative model in models: to write with (give --model NAME, "
                         "or %s FILE)", file_opt);
    }
    return 0;
}

static void fmt_secs(double s, char *buf, size_t cap) {
    if (s < 60) snprintf(buf, cap, "%.0fs", s);
    else snprintf(buf, cap, "%dm%02ds", (int)(s / 60), (int)(s - 60 * (int)(s / 60)));
}

void sb_kb_writer_progress(const char *cmd, size_t done, size_t total, const char *item, size_t got, int asked,
                           const char *noun, double t0) {
    const double el = sb_now_s() - t0;
    char es[32], eta[32];
    fmt_secs(el, es, sizeof es);
    fmt_secs(el / (double)done * (double)(total - done), eta, sizeof eta);
    char *name = sb_utf8_escape_controls(item);
    fprintf(stderr, "%s: [%zu/%zu] %s: %zu %s%s%s  %s  ETA %s\n", cmd, done, total, name ? name : "?", got, noun,
            got == 1 ? "" : "s", got < (size_t)asked ? " (fewer than asked)" : "", es, eta);
    sb_free(name);
}

static int is_utf8(const char *s, size_t n) {
    for (size_t i = 0, k; i < n; i += k)
        if (!(k = sb_utf8_valid((const uint8_t *)s + i, n - i))) return 0;
    return 1;
}

int sb_kb_writer_read(const char *path, const char *layout, sb_kb_row_fn fn, void *ud, char *err) {
    FILE *f = fopen(path, "r");
    if (!f) return sb_seterr(err, SB_EIO, "%s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0, lineno = 0;
    ssize_t got;
    int rc = 0;
    while (!rc && (got = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (got && (line[got - 1] == '\n' || line[got - 1] == '\r')) line[--got] = '\0';
        if (!got || line[0] == '#') continue;
        char *t1 = strchr(line, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        if (!t2 || t1 == line || t2 == t1 + 1 || !t2[1] || strchr(t2 + 1, '\t') || memchr(line, 0, (size_t)got))
            rc = sb_seterr(err, SB_EINVAL, "%s:%zu: expected %s", path, lineno, layout);
        else if (!is_utf8(line, (size_t)got))
            rc = sb_seterr(err, SB_EINVAL, "%s:%zu: not UTF-8 text", path, lineno);
        else {
            *t1 = *t2 = '\0';
            char *fields[3] = { line, t1 + 1, t2 + 1 };
            rc = fn(ud, fields, lineno, err);
        }
    }
    if (!rc && ferror(f)) rc = sb_seterr(err, SB_EIO, "%s: %s", path, strerror(errno));
    free(line);
    fclose(f);
    return rc;
}
