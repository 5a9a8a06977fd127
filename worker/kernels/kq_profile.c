/* kq_profile.c - who this CPU is, and the tuning profile `switchboard tune`
 * writes for it (docs/KERNELS.md, "Tuning").
 *
 * A profile is only as good as the machine it was measured on: the same
 * model name with other microcode can prefetch differently, and a VM can
 * hide a feature the host has. So a profile names the CPU (vendor, family,
 * model, stepping), the microcode and the ISA features, and is applied
 * only where all of them match.
 */
#include <cpuid.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sb_common.h"
#include "worker/kernels/kq_internal.h"

#define PROFILE_FORMAT "switchboard-tune/1"

static void append_flag(char *buf, size_t cap, int have, const char *name) {
    if (!have) return;
    const size_t len = strlen(buf);
    snprintf(buf + len, cap - len, "%s%s", len ? " " : "", name);
}

/* /proc/cpuinfo's first "microcode : 0x..." value, or "". */
static void read_microcode(char *out, size_t cap) {
    out[0] = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "microcode", 9) != 0) continue;
        const char *v = strchr(line, ':');
        if (!v) break;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        size_t n = strcspn(v, " \t\r\n");
        if (n >= cap) n = cap - 1;
        memcpy(out, v, n);
        out[n] = 0;
        break;
    }
    fclose(f);
}

void sb_cpu_identify(sb_cpu_id *id) {
    memset(id, 0, sizeof *id);
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(0, &a, &b, &c, &d)) {
        memcpy(id->vendor, &b, 4);
        memcpy(id->vendor + 4, &d, 4);
        memcpy(id->vendor + 8, &c, 4);
    }
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        const int base_family = (int)((a >> 8) & 0xF), base_model = (int)((a >> 4) & 0xF);
        id->family = base_family + (base_family == 0xF ? (int)((a >> 20) & 0xFF) : 0);
        id->model = base_model + (base_family == 0x6 || base_family == 0xF ? (int)((a >> 16) & 0xF) << 4 : 0);
        id->stepping = (int)(a & 0xF);
    }
    const int f16c = (c >> 29) & 1;
    unsigned a7 = 0, b7 = 0, c7 = 0, d7 = 0, a71 = 0, b71 = 0, c71 = 0, d71 = 0;
    __get_cpuid_count(7, 0, &a7, &b7, &c7, &d7);
    __get_cpuid_count(7, 1, &a71, &b71, &c71, &d71);
    __builtin_cpu_init();
    append_flag(id->flags, sizeof id->flags, __builtin_cpu_supports("avx2"), "avx2");
    append_flag(id->flags, sizeof id->flags, __builtin_cpu_supports("fma"), "fma");
    append_flag(id->flags, sizeof id->flags, f16c, "f16c");
    append_flag(id->flags, sizeof id->flags, __builtin_cpu_supports("avx512f"), "avx512f");
    append_flag(id->flags, sizeof id->flags, __builtin_cpu_supports("avx512bw"), "avx512bw");
    append_flag(id->flags, sizeof id->flags, __builtin_cpu_supports("avx512dq"), "avx512dq");
    append_flag(id->flags, sizeof id->flags, __builtin_cpu_supports("avx512vl"), "avx512vl");
    append_flag(id->flags, sizeof id->flags, __builtin_cpu_supports("avx512vnni"), "avx512vnni");
    append_flag(id->flags, sizeof id->flags, (a71 >> 4) & 1, "avxvnni");
    append_flag(id->flags, sizeof id->flags, (d7 >> 24) & 1, "amx_tile");
    append_flag(id->flags, sizeof id->flags, (d7 >> 25) & 1, "amx_int8");
    read_microcode(id->microcode, sizeof id->microcode);
}

