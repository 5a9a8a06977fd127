/* cli_kb.c - `switchboard kb`: add, list, remove, stats, search and eval
 * over the knowledge bases of a config (docs/KNOWLEDGE.md); adapt is in
 * kb_adapt.c. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kb/kb_internal.h"
#include "common/sb_cmd.h"
#include "common/sb_config.h"
#include "common/sb_json.h"
#include "common/sb_utf8.h"

#define PROGRESS_EVERY_S 2.0    /* a long file reports this often while it is embedded */

static const char *const usage_text =
    "usage: switchboard kb COMMAND -c CONFIG [--kb NAME] [options] [ARGS]\n"
    "\n"
    "Knowledge bases (the config's `knowledge:` section): the agency's documents,\n"
    "chunked on headings and sentences, indexed for BM25 (SQLite FTS5) and embedded\n"
    "by the encoder model `embed_model`, in one SQLite file (0600).\n"
    "\n"
    "commands:\n"
    "  add FILE...        ingest .txt .md .markdown .html .htm .pdf (pdftotext) files;\n"
    "                     a changed file replaces its chunks in one transaction, an\n"
    "                     unchanged one is skipped. The source name is the base name.\n"
    "                     Only regular files: a FIFO, device or directory is refused,\n"
    "                     and so is a file without one of those extensions\n"
    "      --name SOURCE  the source name (one FILE only)\n"
    "      --follow-symlinks  read through a symbolic link (refused by default: a\n"
    "                     link to /etc/passwd would be indexed and served)\n"
    "      --fts MODE     FTS tokenizer of a NEW base: bigram (default), trigram,\n"
    "                     unicode61 (docs/KNOWLEDGE.md has the measurement)\n"
    "      --quiet        no progress on stderr\n"
    "  list               sources: chunks, tokens, bytes, SHA-256, when added\n"
    "  remove SOURCE...   remove sources and their chunks\n"
    "  stats              documents, chunks, tokens, file size, embedder, tokenizer\n"
    "  search QUERY       the best chunks for a question\n"
    "      --mode M       bm25 | vector | hybrid (default: the vectors lead, BM25\n"
    "                     breaks their near-ties)\n"
    "      -k, --top-k N  hits (default 5, at most 100)\n"
    "      --json         one JSON object per hit\n"
    "      --adapter FILE|none  embed the question through this LoRA adapter (kb\n"
    "                     adapt's output) instead of the base's adapter: (none: no\n"
    "                     adapter); search and eval\n"
    "  eval FILE.tsv      recall@1/3/5, MRR and latency of each mode over labelled\n"
    "                     questions (query<TAB>expected source per line, # comments)\n"
    "      --misses       print the questions each mode missed in its top 5\n"
    "      --rerank-model GGUF  also measure hybrid + rerank: a decoder model judges\n"
    "                     each of the top N passages (label likelihood, in-process)\n"
    "      --rerank-top-n N  passages reranked per question (default 5); every\n"
    "                     list is max(10, N) deep\n"
    "      --rerank-vectors  also measure vectors + rerank (a passage both lists\n"
    "                     hold is judged once)\n"
    "      --dump FILE    one JSON line per question and mode: the list, with each\n"
    "                     judged passage's P(yes) (tools/kb_rerank_sweep.py)\n"
    "      --rerank-prompt T  the prompt, with {{query}} and {{passage}}\n"
    "      --rerank-chat  the prompt as a user message of the model's chat template\n"
    "  adapt              fine-tune the encoder for this base's questions: a local\n"
    "                     model writes questions for each chunk, a LoRA adapter learns\n"
    "                     them (switchboard kb adapt --help)\n"
    "  publish            (cloud side) snapshot the base into --dir DIR, the cloud's\n"
    "                     kb_dir: DIR/NAME.sqlite + DIR/NAME.json (version, SHA-256)\n"
    "      --dir DIR      where `switchboard cloud` serves it from (its kb_dir)\n"
    "  pull               (edge side) fetch the version the cloud publishes, check its\n"
    "                     MAC, SHA-256 and version, and swap it in atomically; the\n"
    "                     cloud and credentials are the config's cache.sync\n"
    "      --url URL --edge-id ID --secret-file F --ca-file F   override cache.sync\n"
    "\n"
    "common options:\n"
    "  -c, --config FILE  the YAML config (required)\n"
    "      --kb NAME      the knowledge base (may be left out when there is one)\n"
    "  -t, --threads N    encoder threads (default: the embed model's threads)\n"
    "  -h, --help         this help\n";

