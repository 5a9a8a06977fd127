/* extract.c - plain text, Markdown and HTML to blocks (headings and
 * paragraphs), and reading a document file (PDF through pdftotext).
 *
 * Not a full CommonMark or HTML5 parser: what policy notes use. Markdown:
 * ATX headings, paragraphs, list items and table rows as their own blocks,
 * fenced code kept as text, links reduced to their text, emphasis marks
 * dropped. HTML: h1-h6 are headings, block elements end a paragraph,
 * script/style/head/nav are dropped, entities decoded.
 */
#include "kb/kb_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

uint32_t kb_cp_before(const char *s, size_t end) {
    size_t b = end - 1;
    while (b > 0 && end - b < 4 && ((unsigned char)s[b] & 0xC0) == 0x80) b--;
    size_t used;
    uint32_t cp = kb_cp_at(s, end, b, &used);
    return b + used == end ? cp : 0xFFFD;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

int kb_blocks_push(kb_blocks *b, int level, const char *text, size_t len) {
    while (len && is_space(*text)) { text++; len--; }
    while (len && is_space(text[len - 1])) len--;
    if (!len) return 0;
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 32;
        kb_block *v = sb_realloc(b->v, cap * sizeof *v);
        if (!v) return SB_ENOMEM;
        b->v = v;
        b->cap = cap;
    }
    char *t = sb_malloc(len + 1);
    if (!t) return SB_ENOMEM;
    memcpy(t, text, len);
    t[len] = '\0';
    b->v[b->n++] = (kb_block){ level, t, len };
    return 0;
}

void kb_blocks_free(kb_blocks *b) {
    for (size_t i = 0; i < b->n; i++) sb_free(b->v[i].text);
    sb_free(b->v);
    *b = (kb_blocks){ 0 };
}

/* Append a line to a paragraph: a space between them, except where both
 * sides are CJK (Chinese hard-wrapped lines join without one). */
static int para_add(sb_bytes *p, const char *s, size_t n) {
    while (n && is_space(*s)) { s++; n--; }
    while (n && is_space(s[n - 1])) n--;
    if (!n) return 0;
    if (p->n) {
        size_t used;
        bool cjk = kb_is_cjk(kb_cp_before(p->p, p->n)) && kb_is_cjk(kb_cp_at(s, n, 0, &used));
        if (!cjk && sb_bytes_put(p, " ", 1)) return SB_ENOMEM;
    }
    return sb_bytes_put(p, s, n);
}

static int para_flush(sb_bytes *p, kb_blocks *out) {
    int rc = kb_blocks_push(out, 0, p->p, p->n);
    p->n = 0;
    return rc;
}

/* The end of the line that starts at s[i] (a \n, a \r\n or a lone \r -
 * old Mac files and some exporters - ends it; so does a \f when ff), and
 * in *next where the following line starts. */
static size_t line_end(const char *s, size_t n, size_t i, bool ff, size_t *next) {
    size_t e = i;
    while (e < n && s[e] != '\n' && s[e] != '\r' && !(ff && s[e] == '\f')) e++;
    *next = e + (e + 1 < n && s[e] == '\r' && s[e + 1] == '\n' ? 2 : 1);
    return e;
}

/* ------------------------------------------------------------ text */

static int extract_text(const char *s, size_t n, kb_blocks *out) {
    sb_bytes p = { 0 };
    int rc = 0;
    for (size_t i = 0, next; i < n && !rc; i = next) {
        size_t e = line_end(s, n, i, true, &next);
        size_t k = i;
        while (k < e && is_space(s[k])) k++;
        rc = k == e ? para_flush(&p, out) : para_add(&p, s + i, e - i);
        if (!rc && e < n && s[e] == '\f') rc = para_flush(&p, out);     /* pdftotext's page break */
    }
    if (!rc) rc = para_flush(&p, out);
    sb_free(p.p);
    return rc;
}

/* ------------------------------------------------------------ markdown */

/* Inline markup out: [text](url) -> text, ![alt](url) -> alt, `code`,
 * **strong**, __strong__ and <autolinks> marks dropped. */
