/* test_kb.c - knowledge bases (kb/): chunking in English and Chinese
 * (sections, sentences, no mid-word cut, overlap, HTML/Markdown), and the
 * store (atomic replace, remove, ranks, modes, embedder identity) with a
 * deterministic bag-of-words embedder in place of the encoder. The encoder
 * path itself runs in tests/it_kb.sh on the tiny random e5 fixture.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/sb_common.h"
#include "kb/sb_kb.h"

#define DIM 384          /* multilingual-e5-small's, so the scan benchmark is to scale */

/* One token per ASCII word (letters/digits run) and per other non-space
 * character - the shape of a real tokenizer on Chinese. */
static bool word_char(char c) { return ((c | 32) >= 'a' && (c | 32) <= 'z') || (c >= '0' && c <= '9'); }

static size_t count_tokens(void *ud, const char *s, size_t n) {
    (void)ud;
    size_t t = 0;
    for (size_t i = 0; i < n; t++) {
        if (word_char(s[i])) {
            while (i < n && word_char(s[i])) i++;
        } else if (s[i] == ' ' || s[i] == '\n') {
            i++;
            t--;
        } else {
            i++;
            while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80) i++;
        }
    }
    return t;
}

/* Bag of lowercase ASCII words hashed into DIM buckets, L2-normalised.
 * fail_at > 0: the fail_at-th call fails (an embedder dying mid-ingest). */
typedef struct { int calls, fail_at; } fake;

static int fake_embed(void *ud, int kind, const char *text, size_t len, float *out, char *err) {
    fake *f = ud;
    if (f && f->fail_at && ++f->calls == f->fail_at) return sb_seterr(err, SB_EIO, "embedder died");
    memset(out, 0, DIM * sizeof *out);
    for (size_t i = 0; i < len;) {
        uint32_t h = 2166136261u;
        size_t s = i;
        while (i < len && ((text[i] | 32) >= 'a' && (text[i] | 32) <= 'z')) h = (h ^ (uint32_t)(text[i++] | 32)) * 16777619u;
        if (i == s) { i++; continue; }
        out[h % DIM] += 1;
    }
    float norm = 0;
    for (int d = 0; d < DIM; d++) norm += out[d] * out[d];
    for (int d = 0; d < DIM && norm > 0; d++) out[d] /= sqrtf(norm);
    if (norm == 0) out[0] = 1;
    return 0;
}

static sb_kb_chunk *chunk(const char *text, sb_kb_format fmt, int max, int overlap, size_t *n) {
    sb_kb_chunk *c = NULL;
    char err[SB_ERR_LEN];
    int rc = sb_kb_chunk_text(text, strlen(text), fmt, max, overlap, count_tokens, NULL, &c, n, err);
    if (rc) fprintf(stderr, "chunk: %s\n", err);
    assert_int_equal(rc, 0);
    return c;
}

/* Every whitespace-separated word of the chunk is a word of the source:
 * nothing was cut mid-word. */
static void assert_whole_words(const char *chunk_text, const char *source) {
    char *copy = strdup(chunk_text), *save = NULL;
    for (char *w = strtok_r(copy, " \n", &save); w; w = strtok_r(NULL, " \n", &save)) {
        char pat[256];
        snprintf(pat, sizeof pat, "%s", w);
        const char *p = source;
        int found = 0;
        size_t wl = strlen(pat);
        while ((p = strstr(p, pat))) {
            bool start = p == source || p[-1] == ' ' || p[-1] == '\n' || p[-1] == '#';
            bool end = p[wl] == '\0' || p[wl] == ' ' || p[wl] == '\n';
            if (start && end) { found = 1; break; }
            p++;
        }
        if (!found) fprintf(stderr, "word '%s' of chunk '%s' is not a whole source word\n", w, chunk_text);
        assert_true(found);
    }
    free(copy);
}

