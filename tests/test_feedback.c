/* test_feedback.c - the operators' corrections file (cache/feedback.c) and
 * its TSV export (GET /v1/feedback.tsv, `switchboard feedback export`),
 * whose second column is a stranger's words: a real SQLite file in a
 * temporary directory, rows put and exported as the router does.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/sb_feedback.h"
#include "common/sb_common.h"
#include "common/sb_json.h"
#include "tests/bytes_testlib.h"

static int collect(void *arg, const char *line, size_t len) {
    sb_jw_raw(arg, line, len);
    return 0;
}

/* The export of rows whose utterances are us[0..n), as one string. */
static char *export_of(const char *const *us, size_t n) {
    char dir[] = "/tmp/sb-test-feedback-XXXXXX", path[64], err[SB_ERR_LEN];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/feedback.sqlite", dir);
    sb_feedback *f;
    assert_int_equal(sb_feedback_open(path, true, &f, err), 0);
    for (size_t i = 0; i < n; i++) {
        char id[32];
        snprintf(id, sizeof id, "call-%zu", i);
        sb_feedback_row row = { .call_id = id, .pipeline = "hotline", .predicted = "billing", .intent = "complaint",
                                .utterance = us[i], .time = 1000 + (int64_t)i };
        assert_int_equal(sb_feedback_put(f, &row, err), 0);
    }
    sb_jw w;
    sb_jw_init(&w);
    assert_int_equal(sb_feedback_tsv(f, NULL, collect, &w, err), 0);
    sb_feedback_close(f);
    char *out = sb_strdup(w.p ? w.p : "");
    sb_jw_free(&w);
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    return out;
}

/* A caller's words starting with = + - @ were exported as they came: a
 * spreadsheet opening the file runs them as formulas (=HYPERLINK, =cmd|...).
 * OWASP's advice for CSV: a leading ' makes the cell text. Words with such
 * a character later on are left alone. */
static void test_formula_cells_get_a_quote(void **state) {
    static const char *const us[] = { "=HYPERLINK(\"http://x\")", "+1+2", "-2+3", "@SUM(A1)", "a=b - c", "'quoted" };
    char *out = export_of(us, SB_ARRAY_LEN(us));
    assert_string_equal(out, "complaint\t'=HYPERLINK(\"http://x\")\n"
                             "complaint\t'+1+2\n"
                             "complaint\t'-2+3\n"
                             "complaint\t'@SUM(A1)\n"
                             "complaint\ta=b - c\n"
                             "complaint\t'quoted\n");
    sb_free(out);
}

/* Tab, CR and LF became spaces, but \v, \f, the 0x1c-0x1e separators,
 * U+0085, U+2028 and U+2029 passed: readers that split lines on them
 * (Python's str.splitlines, Unicode-aware editors) saw a forged row. */
static void test_every_line_break_becomes_a_space(void **state) {
    static const char *const us[] = {
        "a\tb\nc\rd",
        "v\vf\fe",
        "fs\x1cgs\x1drs\x1e.",
        "nel\xc2\x85ls\xe2\x80\xa8ps\xe2\x80\xa9" "end",
        "\xe2\x80\xa6 \xc2\xa9 kept",               /* U+2026, U+00A9: not breaks, kept as they are */
    };
    char *out = export_of(us, SB_ARRAY_LEN(us));
    assert_string_equal(out, "complaint\ta b c d\n"
                             "complaint\tv f e\n"
                             "complaint\tfs gs rs .\n"
                             "complaint\tnel ls ps end\n"
                             "complaint\t\xe2\x80\xa6 \xc2\xa9 kept\n");
    sb_free(out);
}

/* runtime.retention's feedback_days: the marks made before the cut go,
 * and their words leave the file and its WAL while it is open. */
static void test_retention_purges_old_marks(void **state) {
    char dir[] = "/tmp/sb-test-feedback-XXXXXX", path[64], err[SB_ERR_LEN];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/feedback.sqlite", dir);
    sb_feedback *f;
    assert_int_equal(sb_feedback_open(path, true, &f, err), 0);
    const int64_t day = 86400, now = 100 * day;
    sb_feedback_row old = { .call_id = "call-old", .pipeline = "hotline", .predicted = "billing", .intent = "complaint",
                            .utterance = "card 6222020200112233445 was charged twice", .time = now - 8 * day };
    sb_feedback_row recent = old;
    recent.call_id = "call-recent";
    recent.utterance = "my meter 13912345678 reads wrong";
    recent.time = now - 3600;
    assert_int_equal(sb_feedback_put(f, &old, err), 0);
    assert_int_equal(sb_feedback_put(f, &recent, err), 0);
    assert_true(db_holds(path, "6222020200112233445"));
    assert_int_equal(sb_feedback_purge_before(f, now - 7 * day, err), 1);
    assert_false(db_holds(path, "6222020200112233445"));
    assert_true(db_holds(path, "13912345678"));
    sb_jw w;
    sb_jw_init(&w);
    assert_int_equal(sb_feedback_tsv(f, NULL, collect, &w, err), 0);
    assert_string_equal(w.p, "complaint\tmy meter 13912345678 reads wrong\n");
    sb_jw_free(&w);
    assert_int_equal(sb_feedback_purge_before(f, now - 7 * day, err), 0);
    sb_feedback_close(f);
    char cmd[96];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_formula_cells_get_a_quote),
        cmocka_unit_test(test_every_line_break_becomes_a_space),
        cmocka_unit_test(test_retention_purges_old_marks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