typedef struct {
    const char *config, *kb, *name, *mode;
    const char *fts, *rerank_model, *rerank_prompt;
    const char *dir, *url, *edge_id, *secret_file, *ca_file;
    int threads, top_k, quiet, json, misses, rerank_n, rerank_chat, rerank_vectors, follow_symlinks;
    const char *dump;
    const char *adapter;        /* --adapter FILE|none: instead of the base's adapter: */
} kb_args;

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "kb: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see 'switchboard kb --help')\n");
    return SB_EXIT_CONFIG;
}

/* --------------------------------------------------------- opening a base */

/* The config and the base --kb names (or its only one). */
static int find_kb(const kb_args *a, sb_config **cfg_out, const sb_config_kb **out) {
    char err[SB_ERR_LEN] = "";
    sb_config *cfg = NULL;
    int rc = sb_config_load(a->config, &cfg, err);
    if (rc) { fprintf(stderr, "kb: %s\n", err); return SB_EXIT_CONFIG; }
    const sb_config_kb *k = NULL;
    if (a->kb) k = sb_config_find_kb(cfg, a->kb);
    else if (cfg->n_kbs == 1) k = &cfg->kbs[0];
    if (!k) {
        fprintf(stderr, "kb: %s: %s (knowledge bases:", a->config,
                a->kb ? "no such knowledge base" : "give --kb NAME");
        for (size_t i = 0; i < cfg->n_kbs; i++) fprintf(stderr, " %s", cfg->kbs[i].name);
        fprintf(stderr, "%s)%s%s\n", cfg->n_kbs ? "" : " none", a->kb ? ": " : "", a->kb ? a->kb : "");
        sb_config_free(cfg);
        return SB_EXIT_CONFIG;
    }
    *cfg_out = cfg;
    *out = k;
    return 0;
}

static int open_kb(const kb_args *a, int create, int need_encoder, sb_kb **out) {
    char err[SB_ERR_LEN] = "";
    sb_config *cfg = NULL;
    const sb_config_kb *k = NULL;
    int rc = find_kb(a, &cfg, &k);
    if (rc) return rc;
    const sb_config_model *m = sb_config_find_model(cfg, k->embed_model);
    int fts = a->fts ? kb_fts_parse(a->fts) : SB_KB_FTS_BIGRAM;
    if (fts < 0) { sb_config_free(cfg); return usage_error("unknown --fts '%s' (bigram, trigram, unicode61)", a->fts); }
    const char *adapter = a->adapter ? (strcmp(a->adapter, "none") ? a->adapter : NULL) : k->adapter_path;
    sb_kb_opts o = { .path = k->path, .create = create, .encoder_gguf = need_encoder ? m->gguf : NULL,
                     .threads = a->threads ? a->threads : m->threads, .chunk_tokens = k->chunk_tokens,
                     .overlap = k->overlap, .fts = (sb_kb_fts)fts, .follow_symlinks = a->follow_symlinks,
                     .query_adapter = need_encoder ? adapter : NULL };
    rc = sb_kb_open(&o, out, err);
    if (rc) {
        fprintf(stderr, "kb %s: %s%s\n", k->name, err,
                rc == SB_EUNSUP ? " (knowledge.*.embed_model must name an encoder such as multilingual-e5-small)" : "");
        rc = rc == SB_ENOTFOUND || rc == SB_EUNSUP || rc == SB_EFORMAT ? SB_EXIT_CONFIG : SB_EXIT_FAIL;
    }
    sb_config_free(cfg);
    return rc ? rc : SB_EXIT_OK;
}

/* ------------------------------------------------------------------ add */

/* File and source names come from outside (a file name may hold an escape
 * sequence or a newline): printed escaped, one line each, never raw. */
static void print_name(FILE *f, const char *fmt, const char *name) {
    char *e = sb_utf8_escape_controls(name);
    fprintf(f, fmt, e ? e : "(out of memory)");
    sb_free(e);
}

typedef struct { double last; int quiet; } progress_state;

static void on_progress(void *ud, const char *source, size_t done, size_t total) {
    progress_state *p = ud;
    double now = sb_now_s();
    if (p->quiet || done == total || now - p->last < PROGRESS_EVERY_S) return;
    p->last = now;
    print_name(stderr, "        %s: ", source);
    fprintf(stderr, "%zu/%zu chunks embedded\n", done, total);
}

