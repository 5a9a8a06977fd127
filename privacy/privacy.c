/* privacy.c - the detector: its built-in detectors and operator patterns,
 * and one call's detection (both scanners, then overlaps resolved). */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/sb_checksum.h"
#include "common/sb_common.h"
#include "privacy/privacy_internal.h"

static const char *const TYPE_NAMES[] = {"ID", "PHONE", "TEL", "CARD", "EMAIL", "PASSPORT", "PLATE", "CUSTOM"};

const char *sb_pii_type_name(sb_pii_type t) {
    return (unsigned)t < SB_ARRAY_LEN(TYPE_NAMES) ? TYPE_NAMES[t] : "?";
}

int sb_pii_type_parse(const char *name) {
    for (int i = 0; i < SB_PII_N_BUILTIN; i++)
        if (!strcasecmp(name, TYPE_NAMES[i])) return i;
    return -1;
}

int sb_privacy_new(unsigned types, sb_privacy **out, char *err) {
    *out = NULL;
    if (types & ~SB_PII_ALL) return sb_seterr(err, SB_EINVAL, "privacy: unknown detector bits 0x%x", types & ~SB_PII_ALL);
    sb_privacy *p = sb_calloc(1, sizeof *p);
    if (!p) return sb_seterr(err, SB_ENOMEM, "privacy: out of memory");
    p->types = types;
    *out = p;
    return 0;
}

void sb_privacy_free(sb_privacy *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_pats; i++) regfree(&p->pats[i].re);
    sb_free(p->pats);
    sb_free(p);
}

static bool valid_name(const char *s) {
    size_t n = strlen(s);
    if (n < 1 || n > PII_NAME_MAX || !(s[0] >= 'A' && s[0] <= 'Z')) return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_')) return false;
    return true;
}

int sb_privacy_add_pattern(sb_privacy *p, const char *name, const char *regex, int on, char *err) {
    if (!name || !valid_name(name))
        return sb_seterr(err, SB_EINVAL, "privacy pattern '%s': a name is 1-%d of A-Z 0-9 _, starting with a letter",
                         name ? name : "", PII_NAME_MAX);
    if (sb_pii_type_parse(name) >= 0 || !strcmp(name, "CUSTOM"))
        return sb_seterr(err, SB_EINVAL, "privacy pattern '%s': the name of a built-in type", name);
    for (size_t i = 0; i < p->n_pats; i++)
        if (!strcmp(p->pats[i].name, name)) return sb_seterr(err, SB_EINVAL, "privacy pattern '%s': defined twice", name);
    if (on != SB_PII_ON_TEXT && on != SB_PII_ON_DIGITS)
        return sb_seterr(err, SB_EINVAL, "privacy pattern '%s': 'on' is text or digits", name);
    if (!regex || !*regex) return sb_seterr(err, SB_EINVAL, "privacy pattern '%s': empty regex", name);
    pii_pattern *np = sb_realloc(p->pats, (p->n_pats + 1) * sizeof *np);
    if (!np) return sb_seterr(err, SB_ENOMEM, "privacy: out of memory");
    p->pats = np;
    pii_pattern *pp = &np[p->n_pats];
    memset(pp, 0, sizeof *pp);
    int rc = regcomp(&pp->re, regex, REG_EXTENDED);
    if (rc) {
        char why[128];
        regerror(rc, &pp->re, why, sizeof why);
        return sb_seterr(err, SB_EINVAL, "privacy pattern '%s': regex '%s': %s", name, regex, why);
    }
    strcpy(pp->name, name);
    pp->on = on;
    p->n_pats++;
    if (on == SB_PII_ON_DIGITS) p->any_digit_pattern = true;
    else p->any_text_pattern = true;
    return 0;
}

const char *const sb_pii_check_names[] = { "none", "luhn", "mod11-2", NULL };

int sb_privacy_pattern_check(sb_privacy *p, const char *name, sb_pii_check check, char *err) {
    for (size_t i = 0; i < p->n_pats; i++)
        if (!strcmp(p->pats[i].name, name)) {
            p->pats[i].check = check;
            return 0;
        }
    return sb_seterr(err, SB_EINVAL, "privacy pattern '%s': no such pattern", name);
}