static int md_inline(sb_bytes *o, const char *s, size_t n) {
    o->n = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '!' && i + 1 < n && s[i + 1] == '[') continue;
        if (c == '[') {
            const char *close = memchr(s + i, ']', n - i);
            if (close && (size_t)(close - s) + 1 < n && close[1] == '(') {
                const char *paren = memchr(close, ')', n - (size_t)(close - s));
                if (paren) {
                    if (sb_bytes_put(o, s + i + 1, (size_t)(close - s - i - 1))) return SB_ENOMEM;
                    i = (size_t)(paren - s);
                    continue;
                }
            }
        }
        if (c == '`' || ((c == '*' || c == '_') && i + 1 < n && s[i + 1] == c)) {
            if (c != '`') i++;
            continue;
        }
        if (sb_bytes_put(o, &c, 1)) return SB_ENOMEM;
    }
    return 0;
}

/* Length of a list marker ("- ", "* ", "+ ", "12. ", "3) ") at s, or 0. */
static size_t md_list_marker(const char *s, size_t n) {
    if (n >= 2 && (s[0] == '-' || s[0] == '*' || s[0] == '+') && s[1] == ' ') return 2;
    size_t d = 0;
    while (d < n && d < 9 && s[d] >= '0' && s[d] <= '9') d++;
    if (d && d + 1 < n && (s[d] == '.' || s[d] == ')') && s[d + 1] == ' ') return d + 2;
    return 0;
}

static bool md_rule(const char *s, size_t n) {   /* --- *** ___ (spaces allowed) */
    size_t k = 0;
    char c = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') continue;
        if (s[i] != '-' && s[i] != '*' && s[i] != '_') return false;
        if (c && s[i] != c) return false;
        c = s[i];
        k++;
    }
    return k >= 3;
}

static int md_line(const char *s, size_t n, bool *in_code, sb_bytes *p, sb_bytes *tmp, kb_blocks *out) {
    size_t ind = 0;
    while (ind < n && ind < 4 && s[ind] == ' ') ind++;
    s += ind;
    n -= ind;
    while (n && (s[n - 1] == '\r' || s[n - 1] == ' ')) n--;
    if (n >= 3 && (!strncmp(s, "```", 3) || !strncmp(s, "~~~", 3))) {
        *in_code = !*in_code;
        return para_flush(p, out);
    }
    if (*in_code) return para_add(p, s, n);
    if (!n || md_rule(s, n)) return para_flush(p, out);
    int level = 0;
    while (level < (int)n && level < 7 && s[level] == '#') level++;
    if (level >= 1 && level <= 6 && ((size_t)level == n || s[level] == ' ')) {
        size_t e = n;
        while (e > (size_t)level && (s[e - 1] == '#' || s[e - 1] == ' ')) e--;
        int rc = para_flush(p, out);
        if (!rc) rc = md_inline(tmp, s + level, e - (size_t)level);
        return rc ? rc : kb_blocks_push(out, level, tmp->p, tmp->n);
    }
    while (n && s[0] == '>') {                   /* block quote: its text */
        s++;
        n--;
        while (n && s[0] == ' ') { s++; n--; }
    }
    size_t lm = md_list_marker(s, n);
    bool row = n && s[0] == '|';
    if (lm || row) {
        int rc = para_flush(p, out);
        if (rc) return rc;
    }
    if (row) {                                  /* a table row: cells apart, |---| rows dropped */
        bool sep = true;
        for (size_t i = 0; i < n; i++) sep &= strchr("|-: ", s[i]) != NULL;
        if (sep) return 0;
        if (md_inline(tmp, s, n)) return SB_ENOMEM;
        size_t k = 0;                           /* cells one space apart */
        for (size_t i = 0; i < tmp->n; i++) {
            char ch = tmp->p[i] == '|' ? ' ' : tmp->p[i];
            if (ch != ' ' || (k && tmp->p[k - 1] != ' ')) tmp->p[k++] = ch;
        }
        return kb_blocks_push(out, 0, tmp->p, k);
    }
    if (md_inline(tmp, s + lm, n - lm)) return SB_ENOMEM;
    return para_add(p, tmp->p, tmp->n);
}

