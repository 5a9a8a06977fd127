/* stop.c - stop strings and UTF-8 safety for streamed generation.
 *
 * The matcher keeps only the bytes it cannot release yet: the longest tail
 * that is a proper prefix of some stop string, and an unfinished UTF-8
 * sequence. Every stop occurrence therefore lies entirely inside the
 * buffer when it completes: if a stop began at byte j of the stream, every
 * tail starting at j was a prefix of it, so nothing from j on was released.
 * The buffer stays shorter than the longest stop plus the latest piece, so
 * searching it from the start on every feed is cheap.
 */
#include "worker/engine/sb_sampler.h"

#include <string.h>

struct sb_stop_matcher {
    char  **stops;
    size_t *stop_len;
    size_t  n_stops;
    char   *buf;            /* held bytes, then the piece being fed */
    size_t  len, cap;
    char   *out;            /* sanitised text handed to the caller */
    size_t  out_cap;
    int     which;          /* index of the stop that matched, or -1 */
};

/* ---- UTF-8 (RFC 3629 / Unicode Table 3-7 well-formed sequences) ---- */

/* Length of the sequence a lead byte starts, 0 if it cannot start one
 * (continuation bytes, C0/C1 overlongs, F5..FF beyond U+10FFFF). */
static int utf8_need(unsigned char b) {
    if (b < 0x80) return 1;
    if (b >= 0xC2 && b <= 0xDF) return 2;
    if (b >= 0xE0 && b <= 0xEF) return 3;
    if (b >= 0xF0 && b <= 0xF4) return 4;
    return 0;
}

/* The second byte's range depends on the lead: it excludes overlongs (E0,
 * F0), surrogates (ED) and code points above U+10FFFF (F4). */
static int utf8_ok_at(unsigned char lead, int pos, unsigned char b) {
    if (pos > 1) return (b & 0xC0) == 0x80;
    switch (lead) {
    case 0xE0: return b >= 0xA0 && b <= 0xBF;
    case 0xED: return b >= 0x80 && b <= 0x9F;
    case 0xF0: return b >= 0x90 && b <= 0xBF;
    case 0xF4: return b >= 0x80 && b <= 0x8F;
    default:   return (b & 0xC0) == 0x80;
    }
}

/* Bytes at the end of s[0..n) that begin a well-formed sequence which is not
 * finished yet (0..3): those must wait for the next piece. */
static size_t utf8_unfinished_tail(const char *s, size_t n) {
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        const unsigned char lead = (unsigned char)s[n - back];
        if ((lead & 0xC0) == 0x80) continue;        /* continuation: look further back */
        int need = utf8_need(lead);
        if (need <= (int)back) return 0;            /* ASCII, invalid or complete */
        for (size_t j = 1; j < back; j++)
            if (!utf8_ok_at(lead, (int)j, (unsigned char)s[n - back + j])) return 0;
        return back;
    }
    return 0;
}

static const char REPLACEMENT[] = "\xEF\xBF\xBD";   /* U+FFFD */

/* Copy s[0..n) into dst (room for 3n bytes) replacing each maximal invalid
 * subsequence with U+FFFD; returns the bytes written. */
static size_t utf8_sanitise(const char *s, size_t n, char *dst) {
    size_t o = 0, i = 0;
    while (i < n) {
        const unsigned char b = (unsigned char)s[i];
        const int need = utf8_need(b);
        if (need == 1) {
            dst[o++] = (char)b;
            i++;
            continue;
        }
        int j = 1;
        while (need && j < need && i + j < n && utf8_ok_at(b, j, (unsigned char)s[i + j])) j++;
        if (need && j == need) {
            memcpy(dst + o, s + i, (size_t)need);
            o += (size_t)need;
            i += (size_t)need;
        } else {
            memcpy(dst + o, REPLACEMENT, 3);
            o += 3;
            i += (size_t)j;
        }
    }
    return o;
}

/* ---- Matcher ---- */

