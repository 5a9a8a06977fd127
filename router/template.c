/* template.c - the prompt templates of pipeline stages.
 *
 * A template is literal text with holes:
 *   {{input}}                   the caller's text
 *   {{config_dir}}              the config file's directory (tool paths)
 *   {{intent}} {{confidence}}   what the intent stage decided
 *   {{stages.NAME.output}}      an earlier stage's output text
 *   {{stages.NAME.json}}        its JSON object (json: true), re-encoded
 *   {{stages.NAME.json.KEY}}    one field of it (strings as is, others as JSON)
 * Templates are compiled when the config loads, and a hole naming a stage
 * that does not exist or runs later is a config error at its line.
 */
#include <stdio.h>
#include <string.h>

#include "router_internal.h"

enum { P_LIT, P_INPUT, P_INTENT, P_CONFIDENCE, P_OUTPUT, P_JSON, P_JSONKEY, P_CONFIG_DIR };

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
    snprintf(why, wn, "unknown template variable {{%.*s}} (known: input, intent, confidence, config_dir, "
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

bool rt_tmpl_uses_stage(const sb_tmpl *t, int stage) {
    for (size_t i = 0; t && i < t->n; i++)
        if (t->pieces[i].stage == stage) return true;
    return false;
}

static void put_json_field(sb_jw *w, const sb_json *v) {
    if (!v) return;
    if (sb_json_type_of(v) == SB_JSON_STRING) { sb_jw_raw(w, sb_json_str(v), sb_json_len(v)); return; }
    sb_jw sub;
    sb_jw_init(&sub);
    sb_jw_value(&sub, v);
    if (!sub.oom) sb_jw_raw(w, sub.p, sub.len);
    else w->oom = 1;
    sb_jw_free(&sub);
}

void sb_tmpl_render(const sb_tmpl *t, const sb_tmpl_env *env, sb_jw *w) {
    for (size_t i = 0; t && i < t->n; i++) {
        const piece *p = &t->pieces[i];
        char num[32];
        switch (p->kind) {
        case P_LIT: sb_jw_raw(w, p->text, p->len); break;
        case P_INPUT: sb_jw_raw(w, env->input, strlen(env->input)); break;
        case P_CONFIG_DIR: if (env->config_dir) sb_jw_raw(w, env->config_dir, strlen(env->config_dir)); break;
        case P_INTENT: if (env->intent) sb_jw_raw(w, env->intent, strlen(env->intent)); break;
        case P_CONFIDENCE:
            snprintf(num, sizeof num, "%.3f", env->confidence);
            sb_jw_raw(w, num, strlen(num));
            break;
        case P_OUTPUT:
            if (env->outputs[p->stage]) sb_jw_raw(w, env->outputs[p->stage], strlen(env->outputs[p->stage]));
            break;
        case P_JSON: put_json_field(w, env->json[p->stage]); break;
        case P_JSONKEY: put_json_field(w, sb_json_get(env->json[p->stage], p->text)); break;
        }
    }
}

/* The intent prompt. Labels are listed with their descriptions, then the
 * few-shot examples as "Caller: ... / Intent: label" pairs, so the model
 * sees exactly the answer format it is scored on. Everything here is fixed
 * per stage: only the utterance that follows differs between calls. */
void sb_intent_preamble(const sb_stage *s, const sb_tmpl_env *env, sb_jw *w) {
    if (s->system) {
        sb_tmpl_render(s->system, env, w);
        sb_jw_raw(w, "\n\n", 2);
    }
    sb_jw_raw(w, "Intents:\n", 9);
    for (size_t i = 0; i < s->n_labels; i++) {
        const sb_label *l = &s->labels[i];
        sb_jw_raw(w, "- ", 2);
        sb_jw_raw(w, l->name, strlen(l->name));
        if (l->description) {
            sb_jw_raw(w, ": ", 2);
            sb_jw_raw(w, l->description, strlen(l->description));
        }
        sb_jw_raw(w, "\n", 1);
    }
    bool any = false;
    for (size_t i = 0; i < s->n_labels; i++) any |= s->labels[i].n_examples > 0;
    if (!any) return;
    sb_jw_raw(w, "\nExamples:\n", 11);
    /* Round-robin over labels, so no label's examples sit all at the end
     * (recency would bias the model towards it). */
    size_t most = 0;
    for (size_t i = 0; i < s->n_labels; i++) most = SB_MAX(most, s->labels[i].n_examples);
    for (size_t k = 0; k < most; k++)
        for (size_t i = 0; i < s->n_labels; i++) {
            const sb_label *l = &s->labels[i];
            if (k >= l->n_examples) continue;
            sb_jw_raw(w, "Caller: ", 8);
            sb_jw_raw(w, l->examples[k], strlen(l->examples[k]));
            sb_jw_raw(w, "\nIntent: ", 9);
            sb_jw_raw(w, l->name, strlen(l->name));
            sb_jw_raw(w, "\n", 1);
        }
}
