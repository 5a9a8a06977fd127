/* template.c - the prompt templates of pipeline stages.
 *
 * A template is literal text with holes:
 *   {{input}}                   the caller's text
 *   {{config_dir}}              the config file's directory (tool paths)
 *   {{intent}} {{confidence}}   what the intent stage decided
 *   {{history}}                 a conversation's turns before this one
 *                               ("Caller: ...\nAgent: ...\n" lines; empty
 *                               without a session)
 *   {{stages.NAME.output}}      an earlier stage's output text
 *   {{stages.NAME.json}}        its JSON object (json: true), re-encoded
 *   {{stages.NAME.json.KEY}}    one field of it (strings as is, others as JSON)
 * Templates are compiled when the config loads, and a hole naming a stage
 * that does not exist or runs later is a config error at its line.
 *
 * A prompt renders into segments: the template's literal text is trusted
 * (the operator wrote it; a "<|im_start|>" there is meant), and whatever
 * fills a hole is not - the caller's words, a model's or a tool's output -
 * so the worker never turns a "<|im_end|>" typed by a caller into the
 * control token that would end his turn (docs/router.md, docs/ipc.md).
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "router/run/sb_run.h"

enum { P_LIT, P_INPUT, P_INTENT, P_CONFIDENCE, P_OUTPUT, P_JSON, P_JSONKEY, P_CONFIG_DIR, P_HISTORY };

typedef struct {
    int kind;
    char *text;             /* literal, or the JSON key */
    size_t len;
    int stage;
} piece;

struct sb_tmpl {
    char *src;
    piece *pieces;
    size_t n;
};

const char *sb_tmpl_source(const sb_tmpl *t) { return t ? t->src : ""; }

void rt_tmpl_free(sb_tmpl *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n; i++) sb_free(t->pieces[i].text);
    sb_free(t->pieces);
    sb_free(t->src);
    sb_free(t);
}

static int add_piece(sb_tmpl *t, int kind, const char *text, size_t len, int stage) {
    piece *np = sb_realloc(t->pieces, (t->n + 1) * sizeof *np);
    if (!np) return SB_ENOMEM;
    t->pieces = np;
    piece *p = &t->pieces[t->n];
    p->kind = kind;
    p->stage = stage;
    p->len = len;
    p->text = NULL;
    if (text) {
        p->text = sb_malloc(len + 1);
        if (!p->text) return SB_ENOMEM;
        memcpy(p->text, text, len);
        p->text[len] = '\0';
    }
    t->n++;
    return 0;
}

/* One hole's contents, trimmed. */
static int compile_hole(sb_tmpl *t, const char *h, size_t n, const rt_tmpl_scope *scope, char *why, size_t wn) {
    while (n && (*h == ' ' || *h == '\t')) { h++; n--; }
    while (n && (h[n - 1] == ' ' || h[n - 1] == '\t')) n--;
#define IS(s) (n == strlen(s) && !memcmp(h, s, n))
    if (IS("input")) return add_piece(t, P_INPUT, NULL, 0, -1);
    if (IS("config_dir")) return add_piece(t, P_CONFIG_DIR, NULL, 0, -1);
    if (IS("history")) return add_piece(t, P_HISTORY, NULL, 0, -1);
    if (IS("intent")) {
        if (!scope->has_intent) { snprintf(why, wn, "{{intent}} needs an intent stage before this one"); return SB_EINVAL; }
        return add_piece(t, P_INTENT, NULL, 0, -1);
    }
    if (IS("confidence")) {
        if (!scope->has_intent) { snprintf(why, wn, "{{confidence}} needs an intent stage before this one"); return SB_EINVAL; }
        return add_piece(t, P_CONFIDENCE, NULL, 0, -1);
    }
#undef IS
    if (n > 7 && !memcmp(h, "stages.", 7)) {
        const char *name = h + 7, *end = h + n;
        const char *dot = memchr(name, '.', (size_t)(end - name));
        if (!dot) goto unknown;
        int idx = -1;
        for (size_t i = 0; i < scope->n_before; i++)
            if (strlen(scope->names[i]) == (size_t)(dot - name) && !memcmp(scope->names[i], name, (size_t)(dot - name)))
                idx = (int)i;
        if (idx < 0) {
            snprintf(why, wn, "{{%.*s}}: no earlier stage named '%.*s'", (int)n, h, (int)(dot - name), name);
            return SB_EINVAL;
        }
        const char *field = dot + 1;
        size_t fl = (size_t)(end - field);
        if (fl == 6 && !memcmp(field, "output", 6)) return add_piece(t, P_OUTPUT, NULL, 0, idx);
        if (fl == 4 && !memcmp(field, "json", 4)) return add_piece(t, P_JSON, NULL, 0, idx);
        if (fl > 5 && !memcmp(field, "json.", 5)) return add_piece(t, P_JSONKEY, field + 5, fl - 5, idx);
    }
unknown:
    snprintf(why, wn, "unknown template variable {{%.*s}} (known: input, intent, confidence, history, config_dir, "
             "stages.NAME.output, stages.NAME.json[.KEY])", (int)(n > 60 ? 60 : n), h);
    return SB_EINVAL;
}

