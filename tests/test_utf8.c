/* test_utf8.c - common/utf8.c's printing helper: names from outside (file
 * names, sources) shown on a terminal without their control characters
 * taking effect.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "common/sb_common.h"
#include "common/sb_utf8.h"

static void expect_escaped(const char *in, const char *want) {
    char *got = sb_utf8_escape_controls(in);
    assert_non_null(got);
    assert_string_equal(got, want);
    sb_free(got);
}

/* C0 (ESC, newline, tab, CR, BEL), DEL, C1 (U+009B is a one-character CSI
 * for terminals that honour C1) and bytes that are not UTF-8 (a lone 0x9B is
 * a CSI for 8-bit terminals) are escaped; a backslash is doubled so an
 * escape in the output is never ambiguous; other UTF-8 is kept. */
static void test_escape_controls(void **state) {
    expect_escaped("plain name.md", "plain name.md");
    expect_escaped("ev\x1b[31mil\nname.txt", "ev\\x1b[31mil\\nname.txt");
    expect_escaped("a\tb\rc\x07" "d\x7f", "a\\tb\\rc\\x07d\\x7f");
    expect_escaped("c1 \xc2\x9b" "2J", "c1 \\u009b2J");
    expect_escaped("lone \x9b byte", "lone \\x9b byte");
    expect_escaped("back\\slash", "back\\\\slash");
    expect_escaped("社保卡 \xc2\xa0 caf\xc3\xa9 \xf0\x9f\x98\x80", "社保卡 \xc2\xa0 caf\xc3\xa9 \xf0\x9f\x98\x80");
    expect_escaped("", "");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escape_controls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