static int extract_md(const char *s, size_t n, kb_blocks *out) {
    sb_bytes p = { 0 }, tmp = { 0 };
    bool in_code = false;
    int rc = 0;
    for (size_t i = 0, next; i < n && !rc; i = next) {
        size_t e = line_end(s, n, i, false, &next);
        rc = md_line(s + i, e - i, &in_code, &p, &tmp, out);
    }
    if (!rc) rc = para_flush(&p, out);
    sb_free(p.p);
    sb_free(tmp.p);
    return rc;
}

/* ------------------------------------------------------------ html */

static const char *const html_blocks[] = {
    "p", "div", "br", "li", "ul", "ol", "tr", "td", "th", "table", "section", "article", "blockquote",
    "pre", "dd", "dt", "dl", "hr", "main", "header", "footer", "aside", "figure", "figcaption", "form", NULL,
};
static const char *const html_dropped[] = { "script", "style", "head", "nav", "noscript", "template", "svg", NULL };

static bool in_list(const char *name, const char *const *list) {
    for (; *list; list++) if (!strcasecmp(name, *list)) return true;
    return false;
}

/* &amp; &lt; &gt; &quot; &apos; &nbsp; &#N; &#xH; at s (s[0] == '&'):
 * appends the character, returns the bytes consumed (0: not an entity). */
static size_t html_entity(const char *s, size_t n, sb_bytes *o, int *rc) {
    static const struct { const char *name; const char *text; } named[] = {
        { "amp;", "&" }, { "lt;", "<" }, { "gt;", ">" }, { "quot;", "\"" }, { "apos;", "'" }, { "nbsp;", " " },
        { "#39;", "'" }, { "middot;", "\xC2\xB7" }, { "mdash;", "\xE2\x80\x94" }, { "ndash;", "\xE2\x80\x93" },
    };
    for (size_t k = 0; k < SB_ARRAY_LEN(named); k++) {
        size_t l = strlen(named[k].name);
        if (n > l && !strncmp(s + 1, named[k].name, l)) {
            *rc = sb_bytes_put(o, named[k].text, strlen(named[k].text));
            return l + 1;
        }
    }
    if (n < 4 || s[1] != '#') return 0;
    bool hex = s[2] == 'x' || s[2] == 'X';
    size_t i = hex ? 3 : 2;
    uint32_t cp = 0;
    size_t start = i;
    for (; i < n && i < start + 8; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : hex && c >= 'a' && c <= 'f' ? c - 'a' + 10
              : hex && c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) break;
        cp = cp * (hex ? 16 : 10) + (uint32_t)d;
    }
    if (i == start || i >= n || s[i] != ';') return 0;
    if (cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) cp = 0xFFFD;
    char u[4];
    *rc = sb_bytes_put(o, u, sb_utf8_encode(cp, u));
    return i + 1;
}

typedef struct {
    sb_bytes p;                 /* the paragraph or heading being collected */
    int heading;                /* 1-6 inside <hN>, else 0 */
    kb_blocks *out;
} html_state;

static int html_flush(html_state *h) {
    int rc = kb_blocks_push(h->out, h->heading, h->p.p, h->p.n);
    h->p.n = 0;
    return rc;
}

