/* test_privacy.c - check digits (common/sb_checksum.h) and personal-data
 * detection, placeholders, masks and restore (privacy/sb_privacy.h).
 *
 * Each detector on the forms it promises (and the span, type and value it
 * reports), the numbers it must leave alone, operator patterns, the
 * placeholder table and restore, random and truncated UTF-8 in exactly
 * sized heap buffers (so ASan sees any read past the end), allocation
 * failures, and a latency figure on a typical utterance (printed; the bar
 * asserted here is generous because the machine is shared - the measured
 * p95 is `switchboard privacy eval`'s, docs/PRIVACY.md).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/sb_checksum.h"
#include "common/sb_common.h"
#include "privacy/sb_privacy.h"

static sb_privacy *det;

static int setup(void **state) {
    char err[SB_ERR_LEN];
    return sb_privacy_new(SB_PII_ALL, &det, err);
}

static int teardown(void **state) {
    sb_privacy_free(det);
    return 0;
}

/* ---------------------------------------------------------------- checksums */

static void test_mod11_2(void **state) {
    assert_int_equal(sb_mod11_2_check("11010519491231002", 17), 'X');
    assert_int_equal(sb_mod11_2_check("32010219800229001", 17), '3');
    assert_true(sb_mod11_2_valid("11010519491231002X", 18));
    assert_true(sb_mod11_2_valid("11010519491231002x", 18));
    assert_true(sb_mod11_2_valid("440305199001011237", 18) == (sb_mod11_2_check("44030519900101123", 17) == '7'));
    assert_true(sb_mod11_2_valid("510107200001010005", 18));
    assert_false(sb_mod11_2_valid("510107200001010004", 18));       /* one digit off */
    assert_false(sb_mod11_2_valid("110105194912310021", 18));       /* X written as 1 */
    assert_false(sb_mod11_2_valid("11010519491231002Y", 18));
    assert_int_equal(sb_mod11_2_check("1101051949123100a", 17), 0);
    assert_false(sb_mod11_2_valid("X", 1));
    /* every single-digit change of a valid ID is caught (MOD 11-2's promise) */
    char id[] = "320102198002290013";
    for (int i = 0; i < 17; i++) {
        char keep = id[i];
        for (char c = '0'; c <= '9'; c++) {
            if (c == keep) continue;
            id[i] = c;
            assert_false(sb_mod11_2_valid(id, 18));
        }
        id[i] = keep;
    }
}

static void test_luhn(void **state) {
    assert_true(sb_luhn_valid("79927398713", 11));                  /* the textbook vector */
    assert_int_equal(sb_luhn_check("7992739871", 10), '3');
    assert_true(sb_luhn_valid("4111111111111111", 16));
    assert_false(sb_luhn_valid("4111111111111112", 16));
    assert_true(sb_luhn_valid("4012888888881881", 16));
    assert_true(sb_luhn_valid("6222021234567890128", 19));
    assert_false(sb_luhn_valid("6222021234567890127", 19));
    assert_true(sb_luhn_valid("378282246310005", 15));              /* Amex test number */
    assert_false(sb_luhn_valid("4111-1111", 9));
    assert_false(sb_luhn_valid("0", 1));
    assert_int_equal(sb_luhn_check("12a", 3), 0);
}

/* ---------------------------------------------------------------- detection */

/* The one detection in text: its type name, value and span text. */
static void expect_one(const char *text, const char *type, const char *value, const char *span) {
    sb_pii_spans s = {0};
    assert_int_equal(sb_privacy_detect(det, text, strlen(text), &s), 0);
    if (s.n != 1) fail_msg("'%s': %zu detections, want 1 %s", text, s.n, type);
    const char *name = s.v[0].type == SB_PII_CUSTOM ? sb_privacy_pattern_name(det, s.v[0].pattern)
                                                      : sb_pii_type_name(s.v[0].type);
    if (strcmp(name, type) || strcmp(s.v[0].value, value))
        fail_msg("'%s': %s '%s', want %s '%s'", text, name, s.v[0].value, type, value);
    if (span && (strlen(span) != s.v[0].end - s.v[0].start || memcmp(text + s.v[0].start, span, strlen(span))))
        fail_msg("'%s': span '%.*s', want '%s'", text, (int)(s.v[0].end - s.v[0].start), text + s.v[0].start, span);
    sb_pii_spans_free(&s);
}

