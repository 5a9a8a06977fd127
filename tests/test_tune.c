/* test_tune.c - the tuning profile (worker/kernels/kq_profile.c) and plans.
 *
 *  1. a plan written by sb_kq_profile_write parses back to the same plan on
 *     the CPU it names (round trip: split, every chosen dot variant);
 *  2. a profile from another CPU (vendor, family, model, stepping), other
 *     microcode or other ISA features is refused, with the reason naming
 *     what differs; so are bad JSON, another format, an unknown level,
 *     type or variant, and split values outside what matmul.c can take;
 *  3. the profile path: SB_TUNE_PROFILE=off disables, SB_TUNE_PROFILE=FILE
 *     names it, else $XDG_CACHE_HOME (absolute only) or ~/.cache, with the
 *     CPU in the file name;
 *  4. the int8 peak probe: a positive rate for each vector family the level
 *     runs on, -1 for an unknown one; the gemm's family per level. (AMX is
 *     probed by `tune` in a child process, as it can fault: not here.)
 *  5. the pick rule: a twin replaces the default only when its first
 *     quartile of rounds beats the default's third and its median is 3 %
 *     faster; overlapping rounds (noise) keep the default.
 * (That the engine applies a profile once, logs one line for one it
 * ignores, and that tuned logits equal untuned ones: tests/it_tune.sh.)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/sb_common.h"
#include "common/sb_json.h"
#include "worker/cli/tune_impl.h"
#include "worker/kernels/sb_kq.h"

/* A profile's text for `plan`, as if measured on `cpu`. */
static char *profile_text(const sb_cpu_id *cpu, const sb_kq_plan *plan) {
    sb_jw w;
    sb_jw_init(&w);
    sb_jw_obj(&w);
    sb_kq_profile_write(&w, cpu, plan);
    sb_jw_key(&w, "measured"), sb_jw_obj(&w), sb_jw_obj_end(&w);     /* tune's own keys are ignored */
    sb_jw_obj_end(&w);
    assert_false(w.oom);
    char *s = strdup(w.p);
    sb_jw_free(&w);
    return s;
}

/* A plan with something non-default in every field the CPU allows. */
static void tuned_plan(sb_kq_plan *plan) {
    const int level = sb_kq_best_level();
    sb_kq_plan_default(level, plan);
    plan->split = (sb_kq_split){ .rows_per_task = 4, .tasks_per_thread = 8, .gemm_rows = 128, .streams = 3, .dot_rows = 1, .task_kib = 96 };
    for (int t = 0; t < SB_TYPE_COUNT; t++) {
        const sb_kq_variant *v;
        if (sb_kq_variants(level, t, &v) > 1) plan->dot[t] = &v[1 + t % 4];
    }
}

/* Parse text on this CPU: the rc, and the reason in why. */
static int parse(const char *text, sb_kq_plan *plan, char *why) {
    sb_cpu_id cpu;
    sb_cpu_identify(&cpu);
    return sb_kq_profile_parse(text, strlen(text), &cpu, plan, why, 256);
}

static void test_round_trip(void **state) {
    (void)state;
    sb_cpu_id cpu;
    sb_cpu_identify(&cpu);
    assert_true(cpu.vendor[0] && cpu.family > 0);
    sb_kq_plan plan, back;
    tuned_plan(&plan);
    char *text = profile_text(&cpu, &plan), why[256] = "";
    assert_int_equal(parse(text, &back, why), 0);
    assert_int_equal(back.level, plan.level);
    assert_memory_equal(&back.split, &plan.split, sizeof plan.split);
    int dots = 0;
    for (int t = 0; t < SB_TYPE_COUNT; t++) {
        assert_ptr_equal(back.dot[t], plan.dot[t]);
        dots += plan.dot[t] != NULL;
    }
    if (plan.level >= SB_KQ_AVX2) assert_true(dots >= 5);       /* not vacuous */
    sb_kq_kernels k;
    sb_kq_resolve(&back, &k);
    assert_int_equal(k.tuned, 1);
    assert_int_equal(k.split.gemm_rows, 128);
    free(text);
}

/* A profile written before the split had streams (dot_rows, task_kib)
 * still applies, with the built-in number of streams (dot rows, task
 * floor): it never chose one. */
