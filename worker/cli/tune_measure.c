/* tune_measure.c - what `switchboard tune` measures (see tune_impl.h):
 * the machine (bandwidth, int8 peaks, caches) and the kernel variants on
 * a model's real tensors.
 */
#include <cpuid.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "worker/cli/tune_impl.h"
#include "worker/cli/sb_bwprobe.h"

/* ---- caches ---------------------------------------------------------------- */

/* sysfs "512K" / "32M" -> bytes. */
static size_t parse_size(const char *s) {
    char *end;
    const unsigned long long v = strtoull(s, &end, 10);
    return (size_t)v << (*end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0);
}

static int read_line(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    const int ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    buf[strcspn(buf, "\n")] = 0;
    return ok ? 0 : -1;
}

/* The same from CPUID's deterministic cache parameters (Intel leaf 4, AMD
 * 0x8000001D: one subleaf per cache), where sysfs does not say (some
 * containers hide it). */
static void cache_sizes_cpuid(tune_machine *mc) {
    static const unsigned leaves[] = { 4, 0x8000001Du };
    for (int l = 0; l < 2 && !(mc->l2_bytes && mc->l3_bytes); l++) {
        unsigned a, b, c, d;
        if ((unsigned)__get_cpuid_max(leaves[l] & 0x80000000u, NULL) < leaves[l]) continue;
        for (unsigned i = 0; i < 8; i++) {
            __cpuid_count(leaves[l], i, a, b, c, d);
            const unsigned type = a & 0x1F, level = (a >> 5) & 7;
            if (type == 0) break;
            if (type == 2) continue;                    /* instruction cache */
            const size_t bytes = (size_t)((b >> 22) + 1) * (((b >> 12) & 0x3FF) + 1) * ((b & 0xFFF) + 1) * (c + 1);
            if (level == 2 && !mc->l2_bytes) mc->l2_bytes = bytes;
            if (level == 3 && !mc->l3_bytes) mc->l3_bytes = bytes;
        }
    }
}

/* L2 and L3 of cpu0 from sysfs (data or unified caches), else CPUID; 0 if unknown. */
static void cache_sizes(tune_machine *mc) {
    for (int i = 0; i < 8; i++) {
        char path[128], level[16], type[32], size[32];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        if (read_line(path, level, sizeof level)) break;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        if (read_line(path, type, sizeof type) || !strcmp(type, "Instruction")) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        if (read_line(path, size, sizeof size)) continue;
        if (!strcmp(level, "2")) mc->l2_bytes = parse_size(size);
        if (!strcmp(level, "3")) mc->l3_bytes = parse_size(size);
    }
    cache_sizes_cpuid(mc);
}

/* ---- bandwidth ------------------------------------------------------------- */

/* Best of `windows` probe windows with 1 and with `threads` readers,
 * alternated (bench --membw's probe: plain and prefetching passes, the
 * better one); GB/s, 0 on failure. */
static void bandwidth(tune_machine *mc, int threads, int windows) {
    sb_bwprobe *p;
    if (sb_bwprobe_new(threads, 1ul << 30, &p)) return;
    for (int w = 0; w < windows; w++) {
        mc->bw1 = SB_MAX(mc->bw1, sb_bwprobe_window_n(p, 1));
        mc->bwt = SB_MAX(mc->bwt, sb_bwprobe_window_n(p, threads));
    }
    sb_bwprobe_free(p);
}

/* ---- int8 peaks -------------------------------------------------------------- */

static const char *const families[TUNE_FAMILIES] = { "avx2", "avx512_vnni", "avx_vnni", "amx" };

const char *tune_family_name(int f) { return families[f]; }

/* AMX in a child: a hypervisor that grants the permission but not the
 * state makes the first tile instruction fault, which must not take the
 * tuner down. The child writes its rate down a pipe; a death is -3. */
static double peak_in_child(const char *family, double seconds) {
    int fd[2];
    if (pipe(fd)) return -3;
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]), close(fd[1]);
        return -3;
    }
    if (pid == 0) {
        close(fd[0]);
        const double r = sb_kq_peak_macs(family, seconds);
        const ssize_t n = write(fd[1], &r, sizeof r);
        _exit(n == (ssize_t)sizeof r ? 0 : 1);
    }
    close(fd[1]);
    double r = -3;
    if (read(fd[0], &r, sizeof r) != (ssize_t)sizeof r) r = -3;
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? r : -3;
}

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int go;
} peak_start;

typedef struct {
    const char *family;
    double seconds, rate;
    peak_start *start;
} peak_job;

