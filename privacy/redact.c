/* redact.c - a text with its personal data replaced (typed placeholders,
 * masks or bare types), and a reply with the placeholders put back. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/sb_common.h"
#include "common/sb_json.h"
#include "privacy/privacy_internal.h"

#define OPEN  "\xE2\x9F\xA8"    /* ⟨ U+27E8 */
#define CLOSE "\xE2\x9F\xA9"    /* ⟩ U+27E9 */

int sb_pii_mode_parse(const char *name) {
    if (!strcmp(name, "pseudonymize")) return SB_PII_PSEUDONYMIZE;
    if (!strcmp(name, "mask")) return SB_PII_MASK;
    if (!strcmp(name, "tag")) return SB_PII_TAG;
    return -1;
}

void sb_pii_table_free(sb_pii_table *t) {
    for (size_t i = 0; i < t->n; i++) {
        sb_free(t->v[i].placeholder);
        sb_free(t->v[i].name);
        sb_free(t->v[i].value);
        sb_free(t->v[i].raw);
    }
    sb_free(t->v);
    memset(t, 0, sizeof *t);
}

static const char *span_name(const sb_privacy *p, const sb_pii_span *s) {
    return s->type == SB_PII_CUSTOM ? sb_privacy_pattern_name(p, s->pattern) : sb_pii_type_name(s->type);
}

static char *dup_n(const char *s, size_t n) {
    char *d = sb_malloc(n + 1);
    if (d) { memcpy(d, s, n); d[n] = 0; }
    return d;
}

/* The table's entry for this value of this type, added if new. */
static const sb_pii_entry *entry_for(sb_pii_table *t, const char *name, const char *value,
                                     const char *raw, size_t raw_len) {
    unsigned same_name = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (strcmp(t->v[i].name, name)) continue;
        if (!strcmp(t->v[i].value, value)) return &t->v[i];
        same_name++;
    }
    if (pii_grow((void **)&t->v, &t->cap, t->n, sizeof *t->v, 8)) return NULL;
    sb_pii_entry e = {.number = same_name + 1};
    char ph[PII_NAME_MAX + 32];
    snprintf(ph, sizeof ph, OPEN "%s_%u" CLOSE, name, e.number);
    e.placeholder = sb_strdup(ph);
    e.name = sb_strdup(name);
    e.value = sb_strdup(value);
    e.raw = dup_n(raw, raw_len);
    if (!e.placeholder || !e.name || !e.value || !e.raw) {
        sb_free(e.placeholder), sb_free(e.name), sb_free(e.value), sb_free(e.raw);
        return NULL;
    }
    t->v[t->n] = e;
    return &t->v[t->n++];
}

/* How much of a value a mask shows at each end: enough for a caller to
 * recognise their own number ("138****5678", "****1234"), not to use it. */
static void mask(sb_jw *w, sb_pii_type type, const char *v) {
    size_t n = strlen(v), head = 0, tail = 0;
    switch (type) {
    case SB_PII_PHONE: head = 3, tail = 4; break;
    case SB_PII_TEL: head = v[1] == '1' || v[1] == '2' ? 3 : 4, tail = 2; break;
    case SB_PII_ID: head = 1, tail = 1; break;
    case SB_PII_CARD: tail = 4; break;
    case SB_PII_PASSPORT: head = 1, tail = 2; break;
    case SB_PII_PLATE: head = 4, tail = 2; break;       /* province (3 bytes) and letter */
    case SB_PII_EMAIL: {
        const char *at = strchr(v, '@');
        sb_jw_raw(w, v, 1);
        sb_jw_raw(w, "***", 3);
        sb_jw_raw(w, at ? at : "", at ? strlen(at) : 0);
        return;
    }
    default: break;
    }
    if (head + tail >= n) head = 0, tail = 0;
    sb_jw_raw(w, v, head);
    for (size_t i = head; i < n - tail; i++) sb_jw_raw(w, "*", 1);
    sb_jw_raw(w, v + n - tail, tail);
}