/* A tag at s (s[0] == '<'); returns the bytes consumed. */
static size_t html_tag(const char *s, size_t n, html_state *h, int *rc) {
    if (n >= 4 && !strncmp(s, "<!--", 4)) {
        const char *e = memmem(s + 4, n - 4, "-->", 3);
        return e ? (size_t)(e - s) + 3 : n;
    }
    const char *gt = memchr(s, '>', n);
    size_t end = gt ? (size_t)(gt - s) + 1 : n;
    bool closing = n > 1 && s[1] == '/';
    char name[16];
    size_t k = 0;
    for (size_t i = closing ? 2 : 1; i < end && k + 1 < sizeof name; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))) break;
        name[k++] = c;
    }
    name[k] = '\0';
    if (!closing && in_list(name, html_dropped)) {   /* skip to </name> */
        char close[24];
        snprintf(close, sizeof close, "</%s", name);
        for (size_t i = end; i + strlen(close) <= n; i++)
            if (!strncasecmp(s + i, close, strlen(close))) {
                const char *g = memchr(s + i, '>', n - i);
                return g ? (size_t)(g - s) + 1 : n;
            }
        return n;
    }
    bool heading = k == 2 && (name[0] == 'h' || name[0] == 'H') && name[1] >= '1' && name[1] <= '6';
    if (heading || in_list(name, html_blocks)) {
        *rc = html_flush(h);
        h->heading = heading && !closing ? name[1] - '0' : 0;
    }
    return end;
}

static int extract_html(const char *s, size_t n, kb_blocks *out) {
    html_state h = { .out = out };
    int rc = 0;
    for (size_t i = 0; i < n && !rc;) {
        if (s[i] == '<') { i += html_tag(s + i, n - i, &h, &rc); continue; }
        if (s[i] == '&') {
            size_t used = html_entity(s + i, n - i, &h.p, &rc);
            if (used) { i += used; continue; }
        }
        if (is_space(s[i])) {                   /* runs of white space are one space */
            if (h.p.n && h.p.p[h.p.n - 1] != ' ') rc = sb_bytes_put(&h.p, " ", 1);
            i++;
            continue;
        }
        rc = sb_bytes_put(&h.p, s + i, 1);
        i++;
    }
    if (!rc) rc = html_flush(&h);
    sb_free(h.p.p);
    return rc;
}

int kb_extract(const char *text, size_t len, sb_kb_format fmt, kb_blocks *out) {
    *out = (kb_blocks){ 0 };
    /* A UTF-8 byte order mark (Windows editors write one) is not text: kept,
     * it hid the first line's "# " and so the first heading and its path. */
    if (len >= 3 && !memcmp(text, "\xEF\xBB\xBF", 3)) {
        text += 3;
        len -= 3;
    }
    int rc = fmt == SB_KB_MARKDOWN ? extract_md(text, len, out)
           : fmt == SB_KB_HTML ? extract_html(text, len, out) : extract_text(text, len, out);
    if (rc) kb_blocks_free(out);
    return rc;
}

/* ------------------------------------------------------------ files */

int sb_kb_format_of(const char *path) {
    const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
    if (!dot || (slash && dot < slash)) return -1;     /* no extension: no way to tell, so no guess */
    static const struct { const char *ext; int fmt; } exts[] = {
        { ".txt", SB_KB_TEXT }, { ".text", SB_KB_TEXT }, { ".md", SB_KB_MARKDOWN }, { ".markdown", SB_KB_MARKDOWN },
        { ".html", SB_KB_HTML }, { ".htm", SB_KB_HTML }, { ".pdf", SB_KB_PDF },
    };
    for (size_t i = 0; i < SB_ARRAY_LEN(exts); i++)
        if (!strcasecmp(dot, exts[i].ext)) return exts[i].fmt;
    return -1;
}

static int read_fd(int fd, const char *what, char **out, size_t *len, char *err) {
    sb_bytes b = { 0 };
    char chunk[65536];
    for (;;) {
        ssize_t got = read(fd, chunk, sizeof chunk);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) { sb_free(b.p); return sb_seterr(err, SB_EIO, "%s: read: %s", what, strerror(errno)); }
        if (got == 0) break;
        if (b.n + (size_t)got > SB_KB_MAX_FILE_BYTES) {
            sb_free(b.p);
            return sb_seterr(err, SB_ERANGE, "%s: larger than %u MiB", what, SB_KB_MAX_FILE_BYTES >> 20);
        }
        if (sb_bytes_put(&b, chunk, (size_t)got)) { sb_free(b.p); return sb_seterr(err, SB_ENOMEM, "out of memory"); }
    }
    if (sb_bytes_put(&b, "", 1)) { sb_free(b.p); return sb_seterr(err, SB_ENOMEM, "out of memory"); }
    *out = b.p;
    *len = b.n - 1;
    return 0;
}