static void expect_none(const char *text) {
    sb_pii_spans s = {0};
    assert_int_equal(sb_privacy_detect(det, text, strlen(text), &s), 0);
    if (s.n) fail_msg("'%s': found %s '%s', want nothing", text, sb_pii_type_name(s.v[0].type), s.v[0].value);
    sb_pii_spans_free(&s);
}

static void test_resident_id(void **state) {
    expect_one("身份证号11010519491231002X，谢谢", "ID", "11010519491231002X", "11010519491231002X");
    expect_one("ID 11010519491231002x.", "ID", "11010519491231002X", "11010519491231002x");
    expect_one("身份证 320102 19800229 0013", "ID", "320102198002290013", "320102 19800229 0013");
    expect_one("老身份证号是440106910228574", "ID", "440106910228574", NULL);
    expect_one("My old ID card number was 440106910228574.", "ID", "440106910228574", NULL);
    expect_one("身份证幺幺零幺零五幺九四九幺二三幺零零二叉", "ID", "11010519491231002X", NULL);
    expect_one("it is one one oh one oh five one nine four nine one two three one oh oh two X",
               "ID", "11010519491231002X", NULL);
    expect_none("身份证号11010519491231002Y");                 /* letter glued on: a code */
    expect_one("第1,11010519491231002X", "ID", "11010519491231002X", NULL);
    expect_none("code 13812345678x");                          /* x after 11 digits: a code */
    expect_none("number 110105194912310021 please");           /* bad check digit, no card context */
    expect_none("number 110105194913310029 please");           /* month 13 */
    expect_none("old number 440106911328574");                 /* 15 digits, month 13 */
}

static void test_mobile(void **state) {
    expect_one("手机13812345678", "PHONE", "13812345678", "13812345678");
    expect_one("call 138 1234 5678 now", "PHONE", "13812345678", "138 1234 5678");
    expect_one("call 138-1234-5678.", "PHONE", "13812345678", "138-1234-5678");
    expect_one("tel +86 138 1234 5678", "PHONE", "13812345678", "+86 138 1234 5678");
    expect_one("tel (+86) 13812345678", "PHONE", "13812345678", "(+86) 13812345678");
    expect_one("tel 0086-13812345678", "PHONE", "13812345678", "0086-13812345678");
    expect_one("电话幺三八 零零幺三 八零零零", "PHONE", "13800138000", "幺三八 零零幺三 八零零零");
    expect_one("电话一三八，〇〇一三，八〇〇〇。", "PHONE", "13800138000", NULL);
    expect_one("电话幺三八两两两两五六七八", "PHONE", "13822225678", NULL);
    expect_one("It's one three eight double oh one three eight triple oh.", "PHONE", "13800138000", NULL);
    expect_one("Oh, one three eight, double oh one three, eight oh oh oh", "PHONE", "13800138000", NULL);
    expect_one("1 3 8 0 0 1 3 8 0 0 0", "PHONE", "13800138000", NULL);
    expect_one("电话＋86 138 0013 8000", "PHONE", "13800138000", "＋86 138 0013 8000");
    expect_none("amounts 13,800,138,000 and 1380.0138000, IP 13.123.145.167");
    expect_none("call 12345, 95598, 12333 or 12366 and 110, 120, 119");
    expect_one("it's plus eight six, one three eight oh oh one three eight oh oh oh", "PHONE", "13800138000",
               "plus eight six, one three eight oh oh one three eight oh oh oh");
    expect_one("号码加八六幺三八零零幺三八零零零", "PHONE", "13800138000", "加八六幺三八零零幺三八零零零");
    expect_none("增加八六个");
    expect_one("号码１３８００１３８０００", "PHONE", "13800138000", NULL);   /* full-width */
    expect_none("12812345678");                                 /* 12x is no mobile prefix */
}

static void test_two_numbers_in_one_run(void **state) {
    const char *t = "13812345678 13987654321";
    sb_pii_spans s = {0};
    assert_int_equal(sb_privacy_detect(det, t, strlen(t), &s), 0);
    assert_int_equal(s.n, 2);
    assert_string_equal(s.v[0].value, "13812345678");
    assert_string_equal(s.v[1].value, "13987654321");
    sb_pii_spans_free(&s);
}