int sb_privacy_redact(const sb_privacy *p, const char *text, size_t len, sb_pii_mode mode,
                      sb_pii_table *table, sb_pii_spans *spans, char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    if (mode == SB_PII_PSEUDONYMIZE && !table) return SB_EINVAL;
    sb_pii_spans own = {0};
    sb_pii_spans *s = spans ? spans : &own;
    int rc = sb_privacy_detect(p, text, len, s);
    sb_jw w;
    sb_jw_init(&w);
    size_t at = 0;
    for (size_t i = 0; rc == 0 && i < s->n; i++) {
        const sb_pii_span *sp = &s->v[i];
        const char *name = span_name(p, sp);
        sb_jw_raw(&w, text + at, sp->start - at);
        if (mode == SB_PII_PSEUDONYMIZE) {
            const sb_pii_entry *e = entry_for(table, name, sp->value, text + sp->start, sp->end - sp->start);
            if (!e) { rc = SB_ENOMEM; break; }
            sb_jw_raw(&w, e->placeholder, strlen(e->placeholder));
        } else if (mode == SB_PII_MASK && sp->type != SB_PII_CUSTOM) {
            mask(&w, sp->type, sp->value);
        } else {
            sb_jw_rawf(&w, OPEN "%s" CLOSE, name);
        }
        at = sp->end;
    }
    sb_jw_raw(&w, text + at, len - at);
    if (!spans) sb_pii_spans_free(&own);
    if (rc == 0 && w.oom) rc = SB_ENOMEM;
    if (rc) { sb_jw_free(&w); return rc; }
    *out = w.p ? w.p : sb_strdup("");
    *out_len = w.len;
    return *out ? 0 : SB_ENOMEM;
}

/* ---------------------------------------------------------------- restore */

static const char *const OPENS[] = {OPEN, "\xE3\x80\x88" /* 〈 */, "<", "\xEF\xBC\x9C" /* ＜ */};
static const char *const CLOSES[] = {CLOSE, "\xE3\x80\x89" /* 〉 */, ">", "\xEF\xBC\x9E" /* ＞ */};

static size_t starts_with_any(const char *t, size_t len, const char *const *set, size_t n_set) {
    for (size_t k = 0; k < n_set; k++) {
        size_t n = strlen(set[k]);
        if (n <= len && !memcmp(t, set[k], n)) return n;
    }
    return 0;
}

/* The placeholder at t (opening bracket included) as "NAME_N" in key, and
 * its length in bytes; 0 if there is none. */
static size_t placeholder_at(const char *t, size_t len, char *key, size_t key_cap) {
    size_t o = starts_with_any(t, len, OPENS, SB_ARRAY_LEN(OPENS));
    if (!o) return 0;
    size_t i = o, k = 0;
    bool gap = false;
    while (i < len && i - o < 40) {
        char c = t[i];
        size_t cl = starts_with_any(t + i, len - i, CLOSES, SB_ARRAY_LEN(CLOSES));
        if (cl) {
            while (k && key[k - 1] == '_') k--;
            key[k] = 0;
            return k ? i + cl : 0;
        }
        if (c == ' ' || c == '_') {
            gap = k > 0;
        } else if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
            if (k + 2 >= key_cap) return 0;
            if (gap) key[k++] = '_';
            gap = false;
            key[k++] = (char)(c >= 'a' && c <= 'z' ? c - 32 : c);
        } else {
            return 0;
        }
        i++;
    }
    return 0;
}