static void test_chunk_english(void **state) {
    (void)state;
    const char *doc =
        "# Housing fund\n\nIntro line before any subsection.\n\n## Withdrawal\n\n"
        "You may withdraw for rent. Bring your ID card and the lease. The review takes 3.5 days! "
        "Money goes to your bank card? Yes, within five working days.\n\n"
        "## Limits\n\nRent withdrawals are capped at 1,500 yuan per month.\n";
    size_t n;
    sb_kb_chunk *c = chunk(doc, SB_KB_MARKDOWN, 12, 0, &n);
    assert_true(n >= 4);
    assert_string_equal(c[0].section, "Housing fund");
    assert_string_equal(c[0].text, "Intro line before any subsection.");
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(c[i].position, (int)i);
        assert_true(c[i].n_tokens <= 12);
        size_t l = strlen(c[i].text);
        assert_true(strchr(".!?", c[i].text[l - 1]) != NULL);       /* whole sentences */
        assert_whole_words(c[i].text, doc);
        /* never across a heading */
        assert_true(!strstr(c[i].text, "capped") || !strcmp(c[i].section, "Housing fund > Limits"));
        assert_true(!strstr(c[i].text, "lease") || !strcmp(c[i].section, "Housing fund > Withdrawal"));
    }
    /* "3.5" is not a sentence end */
    int whole = 0;
    for (size_t i = 0; i < n; i++) whole |= strstr(c[i].text, "The review takes 3.5 days!") != NULL;
    assert_true(whole);
    sb_kb_chunks_free(c, n);
}

static void test_chunk_long_sentence_no_mid_word(void **state) {
    (void)state;
    char doc[4096] = "";
    for (int i = 0; i < 120; i++) strcat(doc, i % 3 ? "alpha " : "withdrawal ");
    strcat(doc, "end.");
    size_t n;
    sb_kb_chunk *c = chunk(doc, SB_KB_TEXT, 16, 4, &n);
    assert_true(n >= 8);
    for (size_t i = 0; i < n; i++) {
        assert_true(c[i].n_tokens <= 16);
        assert_whole_words(c[i].text, doc);
        assert_true(c[i].text[0] != ' ' && c[i].text[strlen(c[i].text) - 1] != ' ');   /* the cut's space dropped */
    }
    sb_kb_chunks_free(c, n);
}

static void test_chunk_chinese(void **state) {
    (void)state;
    const char *doc = "# 住房公积金\n\n## 提取条件\n\n职工连续缴存满六个月可以申请提取。购房、租房都可以提取！"
                      "需要带身份证吗？需要；还要带银行卡。审核三个工作日完成。\n\n## 额度\n\n每月最高一千五百元。\n";
    size_t n;
    sb_kb_chunk *c = chunk(doc, SB_KB_MARKDOWN, 20, 0, &n);
    assert_true(n >= 3);
    char joined[1024] = "";
    for (size_t i = 0; i < n; i++) {
        assert_true(c[i].n_tokens <= 20);
        assert_null(strchr(c[i].text, ' '));                         /* Chinese sentences join without spaces */
        const char *end = c[i].text + strlen(c[i].text) - 3;         /* ends on 。！？； */
        assert_true(!strcmp(end, "。") || !strcmp(end, "！") || !strcmp(end, "？") || !strcmp(end, "；"));
        if (!strcmp(c[i].section, "住房公积金 > 提取条件")) strcat(joined, c[i].text);
    }
    /* without overlap the chunks are the section's text, in order, whole */
    assert_string_equal(joined, "职工连续缴存满六个月可以申请提取。购房、租房都可以提取！需要带身份证吗？需要；"
                                "还要带银行卡。审核三个工作日完成。");
    assert_string_equal(c[n - 1].section, "住房公积金 > 额度");
    sb_kb_chunks_free(c, n);
    /* a long sentence without a stop: cut at ， */
    const char *longs = "申请人应当携带身份证原件，户口簿原件，租赁合同原件，银行卡，以及单位出具的证明材料，然后到窗口办理。";
    c = chunk(longs, SB_KB_TEXT, 16, 0, &n);
    assert_true(n >= 2);
    for (size_t i = 0; i + 1 < n; i++) {
        const char *end = c[i].text + strlen(c[i].text) - 3;
        assert_string_equal(end, "，");
        assert_true(c[i].n_tokens <= 16);
    }
    sb_kb_chunks_free(c, n);
}