static int cmd_add(const kb_args *a, int n, char **files) {
    if (!n) return usage_error("%sadd: give FILE arguments", "");
    if (a->name && n > 1) return usage_error("%sadd: --name names one FILE only", "");
    sb_kb *kb;
    int rc = open_kb(a, 1, 1, &kb);
    if (rc) return rc;
    char err[SB_ERR_LEN];
    int failed = 0;
    size_t chunks = 0;
    double t0 = sb_now_s();
    for (int i = 0; i < n; i++) {
        progress_state p = { sb_now_s(), a->quiet };
        sb_kb_add_result r;
        double ts = sb_now_s();
        if (sb_kb_add_file(kb, files[i], a->name, on_progress, &p, &r, err)) {
            print_name(stderr, "kb add: %s\n", err);          /* it names the file */
            failed++;
            continue;
        }
        chunks += r.n_chunks;
        if (a->quiet) continue;
        fprintf(stderr, "[%3d/%3d] ", i + 1, n);
        print_name(stderr, "%s: ", files[i]);
        if (r.unchanged) fprintf(stderr, "unchanged\n");
        else fprintf(stderr, "%zu chunks, %zu tokens, %.2f s (embed %.2f s, store %.3f s)%s%s\n", r.n_chunks,
                     r.n_tokens, sb_now_s() - ts, r.embed_s, r.store_s, r.replaced ? ", replaced" : "",
                     r.n_chunks ? "" : " - no text found");
    }
    if (!a->quiet)
        fprintf(stderr, "kb add: %d files, %zu chunks written, %.1f s%s\n", n - failed, chunks, sb_now_s() - t0,
                failed ? "; some files failed (above)" : "");
    sb_kb_close(kb);
    return failed ? SB_EXIT_FAIL : SB_EXIT_OK;
}

/* ------------------------------------------------------ list/remove/stats */

static int cmd_list(const kb_args *a) {
    sb_kb *kb;
    int rc = open_kb(a, 0, 0, &kb);
    if (rc) return rc;
    sb_kb_doc *d;
    size_t n;
    char err[SB_ERR_LEN];
    if ((rc = sb_kb_list(kb, &d, &n, err))) {
        fprintf(stderr, "kb list: %s\n", err);
        sb_kb_close(kb);
        return SB_EXIT_FAIL;
    }
    printf("%-40s %7s %8s %9s  %-12s %s\n", "source", "chunks", "tokens", "bytes", "sha256", "added (unix)");
    for (size_t i = 0; i < n; i++) {
        print_name(stdout, "%-40s", d[i].source);
        printf(" %7d %8d %9lld  %.12s %lld\n", d[i].n_chunks, d[i].n_tokens, (long long)d[i].bytes, d[i].sha256,
               (long long)d[i].added_s);
    }
    sb_kb_docs_free(d, n);
    sb_kb_close(kb);
    return SB_EXIT_OK;
}

static int cmd_remove(const kb_args *a, int n, char **sources) {
    if (!n) return usage_error("%sremove: give SOURCE arguments (names as `kb list` shows them)", "");
    sb_kb *kb;
    int rc = open_kb(a, 0, 0, &kb), failed = 0;
    if (rc) return rc;
    char err[SB_ERR_LEN];
    for (int i = 0; i < n; i++) {
        if (sb_kb_remove(kb, sources[i], err)) { print_name(stderr, "kb remove: %s\n", err); failed++; }
        else if (!a->quiet) print_name(stderr, "kb remove: %s removed\n", sources[i]);
    }
    sb_kb_close(kb);
    return failed ? SB_EXIT_FAIL : SB_EXIT_OK;
}

static int cmd_stats(const kb_args *a) {
    sb_kb *kb;
    int rc = open_kb(a, 0, 0, &kb);
    if (rc) return rc;
    sb_kb_stats st;
    char err[SB_ERR_LEN];
    if ((rc = sb_kb_stats_get(kb, &st, err))) fprintf(stderr, "kb stats: %s\n", err);
    else
        printf("documents  %lld\nchunks     %lld\ntokens     %lld\nfile       %.2f MiB\ndimensions %d\n"
               "embedder   %s\nfts        %s\n", (long long)st.n_docs, (long long)st.n_chunks, (long long)st.n_tokens,
               st.file_bytes / 1048576.0, st.dim, st.embed_id, st.fts);
    sb_kb_close(kb);
    return rc ? SB_EXIT_FAIL : SB_EXIT_OK;
}