static void test_profile_without_streams(void **state) {
    (void)state;
    sb_cpu_id cpu;
    sb_cpu_identify(&cpu);
    sb_kq_plan plan, back, builtin;
    tuned_plan(&plan);
    sb_kq_plan_default(plan.level, &builtin);
    assert_true(builtin.split.streams > 1);
    assert_int_equal(builtin.split.dot_rows, 4);
    assert_int_equal(builtin.split.task_kib, 256);
    static const char *const cut[] = { ",\"task_kib\":96", ",\"dot_rows\":1", ",\"streams\":3" };
    char *text = profile_text(&cpu, &plan), why[256] = "";
    for (int i = 0; i < 3; i++) {       /* without task_kib, then dot_rows too, then streams too */
        char *at = strstr(text, cut[i]);
        assert_non_null(at);
        memmove(at, at + strlen(cut[i]), strlen(at + strlen(cut[i])) + 1);
        assert_int_equal(parse(text, &back, why), 0);
        assert_int_equal(back.split.task_kib, builtin.split.task_kib);
        assert_int_equal(back.split.dot_rows, i >= 1 ? builtin.split.dot_rows : 1);
        assert_int_equal(back.split.streams, i >= 2 ? builtin.split.streams : 3);
    }
    assert_int_equal(back.split.rows_per_task, 4);
    free(text);
}

/* The profile made on a CPU that differs in one field: refused, and the
 * reason says `expect`. */
static void refused_cpu(void (*change)(sb_cpu_id *), const char *expect) {
    sb_cpu_id other;
    sb_cpu_identify(&other);
    change(&other);
    sb_kq_plan plan;
    tuned_plan(&plan);
    char *text = profile_text(&other, &plan), why[256] = "";
    assert_int_equal(parse(text, &plan, why), -1);
    if (!strstr(why, expect)) fail_msg("reason \"%s\" does not say \"%s\"", why, expect);
    free(text);
}

static void other_vendor(sb_cpu_id *c) { snprintf(c->vendor, sizeof c->vendor, "%s", c->vendor[0] == 'A' ? "GenuineIntel" : "AuthenticAMD"); }
static void other_model(sb_cpu_id *c) { c->model++; }
static void other_stepping(sb_cpu_id *c) { c->stepping++; }
static void other_microcode(sb_cpu_id *c) { snprintf(c->microcode, sizeof c->microcode, "%s", strcmp(c->microcode, "0x2") ? "0x2" : "0x3"); }
static void other_flags(sb_cpu_id *c) { snprintf(c->flags, sizeof c->flags, "avx2 fma"); }

static void test_foreign_and_stale(void **state) {
    (void)state;
    refused_cpu(other_vendor, "another CPU (vendor");
    refused_cpu(other_model, "another CPU (model");
    refused_cpu(other_stepping, "another CPU (stepping");
    refused_cpu(other_microcode, "stale: microcode");
    sb_cpu_id me;
    sb_cpu_identify(&me);
    if (strcmp(me.flags, "avx2 fma")) refused_cpu(other_flags, "other ISA features");
}