static void test_landline(void **state) {
    expect_one("电话010-12345678", "TEL", "01012345678", "010-12345678");
    expect_one("call 0755 8888 1234", "TEL", "075588881234", "0755 8888 1234");
    expect_one("电话(021)62345678", "TEL", "02162345678", "(021)62345678");
    expect_one("电话（021）6234 5678", "TEL", "02162345678", "（021）6234 5678");
    expect_one("电话0571-8765432", "TEL", "05718765432", NULL);
    expect_one("tel +86 755 8888 1234", "TEL", "075588881234", NULL);
    expect_one("座机零七五五 八八八八 幺二三四", "TEL", "075588881234", NULL);
    expect_none("读数 00123456789 度");                          /* 00 is no area code */
    expect_none("电话 0123456789");                              /* 01x other than 010 */
}

static void test_card(void **state) {
    expect_one("退到6222021234567890128这张卡", "CARD", "6222021234567890128", NULL);
    expect_one("card 6222 0212 3456 7890 128.", "CARD", "6222021234567890128", "6222 0212 3456 7890 128");
    expect_one("the number 4111111111111111 was charged", "CARD", "4111111111111111", NULL);
    expect_one("我的账号是1234567890123", "CARD", "1234567890123", NULL);        /* context, no Luhn */
    expect_one("My account number is 98765432101", "CARD", "98765432101", NULL);
    expect_one("卡号六二二二 零二幺二 三四五六 七八九零 幺二八", "CARD", "6222021234567890128", NULL);
    expect_none("the number 4111111111111112 was charged");    /* fails Luhn, no context */
    expect_none("订单 1234567890123");                           /* no context, fails Luhn */
    expect_none("卡里余额 1234 元");                              /* a card word, a short number */
}

static void test_email_passport_plate(void **state) {
    expect_one("邮箱 Zhang.San@Example.COM。", "EMAIL", "zhang.san@example.com", "Zhang.San@Example.COM");
    expect_one("mail li_si+tax@mail.gov.cn.", "EMAIL", "li_si+tax@mail.gov.cn", "li_si+tax@mail.gov.cn");
    expect_none("email me at @home or a@b");
    expect_one("护照E12345678", "PASSPORT", "E12345678", NULL);
    expect_one("passport EA1234567", "PASSPORT", "EA1234567", NULL);
    expect_one("旧护照G12345678", "PASSPORT", "G12345678", NULL);
    expect_one("diplomatic DE1234567", "PASSPORT", "DE1234567", NULL);
    expect_one("passport number K1234567 please", "PASSPORT", "K1234567", NULL);
    expect_one("护照号码 AB12345678", "PASSPORT", "AB12345678", NULL);
    expect_none("ticket K1234567 please");                     /* generic form needs "passport" */
    expect_none("Reference SR12345678 and GD202405011234");
    expect_one("车牌京A12345", "PLATE", "京A12345", "京A12345");
    expect_one("车牌粤B·D12345", "PLATE", "粤BD12345", "粤B·D12345");
    expect_one("车牌沪C 12345F", "PLATE", "沪C12345F", NULL);
    expect_one("川A8B9C7违章", "PLATE", "川A8B9C7", NULL);
    expect_one("教练车京A1234学", "PLATE", "京A1234学", NULL);
    expect_none("京ABCD12");                                    /* three letters of five */
    expect_none("新A123");
}