/* ---------------------------------------------------------------- search */

static void print_hit(const sb_kb_hit *h, int rank, int json) {
    if (json) {
        sb_jw w;
        sb_jw_init(&w);
        sb_jw_obj(&w);
        sb_jw_key(&w, "rank"); sb_jw_int(&w, rank);
        sb_jw_key(&w, "score"); sb_jw_num(&w, h->score);
        sb_jw_key(&w, "source"); sb_jw_str(&w, h->source);
        sb_jw_key(&w, "section"); sb_jw_str(&w, h->section);
        sb_jw_key(&w, "position"); sb_jw_int(&w, h->position);
        sb_jw_key(&w, "bm25_rank"); sb_jw_int(&w, h->bm25_rank);
        sb_jw_key(&w, "vector_rank"); sb_jw_int(&w, h->vec_rank);
        sb_jw_key(&w, "text"); sb_jw_str(&w, h->text);
        sb_jw_obj_end(&w);
        if (!w.oom) puts(w.p);
        sb_jw_free(&w);
        return;
    }
    printf("%d. %.4f  ", rank, h->score);
    print_name(stdout, "%s", h->source);
    print_name(stdout, *h->section ? " > %s" : "%s", h->section);
    printf("  #%d\n", h->position);
    for (const char *line = h->text;;) {                   /* the text's lines, each escaped */
        size_t len = strcspn(line, "\n");
        char *l = strndup(line, len);
        print_name(stdout, "   %s\n", l ? l : "(out of memory)");
        free(l);
        if (!line[len]) break;
        line += len + 1;
    }
}

static int cmd_search(const kb_args *a, int n, char **words) {
    if (n != 1) return usage_error("%ssearch: give one QUERY argument (quote it)", "");
    int mode = a->mode ? sb_kb_mode_parse(a->mode) : SB_KB_HYBRID;
    if (mode < 0) return usage_error("unknown --mode '%s' (bm25, vector, hybrid)", a->mode);
    sb_kb *kb;
    int rc = open_kb(a, 0, mode != SB_KB_BM25, &kb);
    if (rc) return rc;
    sb_kb_search_opts o = { .mode = (sb_kb_mode)mode, .top_k = a->top_k };
    sb_kb_hit *h;
    size_t nh;
    char err[SB_ERR_LEN];
    double t0 = sb_now_s();
    if ((rc = sb_kb_search(kb, words[0], strlen(words[0]), &o, &h, &nh, err))) {
        fprintf(stderr, "kb search: %s\n", err);
        sb_kb_close(kb);
        return SB_EXIT_FAIL;
    }
    double ms = (sb_now_s() - t0) * 1000;
    for (size_t i = 0; i < nh; i++) print_hit(&h[i], (int)i + 1, a->json);
    if (!a->quiet) fprintf(stderr, "kb search: %zu hits (%s), %.1f ms\n", nh, sb_kb_mode_name(o.mode), ms);
    sb_kb_hits_free(h, nh);
    sb_kb_close(kb);
    return SB_EXIT_OK;
}

/* ------------------------------------------------------------------ eval */

static int cmd_eval(const kb_args *a, int n, char **files) {
    if (n != 1) return usage_error("%seval: give one FILE.tsv (query<TAB>expected source per line)", "");
    sb_kb *kb;
    int rc = open_kb(a, 0, 1, &kb);
    if (rc) return rc;
    kb_eval_opts eo = { .misses = a->misses, .rerank_n = a->rerank_n, .rerank_prompt = a->rerank_prompt,
                        .rerank_vectors = a->rerank_vectors };
    char err[SB_ERR_LEN];
    if (a->dump && !(eo.dump = fopen(a->dump, "w"))) {
        fprintf(stderr, "kb eval: --dump %s: %s\n", a->dump, strerror(errno));
        rc = SB_EXIT_FAIL;
    }
    if (!rc && a->rerank_model && sb_kb_reranker_open(a->rerank_model, a->threads ? a->threads : 2, a->rerank_chat, &eo.reranker, err)) {
        fprintf(stderr, "kb eval: %s\n", err);
        rc = SB_EXIT_FAIL;
    }
    if (!rc) rc = kb_eval_run(kb, files[0], &eo);
    sb_kb_reranker_close(eo.reranker);
    if (eo.dump && fclose(eo.dump) && !rc) {
        fprintf(stderr, "kb eval: --dump %s: %s\n", a->dump, strerror(errno));
        rc = SB_EXIT_FAIL;
    }
    sb_kb_close(kb);
    return rc;
}

