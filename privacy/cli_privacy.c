/* cli_privacy.c - `switchboard privacy`: detect and replace personal data
 * in a text, and measure the detectors on a labelled set (docs/PRIVACY.md). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sb_cmd.h"
#include "common/sb_common.h"
#include "common/sb_json.h"
#include "privacy/privacy_cli.h"

#define MAX_INPUT (64u << 20)

static void usage(FILE *f) {
    fprintf(f,
        "usage: switchboard privacy detect [options] [TEXT | -]\n"
        "       switchboard privacy erase (--session ID | --call ID | --value V) -c CONFIG  (see erase --help)\n"
        "       switchboard privacy eval [options] FILE.tsv\n"
        "\n"
        "Callers' personal data: resident IDs, mobiles, landlines, bank cards and\n"
        "accounts, e-mail, passports, vehicle plates - also as ASR writes them\n"
        "(Chinese numerals, English digit words, spaced digits). docs/PRIVACY.md.\n"
        "\n"
        "detect: each line of TEXT (or of stdin, for - or no TEXT) with its\n"
        "identifiers replaced, one output line per input line.\n"
        "  --mode M            pseudonymize (default: typed placeholders <PHONE_1>,\n"
        "                      one per value), mask (138****5678) or tag (<PHONE>)\n"
        "  --json              one JSON object a line: text, spans (type, byte start\n"
        "                      and end, normalised value) and, pseudonymized, the\n"
        "                      table of placeholders and values\n"
        "eval: recall, false positives and latency over KIND<TAB>TEXT<TAB>SPANS lines\n"
        "(tests/data/pii/, tools/gen_pii.py). A mention is found when a detection of\n"
        "its type overlaps it; a negative line with any detection is a false positive;\n"
        "latency is one pseudonymization (detect + replace) of a line.\n"
        "  --repeat N          time every line N times (default 3)\n"
        "  --misses            print every missed mention and false positive\n"
        "  --min-recall X      exit 3 when recall is below X (0-1)\n"
        "  --max-fp X          exit 3 when the false-positive rate is above X (0-1)\n"
        "  --json              the report as one JSON object\n"
        "common options:\n"
        "  --types LIST        the built-in detectors to run, comma-separated\n"
        "                      (ID,PHONE,TEL,CARD,EMAIL,PASSPORT,PLATE; default all)\n"
        "  --pattern NAME=RE   an operator's pattern: POSIX extended regex over the text\n"
        "  --digit-pattern NAME=RE  a regex the whole digit string of a number must\n"
        "                      match (spoken and spaced forms included)\n"
        "\n"
        "Exit: 0, 1 runtime error, 2 usage or input error, 3 below a --min/--max bar.\n");
}

static int parse_types(const char *list, unsigned *types) {
    *types = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int t = sb_pii_type_parse(tok);
        if (t < 0) {
            fprintf(stderr, "privacy: --types: unknown type '%s' (ID,PHONE,TEL,CARD,EMAIL,PASSPORT,PLATE)\n", tok);
            return -1;
        }
        *types |= 1u << t;
    }
    return 0;
}

static int add_pattern(sb_privacy *p, const char *arg, int on) {
    const char *eq = strchr(arg, '=');
    char name[64], err[SB_ERR_LEN];
    if (!eq || (size_t)(eq - arg) >= sizeof name) {
        fprintf(stderr, "privacy: %s expects NAME=REGEX, got '%s'\n", on ? "--digit-pattern" : "--pattern", arg);
        return -1;
    }
    memcpy(name, arg, (size_t)(eq - arg));
    name[eq - arg] = 0;
    if (sb_privacy_add_pattern(p, name, eq + 1, on, err)) {
        fprintf(stderr, "privacy: %s\n", err);
        return -1;
    }
    return 0;
}

static void json_line(const sb_privacy *p, sb_jw *w, const char *redacted, size_t n,
                      const sb_pii_spans *s, const sb_pii_table *t) {
    sb_jw_reset(w);
    sb_jw_obj(w);
    sb_jw_key(w, "text"), sb_jw_strn(w, redacted, n);
    sb_jw_key(w, "spans"), sb_jw_arr(w);
    for (size_t i = 0; i < s->n; i++) {
        const sb_pii_span *sp = &s->v[i];
        sb_jw_obj(w);
        sb_jw_key(w, "type");
        sb_jw_str(w, sp->type == SB_PII_CUSTOM ? sb_privacy_pattern_name(p, sp->pattern) : sb_pii_type_name(sp->type));
        sb_jw_key(w, "start"), sb_jw_int(w, (int64_t)sp->start);
        sb_jw_key(w, "end"), sb_jw_int(w, (int64_t)sp->end);
        sb_jw_key(w, "value"), sb_jw_str(w, sp->value);
        sb_jw_obj_end(w);
    }
    sb_jw_arr_end(w);
    if (t) {
        sb_jw_key(w, "table"), sb_jw_arr(w);
        for (size_t i = 0; i < t->n; i++) {
            sb_jw_obj(w);
            sb_jw_key(w, "placeholder"), sb_jw_str(w, t->v[i].placeholder);
            sb_jw_key(w, "value"), sb_jw_str(w, t->v[i].value);
            sb_jw_obj_end(w);
        }
        sb_jw_arr_end(w);
    }
    sb_jw_obj_end(w);
}

/* One line: replaced and printed. 0, or SB_ENOMEM / SB_EIO. */
static int detect_line(const sb_privacy *p, const char *line, size_t len, sb_pii_mode mode, bool json,
                       sb_pii_spans *spans, sb_jw *w) {
    sb_pii_table table = {0};
    char *out;
    size_t n;
    int rc = sb_privacy_redact(p, line, len, mode, &table, spans, &out, &n);
    if (rc) return rc;
    if (json) {
        json_line(p, w, out, n, spans, mode == SB_PII_PSEUDONYMIZE ? &table : NULL);
        rc = w->oom ? SB_ENOMEM : 0;
        if (!rc && (fwrite(w->p, 1, w->len, stdout) != w->len || fputc('\n', stdout) == EOF)) rc = SB_EIO;
    } else if (fwrite(out, 1, n, stdout) != n || fputc('\n', stdout) == EOF) {
        rc = SB_EIO;
    }
    sb_free(out);
    sb_pii_table_free(&table);
    return rc;
}