int sb_privacy_restore(const sb_pii_table *t, const char *text, size_t len, bool raw,
                       char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    sb_jw w;
    sb_jw_init(&w);
    size_t at = 0, i = 0;
    while (i < len) {
        char key[64];
        size_t n = t->n ? placeholder_at(text + i, len - i, key, sizeof key) : 0;
        const sb_pii_entry *e = NULL;
        for (size_t k = 0; n && k < t->n && !e; k++) {
            char want[64];
            snprintf(want, sizeof want, "%s_%u", t->v[k].name, t->v[k].number);
            if (!strcmp(want, key)) e = &t->v[k];
        }
        if (!e) { i++; continue; }
        sb_jw_raw(&w, text + at, i - at);
        const char *v = raw ? e->raw : e->value;
        sb_jw_raw(&w, v, strlen(v));
        i += n;
        at = i;
    }
    sb_jw_raw(&w, text + at, len - at);
    if (w.oom) { sb_jw_free(&w); return SB_ENOMEM; }
    *out = w.p ? w.p : sb_strdup("");
    *out_len = w.len;
    return *out ? 0 : SB_ENOMEM;
}

/* ---------------------------------------------------------------- keeping a table */

int sb_pii_table_save(const sb_pii_table *t, char **out, size_t *out_len) {
    *out = NULL;
    *out_len = 0;
    sb_jw w;
    sb_jw_init(&w);
    sb_jw_arr(&w);
    for (size_t i = 0; i < t->n; i++) {
        const sb_pii_entry *e = &t->v[i];
        sb_jw_obj(&w);
        sb_jw_key(&w, "name"); sb_jw_str(&w, e->name);
        sb_jw_key(&w, "number"); sb_jw_int(&w, e->number);
        sb_jw_key(&w, "value"); sb_jw_str(&w, e->value);
        sb_jw_key(&w, "raw"); sb_jw_str(&w, e->raw);
        sb_jw_obj_end(&w);
    }
    sb_jw_arr_end(&w);
    if (w.oom) { sb_jw_free(&w); return SB_ENOMEM; }
    *out = w.p;
    *out_len = w.len;
    return 0;
}

/* One saved entry into t; SB_EINVAL when it is not one. */
static int load_entry(const sb_json *o, sb_pii_table *t) {
    const char *name = sb_json_str(sb_json_get(o, "name")), *value = sb_json_str(sb_json_get(o, "value")),
               *raw = sb_json_str(sb_json_get(o, "raw"));
    const sb_json *num = sb_json_get(o, "number");
    if (!name || !value || !raw || !sb_json_is_int(num, 1, 1000000) || !name[0] || strlen(name) > PII_NAME_MAX)
        return SB_EINVAL;
    if (pii_grow((void **)&t->v, &t->cap, t->n, sizeof *t->v, 8)) return SB_ENOMEM;
    sb_pii_entry e = {.number = (unsigned)sb_json_num(num)};
    char ph[PII_NAME_MAX + 32];
    snprintf(ph, sizeof ph, OPEN "%s_%u" CLOSE, name, e.number);
    e.placeholder = sb_strdup(ph);
    e.name = sb_strdup(name);
    e.value = sb_strdup(value);
    e.raw = sb_strdup(raw);
    if (!e.placeholder || !e.name || !e.value || !e.raw) {
        sb_free(e.placeholder), sb_free(e.name), sb_free(e.value), sb_free(e.raw);
        return SB_ENOMEM;
    }
    t->v[t->n++] = e;
    return 0;
}

int sb_pii_table_load(const char *text, size_t len, sb_pii_table *t, char *err) {
    sb_pii_table_free(t);
    sb_json_doc *d;
    if (sb_json_parse(text, len, &d, NULL)) return sb_seterr(err, SB_EINVAL, "a saved placeholder table is not JSON");
    const sb_json *a = sb_json_root(d);
    int rc = sb_json_type_of(a) == SB_JSON_ARRAY ? 0 : SB_EINVAL;
    for (size_t i = 0; !rc && i < sb_json_len(a); i++) rc = load_entry(sb_json_at(a, i), t);
    sb_json_doc_free(d);
    if (rc) {
        sb_pii_table_free(t);
        return rc == SB_ENOMEM ? sb_seterr(err, rc, "out of memory")
                               : sb_seterr(err, rc, "a saved placeholder table has an entry that is not one");
    }
    return 0;
}
