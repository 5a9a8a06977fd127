/* stage_kinds.c - the table of stage kinds (stage_internal.h): the one
 * place that lists them. A new kind is its file, a line here and its
 * section in docs/router.md; the loader and the executor find it by name.
 */
#include <stdio.h>
#include <string.h>

#include "router/run/stage_internal.h"

/* In SB_STAGE_* order: sb_stage.kind is the index, and the front doors
 * name the built-in kinds by it. Room after them for registered kinds. */
#define MAX_KINDS 16
static const rt_stage_kind *kinds[MAX_KINDS] = {
    &rt_kind_intent,
    &rt_kind_generate,
    &rt_kind_tool,
    &rt_kind_retrieve,
};
static int n_kinds = 4;

const rt_stage_kind *rt_stage_kind_find(const char *name, int *index) {
    for (int i = 0; i < n_kinds; i++)
        if (!strcmp(kinds[i]->name, name)) {
            if (index) *index = i;
            return kinds[i];
        }
    return NULL;
}

const rt_stage_kind *rt_stage_kind_of(const sb_stage *s) { return kinds[s->kind]; }

const char *sb_stage_kind_name(sb_stage_kind k) {
    return (int)k >= 0 && (int)k < n_kinds ? kinds[k]->name : "?";
}

void rt_stage_kind_list(char *out, size_t n) {
    size_t at = 0;
    out[0] = '\0';
    for (int i = 0; i < n_kinds && at < n; i++)
        at += (size_t)snprintf(out + at, n - at, "%s%s", i == 0 ? "" : i == n_kinds - 1 ? " or " : ", ",
                               kinds[i]->name);
}

int rt_stage_kind_register(const rt_stage_kind *k) {
    if (rt_stage_kind_find(k->name, NULL)) return SB_EINVAL;
    if (n_kinds == MAX_KINDS) return SB_EBUSY;
    kinds[n_kinds++] = k;
    return 0;
}