static void test_chunk_overlap(void **state) {
    (void)state;
    const char *doc = "One two three. Four five six. Seven eight nine. Ten eleven twelve.";
    size_t n;
    sb_kb_chunk *c = chunk(doc, SB_KB_TEXT, 8, 4, &n);
    assert_int_equal(n, 3);
    assert_string_equal(c[0].text, "One two three. Four five six.");
    assert_string_equal(c[1].text, "Four five six. Seven eight nine.");   /* the last sentence again */
    assert_string_equal(c[2].text, "Seven eight nine. Ten eleven twelve.");
    sb_kb_chunks_free(c, n);
}

static void test_chunk_html_markdown(void **state) {
    (void)state;
    const char *html = "<html><head><title>x</title><style>p{}</style></head><body><script>var a=1;</script>"
                       "<h2>Tax &amp; fees</h2><p>Refunds take two&nbsp;weeks.</p><ul><li>Use the app.</li>"
                       "<li>Keep receipts &#20116;&#x5E74;.</li></ul><!-- hidden --></body></html>";
    size_t n;
    sb_kb_chunk *c = chunk(html, SB_KB_HTML, 50, 0, &n);
    assert_int_equal(n, 1);
    assert_string_equal(c[0].section, "Tax & fees");
    assert_string_equal(c[0].text, "Refunds take two weeks.\nUse the app.\nKeep receipts 五年.");
    sb_kb_chunks_free(c, n);
    const char *md = "## Steps\n\n1. Apply [online](https://x.example/a) or at a **counter**.\n"
                     "2. Wait for `approval`.\n\n| Fee | Time |\n|---|---|\n| none | 1 day |\n";
    c = chunk(md, SB_KB_MARKDOWN, 50, 0, &n);
    assert_int_equal(n, 1);
    assert_string_equal(c[0].text, "Apply online or at a counter.\nWait for approval.\nFee Time\nnone 1 day");
    sb_kb_chunks_free(c, n);
    char err[SB_ERR_LEN];
    sb_kb_chunk *bad;
    assert_int_equal(sb_kb_chunk_text("ok \xff no", 7, SB_KB_TEXT, 50, 0, count_tokens, NULL, &bad, &n, err),
                     SB_EINVAL);
    assert_non_null(strstr(err, "offset 3"));
}

/* A UTF-8 BOM hid the first line's "# " (the first heading and its path
 * were lost), and a lone CR was no line break (a classic-Mac or exported
 * file was one line). Text files likewise. */
static void test_chunk_bom_and_cr(void **state) {
    (void)state;
    static const char *const md[] = {
        "\xef\xbb\xbf# Fund\n\n## Rent\n\nBring the lease.\n",
        "# Fund\r\r## Rent\r\rBring the lease.\r",
        "\xef\xbb\xbf# Fund\r\n\r\n## Rent\r\n\r\nBring the lease.\r\n",
    };
    for (size_t i = 0; i < sizeof md / sizeof md[0]; i++) {
        size_t n;
        sb_kb_chunk *c = chunk(md[i], SB_KB_MARKDOWN, 50, 0, &n);
        assert_int_equal(n, 1);
        assert_string_equal(c[0].section, "Fund > Rent");
        assert_string_equal(c[0].text, "Bring the lease.");
        sb_kb_chunks_free(c, n);
    }
    size_t n;
    sb_kb_chunk *c = chunk("\xef\xbb\xbfOne line.\r\rAnother paragraph.\r", SB_KB_TEXT, 50, 0, &n);
    assert_int_equal(n, 1);
    assert_string_equal(c[0].text, "One line.\nAnother paragraph.");
    sb_kb_chunks_free(c, n);
}

/* ---------------------------------------------------------------- store */

