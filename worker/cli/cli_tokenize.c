/* cli_tokenize.c - `switchboard tokenize`: the tokenizer from the shell.
 * Only the GGUF's tokenizer keys are read (no weights), so vocab-only files
 * such as llama.cpp's ggml-vocab-*.gguf work too. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sb_cmd.h"
#include "common/sb_common.h"
#include "worker/gguf/sb_gguf.h"
#include "worker/tokenizer/sb_vocab.h"

static void usage(FILE *f) {
    fprintf(f,
        "usage: switchboard tokenize -m MODEL.gguf (-p TEXT | -f FILE) [options]\n"
        "\n"
        "Print the token ids llama.cpp would give TEXT, space-separated on one line.\n"
        "BOS is added when the model asks for it and special tokens (<|eot_id|>,\n"
        "</s>...) in the text are parsed, like llama.cpp's llama-tokenize.\n"
        "\n"
        "  -m, --model FILE   GGUF model or vocab-only file\n"
        "  -p, --prompt TEXT  text to tokenize\n"
        "  -f, --file FILE    read the text from FILE (bytes, as is)\n"
        "      --no-bos       do not add BOS/EOS even if the model asks for them\n"
        "      --no-special   treat control-token texts as plain text\n"
        "      --pieces       one line per token: id, tab, its text as rendered\n"
        "  -h, --help         this help\n");
}

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    char *buf = sb_malloc(cap);
    for (size_t got; buf && (got = fread(buf + len, 1, cap - len, f)) > 0;) {
        len += got;
        if (len == cap) {
            char *p = sb_realloc(buf, cap *= 2);
            if (!p) { sb_free(buf); buf = NULL; }
            else buf = p;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) { sb_free(buf); return NULL; }
    *n = len;
    return buf;
}

/* A piece, with bytes that would break the line shown as \xNN. */
static void print_piece(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c < 0x20 || c == 0x7F) printf("\\x%02x", c);
        else putchar(c);
    }
}

int sb_cmd_tokenize(int argc, char **argv) {
    enum { OPT_NO_BOS = 256, OPT_NO_SPECIAL, OPT_PIECES };
    static const struct option opts[] = {
        { "model", required_argument, NULL, 'm' }, { "prompt", required_argument, NULL, 'p' },
        { "file", required_argument, NULL, 'f' },  { "no-bos", no_argument, NULL, OPT_NO_BOS },
        { "no-special", no_argument, NULL, OPT_NO_SPECIAL }, { "pieces", no_argument, NULL, OPT_PIECES },
        { "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 },
    };
    const char *model = NULL, *prompt = NULL, *file = NULL;
    int add_bos = 1, special = 1, pieces = 0, c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:p:f:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'p': prompt = optarg; break;
        case 'f': file = optarg; break;
        case OPT_NO_BOS: add_bos = 0; break;
        case OPT_NO_SPECIAL: special = 0; break;
        case OPT_PIECES: pieces = 1; break;
        case 'h': usage(stdout); return SB_EXIT_OK;
        default: usage(stderr); return SB_EXIT_CONFIG;
        }
    }
    if (!model || (!prompt == !file) || optind != argc) { usage(stderr); return SB_EXIT_CONFIG; }

    char err[SB_ERR_LEN] = "";
    sb_gguf *g = NULL;
    sb_vocab *v = NULL;
    char *text = NULL;
    size_t len = 0;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = SB_EXIT_FAIL;
    if (sb_gguf_open(model, &g, err) || sb_vocab_load(g, &v, err)) {
        fprintf(stderr, "switchboard tokenize: %s\n", err);
        rc = SB_EXIT_CONFIG;
        goto out;
    }
    if (file) {
        if (!(text = read_file(file, &len))) { fprintf(stderr, "switchboard tokenize: cannot read %s\n", file); goto out; }
    } else {
        len = strlen(prompt);
    }
    if (sb_tokenize(v, file ? text : prompt, len, add_bos, special, &ids, &n, err)) {
        fprintf(stderr, "switchboard tokenize: %s\n", err);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (!pieces) { printf(i ? " %d" : "%d", ids[i]); continue; }
        char buf[256];
        int pn = sb_token_to_piece(v, ids[i], buf, sizeof buf, 1);
        printf("%d\t", ids[i]);
        print_piece(buf, (size_t)SB_MIN(pn, (int)sizeof buf));
        putchar('\n');
    }
    if (!pieces) putchar('\n');
    rc = SB_EXIT_OK;
out:
    sb_free(ids);
    sb_free(text);
    sb_vocab_free(v);
    sb_gguf_close(g);
    return rc;
}