bool pii_pattern_accepts(const pii_pattern *pp, const char *v, size_t n) {
    if (pp->check == SB_PII_CHECK_NONE) return true;
    char d[SB_PII_VALUE_MAX];
    size_t k = 0;
    for (size_t i = 0; i < n && k < sizeof d; i++) {
        bool x = (v[i] == 'X' || v[i] == 'x') && pp->check == SB_PII_CHECK_MOD11_2;
        if ((v[i] >= '0' && v[i] <= '9') || x) d[k++] = x ? 'X' : v[i];
    }
    if (k < 2 || k == sizeof d) return false;
    for (size_t i = 0; i + 1 < k; i++)
        if (d[i] == 'X') return false;      /* X is a check character, last or nowhere */
    return pp->check == SB_PII_CHECK_LUHN ? sb_luhn_valid(d, k) : sb_mod11_2_valid(d, k);
}

const char *sb_privacy_pattern_name(const sb_privacy *p, int pattern) {
    return pattern >= 0 && (size_t)pattern < p->n_pats ? p->pats[pattern].name : NULL;
}

void sb_pii_spans_free(sb_pii_spans *s) {
    sb_free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

int pii_grow(void **v, size_t *cap, size_t n, size_t size, size_t first) {
    if (n < *cap) return 0;
    size_t c = *cap ? *cap * 2 : first, bytes;
    if (sb_mul_size(c, size, &bytes)) return SB_ENOMEM;
    void *nv = sb_realloc(*v, bytes);
    if (!nv) return SB_ENOMEM;
    *v = nv;
    *cap = c;
    return 0;
}

int pii_push(sb_pii_spans *s, size_t start, size_t end, sb_pii_type type, int pattern,
             const char *value, size_t vlen) {
    if (pii_grow((void **)&s->v, &s->cap, s->n, sizeof *s->v, 8)) return SB_ENOMEM;
    sb_pii_span *sp = &s->v[s->n++];
    sp->start = start;
    sp->end = end;
    sp->type = type;
    sp->pattern = pattern;
    vlen = SB_MIN(vlen, sizeof sp->value - 1);
    memcpy(sp->value, value, vlen);
    sp->value[vlen] = 0;
    return 0;
}

static bool ascii_word(const char *w) {
    for (; *w; w++)
        if ((unsigned char)*w >= 0x80) return false;
    return true;
}

bool pii_has_word(const char *t, size_t from, size_t to, const char *const *words) {
    if (to <= from) return false;
    for (const char *const *w = words; *w; w++) {
        size_t n = strlen(*w);
        if (!ascii_word(*w)) {
            if (memmem(t + from, to - from, *w, n)) return true;
            continue;
        }
        for (size_t i = from; i + n <= to; i++)
            if (!strncasecmp(t + i, *w, n)) return true;
    }
    return false;
}

/* Start order; at one start the longer first. */
static int by_start(const void *a, const void *b) {
    const sb_pii_span *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->end > y->end ? -1 : x->end < y->end;
}

static bool operator_text(const sb_pii_span *s) { return s->type == SB_PII_CUSTOM && s->pattern >= 0; }

/* Keep spans that do not overlap: a built-in detection wins over an
 * operator's text match, otherwise the one met first (the longer at a tie). */
static void resolve(const sb_privacy *p, sb_pii_spans *s) {
    if (s->n < 2) return;
    qsort(s->v, s->n, sizeof *s->v, by_start);
    size_t kept = 0;
    for (size_t i = 0; i < s->n; i++) {
        sb_pii_span *sp = &s->v[i];
        if (kept && sp->start < s->v[kept - 1].end) {
            sb_pii_span *last = &s->v[kept - 1];
            bool text_pat = operator_text(last) && p->pats[last->pattern].on == SB_PII_ON_TEXT;
            if (text_pat && !operator_text(sp)) *last = *sp;
            continue;
        }
        s->v[kept++] = *sp;
    }
    s->n = kept;
}

int sb_privacy_detect(const sb_privacy *p, const char *text, size_t len, sb_pii_spans *out) {
    out->n = 0;
    int rc = pii_scan_digits(p, text, len, out);
    if (rc == 0) rc = pii_scan_text(p, text, len, out);
    resolve(p, out);
    return rc;
}