/* text with the first `from` replaced by `to`, refused for `expect`. */
static void refused_edit(const char *from, const char *to, const char *expect) {
    sb_cpu_id cpu;
    sb_cpu_identify(&cpu);
    sb_kq_plan plan;
    tuned_plan(&plan);
    char *text = profile_text(&cpu, &plan);
    char *at = strstr(text, from);
    if (!at) fail_msg("\"%s\" not in %s", from, text);
    char *edited = malloc(strlen(text) + strlen(to) + 1);
    assert_non_null(edited);
    sprintf(edited, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    char why[256] = "";
    assert_int_equal(parse(edited, &plan, why), -1);
    if (!strstr(why, expect)) fail_msg("reason \"%s\" does not say \"%s\" (profile %s)", why, expect, edited);
    free(text);
    free(edited);
}

static void test_bad_profiles(void **state) {
    (void)state;
    char why[256] = "";
    sb_kq_plan plan;
    assert_int_equal(parse("{\"format\": \"switchboard-tune/1\", ", &plan, why), -1);
    assert_non_null(strstr(why, "bad JSON"));
    assert_int_equal(parse("", &plan, why), -1);
    assert_non_null(strstr(why, "bad JSON"));
    assert_int_equal(parse("[1, 2]", &plan, why), -1);
    refused_edit("switchboard-tune/1", "switchboard-tune/9", "\"format\"");
    refused_edit("\"level\":\"", "\"level\":\"x", "unknown level");
    refused_edit("\"rows_per_task\":4", "\"rows_per_task\":0", "rows_per_task");
    refused_edit("\"tasks_per_thread\":8", "\"tasks_per_thread\":\"8\"", "tasks_per_thread");
    refused_edit("\"gemm_rows\":128", "\"gemm_rows\":120", "multiple of 16");
    refused_edit("\"streams\":3", "\"streams\":0", "streams");
    refused_edit("\"streams\":3", "\"streams\":9", "streams");
    refused_edit("\"dot_rows\":1", "\"dot_rows\":0", "dot_rows");
    refused_edit("\"dot_rows\":1", "\"dot_rows\":3", "1, 2 or 4");
    refused_edit("\"dot_rows\":1", "\"dot_rows\":8", "dot_rows");
    refused_edit("\"task_kib\":96", "\"task_kib\":-1", "task_kib");
    refused_edit("\"task_kib\":96", "\"task_kib\":1.5", "task_kib");
    refused_edit("\"task_kib\":96", "\"task_kib\":1048577", "task_kib");
    refused_edit("\"split\":{", "\"splat\":{", "plan.split");
    if (sb_kq_best_level() >= SB_KQ_AVX2) {
        refused_edit("-pf", "-pf7", "unknown variant");
        refused_edit("\"dot\":{\"", "\"dot\":{\"Q9", "unknown type");
    }
}

static void test_profile_path(void **state) {
    (void)state;
    sb_cpu_id cpu;
    sb_cpu_identify(&cpu);
    char path[4096], want[4096];
    setenv("SB_TUNE_PROFILE", "off", 1);
    assert_int_equal(sb_kq_profile_path(&cpu, path, sizeof path), -1);
    setenv("SB_TUNE_PROFILE", "/tmp/some/profile.json", 1);
    assert_int_equal(sb_kq_profile_path(&cpu, path, sizeof path), 0);
    assert_string_equal(path, "/tmp/some/profile.json");
    unsetenv("SB_TUNE_PROFILE");
    setenv("XDG_CACHE_HOME", "/xdg/cache", 1);
    assert_int_equal(sb_kq_profile_path(&cpu, path, sizeof path), 0);
    snprintf(want, sizeof want, "/xdg/cache/switchboard/tune-%s-%d-%d-%d.json", cpu.vendor, cpu.family, cpu.model,
             cpu.stepping);
    assert_string_equal(path, want);
    setenv("XDG_CACHE_HOME", "relative", 1);      /* the XDG spec: relative paths are invalid, ignored */
    setenv("HOME", "/home/h", 1);
    assert_int_equal(sb_kq_profile_path(&cpu, path, sizeof path), 0);
    snprintf(want, sizeof want, "/home/h/.cache/switchboard/tune-%s-%d-%d-%d.json", cpu.vendor, cpu.family,
             cpu.model, cpu.stepping);
    assert_string_equal(path, want);
}

static void test_peak(void **state) {
    (void)state;
    const int level = sb_kq_best_level();
    if (level >= SB_KQ_AVX2) assert_true(sb_kq_peak_macs("avx2", 0.02) > 1e8);
    if (level >= SB_KQ_AVX512) assert_true(sb_kq_peak_macs("avx512_vnni", 0.02) > 1e8);
    assert_true(sb_kq_peak_macs("avx_vnni", 0.02) != 0);
    assert_true(sb_kq_peak_macs("sse9", 0.02) == -1);
    /* the AVX-512 level multiplies with AMX where the table took its gemms
     * (test_gemm checks it does wherever the OS grants AMX) */
    const char *fam = sb_kq_gemm_family(SB_KQ_AVX512);
    assert_true(!strcmp(fam, "amx") || !strcmp(fam, "avx512_vnni"));
    if (!strcmp(fam, "amx")) assert_true(sb_kq_amx_usable() && sb_kq_peak_macs("amx", 0.02) > 1e9);
    assert_string_equal(sb_kq_gemm_family(SB_KQ_AVX2), "avx2");
}

static tune_samples rounds(const double *v, int n) {
    tune_samples s = { .n = 0 };
    for (int i = 0; i < n; i++) tune_sample_add(&s, v[i]);
    return s;
}

static void test_pick_rule(void **state) {
    (void)state;
    const double base[] = { 100, 101, 99, 100, 102, 98, 100, 101 };
    const double clear[] = { 110, 109, 111, 110, 108, 112, 110, 109 };   /* +10 %, rounds apart */
    const double noisy[] = { 130, 80, 125, 90, 120, 85, 128, 95 };       /* median +7 %, scattered */
    const double small[] = { 102, 102, 103, 102, 101, 102, 103, 102 };   /* apart, but +2 % */
    tune_samples b = rounds(base, 8), c = rounds(clear, 8), n = rounds(noisy, 8), sm = rounds(small, 8);
    assert_true(tune_quantile(&b, 0.5) == 100);
    assert_true(tune_beats(&c, &b));
    assert_false(tune_beats(&b, &c));
    assert_false(tune_beats(&n, &b));
    assert_false(tune_beats(&sm, &b));
    tune_samples two_a = rounds((const double[]){ 105, 110 }, 2), two_b = rounds((const double[]){ 100, 106 }, 2);
    assert_false(tune_beats(&two_a, &two_b));      /* a's slower round is under b's faster */
    two_b = rounds((const double[]){ 100, 101 }, 2);
    assert_true(tune_beats(&two_a, &two_b));
    tune_samples none = { .n = 0 };
    assert_false(tune_beats(&none, &b));
    assert_false(tune_beats(&c, &none));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peak),
        cmocka_unit_test(test_pick_rule),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_profile_without_streams),
        cmocka_unit_test(test_foreign_and_stale),
        cmocka_unit_test(test_bad_profiles),
        cmocka_unit_test(test_profile_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
