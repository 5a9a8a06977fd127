/* cli_route_para.c - `route train --paraphrases`: other callers' words for
 * each of the stage's training examples, as more texts of its label.
 *
 * Five examples a label do not tell the encoder how else a caller says the
 * same thing; a local generative model can. The writer is kb adapt's
 * (sb_kb.h): seeded sampling, the prompt in the example's language, lines
 * cleaned, repeats and lines in the other language dropped. Generating is
 * the slow part, so the paraphrases can be saved and read back
 * (LABEL<TAB>EXAMPLE<TAB>PARAPHRASE rows), and training variants reuse them.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "router/router_internal.h"
#include "kb/sb_kb.h"

#define OOS_NAME "out_of_scope"

/* The instructions, in the example's language. */
#define PROMPT_EN \
    "Here is what a caller said to a public service hotline:\n\n%s\n\n" \
    "Write %d different ways another caller might say the same thing, with the same request, in the everyday " \
    "words people use on the phone. Write one per line, in English, without numbering."
#define PROMPT_ZH \
    "以下是一位群众打给政务服务热线时说的话：\n\n%s\n\n" \
    "请写出%d种别的来电群众表达同一件事、同一诉求的不同说法，用打电话时平常的口语。每行一句，用中文，不要编号。"

static const char *label_name(const sb_stage *st, int label) {
    return label < (int)st->n_labels ? st->labels[label].name : OOS_NAME;
}

static int push(rt_paras *P, size_t example, const char *text) {
    if (P->n == P->cap) {
        rt_para *v = sb_realloc(P->p, (P->cap = P->cap ? 2 * P->cap : 64) * sizeof *v);
        if (!v) return SB_ENOMEM;
        P->p = v;
    }
    char *t = sb_strdup(text);
    if (!t) return SB_ENOMEM;
    P->p[P->n++] = (rt_para){ example, t };
    return 0;
}

void rt_paras_free(rt_paras *P) {
    for (size_t i = 0; i < P->n; i++) sb_free(P->p[i].text);
    sb_free(P->p);
    memset(P, 0, sizeof *P);
}

int rt_paras_generate(const char *gguf, int threads, uint64_t seed, int n, const sb_stage *st,
                      const rt_example *ex, size_t n_ex, rt_paras *P, char *err) {
    sb_kb_writer *g;
    int rc = sb_kb_writer_open(gguf, threads, seed, &g, err);
    const double t0 = sb_now_s();
    for (size_t i = 0; i < n_ex && !rc; i++) {
        const int zh = sb_kb_text_is_zh(ex[i].text);
        const char *fmt = zh ? PROMPT_ZH : PROMPT_EN;
        const size_t cap = strlen(fmt) + strlen(ex[i].text) + 16;
        char *prompt = sb_malloc(cap), **lines = NULL;
        size_t nl = 0, kept = 0;
        if (!prompt) { rc = sb_seterr(err, SB_ENOMEM, "out of memory"); break; }
        snprintf(prompt, cap, fmt, ex[i].text, n);
        rc = sb_kb_writer_lines(g, prompt, zh, n, (uint64_t)i, &lines, &nl, err);
        sb_free(prompt);
        for (size_t k = 0; k < nl && !rc && kept < (size_t)n; k++) {      /* an answer may hold more than asked */
            if (!strcmp(lines[k], ex[i].text)) continue;            /* the example copied back */
            if (push(P, i, lines[k])) rc = sb_seterr(err, SB_ENOMEM, "out of memory");
            kept++;
        }
        sb_kb_lines_free(lines, nl);
        char item[160];
        size_t cut = strlen(ex[i].text);
        if (cut > 48) {                     /* the example's start, cut on a character's boundary */
            cut = 48;
            while (cut && ((unsigned char)ex[i].text[cut] & 0xC0) == 0x80) cut--;
        }
        snprintf(item, sizeof item, "%s \"%.*s%s\"", label_name(st, ex[i].label), (int)cut, ex[i].text,
                 ex[i].text[cut] ? "..." : "");
        if (!rc) sb_kb_writer_progress("route train", i + 1, n_ex, item, kept, n, "paraphrase", t0);
    }
    sb_kb_writer_close(g);
    return rc;
}

/* An example as the file holds it: a tab would split the row, so it is a
 * space there; the comparison reads it back so. */
static int same_example(const char *file, const char *text) {
    for (; *file && *text; file++, text++)
        if (*file != (*text == '\t' || *text == '\n' ? ' ' : *text)) return 0;
    return !*file && !*text;
}

static int find_label(const sb_stage *st, const char *name) {
    for (size_t i = 0; i < st->n_labels; i++)
        if (!strcmp(st->labels[i].name, name)) return (int)i;
    return strcmp(name, OOS_NAME) ? -1 : (int)st->n_labels;
}

typedef struct { const char *path; const sb_stage *st; const rt_example *ex; size_t n_ex; rt_paras *P; } reader;

static int read_row(void *ud, char *f[3], size_t lineno, char *err) {
    reader *r = ud;
    const int label = find_label(r->st, f[0]);
    if (label < 0)
        return sb_seterr(err, SB_EINVAL, "%s:%zu: no label '%s' in stage '%s' (nor %s)", r->path, lineno, f[0],
                         r->st->name, OOS_NAME);
    for (size_t i = 0; i < r->n_ex; i++)
        if (r->ex[i].label == label && same_example(f[1], r->ex[i].text))
            return push(r->P, i, f[2]) ? sb_seterr(err, SB_ENOMEM, "out of memory") : 0;
    r->P->skipped++;                /* written for an example this run does not train on (another --shots) */
    return 0;
}

int rt_paras_read(const char *path, const sb_stage *st, const rt_example *ex, size_t n_ex, rt_paras *P,
                  char *err) {
    reader r = { path, st, ex, n_ex, P };
    int rc = sb_kb_writer_read(path, "LABEL<TAB>EXAMPLE<TAB>PARAPHRASE", read_row, &r, err);
    return rc == SB_EIO ? SB_EINVAL : rc;       /* a file the option names that cannot be read: a usage error */
}

int rt_paras_save(const char *path, const sb_stage *st, const rt_example *ex, const rt_paras *P, char *err) {
    FILE *f = fopen(path, "w");
    if (!f) return sb_seterr(err, SB_EIO, "%s: %s", path, strerror(errno));
    fprintf(f, "# route train's paraphrases: LABEL<TAB>EXAMPLE<TAB>PARAPHRASE\n");
    for (size_t i = 0; i < P->n; i++) {
        const rt_example *e = &ex[P->p[i].example];
        fprintf(f, "%s\t", label_name(st, e->label));
        for (const char *c = e->text; *c; c++) fputc(*c == '\t' || *c == '\n' ? ' ' : *c, f);
        fprintf(f, "\t%s\n", P->p[i].text);
    }
    int bad = ferror(f);
    if (fclose(f) || bad) return sb_seterr(err, SB_EIO, "%s: write failed", path);
    return 0;
}