int sb_kq_profile_path(const sb_cpu_id *cpu, char *buf, size_t cap) {
    const char *env = getenv("SB_TUNE_PROFILE");
    if (env && strcmp(env, "off") == 0) return -1;
    if (env && *env) return snprintf(buf, cap, "%s", env) < (int)cap ? 0 : -1;
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    int n;
    if (xdg && *xdg == '/')
        n = snprintf(buf, cap, "%s/switchboard/tune-%s-%d-%d-%d.json", xdg, cpu->vendor, cpu->family, cpu->model,
                     cpu->stepping);
    else if (home && *home)
        n = snprintf(buf, cap, "%s/.cache/switchboard/tune-%s-%d-%d-%d.json", home, cpu->vendor, cpu->family,
                     cpu->model, cpu->stepping);
    else
        return -1;
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

/* ---- writing ------------------------------------------------------------- */

void sb_kq_profile_write_cpu(sb_jw *w, const sb_cpu_id *cpu) {
    sb_jw_key(w, "cpu");
    sb_jw_obj(w);
    sb_jw_key(w, "vendor"), sb_jw_str(w, cpu->vendor);
    sb_jw_key(w, "family"), sb_jw_int(w, cpu->family);
    sb_jw_key(w, "model"), sb_jw_int(w, cpu->model);
    sb_jw_key(w, "stepping"), sb_jw_int(w, cpu->stepping);
    sb_jw_key(w, "microcode"), sb_jw_str(w, cpu->microcode);
    sb_jw_key(w, "flags"), sb_jw_str(w, cpu->flags);
    sb_jw_obj_end(w);
}

void sb_kq_profile_write(sb_jw *w, const sb_cpu_id *cpu, const sb_kq_plan *plan) {
    sb_jw_key(w, "format"), sb_jw_str(w, PROFILE_FORMAT);
    sb_kq_profile_write_cpu(w, cpu);
    sb_jw_key(w, "level"), sb_jw_str(w, sb_kq_level_name(plan->level));
    sb_jw_key(w, "plan");
    sb_jw_obj(w);
    sb_jw_key(w, "split");
    sb_jw_obj(w);
    sb_jw_key(w, "rows_per_task"), sb_jw_int(w, plan->split.rows_per_task);
    sb_jw_key(w, "tasks_per_thread"), sb_jw_int(w, plan->split.tasks_per_thread);
    sb_jw_key(w, "gemm_rows"), sb_jw_int(w, plan->split.gemm_rows);
    sb_jw_key(w, "streams"), sb_jw_int(w, plan->split.streams);
    sb_jw_key(w, "dot_rows"), sb_jw_int(w, plan->split.dot_rows);
    sb_jw_key(w, "task_kib"), sb_jw_int(w, plan->split.task_kib);
    sb_jw_obj_end(w);
    sb_jw_key(w, "dot");
    sb_jw_obj(w);
    const sb_kq_traits *names = sb_kq_table(SB_KQ_REF);
    for (int t = 0; t < SB_TYPE_COUNT; t++)
        if (plan->dot[t]) sb_jw_key(w, names[t].name), sb_jw_str(w, plan->dot[t]->name);
    sb_jw_obj_end(w);
    sb_jw_obj_end(w);
}

/* ---- reading ------------------------------------------------------------- */

#define WHY(...) (snprintf(why, why_cap, __VA_ARGS__), -1)

/* "cpu" must be this CPU: the first field that differs is the reason. */
static int check_cpu(const sb_json *c, const sb_cpu_id *cpu, char *why, size_t why_cap) {
    if (sb_json_type_of(c) != SB_JSON_OBJECT) return WHY("no \"cpu\" object");
    const char *vendor = sb_json_str(sb_json_get(c, "vendor"));
    if (!vendor || strcmp(vendor, cpu->vendor) != 0)
        return WHY("made on another CPU (vendor %s, this is %s)", vendor ? vendor : "?", cpu->vendor);
    static const char *const ints[] = { "family", "model", "stepping" };
    const int mine[] = { cpu->family, cpu->model, cpu->stepping };
    for (int i = 0; i < 3; i++) {
        const sb_json *v = sb_json_get(c, ints[i]);
        if (!sb_json_is_int(v, 0, 1 << 20)) return WHY("\"cpu.%s\" is not an integer", ints[i]);
        if ((int)sb_json_num(v) != mine[i])
            return WHY("made on another CPU (%s %d, this is %d)", ints[i], (int)sb_json_num(v), mine[i]);
    }
    const char *mc = sb_json_str(sb_json_get(c, "microcode"));
    if (!mc || strcmp(mc, cpu->microcode) != 0)
        return WHY("stale: microcode %s, this CPU runs %s", mc ? mc : "?", cpu->microcode);
    const char *flags = sb_json_str(sb_json_get(c, "flags"));
    if (!flags || strcmp(flags, cpu->flags) != 0)
        return WHY("made with other ISA features (\"%s\", this CPU has \"%s\")", flags ? flags : "?", cpu->flags);
    return 0;
}

static int int_field(const sb_json *obj, const char *key, int lo, int hi, int *out, char *why, size_t why_cap) {
    const sb_json *v = sb_json_get(obj, key);
    if (!sb_json_is_int(v, lo, hi)) return WHY("\"plan.split.%s\" must be an integer in [%d, %d]", key, lo, hi);
    *out = (int)sb_json_num(v);
    return 0;
}

static int parse_split(const sb_json *s, sb_kq_split *split, char *why, size_t why_cap) {
    if (sb_json_type_of(s) != SB_JSON_OBJECT) return WHY("no \"plan.split\" object");
    if (int_field(s, "rows_per_task", 1, 1 << 16, &split->rows_per_task, why, why_cap) ||
        int_field(s, "tasks_per_thread", 1, 4096, &split->tasks_per_thread, why, why_cap) ||
        int_field(s, "gemm_rows", 16, 512, &split->gemm_rows, why, why_cap))
        return -1;
    /* a profile from before streams (dot_rows, task_kib) were tuned keeps
     * the built-in (sb_kq_plan_default filled it in): it never chose one */
    if (sb_json_get(s, "streams") && int_field(s, "streams", 1, SB_KQ_MAX_STREAMS, &split->streams, why, why_cap))
        return -1;
    if (sb_json_get(s, "dot_rows") && int_field(s, "dot_rows", 1, 4, &split->dot_rows, why, why_cap)) return -1;
    if (sb_json_get(s, "task_kib") && int_field(s, "task_kib", 0, 1 << 20, &split->task_kib, why, why_cap)) return -1;
    if (split->dot_rows == 3) return WHY("\"plan.split.dot_rows\" must be 1, 2 or 4");
    if (split->gemm_rows % 16) return WHY("\"plan.split.gemm_rows\" %d is not a multiple of 16", split->gemm_rows);
    return 0;
}

static int type_by_name(const char *name) {
    const sb_kq_traits *t = sb_kq_table(SB_KQ_REF);
    for (int i = 0; i < SB_TYPE_COUNT; i++)
        if (t[i].blck_size && strcmp(t[i].name, name) == 0) return i;
    return -1;
}

static int parse_dots(const sb_json *d, sb_kq_plan *plan, char *why, size_t why_cap) {
    if (sb_json_type_of(d) != SB_JSON_OBJECT) return WHY("no \"plan.dot\" object");
    for (size_t i = 0; i < sb_json_len(d); i++) {
        const char *tname = sb_json_key_at(d, i), *vname = sb_json_str(sb_json_val_at(d, i));
        const int type = type_by_name(tname);
        if (type < 0) return WHY("\"plan.dot\": unknown type \"%s\"", tname);
        if (!vname) return WHY("\"plan.dot.%s\" is not a string", tname);
        plan->dot[type] = sb_kq_variant_find(plan->level, type, vname);
        if (!plan->dot[type])
            return WHY("\"plan.dot.%s\": unknown variant \"%s\" at level %s", tname, vname,
                       sb_kq_level_name(plan->level));
    }
    return 0;
}

int sb_kq_profile_parse(const char *text, size_t len, const sb_cpu_id *cpu, sb_kq_plan *plan, char *why,
                        size_t why_cap) {
    sb_json_doc *doc = NULL;
    char err[256];
    if (sb_json_parse(text, len, &doc, err) != 0) return WHY("bad JSON: %s", err);
    const sb_json *root = sb_json_root(doc), *p = sb_json_get(root, "plan");
    const char *format = sb_json_str(sb_json_get(root, "format")), *level = sb_json_str(sb_json_get(root, "level"));
    int rc = 0;
    if (!format || strcmp(format, PROFILE_FORMAT) != 0) {
        rc = WHY("\"format\" is not \"%s\"", PROFILE_FORMAT);
        goto done;
    }
    if ((rc = check_cpu(sb_json_get(root, "cpu"), cpu, why, why_cap))) goto done;
    int lvl = -1;
    for (int l = 0; level && l < SB_KQ_LEVELS; l++)
        if (strcmp(level, sb_kq_level_name(l)) == 0) lvl = l;
    if (lvl < 0) {
        rc = WHY("unknown level \"%s\"", level ? level : "?");
        goto done;
    }
    sb_kq_plan_default(lvl, plan);
    if (sb_json_type_of(p) != SB_JSON_OBJECT) rc = WHY("no \"plan\" object");
    else if (!(rc = parse_split(sb_json_get(p, "split"), &plan->split, why, why_cap)))
        rc = parse_dots(sb_json_get(p, "dot"), plan, why, why_cap);
done:
    sb_json_doc_free(doc);
    return rc;
}