/* Numbers a hotline hears all day that identify nobody. */
static void test_not_identifiers(void **state) {
    static const char *const neg[] = {
        "请拨打12345或者95598，也可以打12333、12329、96116、110、120、119、122、12366。",
        "Please call 12345, 95598 or 10086.",
        "企业热线400-820-8820，800-810-8888", "hotline 4006695566",
        "2024年5月1日下午3点，电费356.5元，用电1234 kWh，增长12.5%。",
        "The call took 45 minutes on 2024-05-01 at 14:30, total 1,234,567.89 yuan.",
        "二〇二四年三月交了十二个月，一共三千五百元。",
        "I paid twelve months in twenty twenty-three, one or two times.",
        "本月用水18 m³，燃气23.5立方米，读数0012345678度，电表12345678kWh。",
        "日期20240501，时间 09:00-17:30，工单GD2024050112345，编号WO-2024-123456",
        "邮编100010，人社部发〔2023〕12号，第3条",
        "缴费基数 12,345 元，比例 8%，一共 36 个月，从 1998 年开始。",
        "Press 1 for English, then 2, then 0 for the operator at 3 o'clock.",
        "meter readings 1234 5678 and 9012",
        "amounts 1,234,567,890 and 12.345678901234",
        "社保卡余额6003470元，卡里还有45笔",
    };
    for (size_t i = 0; i < SB_ARRAY_LEN(neg); i++) expect_none(neg[i]);
}

static void test_types_mask(void **state) {
    sb_privacy *only;
    char err[SB_ERR_LEN];
    assert_int_equal(sb_privacy_new(1u << SB_PII_PHONE, &only, err), 0);
    const char *t = "手机13812345678，身份证11010519491231002X，邮箱a@b.cn";
    sb_pii_spans s = {0};
    assert_int_equal(sb_privacy_detect(only, t, strlen(t), &s), 0);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.v[0].type, SB_PII_PHONE);
    sb_pii_spans_free(&s);
    sb_privacy_free(only);
    assert_int_equal(sb_privacy_new(1u << 20, &only, err), SB_EINVAL);
    assert_int_equal(sb_pii_type_parse("phone"), SB_PII_PHONE);
    assert_int_equal(sb_pii_type_parse("nope"), -1);
}

static void test_operator_patterns(void **state) {
    sb_privacy *p;
    char err[SB_ERR_LEN];
    assert_int_equal(sb_privacy_new(SB_PII_ALL, &p, err), 0);
    assert_int_equal(sb_privacy_add_pattern(p, "STAFF", "EMP-[0-9]{6}", SB_PII_ON_TEXT, err), 0);
    assert_int_equal(sb_privacy_add_pattern(p, "MEMBER", "9[0-9]{9}", SB_PII_ON_DIGITS, err), 0);
    assert_int_equal(sb_privacy_add_pattern(p, "bad", "x", SB_PII_ON_TEXT, err), SB_EINVAL);
    assert_non_null(strstr(err, "A-Z"));
    assert_int_equal(sb_privacy_add_pattern(p, "PHONE", "x", SB_PII_ON_TEXT, err), SB_EINVAL);
    assert_int_equal(sb_privacy_add_pattern(p, "STAFF", "x", SB_PII_ON_TEXT, err), SB_EINVAL);
    assert_int_equal(sb_privacy_add_pattern(p, "BROKEN", "a[", SB_PII_ON_TEXT, err), SB_EINVAL);
    assert_non_null(strstr(err, "BROKEN"));
    assert_int_equal(sb_privacy_add_pattern(p, "EMPTY", "", SB_PII_ON_TEXT, err), SB_EINVAL);

    const char *t = "工号EMP-123456，会员号 九八七 六五四 三二一〇，手机13812345678";
    sb_pii_spans s = {0};
    assert_int_equal(sb_privacy_detect(p, t, strlen(t), &s), 0);
    assert_int_equal(s.n, 3);
    assert_string_equal(sb_privacy_pattern_name(p, s.v[0].pattern), "STAFF");
    assert_string_equal(s.v[0].value, "EMP-123456");
    assert_string_equal(sb_privacy_pattern_name(p, s.v[1].pattern), "MEMBER");
    assert_string_equal(s.v[1].value, "9876543210");
    assert_int_equal(s.v[2].type, SB_PII_PHONE);
    /* a NUL inside the text does not hide what follows it */
    assert_int_equal(sb_privacy_detect(p, "EMP-123456\0EMP-654321", 21, &s), 0);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.v[1].start, 11);
    /* the digit pattern must match the whole number, not a part of it */
    const char *u = "order 98765432101";
    assert_int_equal(sb_privacy_detect(p, u, strlen(u), &s), 0);
    assert_int_equal(s.n, 0);
    /* a built-in detection wins over an overlapping text pattern */
    sb_privacy *q;
    assert_int_equal(sb_privacy_new(SB_PII_ALL, &q, err), 0);
    assert_int_equal(sb_privacy_add_pattern(q, "LONGNUM", "[0-9]{11}", SB_PII_ON_TEXT, err), 0);
    const char *v = "手机13812345678";
    assert_int_equal(sb_privacy_detect(q, v, strlen(v), &s), 0);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.v[0].type, SB_PII_PHONE);
    sb_pii_spans_free(&s);
    sb_privacy_free(q);
    sb_privacy_free(p);
}