/* pdftotext -q -enc UTF-8 FILE - : spawned without a shell, its stdout read
 * here; pages are separated by \f, which the text extractor treats as a
 * paragraph break. */
static int read_pdf(int fd, const char *path, char **out, size_t *len, char *err) {
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC)) return sb_seterr(err, SB_EIO, "%s: pipe: %s", path, strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pfd[1], 1);
    /* pdftotext reads the file checked here (fd 3), not whatever the path
     * names by the time it opens it. */
    posix_spawn_file_actions_adddup2(&fa, fd, 3);
    char *argv[] = { "pdftotext", "-q", "-enc", "UTF-8", "/dev/fd/3", "-", NULL };
    pid_t pid;
    int e = posix_spawnp(&pid, "pdftotext", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(pfd[1]);
    if (e) {
        close(pfd[0]);
        return sb_seterr(err, SB_EUNSUP, "%s: PDF needs the 'pdftotext' tool (Debian package poppler-utils), "
                         "which is not installed: %s", path, strerror(e));
    }
    int rc = read_fd(pfd[0], path, out, len, err);
    close(pfd[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (!rc && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        sb_free(*out);
        *out = NULL;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
            return sb_seterr(err, SB_EUNSUP, "%s: PDF needs the 'pdftotext' tool (Debian package poppler-utils), "
                             "which is not installed", path);
        return sb_seterr(err, SB_EFORMAT, "%s: pdftotext failed (exit status %d): not a readable PDF?", path,
                         WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    return rc;
}

static const char *file_kind(mode_t m) {
    return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISSOCK(m) ? "a socket"
         : S_ISCHR(m) || S_ISBLK(m) ? "a device" : "not a regular file";
}

/* path opened for reading if it is a regular file (and, unless
 * follow_symlinks, not a symbolic link). O_NONBLOCK: opening a FIFO must
 * not wait for a writer (it did, forever) before it can be refused. */
static int open_regular(const char *path, bool follow_symlinks, int *fd_out, char *err) {
    struct stat st;
    if (!follow_symlinks && lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
        return sb_seterr(err, SB_EINVAL, "%s: a symbolic link: refused (kb add --follow-symlinks reads through it)",
                         path);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | (follow_symlinks ? 0 : O_NOFOLLOW));
    if (fd < 0 && errno == ELOOP && !follow_symlinks)      /* made a link since the lstat */
        return sb_seterr(err, SB_EINVAL, "%s: a symbolic link: refused (kb add --follow-symlinks reads through it)",
                         path);
    if (fd < 0) return sb_seterr(err, SB_EIO, "%s: %s", path, strerror(errno));
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        int rc = sb_seterr(err, SB_EINVAL, "%s: %s: only regular files are read", path, file_kind(st.st_mode));
        close(fd);
        return rc;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    *fd_out = fd;
    return 0;
}

int sb_kb_read_file(const char *path, sb_kb_format fmt, bool follow_symlinks, char **out, size_t *len, char *err) {
    *out = NULL;
    *len = 0;
    if ((int)fmt < 0 || fmt > SB_KB_PDF) {
        const char *slash = strrchr(path, '/'), *dot = strrchr(path, '.');
        if (!dot || (slash && dot < slash))
            return sb_seterr(err, SB_EUNSUP, "%s: no file extension, so no known format (expected .txt .md "
                             ".markdown .html .htm .pdf; rename the file)", path);
        return sb_seterr(err, SB_EUNSUP, "%s: unsupported file type '%.16s' (expected .txt .md .markdown .html .htm "
                         ".pdf)", path, dot);
    }
    int fd = -1, rc = open_regular(path, follow_symlinks, &fd, err);
    if (rc) return rc;
    rc = fmt == SB_KB_PDF ? read_pdf(fd, path, out, len, err) : read_fd(fd, path, out, len, err);
    close(fd);
    return rc;
}