static void *peak_thread(void *arg) {
    peak_job *j = arg;
    pthread_mutex_lock(&j->start->mu);
    while (!j->start->go) pthread_cond_wait(&j->start->cv, &j->start->mu);
    pthread_mutex_unlock(&j->start->mu);
    j->rate = sb_kq_peak_macs(j->family, j->seconds);
    return NULL;
}

/* The gemm family's rate with `threads` threads at it at once, summed.
 * The threads start together, so that each one's timed span overlaps the
 * others'. */
static double peak_all_threads(const char *family, int threads, double seconds) {
    enum { MAX_T = 256 };
    threads = SB_MIN(threads, MAX_T);
    /* AMX runs here only where the kernel table took it (the OS granted
     * the tile state), as the gemm itself will */
    if (threads < 1 || (!strcmp(family, "amx") && !sb_kq_amx_usable())) return -1;
    pthread_t tid[MAX_T];
    peak_job job[MAX_T];
    peak_start start = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0 };
    int n = 1;
    job[0] = (peak_job){ family, seconds, -1, &start };
    for (; n < threads; n++) {
        job[n] = job[0];
        if (pthread_create(&tid[n], NULL, peak_thread, &job[n])) break;
    }
    pthread_mutex_lock(&start.mu);
    start.go = 1;
    pthread_cond_broadcast(&start.cv);
    pthread_mutex_unlock(&start.mu);
    peak_thread(&job[0]);
    double sum = 0;
    for (int i = 1; i < n; i++) pthread_join(tid[i], NULL);
    for (int i = 0; i < n && sum >= 0; i++) sum = job[i].rate > 0 ? sum + job[i].rate : -1;
    return n == threads ? sum : -1;
}

void tune_measure_machine(tune_machine *mc, int threads, const char *gemm_family, double seconds) {
    cache_sizes(mc);
    const double t0 = sb_now_s();
    for (int f = 0; f < TUNE_FAMILIES; f++)
        mc->peak[f] = !strcmp(families[f], "amx") ? peak_in_child(families[f], seconds * 0.08)
                                                  : sb_kq_peak_macs(families[f], seconds * 0.08);
    mc->peak_t = peak_all_threads(gemm_family, threads, seconds * 0.08);
    /* the rest of the share for the probes (a window: ~0.1 s per reader count) */
    const int windows = SB_MAX(2, (int)((seconds - (sb_now_s() - t0)) / 0.2 / 2));
    bandwidth(mc, threads, windows);
}

/* ---- finding the models ------------------------------------------------------ */

static int is_gguf(const char *name) {
    const size_t n = strlen(name);
    return n > 5 && !strcmp(name + n - 5, ".gguf");
}

static int by_path(const void *a, const void *b) { return strcmp(a, b); }

int tune_find_models(char **args, int n_args, char paths[][TUNE_PATH], int cap) {
    int n = 0;
    for (int i = 0; i < n_args && n < cap; i++) {
        DIR *d = opendir(args[i]);
        if (!d) {
            snprintf(paths[n++], TUNE_PATH, "%s", args[i]);
            continue;
        }
        for (struct dirent *e; (e = readdir(d)) && n < cap;)
            if (is_gguf(e->d_name)) {
                const int slash = args[i][strlen(args[i]) - 1] == '/';
                snprintf(paths[n++], TUNE_PATH, "%s%s%s", args[i], slash ? "" : "/", e->d_name);
            }
        closedir(d);
    }
    qsort(paths, (size_t)n, TUNE_PATH, by_path);    /* readdir's order is the file system's */
    return n;
}

void tune_sample_add(tune_samples *s, double tps) {
    if (s->n < TUNE_MAX_ROUNDS) s->v[s->n++] = tps;
}

double tune_quantile(const tune_samples *s, double q) {
    double v[TUNE_MAX_ROUNDS];
    memcpy(v, s->v, (size_t)s->n * sizeof *v);
    sb_sort_doubles(v, (size_t)s->n);
    return sb_percentile(v, (size_t)s->n, q);
}

/* The quartiles' gap is the threshold the machine itself gives: on a quiet
 * box the rounds agree and a 4 % gain shows, on a busy one they scatter and
 * the default stays, instead of a pick that flips from run to run. */
int tune_beats(const tune_samples *a, const tune_samples *b) {
    if (!a->n || !b->n) return 0;
    return tune_quantile(a, 0.25) > tune_quantile(b, 0.75) &&
           tune_quantile(a, 0.5) > tune_quantile(b, 0.5) * (1 + TUNE_MARGIN);
}