/* ------------------------------------------------------- publish, pull */

static int kb_cmd_publish(const kb_args *a) {
    if (!a->dir) return usage_error("%spublish: --dir DIR is required (the cloud's kb_dir)", "");
    sb_kb *kb;
    int rc = open_kb(a, 0, 0, &kb);
    if (rc) return rc;
    sb_config *cfg = NULL;
    const sb_config_kb *k = NULL;
    if ((rc = find_kb(a, &cfg, &k))) { sb_kb_close(kb); return rc; }
    char err[SB_ERR_LEN];
    sb_kb_published p;
    rc = sb_kb_publish(kb, a->dir, k->name, &p, err);
    if (rc) fprintf(stderr, "kb publish %s: %s\n", k->name, err);
    else printf("published %s: version %.16s, %lld bytes, sha256 %s, in %s\n", k->name, p.version,
                (long long)p.bytes, p.sha256, a->dir);
    sb_config_free(cfg);
    sb_kb_close(kb);
    return rc ? SB_EXIT_FAIL : SB_EXIT_OK;
}

static int kb_cmd_pull(const kb_args *a) {
    sb_config *cfg = NULL;
    const sb_config_kb *k = NULL;
    int rc = find_kb(a, &cfg, &k);
    if (rc) return rc;
    sb_cloud_peer peer = { .url = a->url ? a->url : cfg->cache.sync.url,
                           .edge_id = a->edge_id ? a->edge_id : cfg->cache.sync.edge_id,
                           .ca_file = a->ca_file ? a->ca_file : cfg->cache.sync.ca_file };
    const char *sf = a->secret_file ? a->secret_file : cfg->cache.sync.secret_file;
    char err[SB_ERR_LEN], *secret = NULL;
    size_t n = 0;
    if (!peer.url || !peer.edge_id || !sf) {
        sb_config_free(cfg);
        return usage_error("%spull: no cloud: set cache.sync (url, edge_id, secret_file) or give --url, --edge-id "
                           "and --secret-file", "");
    }
    if (sb_read_file(sf, 4096, &secret, &n, err)) {
        fprintf(stderr, "kb pull: secret file: %s\n", err);
        sb_config_free(cfg);
        return SB_EXIT_CONFIG;
    }
    while (n && (secret[n - 1] == '\n' || secret[n - 1] == '\r' || secret[n - 1] == ' ')) secret[--n] = '\0';
    peer.secret = secret;
    sb_kb_pull_result r;
    rc = sb_kb_pull(k->path, k->name, &peer, &r, err);
    if (rc) fprintf(stderr, "kb pull %s: %s\n", k->name, err);
    else if (r.unchanged) printf("%s: up to date (version %.16s)\n", k->name, r.got.version);
    else printf("%s: pulled version %.16s (%lld bytes) in %.2f s, swapped in %.3f s\n", k->name, r.got.version,
                (long long)r.got.bytes, r.fetch_s, r.swap_s);
    memset(secret, 0, n);
    sb_free(secret);
    sb_config_free(cfg);
    return rc ? SB_EXIT_FAIL : SB_EXIT_OK;
}