/* ---------------------------------------------------------------- replace, restore */

static char *redact(const char *text, sb_pii_mode mode, sb_pii_table *t) {
    char *out;
    size_t n;
    assert_int_equal(sb_privacy_redact(det, text, strlen(text), mode, t, NULL, &out, &n), 0);
    assert_int_equal(strlen(out), n);
    return out;
}

static void test_pseudonymize_restore(void **state) {
    sb_pii_table t = {0};
    const char *in = "手机13812345678，再说一遍幺三八 幺二三四 五六七八；另一个139 8765 4321；身份证11010519491231002X";
    char *out = redact(in, SB_PII_PSEUDONYMIZE, &t);
    assert_string_equal(out, "手机⟨PHONE_1⟩，再说一遍⟨PHONE_1⟩；另一个⟨PHONE_2⟩；身份证⟨ID_1⟩");
    assert_int_equal(t.n, 3);
    /* the next turn of the same call keeps the numbering */
    char *out2 = redact("还是13987654321，卡号6222021234567890128", SB_PII_PSEUDONYMIZE, &t);
    assert_string_equal(out2, "还是⟨PHONE_2⟩，卡号⟨CARD_1⟩");
    assert_int_equal(t.n, 4);

    /* a model's reply: exact, spaced, ASCII-bracketed and lower-case echoes */
    const char *reply = "已给⟨PHONE_1⟩发短信，< phone 2 >也收到；〈ID_1〉核实了，卡⟨CARD 1⟩，⟨PHONE_9⟩不认识，<b>粗体</b>";
    char *back;
    size_t n;
    assert_int_equal(sb_privacy_restore(&t, reply, strlen(reply), false, &back, &n), 0);
    assert_string_equal(back, "已给13812345678发短信，13987654321也收到；11010519491231002X核实了，卡6222021234567890128，"
                              "⟨PHONE_9⟩不认识，<b>粗体</b>");
    sb_free(back);
    /* raw: the caller's own wording comes back, so the round trip is exact */
    assert_int_equal(sb_privacy_restore(&t, out, strlen(out), true, &back, &n), 0);
    assert_string_equal(back, "手机13812345678，再说一遍13812345678；另一个139 8765 4321；身份证11010519491231002X");
    sb_free(back);
    sb_free(out);
    sb_free(out2);
    sb_pii_table_free(&t);

    sb_pii_table empty = {0};
    assert_int_equal(sb_privacy_restore(&empty, "⟨PHONE_1⟩", strlen("⟨PHONE_1⟩"), false, &back, &n), 0);
    assert_string_equal(back, "⟨PHONE_1⟩");
    sb_free(back);
    char *none = redact("", SB_PII_PSEUDONYMIZE, &empty);
    assert_string_equal(none, "");
    sb_free(none);
    char *dummy;
    assert_int_equal(sb_privacy_redact(det, "x", 1, SB_PII_PSEUDONYMIZE, NULL, NULL, &dummy, &n), SB_EINVAL);
}

static void test_mask_and_tag(void **state) {
    const char *in = "手机13812345678 卡6222021234567890128 证11010519491231002X 邮箱zhang@qq.com 车京A12345 电话010-62345678";
    char *m = redact(in, SB_PII_MASK, NULL);
    assert_string_equal(m, "手机138****5678 卡***************0128 证1****************X 邮箱z***@qq.com 车京A***45 电话010******78");
    char *g = redact(in, SB_PII_TAG, NULL);
    assert_string_equal(g, "手机⟨PHONE⟩ 卡⟨CARD⟩ 证⟨ID⟩ 邮箱⟨EMAIL⟩ 车⟨PLATE⟩ 电话⟨TEL⟩");
    sb_free(m);
    sb_free(g);
    assert_int_equal(sb_pii_mode_parse("mask"), SB_PII_MASK);
    assert_int_equal(sb_pii_mode_parse("erase"), -1);
}

