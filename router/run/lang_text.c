/* lang_text.c - texts the config writes per language ({zh: "...", en:
 * "..."}) and which of them a caller hears: a slot's question, a hand-off
 * line, an intent label's display name.
 *
 * The caller's language is read from the call's words: Chinese characters
 * (the CJK block, three UTF-8 bytes from E4 to E9) choose `zh`, anything
 * else `en`; a text without that language gives the first one it lists.
 * A guess from the script is exact for the two languages the hotline
 * serves, where asking a model was not.
 */
#include <string.h>

#include "router/run/stage_internal.h"

bool rt_looks_chinese(const char *t) {
    for (const unsigned char *p = (const unsigned char *)t; p && *p; p++)
        if (*p >= 0xE4 && *p <= 0xE9) return true;
    return false;
}

static bool valid_lang(const char *l) {
    size_t n = strlen(l);
    if (n < 2 || n > 8) return false;
    for (; *l; l++)
        if (!((*l >= 'a' && *l <= 'z') || (*l >= 'A' && *l <= 'Z') || *l == '-')) return false;
    return true;
}

int rt_text_load(vctx *c, const sb_config_node *v, const char *what, sb_lang_text *t) {
    if (v->kind != SB_CFG_MAP || !v->n_pairs || v->n_pairs > SB_MAX_LANGS)
        return FAIL(c, v, "%s.%s: expected a mapping of 1-%d languages to texts, e.g. {zh: \"...\", en: \"...\"}",
                    c->path, what, SB_MAX_LANGS);
    for (size_t k = 0; k < v->n_pairs; k++) {
        const sb_config_node *lk = v->pairs[k].key, *q = v->pairs[k].value;
        if (!valid_lang(lk->value))
            return FAIL(c, lk, "%s.%s: '%s' is not a language tag (zh, en, zh-HK...)", c->path, what, lk->value);
        if (q->kind != SB_CFG_SCALAR || !q->len)
            return FAIL(c, q, "%s.%s.%s: expected the text", c->path, what, lk->value);
        if (!(t->lang[k] = sb_strdup(lk->value)) || !(t->text[k] = sb_strdup(q->value))) return SB_ENOMEM;
        t->n++;
    }
    return 0;
}

const char *rt_text_in(const sb_lang_text *t, const char *lang) {
    for (size_t k = 0; k < t->n; k++)
        if (!strncmp(t->lang[k], lang, 2)) return t->text[k];
    return t->n ? t->text[0] : NULL;
}

const char *rt_text_for(const sb_lang_text *t, const char *input) {
    return rt_text_in(t, rt_looks_chinese(input) ? "zh" : "en");
}

void rt_text_free(sb_lang_text *t) {
    for (size_t k = 0; k < t->n; k++) {
        sb_free(t->lang[k]);
        sb_free(t->text[k]);
    }
    t->n = 0;
}

const char *rt_handoff_default(const char *input) {
    static const sb_lang_text line = { { "zh", "en" },
                                       { "正在为您转接人工服务，请稍候。",
                                         "I'll put you through to a colleague who can help. Please hold." }, 2 };
    return rt_text_for(&line, input);
}