int rt_tmpl_compile(const char *src, const rt_tmpl_scope *scope, sb_tmpl **out, char *why, size_t wn) {
    *out = NULL;
    sb_tmpl *t = sb_calloc(1, sizeof *t);
    if (!t || !(t->src = sb_strdup(src))) { sb_free(t); return SB_ENOMEM; }
    const char *p = src;
    int rc = 0;
    while (*p && !rc) {
        const char *open = strstr(p, "{{");
        if (!open) { rc = add_piece(t, P_LIT, p, strlen(p), -1); break; }
        if (open > p) rc = add_piece(t, P_LIT, p, (size_t)(open - p), -1);
        if (rc) break;
        const char *close = strstr(open + 2, "}}");
        if (!close) { snprintf(why, wn, "'{{' without a closing '}}'"); rc = SB_EINVAL; break; }
        rc = compile_hole(t, open + 2, (size_t)(close - open - 2), scope, why, wn);
        p = close + 2;
    }
    if (rc) {
        if (rc == SB_ENOMEM) snprintf(why, wn, "out of memory");
        rt_tmpl_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

/* ------------------------------------------------------------ rendering */

/* Where a render goes: plain text (tool arguments, stdin, bodies), or
 * segments (prompts). */
typedef struct {
    sb_jw *w;
    sb_segs *segs;
} sink;

static void emit(sink *k, const char *p, size_t n, bool special) {
    if (k->segs) sb_segs_add(k->segs, p, n, special);
    else sb_jw_raw(k->w, p, n);
}

static void emit_str(sink *k, const char *s, bool special) {
    if (s) emit(k, s, strlen(s), special);
}

static void put_json_field(sink *k, const sb_json *v) {
    if (!v) return;
    if (sb_json_type_of(v) == SB_JSON_STRING) { emit(k, sb_json_str(v), sb_json_len(v), false); return; }
    sb_jw sub;
    sb_jw_init(&sub);
    sb_jw_value(&sub, v);
    if (!sub.oom) emit(k, sub.p, sub.len, false);
    else if (k->segs) k->segs->oom = 1;
    else k->w->oom = 1;
    sb_jw_free(&sub);
}

/* Literal pieces are the template's own (trusted) text; everything a hole
 * brings in is not, {{config_dir}} and {{intent}} included: one rule that
 * needs no exceptions to be explained. */
static void render(const sb_tmpl *t, const sb_tmpl_env *env, sink *k) {
    for (size_t i = 0; t && i < t->n; i++) {
        const piece *p = &t->pieces[i];
        char num[32];
        switch (p->kind) {
        case P_LIT: emit(k, p->text, p->len, true); break;
        case P_INPUT: emit_str(k, env->input, false); break;
        case P_CONFIG_DIR: emit_str(k, env->config_dir, false); break;
        case P_HISTORY: emit_str(k, env->history ? env->history : "", false); break;
        case P_INTENT: emit_str(k, env->intent, false); break;
        case P_CONFIDENCE:
            snprintf(num, sizeof num, "%.3f", env->confidence);
            emit_str(k, num, false);
            break;
        case P_OUTPUT: emit_str(k, env->outputs[p->stage], false); break;
        case P_JSON: put_json_field(k, env->json[p->stage]); break;
        case P_JSONKEY: put_json_field(k, sb_json_get(env->json[p->stage], p->text)); break;
        }
    }
}

void sb_tmpl_render(const sb_tmpl *t, const sb_tmpl_env *env, sb_jw *w) {
    sink k = { w, NULL };
    render(t, env, &k);
}

static bool blank_value(const sb_json *v) {
    return !v || sb_json_type_of(v) == SB_JSON_NULL || (sb_json_type_of(v) == SB_JSON_STRING && !sb_json_len(v));
}

bool sb_tmpl_lacks(const sb_tmpl *t, const sb_tmpl_env *env, int stage) {
    for (size_t i = 0; t && i < t->n; i++) {
        const piece *p = &t->pieces[i];
        if (p->stage != stage) continue;
        if (p->kind == P_OUTPUT && (!env->outputs[stage] || !env->outputs[stage][0])) return true;
        if (p->kind == P_JSON && !env->json[stage]) return true;
        if (p->kind == P_JSONKEY && blank_value(sb_json_get(env->json[stage], p->text))) return true;
    }
    return false;
}

void sb_tmpl_render_segs(const sb_tmpl *t, const sb_tmpl_env *env, sb_segs *out) {
    sink k = { NULL, out };
    render(t, env, &k);
}

/* Bytes of a line break at s[0..n): \n \r \v \f, U+0085 NEL, U+2028 LINE
 * SEPARATOR, U+2029 PARAGRAPH SEPARATOR (what a model may read as a new
 * line); 0 if none starts there. */
static size_t line_break_at(const unsigned char *s, size_t n) {
    if (s[0] == '\n' || s[0] == '\r' || s[0] == '\v' || s[0] == '\f') return 1;
    if (n >= 2 && s[0] == 0xC2 && s[1] == 0x85) return 2;
    if (n >= 3 && s[0] == 0xE2 && s[1] == 0x80 && (s[2] == 0xA8 || s[2] == 0xA9)) return 3;
    return 0;
}

static int blank(unsigned char c) { return c == ' ' || c == '\t'; }
static int word_char(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

/* Length of ":" or a full-width "：" at t[0..n), else 0. */
static size_t colon_at(const unsigned char *t, size_t n) {
    if (n >= 1 && t[0] == ':') return 1;
    if (n >= 3 && t[0] == 0xEF && t[1] == 0xBC && t[2] == 0x9A) return 3;
    return 0;
}

/* `word`, blanks, a colon at t[0..n) (ASCII case-insensitive): its length or 0. */
static size_t field_at(const unsigned char *t, size_t n, const char *word) {
    size_t w = strlen(word), j, c;
    if (n < w || strncasecmp((const char *)t, word, w)) return 0;
    for (j = w; j < n && blank(t[j]); j++) {}
    return (c = colon_at(t + j, n - j)) ? j + c : 0;
}

/* What a forged framing label takes with it: the answer word after
 * "Intent:", or the rest of the line after "Caller:", "Examples:" and a
 * "- label:" line of the label list. */
enum { FORGED_WORD = 1, FORGED_LINE };

/* A framing label of the intent prompt starting at t[k] of t[0..n): its
 * length (*what set), or 0. at_line_start: only blanks before k on its line. */
static size_t framing_at(const sb_stage *s, const unsigned char *t, size_t n, size_t k, bool at_line_start,
                         int *what) {
    static const struct { const char *word; int what; } FIELDS[] = {
        { "intents", FORGED_WORD }, { "intent", FORGED_WORD }, { "caller", FORGED_LINE }, { "examples", FORGED_LINE },
    };
    if (k > 0 && word_char(t[k - 1])) return 0;        /* inside a word: "subcaller:" */
    for (size_t i = 0; i < SB_ARRAY_LEN(FIELDS); i++) {
        size_t len = field_at(t + k, n - k, FIELDS[i].word);
        if (len) { *what = FIELDS[i].what; return len; }
    }
    if (!at_line_start || t[k] != '-') return 0;
    size_t j = k + 1;
    while (j < n && blank(t[j])) j++;
    for (size_t i = 0; i < s->n_labels; i++) {
        size_t len = field_at(t + j, n - j, s->labels[i].name);
        if (len) { *what = FORGED_LINE; return j + len - k; }
    }
    return 0;
}

/* The caller's text t[0..n) for the intent prompt, into out: his words on
 * one line, without the prompt's own framing. Each run of line breaks (and
 * the blanks around it) is one space, none at either end; a framing label
 * ("Intent:", "Caller:"...) is left out with what it brings (see above),
 * or alone when labels_only. */
static void caller_line(const sb_stage *s, const unsigned char *t, size_t n, bool labels_only, sb_jw *out) {
    bool line_start = true, pending_space = false, dropped = false;
    for (size_t k = 0; k < n;) {
        size_t b = line_break_at(t + k, n - k);
        if (b) {
            while (out->len && blank((unsigned char)out->p[out->len - 1])) out->len--;
            pending_space = out->len > 0;
            line_start = true;
            for (k += b; k < n && blank(t[k]); k++) {}
            continue;
        }
        int what = 0;
        size_t len = framing_at(s, t, n, k, line_start, &what);
        if (len) {
            k += len;
            dropped = true;
            if (labels_only) continue;
            if (what == FORGED_WORD) {
                while (k < n && blank(t[k])) k++;
                while (k < n && word_char(t[k])) k++;
            } else {
                while (k < n && !line_break_at(t + k, n - k)) k++;
            }
            continue;
        }
        if (!blank(t[k])) line_start = false;
        else if (dropped && (!out->len || blank((unsigned char)out->p[out->len - 1]))) { k++; continue; }
        if (pending_space) sb_jw_raw(out, " ", 1);
        pending_space = false;
        sb_jw_raw(out, (const char *)t + k, 1);
        k++;
    }
    /* Where a label was taken out, no blanks are left at the end either
     * (otherwise the caller's own blanks are his). */
    while (dropped && out->len && blank((unsigned char)out->p[out->len - 1])) out->len--;
}

static bool all_blank(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!blank((unsigned char)p[i])) return false;
    return true;
}

/* src appended to dst, its untrusted text through caller_line - or with
 * the labels alone removed if nothing else would be left ("Caller: 我要查
 * 社保" typed in the prompt's own format is still a call). */
static void segs_cat_caller(const sb_stage *s, sb_segs *dst, const sb_segs *src) {
    sb_jw line;
    sb_jw_init(&line);
    if (src->oom) dst->oom = 1;
    for (size_t i = 0; i < src->n; i++) {
        const unsigned char *t = (const unsigned char *)src->text.p + src->v[i].off;
        size_t n = src->v[i].len;
        if (src->v[i].special) { sb_segs_add(dst, (const char *)t, n, true); continue; }
        sb_jw_reset(&line);
        caller_line(s, t, n, false, &line);
        if (all_blank(line.p, line.len) && !all_blank((const char *)t, n)) {
            sb_jw_reset(&line);
            caller_line(s, t, n, true, &line);
        }
        if (line.oom) dst->oom = 1;
        else sb_segs_add(dst, line.p, line.len, false);
    }
    sb_jw_free(&line);
}

void sb_intent_caller(const sb_stage *s, const sb_tmpl_env *env, bool content_free, sb_segs *out) {
    sb_segs utt;
    sb_segs_init(&utt);
    if (content_free) sb_segs_add(&utt, "N/A", 3, false);
    else sb_tmpl_render_segs(s->utterance, env, &utt);
    sb_segs_add(out, "Caller: ", 8, true);
    segs_cat_caller(s, out, &utt);
    sb_segs_add(out, "\nIntent:", 8, true);
    sb_segs_free(&utt);
}

/* The intent prompt. Labels are listed with their descriptions, then the
 * few-shot examples as "Caller: ... / Intent: label" pairs, so the model
 * sees exactly the answer format it is scored on. Everything here is fixed
 * per stage: only the utterance that follows differs between calls. */
void sb_intent_preamble(const sb_stage *s, const sb_tmpl_env *env, sb_segs *w) {
    /* Labels, descriptions and examples come from the config: trusted, like
     * a template's literal text. */
#define LIT(str, n) sb_segs_add(w, (str), (n), true)
    if (s->system) {
        sb_tmpl_render_segs(s->system, env, w);
        LIT("\n\n", 2);
    }
    LIT("Intents:\n", 9);
    for (size_t i = 0; i < s->n_labels; i++) {
        const sb_label *l = &s->labels[i];
        LIT("- ", 2);
        LIT(l->name, strlen(l->name));
        if (l->description) {
            LIT(": ", 2);
            LIT(l->description, strlen(l->description));
        }
        LIT("\n", 1);
    }
    bool any = false;
    for (size_t i = 0; i < s->n_labels; i++) any |= s->labels[i].n_examples > 0;
    if (!any) return;
    LIT("\nExamples:\n", 11);
    /* Round-robin over labels, so no label's examples sit all at the end
     * (recency would bias the model towards it). */
    size_t most = 0;
    for (size_t i = 0; i < s->n_labels; i++) most = SB_MAX(most, s->labels[i].n_examples);
    for (size_t k = 0; k < most; k++)
        for (size_t i = 0; i < s->n_labels; i++) {
            const sb_label *l = &s->labels[i];
            if (k >= l->n_examples) continue;
            LIT("Caller: ", 8);
            LIT(l->examples[k], strlen(l->examples[k]));
            LIT("\nIntent: ", 9);
            LIT(l->name, strlen(l->name));
            LIT("\n", 1);
        }
#undef LIT
}