static char g_dir[64], g_path[128];

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/sb-kb-XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    snprintf(g_path, sizeof g_path, "%s/kb.sqlite", g_dir);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static sb_kb *open_fake(fake *f, const char *embed_id) {
    sb_kb_opts o = { .path = g_path, .create = 1, .embed = fake_embed, .count = count_tokens, .ud = f, .dim = DIM,
                     .embed_id = embed_id, .chunk_tokens = 64, .overlap = 0 };
    sb_kb *kb = NULL;
    char err[SB_ERR_LEN];
    int rc = sb_kb_open(&o, &kb, err);
    if (rc) fprintf(stderr, "open: %s\n", err);
    assert_int_equal(rc, 0);
    return kb;
}

static int add(sb_kb *kb, const char *source, const char *text, sb_kb_add_result *r) {
    char err[SB_ERR_LEN];
    return sb_kb_add_text(kb, source, text, strlen(text), SB_KB_MARKDOWN, NULL, NULL, r, err);
}

static size_t search(sb_kb *kb, const char *q, sb_kb_mode mode, sb_kb_hit **h) {
    sb_kb_search_opts o = { .mode = mode, .top_k = 5 };
    size_t n = 0;
    char err[SB_ERR_LEN];
    assert_int_equal(sb_kb_search(kb, q, strlen(q), &o, h, &n, err), 0);
    return n;
}

static const char *const RENT = "# Rent\n\nBring the lease and your identity card to draw money for rent.\n";
static const char *const TAX = "# Tax\n\nThe annual settlement runs from March to June in the tax app.\n";

