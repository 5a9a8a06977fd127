/* replay.c - a main() for the fuzz targets without libFuzzer: runs
 * LLVMFuzzerTestOneInput once on each file named on the command line (a
 * directory: on each file in it). `make test` links every target with it and
 * tests/it_fuzz_seeds.sh replays the seeds, so the targets build with the
 * project's compiler and flags, and every seed (which includes each finding's
 * reproducer) is checked in the normal suite, with no clang needed.
 * A target signals a broken invariant with __builtin_trap: the run dies.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); return -1; }
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap *= 2);
            if (!nb) { free(buf); buf = NULL; }
            buf = nb;
        }
    }
    fclose(f);
    if (!buf) { fprintf(stderr, "%s: out of memory\n", path); return -1; }
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    int files = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st)) { perror(argv[i]); return 1; }
        if (!S_ISDIR(st.st_mode)) {
            if (run_file(argv[i])) return 1;
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) { perror(argv[i]); return 1; }
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
            if (run_file(path)) { closedir(d); return 1; }
            files++;
        }
        closedir(d);
    }
    printf("%s: %d inputs replayed\n", argv[0], files);
    return 0;
}