int sb_stop_new(const char *const *stops, size_t n_stops, sb_stop_matcher **out, char *err) {
    *out = NULL;
    for (size_t i = 0; i < n_stops; i++)
        if (!stops[i] || !stops[i][0])
            return sb_seterr(err, SB_EINVAL, "stop string %zu is empty", i);
    sb_stop_matcher *m = sb_calloc(1, sizeof *m);
    if (!m) goto nomem;
    m->which = -1;
    if (n_stops) {
        m->stops = sb_calloc(n_stops, sizeof *m->stops);
        m->stop_len = sb_calloc(n_stops, sizeof *m->stop_len);
        if (!m->stops || !m->stop_len) goto nomem;
    }
    m->n_stops = n_stops;
    size_t longest = 0;
    for (size_t i = 0; i < n_stops; i++) {
        if (!(m->stops[i] = sb_strdup(stops[i]))) goto nomem;
        m->stop_len[i] = strlen(stops[i]);
        longest = SB_MAX(longest, m->stop_len[i]);
    }
    /* Room for the longest hold plus a typical token, so that steady-state
     * feeding does not allocate. */
    m->cap = longest + 64;
    m->out_cap = 3 * m->cap;
    m->buf = sb_malloc(m->cap);
    m->out = sb_malloc(m->out_cap);
    if (!m->buf || !m->out) goto nomem;
    *out = m;
    return 0;
nomem:
    sb_stop_free(m);
    return sb_seterr(err, SB_ENOMEM, "stop matcher: out of memory");
}

void sb_stop_free(sb_stop_matcher *m) {
    if (!m) return;
    for (size_t i = 0; m->stops && i < m->n_stops; i++) sb_free(m->stops[i]);
    sb_free(m->stops);
    sb_free(m->stop_len);
    sb_free(m->buf);
    sb_free(m->out);
    sb_free(m);
}

void sb_stop_reset(sb_stop_matcher *m) {
    m->len = 0;
    m->which = -1;
}

int sb_stop_which(const sb_stop_matcher *m) { return m->which; }

static int reserve(char **p, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t n = SB_MAX(need, *cap * 2);
    char *q = sb_realloc(*p, n);
    if (!q) return SB_ENOMEM;
    *p = q;
    *cap = n;
    return 0;
}

/* Sanitise buf[0..n) into out and drop it from buf. */
static int release(sb_stop_matcher *m, size_t n, const char **emit, size_t *emit_len) {
    size_t need;
    if (sb_mul_size(n, 3, &need) || reserve(&m->out, &m->out_cap, need)) return SB_ENOMEM;
    *emit = m->out;
    *emit_len = utf8_sanitise(m->buf, n, m->out);
    memmove(m->buf, m->buf + n, m->len - n);
    m->len -= n;
    return 0;
}

/* Longest proper prefix of any stop string that the buffer ends with. */
static size_t stop_prefix_tail(const sb_stop_matcher *m) {
    size_t best = 0;
    for (size_t s = 0; s < m->n_stops; s++) {
        size_t k = SB_MIN(m->len, m->stop_len[s] - 1);
        for (; k > best; k--)
            if (memcmp(m->buf + m->len - k, m->stops[s], k) == 0) break;
        best = SB_MAX(best, k);
    }
    return best;
}

int sb_stop_feed(sb_stop_matcher *m, const char *piece, size_t len,
                 const char **emit, size_t *emit_len) {
    *emit = m->out;
    *emit_len = 0;
    if (m->which >= 0) return 1;
    size_t need;
    if (sb_add_size(m->len, len, &need) || reserve(&m->buf, &m->cap, need)) return SB_ENOMEM;
    if (len) memcpy(m->buf + m->len, piece, len);
    m->len = need;

    /* The earliest occurrence wins; at one position the first listed stop. */
    size_t at = SIZE_MAX;
    for (size_t s = 0; s < m->n_stops; s++) {
        const char *hit = memmem(m->buf, m->len, m->stops[s], m->stop_len[s]);
        if (hit && (size_t)(hit - m->buf) < at) {
            at = (size_t)(hit - m->buf);
            m->which = (int)s;
        }
    }
    if (m->which >= 0) {
        int rc = release(m, at, emit, emit_len);
        m->len = 0;                         /* the stop and what follows are dropped */
        return rc ? rc : 1;
    }
    size_t hold = SB_MAX(stop_prefix_tail(m), utf8_unfinished_tail(m->buf, m->len));
    return release(m, m->len - hold, emit, emit_len);
}

int sb_stop_flush(sb_stop_matcher *m, const char **emit, size_t *emit_len) {
    *emit = m->out;
    *emit_len = 0;
    if (m->which >= 0) return 0;
    return release(m, m->len, emit, emit_len);
}