static void test_store_add_search_remove(void **state) {
    (void)state;
    mode_t old = umask(022);
    sb_kb *kb = open_fake(NULL, "fake-1");
    sb_kb_add_result r;
    assert_int_equal(add(kb, "rent.md", RENT, &r), 0);
    assert_int_equal(r.n_chunks, 1);
    assert_false(r.replaced);
    assert_int_equal(add(kb, "tax.md", TAX, &r), 0);
    struct stat st;
    assert_int_equal(stat(g_path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);                 /* agency text: owner only, whatever the umask */
    umask(old);
    for (int mode = SB_KB_BM25; mode <= SB_KB_HYBRID; mode++) {
        sb_kb_hit *h;
        size_t n = search(kb, "annual tax settlement", (sb_kb_mode)mode, &h);
        assert_true(n >= 1);
        assert_string_equal(h[0].source, "tax.md");
        assert_string_equal(h[0].section, "Tax");
        if (mode == SB_KB_HYBRID) assert_int_equal(h[0].bm25_rank, 1);
        sb_kb_hits_free(h, n);
        n = search(kb, "lease identity card", (sb_kb_mode)mode, &h);
        assert_string_equal(h[0].source, "rent.md");
        sb_kb_hits_free(h, n);
    }
    /* unchanged: nothing written; changed: replaced */
    assert_int_equal(add(kb, "rent.md", RENT, &r), 0);
    assert_true(r.unchanged);
    assert_int_equal(add(kb, "rent.md", "# Rent\n\nRenters now need a residence permit.\n", &r), 0);
    assert_true(r.replaced);
    sb_kb_hit *h;
    size_t n = search(kb, "lease identity card", SB_KB_BM25, &h);
    for (size_t i = 0; i < n; i++) assert_string_not_equal(h[i].source, "rent.md");   /* the old text is gone */
    sb_kb_hits_free(h, n);
    sb_kb_doc *d;
    char err[SB_ERR_LEN];
    assert_int_equal(sb_kb_list(kb, &d, &n, err), 0);
    assert_int_equal(n, 2);
    assert_string_equal(d[0].source, "rent.md");
    assert_int_equal(d[0].n_chunks, 1);
    sb_kb_docs_free(d, n);
    assert_int_equal(sb_kb_remove(kb, "rent.md", err), 0);
    assert_int_equal(sb_kb_remove(kb, "rent.md", err), SB_ENOTFOUND);
    n = search(kb, "residence permit renters", SB_KB_VECTOR, &h);
    for (size_t i = 0; i < n; i++) assert_string_not_equal(h[i].source, "rent.md");
    sb_kb_hits_free(h, n);
    sb_kb_stats stt;
    assert_int_equal(sb_kb_stats_get(kb, &stt, err), 0);
    assert_int_equal(stt.n_docs, 1);
    assert_int_equal(stt.dim, DIM);
    assert_string_equal(stt.fts, "bigram");
    sb_kb_close(kb);
}

/* The embedder dies on the 2nd chunk of a new version: the old version
 * stays, whole (the kill -9 variant is in tests/it_kb.sh). */
static void test_store_atomic_replace(void **state) {
    (void)state;
    sb_kb *kb = open_fake(NULL, "fake-1");
    sb_kb_add_result r;
    assert_int_equal(add(kb, "rent.md", RENT, &r), 0);
    sb_kb_close(kb);
    fake f = { .fail_at = 2 };
    kb = open_fake(&f, "fake-1");
    assert_int_equal(add(kb, "rent.md", "# A\n\nNew first part.\n\n# B\n\nNew second part.\n", &r), SB_EIO);
    sb_kb_hit *h;
    size_t n = search(kb, "lease identity card", SB_KB_HYBRID, &h);
    assert_int_equal(n, 1);
    assert_string_equal(h[0].source, "rent.md");
    assert_non_null(strstr(h[0].text, "Bring the lease"));
    sb_kb_hits_free(h, n);
    /* a second connection sees the first one's writes in its vector scan */
    sb_kb *other = open_fake(NULL, "fake-1");
    n = search(other, "annual settlement", SB_KB_VECTOR, &h);
    sb_kb_hits_free(h, n);
    assert_int_equal(add(kb, "tax.md", TAX, &r), 0);
    n = search(other, "annual settlement March June", SB_KB_VECTOR, &h);
    assert_true(n >= 1);
    assert_string_equal(h[0].source, "tax.md");
    sb_kb_hits_free(h, n);
    sb_kb_close(other);
    sb_kb_close(kb);
}

/* The content version moves with every change a search could see, on this
 * connection and on another one, and comes back with the same content. */
static void test_store_version(void **state) {
    (void)state;
    sb_kb *kb = open_fake(NULL, "fake-1"), *other = open_fake(NULL, "fake-1");
    char err[SB_ERR_LEN], v0[65], v1[65], v2[65], v3[65], seen[65];
    sb_kb_add_result r;
    assert_int_equal(sb_kb_version(kb, v0, err), 0);
    assert_int_equal(strlen(v0), 64);
    assert_int_equal(add(kb, "rent.md", RENT, &r), 0);
    assert_int_equal(sb_kb_version(kb, v1, err), 0);
    assert_string_not_equal(v0, v1);
    assert_int_equal(sb_kb_version(other, seen, err), 0);
    assert_string_equal(seen, v1);
    assert_int_equal(add(kb, "rent.md", RENT, &r), 0);                /* unchanged: same version */
    assert_int_equal(sb_kb_version(kb, v2, err), 0);
    assert_string_equal(v2, v1);
    assert_int_equal(add(kb, "rent.md", "# Rent\n\nA permit is needed now.\n", &r), 0);
    assert_int_equal(sb_kb_version(kb, v2, err), 0);
    assert_string_not_equal(v2, v1);
    assert_int_equal(sb_kb_version(other, seen, err), 0);            /* another process's write */
    assert_string_equal(seen, v2);
    assert_int_equal(add(other, "tax.md", TAX, &r), 0);
    assert_int_equal(sb_kb_version(kb, v3, err), 0);
    assert_string_not_equal(v3, v2);
    assert_int_equal(sb_kb_remove(kb, "tax.md", err), 0);
    assert_int_equal(sb_kb_version(kb, v3, err), 0);
    assert_string_equal(v3, v2);                                     /* the same content again */
    sb_kb_close(other);
    sb_kb_close(kb);
}

/* Hybrid: the vectors lead and BM25 breaks their near-ties. Three
 * passages of disjoint words; the query vector is built from theirs to set
 * each cosine, and the query's one word is only in the second passage. A
 * clear vector winner stays first although BM25 ranks it nowhere
 * (reciprocal rank fusion put the BM25 hit first: a first place in one list
 * and a second in the other beat a lone first); two near-equal cosines are
 * ordered by BM25. */
static void fused_first(sb_kb *kb, double ca, double cb, double cc, const char *want) {
    static const char *const texts[] = { "Alpha\nalpha apple", "Beta\nbeta banana", "Gamma\ngamma grape" };
    const double c[] = { ca, cb, cc };
    float q[DIM] = { 0 }, v[DIM];
    char err[SB_ERR_LEN];
    for (int t = 0; t < 3; t++) {
        assert_int_equal(fake_embed(NULL, 2, texts[t], strlen(texts[t]), v, err), 0);
        for (int d = 0; d < DIM; d++) q[d] += (float)c[t] * v[d];
    }
    sb_kb_search_opts o = { .mode = SB_KB_HYBRID, .top_k = 3, .qvec = q };
    sb_kb_hit *h;
    size_t n;
    assert_int_equal(sb_kb_search(kb, "banana", 6, &o, &h, &n, err), 0);
    assert_int_equal(n, 3);
    assert_string_equal(h[0].source, want);
    sb_kb_hits_free(h, n);
}

static void test_store_hybrid_vectors_lead(void **state) {
    (void)state;
    sb_kb *kb = open_fake(NULL, "fake-1");
    sb_kb_add_result r;
    assert_int_equal(add(kb, "a.md", "# Alpha\n\nalpha apple\n", &r), 0);
    assert_int_equal(add(kb, "b.md", "# Beta\n\nbeta banana\n", &r), 0);
    assert_int_equal(add(kb, "c.md", "# Gamma\n\ngamma grape\n", &r), 0);
    fused_first(kb, 0.9, 0.5, 0.1, "a.md");      /* the vectors are sure: BM25 cannot outvote them */
    fused_first(kb, 0.80, 0.79, 0.1, "b.md");    /* they are not: BM25's exact word decides */
    sb_kb_search_opts o = { .mode = SB_KB_HYBRID, .top_k = 3, .bm25_weight = 2 };
    sb_kb_hit *h;
    size_t n;
    char err[SB_ERR_LEN];
    assert_int_equal(sb_kb_search(kb, "banana", 6, &o, &h, &n, err), SB_EINVAL);
    sb_kb_close(kb);
}

/* The rerank's prompt, probability and order (kb/rerank.c). */
static void test_rerank_helpers(void **state) {
    (void)state;
    sb_kb_hit h[3] = { { .section = "Fund > Rent", .text = "Bring the lease.", .rerank = 0.2 },
                       { .section = "", .text = "B", .rerank = 0.9 },
                       { .section = NULL, .text = "C", .rerank = 0.2 } };
    size_t n;
    char *p = sb_kb_rerank_prompt("Q={{query}} P={{passage}} again {{query}} {{x}}", "rent?", 5, &h[0], &n);
    assert_string_equal(p, "Q=rent? P=Fund > Rent\nBring the lease. again rent? {{x}}");
    assert_int_equal(n, strlen(p));
    sb_free(p);
    p = sb_kb_rerank_prompt(NULL, "q", 1, &h[1], NULL);
    assert_non_null(strstr(p, "Passage: B\nQuestion: q\n"));
    sb_free(p);
    assert_true(fabs(sb_kb_rerank_prob(log(0.75), log(0.25)) - 0.75) < 1e-12);
    assert_true(fabs(sb_kb_rerank_prob(-1000, -1000) - 0.5) < 1e-12);   /* no underflow */
    sb_kb_rerank_sort(h, 3);
    assert_string_equal(h[0].text, "B");
    assert_string_equal(h[1].text, "Bring the lease.");                 /* stable among ties */
    assert_string_equal(h[2].text, "C");
    /* Fusion: search ranks 1..4, the reranker puts the last first: it
     * rises to 2nd (ranks 4+1: RRF favours a first place in either list
     * over s2's 2+3), not to 1st (s1: 1+2). */
    sb_kb_hit f[4] = { { .text = "s1", .rerank = 0.5 }, { .text = "s2", .rerank = 0.3 },
                       { .text = "s3", .rerank = 0.2 }, { .text = "s4", .rerank = 0.9 } };
    sb_kb_rerank_fuse(f, 4);
    assert_string_equal(f[0].text, "s1");
    assert_string_equal(f[1].text, "s4");
    assert_string_equal(f[2].text, "s2");
    assert_string_equal(f[3].text, "s3");
}

/* Vectors of another embedder do not mix with the base's. */
static void test_store_embedder_identity(void **state) {
    (void)state;
    sb_kb *kb = open_fake(NULL, "fake-1");
    sb_kb_add_result r;
    assert_int_equal(add(kb, "rent.md", RENT, &r), 0);
    sb_kb_close(kb);
    kb = open_fake(NULL, "fake-2");
    char err[SB_ERR_LEN];
    assert_int_equal(sb_kb_add_text(kb, "tax.md", TAX, strlen(TAX), SB_KB_MARKDOWN, NULL, NULL, &r, err), SB_EINVAL);
    assert_non_null(strstr(err, "fake-1"));
    sb_kb_hit *h;
    size_t n = search(kb, "lease", SB_KB_BM25, &h);             /* BM25 needs no vectors */
    assert_int_equal(n, 1);
    sb_kb_hits_free(h, n);
    sb_kb_search_opts o = { .mode = SB_KB_VECTOR, .top_k = 5 };
    assert_int_equal(sb_kb_search(kb, "lease", 5, &o, &h, &n, err), SB_EINVAL);
    sb_kb_close(kb);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The brute-force scan at the scale: 5,000 chunks x 384 floats
 * (the fake embedder stands in for the encoder, whose cost is measured in
 * docs/KNOWLEDGE.md separately). Prints the search latency per mode. */
static void test_store_latency_5000(void **state) {
    (void)state;
    /* 300 made-up words, 40 per chunk: a term is in ~13 % of the chunks,
     * commoner than most words of real notes (a harder case for BM25). */
    char words[300][16];
    for (int i = 0; i < 300; i++) snprintf(words[i], sizeof words[i], "w%dx", i);
    sb_kb *kb = open_fake(NULL, "fake-1");
    srand(21);
    char *doc = malloc(1 << 20);
    double t0 = sb_now_s();
    for (int d = 0; d < 50; d++) {
        size_t len = 0;
        for (int sct = 0; sct < 100; sct++) {
            len += (size_t)sprintf(doc + len, "## Section %d\n\n", sct);
            for (int w = 0; w < 40; w++) len += (size_t)sprintf(doc + len, "%s ", words[rand() % 300]);
            len += (size_t)sprintf(doc + len, "end.\n\n");
        }
        char name[32];
        snprintf(name, sizeof name, "doc%02d.md", d);
        sb_kb_add_result r;
        assert_int_equal(add(kb, name, doc, &r), 0);
        assert_int_equal(r.n_chunks, 100);
    }
    double ingest = sb_now_s() - t0;
    free(doc);
    enum { N = 100 };
    double ms[3][N];
    float q[DIM];
    char err[SB_ERR_LEN];
    /* the first vector search reads every vector from SQLite */
    assert_int_equal(fake_embed(NULL, 1, "w1x", 3, q, err), 0);
    sb_kb_search_opts first = { .mode = SB_KB_VECTOR, .top_k = 5, .qvec = q };
    sb_kb_hit *fh;
    size_t fn;
    double tf = sb_now_s();
    assert_int_equal(sb_kb_search(kb, "w1x", 3, &first, &fh, &fn, err), 0);
    double first_ms = (sb_now_s() - tf) * 1000;
    sb_kb_hits_free(fh, fn);
    for (int mode = SB_KB_BM25; mode <= SB_KB_HYBRID; mode++) {
        for (int i = 0; i < N; i++) {
            char query[128];
            snprintf(query, sizeof query, "%s %s %s", words[rand() % 300], words[rand() % 300], words[rand() % 300]);
            assert_int_equal(fake_embed(NULL, 1, query, strlen(query), q, err), 0);
            sb_kb_search_opts so = { .mode = (sb_kb_mode)mode, .top_k = 5, .qvec = q };
            sb_kb_hit *h;
            size_t n;
            double t = sb_now_s();
            assert_int_equal(sb_kb_search(kb, query, strlen(query), &so, &h, &n, err), 0);
            ms[mode][i] = (sb_now_s() - t) * 1000;
            assert_int_equal(n, 5);
            sb_kb_hits_free(h, n);
        }
        qsort(ms[mode], N, sizeof ms[mode][0], cmp_double);
    }
    fprintf(stderr, "# kb 5,000 chunks x %d floats (fake embedder): ingest %.2f s; first vector search (reads the "
            "vectors) %.1f ms; then p50/p95 ms: bm25 %.2f/%.2f, vector scan %.2f/%.2f, hybrid %.2f/%.2f\n",
            DIM, ingest, first_ms, ms[0][N / 2], ms[0][N * 95 / 100], ms[1][N / 2], ms[1][N * 95 / 100],
            ms[2][N / 2], ms[2][N * 95 / 100]);
    assert_true(ms[2][N / 2] < 1000);           /* sanity only: machines vary */
    sb_kb_close(kb);
}

/* The router's way: no encoder in-process, the query vector comes from a
 * worker (here: the fake embedder called by the test). */
static void test_store_caller_vector(void **state) {
    (void)state;
    sb_kb *kb = open_fake(NULL, "fake-1");
    sb_kb_add_result r;
    assert_int_equal(add(kb, "rent.md", RENT, &r), 0);
    assert_int_equal(add(kb, "tax.md", TAX, &r), 0);
    sb_kb_close(kb);
    sb_kb_opts o = { .path = g_path };
    char err[SB_ERR_LEN];
    assert_int_equal(sb_kb_open(&o, &kb, err), 0);
    int dim = 0;
    assert_string_equal(sb_kb_embed_id(kb, &dim), "fake-1");
    assert_int_equal(dim, DIM);
    float q[DIM];
    const char *text = "annual settlement March June";
    assert_int_equal(fake_embed(NULL, 1, text, strlen(text), q, err), 0);
    for (int mode = SB_KB_VECTOR; mode <= SB_KB_HYBRID; mode++) {
        sb_kb_search_opts so = { .mode = (sb_kb_mode)mode, .top_k = 2, .qvec = q };
        sb_kb_hit *h;
        size_t n;
        assert_int_equal(sb_kb_search(kb, text, strlen(text), &so, &h, &n, err), 0);
        assert_int_equal(n, 2);
        assert_string_equal(h[0].source, "tax.md");
        assert_true(h[0].vec_rank == 1);
        sb_kb_hits_free(h, n);
    }
    sb_kb_search_opts so = { .mode = SB_KB_VECTOR, .top_k = 2 };   /* no vector, no encoder */
    sb_kb_hit *h;
    size_t n;
    assert_int_equal(sb_kb_search(kb, text, strlen(text), &so, &h, &n, err), SB_EINVAL);
    sb_kb_close(kb);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunk_english),
        cmocka_unit_test(test_chunk_long_sentence_no_mid_word),
        cmocka_unit_test(test_chunk_chinese),
        cmocka_unit_test(test_chunk_overlap),
        cmocka_unit_test(test_chunk_html_markdown),
        cmocka_unit_test(test_chunk_bom_and_cr),
        cmocka_unit_test_setup_teardown(test_store_add_search_remove, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_atomic_replace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_embedder_identity, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_caller_vector, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_version, setup, teardown),
        cmocka_unit_test_setup_teardown(test_store_hybrid_vectors_lead, setup, teardown),
        cmocka_unit_test(test_rerank_helpers),
        cmocka_unit_test_setup_teardown(test_store_latency_5000, setup, teardown),
    };
    return cmocka_run_group_tests_name("kb", tests, NULL, NULL);
}
