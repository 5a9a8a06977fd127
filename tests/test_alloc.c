/* test_alloc.c - common/'s aligned allocation (sb_common.h):
 *  a. small and big buffers are 64-byte aligned, zeroed and writable to
 *     their last byte, and go back through sb_aligned_free (under ASan a
 *     wrong free or an overrun fails);
 *  b. a big buffer is resident only where written (mincore): a buffer
 *     sized for the biggest batch costs what a pass writes;
 *  c. the failure hook fails either kind.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/sb_common.h"

static void check_zeroed_aligned(size_t n) {
    uint8_t *p = sb_aligned_alloc(n);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % 64, 0);
    for (size_t i = 0; i < n; i += 4093) assert_int_equal(p[i], 0);
    assert_int_equal(p[n - 1], 0);
    memset(p, 0x5a, n);
    sb_aligned_free(p);
}

static void test_aligned_zeroed(void **state) {
    (void)state;
    const size_t sizes[] = { 1, 63, 64, 65, 4096, 255 * 1024, 256 * 1024, 9u << 20 };
    for (size_t i = 0; i < SB_ARRAY_LEN(sizes); i++) check_zeroed_aligned(sizes[i]);
    sb_aligned_free(NULL);
}

static int resident_pages(const uint8_t *p, size_t n) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const uint8_t *lo = (const uint8_t *)((uintptr_t)p / page * page);
    const size_t len = (size_t)(p + n - lo);
    unsigned char *vec = malloc((len + page - 1) / page);
    assert_non_null(vec);
    assert_int_equal(mincore((void *)lo, len, vec), 0);
    int r = 0;
    for (size_t i = 0; i < (len + page - 1) / page; i++) r += vec[i] & 1;
    free(vec);
    return r;
}

static void test_big_is_lazy(void **state) {
    (void)state;
    const size_t n = 8u << 20;
    uint8_t *p = sb_aligned_alloc(n);
    assert_non_null(p);
    assert_true(resident_pages(p, n) <= 1);         /* at most the header's page */
    memset(p + (1u << 20), 1, 1u << 20);            /* one "row" of 1 MiB written */
    const int r = resident_pages(p, n);
    const int per_mib = (int)((1u << 20) / (size_t)sysconf(_SC_PAGESIZE));
    assert_true(r >= per_mib && r <= per_mib + 3);
    sb_aligned_free(p);
}

static void test_fail_hook(void **state) {
    (void)state;
    sb_malloc_fail_after(0);
    assert_null(sb_aligned_alloc(100));
    sb_malloc_fail_after(0);
    assert_null(sb_aligned_alloc(1u << 20));
    sb_malloc_fail_after(-1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_aligned_zeroed),
        cmocka_unit_test(test_big_is_lazy),
        cmocka_unit_test(test_fail_hook),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