int sb_cmd_kb(int argc, char **argv) {
    enum { OPT_KB = 256, OPT_NAME, OPT_FTS, OPT_QUIET, OPT_MODE, OPT_JSON, OPT_MISSES, OPT_RR_MODEL, OPT_RR_N, OPT_RR_PROMPT,
           OPT_DIR, OPT_URL, OPT_EDGE, OPT_SECRET, OPT_CA, OPT_RR_CHAT, OPT_RR_VEC, OPT_DUMP, OPT_FOLLOW, OPT_ADAPTER };
    static const struct option opts[] = {
        { "config", required_argument, NULL, 'c' }, { "kb", required_argument, NULL, OPT_KB },
        { "threads", required_argument, NULL, 't' }, { "name", required_argument, NULL, OPT_NAME },
        { "fts", required_argument, NULL, OPT_FTS }, { "quiet", no_argument, NULL, OPT_QUIET },
        { "mode", required_argument, NULL, OPT_MODE }, { "top-k", required_argument, NULL, 'k' },
        { "json", no_argument, NULL, OPT_JSON }, { "misses", no_argument, NULL, OPT_MISSES },
        { "rerank-model", required_argument, NULL, OPT_RR_MODEL }, { "rerank-top-n", required_argument, NULL, OPT_RR_N },
        { "rerank-prompt", required_argument, NULL, OPT_RR_PROMPT },
        { "dir", required_argument, NULL, OPT_DIR }, { "url", required_argument, NULL, OPT_URL },
        { "edge-id", required_argument, NULL, OPT_EDGE }, { "secret-file", required_argument, NULL, OPT_SECRET },
        { "ca-file", required_argument, NULL, OPT_CA }, { "rerank-chat", no_argument, NULL, OPT_RR_CHAT },
        { "rerank-vectors", no_argument, NULL, OPT_RR_VEC }, { "dump", required_argument, NULL, OPT_DUMP },
        { "follow-symlinks", no_argument, NULL, OPT_FOLLOW }, { "adapter", required_argument, NULL, OPT_ADAPTER },
        { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 },
    };
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(usage_text, argc < 2 ? stderr : stdout);
        return argc < 2 ? SB_EXIT_CONFIG : SB_EXIT_OK;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "adapt")) return kb_cmd_adapt(argc - 1, argv + 1);     /* options of its own */
    kb_args a = { .top_k = 5, .rerank_n = 5 };
    int64_t v;
    optind = 1;
    int c;
    while ((c = getopt_long(argc - 1, argv + 1, "c:t:k:h", opts, NULL)) != -1) {
        switch (c) {
        case 'c': a.config = optarg; break;
        case OPT_KB: a.kb = optarg; break;
        case 't': if (sb_opt_int("kb", "--threads", optarg, 1, 256, &v)) return SB_EXIT_CONFIG; a.threads = (int)v; break;
        case 'k': if (sb_opt_int("kb", "--top-k", optarg, 1, SB_KB_MAX_TOP_K, &v)) return SB_EXIT_CONFIG; a.top_k = (int)v; break;
        case OPT_NAME: a.name = optarg; break;
        case OPT_FTS: a.fts = optarg; break;
        case OPT_QUIET: a.quiet = 1; break;
        case OPT_MODE: a.mode = optarg; break;
        case OPT_JSON: a.json = 1; break;
        case OPT_MISSES: a.misses = 1; break;
        case OPT_RR_MODEL: a.rerank_model = optarg; break;
        case OPT_RR_PROMPT: a.rerank_prompt = optarg; break;
        case OPT_RR_CHAT: a.rerank_chat = 1; break;
        case OPT_RR_VEC: a.rerank_vectors = 1; break;
        case OPT_DUMP: a.dump = optarg; break;
        case OPT_FOLLOW: a.follow_symlinks = 1; break;
        case OPT_ADAPTER: a.adapter = optarg; break;
        case OPT_DIR: a.dir = optarg; break;
        case OPT_URL: a.url = optarg; break;
        case OPT_EDGE: a.edge_id = optarg; break;
        case OPT_SECRET: a.secret_file = optarg; break;
        case OPT_CA: a.ca_file = optarg; break;
        case OPT_RR_N: if (sb_opt_int("kb", "--rerank-top-n", optarg, 1, SB_KB_MAX_TOP_K, &v)) return SB_EXIT_CONFIG; a.rerank_n = (int)v; break;
        case 'h': fputs(usage_text, stdout); return SB_EXIT_OK;
        default: return usage_error("%sbad option", "");
        }
    }
    int rest = argc - 1 - optind;
    char **args = argv + 1 + optind;
    static const char *const cmds[] = { "add", "list", "remove", "stats", "search", "eval", "publish", "pull", NULL };
    bool known = false;
    for (const char *const *k = cmds; *k; k++) known |= !strcmp(*k, cmd);
    if (!known)
        return usage_error("unknown command '%s' (add, list, remove, stats, search, eval, adapt, publish, pull)", cmd);
    if (!a.config) return usage_error("%s-c CONFIG is required", "");
    if (!strcmp(cmd, "add")) return cmd_add(&a, rest, args);
    if (!strcmp(cmd, "remove")) return cmd_remove(&a, rest, args);
    if (!strcmp(cmd, "search")) return cmd_search(&a, rest, args);
    if (!strcmp(cmd, "eval")) return cmd_eval(&a, rest, args);
    if (rest) return usage_error("unexpected argument '%s'", args[0]);
    if (!strcmp(cmd, "publish")) return kb_cmd_publish(&a);
    if (!strcmp(cmd, "pull")) return kb_cmd_pull(&a);
    return !strcmp(cmd, "list") ? cmd_list(&a) : cmd_stats(&a);
}