/* ---------------------------------------------------------------- hostile input */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next_u32(void) {
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return (uint32_t)((rng * 2685821657736338717ull) >> 32);
}

/* Pieces that exercise every path: digits, numerals, digit words, separators,
 * '+', '@', brackets, province characters, and cut UTF-8 sequences. */
static const char *const PIECES[] = {
    "1", "3", "8", "0", "9", "X", "x", " ", "-", "+", "+86", "0086", "(", ")", "（", "）", ",", "，",
    "幺", "两", "零", "〇", "叉", "one", "oh", "double", "triple", " nine", "ex", "@", ".", "a", "E",
    "京", "粤", "·", "学", "card", "卡号", "护照", "passport", "\xE5", "\xE5\xB9", "\xFF", "\xC0\x80",
    "\xF4\x90\x80\x80", "\xED\xA0\x80", "13812345678", "11010519491231002", "6222021234567890128",
    "１", "\x00", "⟨PHONE_1⟩", "<", ">", "〈",
};

static void check_spans(const sb_pii_spans *s, size_t len) {
    for (size_t i = 0; i < s->n; i++) {
        assert_true(s->v[i].start < s->v[i].end);
        assert_true(s->v[i].end <= len);
        assert_true(strlen(s->v[i].value) < SB_PII_VALUE_MAX);
        if (i) assert_true(s->v[i - 1].end <= s->v[i].start);
    }
}

static void test_random_bytes(void **state) {
    sb_privacy *p;
    char err[SB_ERR_LEN];
    assert_int_equal(sb_privacy_new(SB_PII_ALL, &p, err), 0);
    assert_int_equal(sb_privacy_add_pattern(p, "DIG", "^7+$", SB_PII_ON_DIGITS, err), 0);
    assert_int_equal(sb_privacy_add_pattern(p, "TXT", "[xX]{2}", SB_PII_ON_TEXT, err), 0);
    sb_pii_spans s = {0};
    for (int iter = 0; iter < 3000; iter++) {
        char tmp[512];
        size_t len = 0;
        int pieces = (int)(next_u32() % 40);
        for (int k = 0; k < pieces; k++) {
            const char *pc = PIECES[next_u32() % SB_ARRAY_LEN(PIECES)];
            size_t pl = pc[0] ? strlen(pc) : 1;
            if (len + pl > sizeof tmp) break;
            memcpy(tmp + len, pc, pl);
            len += pl;
        }
        if (iter % 3 == 0)                      /* and plain random bytes */
            for (size_t k = 0; k < len; k++) if (next_u32() % 4 == 0) tmp[k] = (char)next_u32();
        char *buf = malloc(len ? len : 1);     /* exactly len bytes: ASan catches over-reads */
        memcpy(buf, tmp, len);
        assert_int_equal(sb_privacy_detect(p, buf, len, &s), 0);
        check_spans(&s, len);
        sb_pii_table t = {0};
        char *out, *back;
        size_t n, bn;
        assert_int_equal(sb_privacy_redact(p, buf, len, SB_PII_PSEUDONYMIZE, &t, &s, &out, &n), 0);
        check_spans(&s, len);
        assert_int_equal(sb_privacy_restore(&t, out, n, true, &back, &bn), 0);
        if (s.n == t.n && !memmem(buf, len, "\xE2\x9F\xA8", 3) && !memchr(buf, '<', len) && !memmem(buf, len, "\xE3\x80\x88", 3))
            assert_memory_equal(back, buf, len);  /* one wording a value, no brackets of its own: exact */
        sb_free(out);
        sb_free(back);
        assert_int_equal(sb_privacy_redact(p, buf, len, SB_PII_MASK, NULL, NULL, &out, &n), 0);
        sb_free(out);
        sb_pii_table_free(&t);
        free(buf);
    }
    sb_pii_spans_free(&s);
    sb_privacy_free(p);
}