static int cmd_detect(sb_privacy *p, sb_pii_mode mode, bool json, const char *arg) {
    char *buf = NULL, err[SB_ERR_LEN];
    size_t len;
    if (!arg || !strcmp(arg, "-")) {
        if (sb_read_stream(stdin, "stdin", MAX_INPUT, &buf, &len, err)) {
            fprintf(stderr, "privacy: %s\n", err);
            return SB_EXIT_FAIL;
        }
    } else {
        buf = sb_strdup(arg);
        if (!buf) return SB_EXIT_FAIL;
        len = strlen(arg);
    }
    sb_pii_spans spans = {0};
    sb_jw w;
    sb_jw_init(&w);
    int rc = 0;
    for (size_t at = 0; at < len && rc == 0;) {
        const char *nl = memchr(buf + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - buf) : len;
        rc = detect_line(p, buf + at, end - at, mode, json, &spans, &w);
        at = end + 1;
    }
    if (rc) fprintf(stderr, "privacy: %s\n", sb_strerror(rc));
    sb_jw_free(&w);
    sb_pii_spans_free(&spans);
    sb_free(buf);
    return rc ? SB_EXIT_FAIL : SB_EXIT_OK;
}

int sb_cmd_privacy(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? SB_EXIT_CONFIG : SB_EXIT_OK;
    }
    const char *sub = argv[1];
    if (strcmp(sub, "detect") && strcmp(sub, "eval")) {
        fprintf(stderr, "privacy: unknown command '%s' (detect, eval, erase)\n", sub);
        return SB_EXIT_CONFIG;
    }
    static const struct option opts[] = {
        {"mode", 1, 0, 'm'}, {"json", 0, 0, 'j'}, {"types", 1, 0, 't'}, {"pattern", 1, 0, 'p'},
        {"digit-pattern", 1, 0, 'd'}, {"repeat", 1, 0, 'r'}, {"misses", 0, 0, 'M'},
        {"min-recall", 1, 0, 'R'}, {"max-fp", 1, 0, 'F'}, {"help", 0, 0, 'h'}, {0, 0, 0, 0},
    };
    sb_privacy *p = NULL;
    char err[SB_ERR_LEN];
    if (sb_privacy_new(SB_PII_ALL, &p, err)) { fprintf(stderr, "privacy: %s\n", err); return SB_EXIT_FAIL; }
    pii_eval_opts eo = {.repeat = 3, .min_recall = -1, .max_fp = -1};
    int mode = SB_PII_PSEUDONYMIZE, rc = SB_EXIT_CONFIG;
    bool json = false;
    unsigned types = SB_PII_ALL;
    int64_t v;
    optind = 2;
    opterr = 0;
    for (int ch; (ch = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
        switch (ch) {
        case 'm':
            if ((mode = sb_pii_mode_parse(optarg)) < 0) {
                fprintf(stderr, "privacy: --mode is pseudonymize, mask or tag, got '%s'\n", optarg);
                goto out;
            }
            break;
        case 'j': json = true; break;
        case 't': if (parse_types(optarg, &types)) goto out; break;
        case 'p': if (add_pattern(p, optarg, SB_PII_ON_TEXT)) goto out; break;
        case 'd': if (add_pattern(p, optarg, SB_PII_ON_DIGITS)) goto out; break;
        case 'r':
            if (sb_opt_int("privacy", "--repeat", optarg, 1, 1000, &v)) goto out;
            eo.repeat = (int)v;
            break;
        case 'M': eo.misses = true; break;
        case 'R': case 'F': {
            char *end;
            double x = strtod(optarg, &end);
            if (*end || end == optarg || x < 0 || x > 1) {
                fprintf(stderr, "privacy: %s expects a number in [0, 1], got '%s'\n",
                        ch == 'R' ? "--min-recall" : "--max-fp", optarg);
                goto out;
            }
            *(ch == 'R' ? &eo.min_recall : &eo.max_fp) = x;
            break;
        }
        case 'h': usage(stdout); rc = SB_EXIT_OK; goto out;
        default:
            fprintf(stderr, "privacy: unknown or incomplete option '%s' (see --help)\n", argv[optind - 1]);
            goto out;
        }
    }
    p->types = types;
    if (optind + 1 < argc) { fprintf(stderr, "privacy: one TEXT or FILE only (quote the text)\n"); goto out; }
    const char *arg = optind < argc ? argv[optind] : NULL;
    if (!strcmp(sub, "detect")) {
        rc = cmd_detect(p, (sb_pii_mode)mode, json, arg);
    } else if (!arg) {
        fprintf(stderr, "privacy: eval needs FILE.tsv\n");
    } else {
        eo.json = json;
        rc = pii_eval(p, arg, &eo);
    }
out:
    sb_privacy_free(p);
    return rc;
}