/* Long inputs stay linear: a megabyte of spaced digits, of numerals, of words. */
static void test_long_input(void **state) {
    static const char *const unit[] = {"1 ", "幺", "one ", "double ", "13812345678 ", "a@b.cn ", "京A12345 "};
    for (size_t u = 0; u < SB_ARRAY_LEN(unit); u++) {
        size_t ul = strlen(unit[u]), len = (1u << 20) / ul * ul;
        char *buf = malloc(len);
        for (size_t i = 0; i < len; i += ul) memcpy(buf + i, unit[u], ul);
        sb_pii_spans s = {0};
        uint64_t t0 = sb_now_ns();
        assert_int_equal(sb_privacy_detect(det, buf, len, &s), 0);
        double ms = (double)(sb_now_ns() - t0) / 1e6;
        check_spans(&s, len);
        print_message("long input '%s' x %zu: %zu detections in %.1f ms\n", unit[u], len / ul, s.n, ms);
        if (u == 4 || u >= 5) assert_int_equal(s.n, len / ul);     /* every one of them, none cut */
        assert_true(ms < 20000);
        sb_pii_spans_free(&s);
        free(buf);
    }
}

static void test_alloc_failures(void **state) {
    const char *in = "手机13812345678，身份证11010519491231002X，卡6222021234567890128，邮箱a@b.cn，车京A12345，"
                     "电话010-62345678，护照E12345678，13912345678，13712345678，13612345678";
    int failed = 0;
    for (long k = 0; k < 60; k++) {
        sb_pii_table t = {0};
        char *out = NULL;
        size_t n;
        sb_malloc_fail_after(k);
        int rc = sb_privacy_redact(det, in, strlen(in), SB_PII_PSEUDONYMIZE, &t, NULL, &out, &n);
        sb_malloc_fail_after(-1);
        if (rc) {
            assert_int_equal(rc, SB_ENOMEM);
            assert_null(out);
            failed++;
        } else {
            assert_non_null(out);
            assert_int_equal(t.n, 10);
        }
        sb_free(out);
        sb_pii_table_free(&t);
    }
    assert_true(failed > 5);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* A typical utterance (about 120 characters, three identifiers). The bar
 * here is 10x the target, for a loaded machine and sanitizers. */
static void test_latency(void **state) {
    const char *in = "您好，我的手机号是幺三八 零零幺三 八零零零，身份证号11010519491231002X，"
                     "上个月2024年5月1日交的电费356.5元没有到账，银行卡6222 0212 3456 7890 128，请拨打95598查一下。";
    enum { N = 2000 };
    static uint64_t ns[N];
    sb_pii_spans s = {0};
    for (int i = 0; i < N; i++) {
        sb_pii_table t = {0};
        char *out;
        size_t n;
        uint64_t t0 = sb_now_ns();
        assert_int_equal(sb_privacy_redact(det, in, strlen(in), SB_PII_PSEUDONYMIZE, &t, &s, &out, &n), 0);
        ns[i] = sb_now_ns() - t0;
        assert_int_equal(s.n, 3);
        sb_free(out);
        sb_pii_table_free(&t);
    }
    qsort(ns, N, sizeof ns[0], cmp_u64);
    double p50 = (double)ns[N / 2] / 1e3, p95 = (double)ns[N * 95 / 100] / 1e3;
    print_message("latency of one pseudonymization (%zu bytes): p50 %.1f us, p95 %.1f us\n", strlen(in), p50, p95);
    assert_true(p95 < 10000.0);
    sb_pii_spans_free(&s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mod11_2),
        cmocka_unit_test(test_luhn),
        cmocka_unit_test(test_resident_id),
        cmocka_unit_test(test_mobile),
        cmocka_unit_test(test_two_numbers_in_one_run),
        cmocka_unit_test(test_landline),
        cmocka_unit_test(test_card),
        cmocka_unit_test(test_email_passport_plate),
        cmocka_unit_test(test_not_identifiers),
        cmocka_unit_test(test_types_mask),
        cmocka_unit_test(test_operator_patterns),
        cmocka_unit_test(test_pseudonymize_restore),
        cmocka_unit_test(test_mask_and_tag),
        cmocka_unit_test(test_random_bytes),
        cmocka_unit_test(test_long_input),
        cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_latency),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
