/* caller_words.c - what a caller's short answer means, in Chinese and
 * English as people say it on a phone line and as speech recognition
 * writes it: yes or no ("是的", "对对对", "嗯", "不用了", "yeah", "nope"),
 * a correction's lead ("不对，是 ...", "no, it's ..."), a refusal to give
 * something ("不方便说", "I'd rather not", "skip").
 *
 * Yes and no are read from the answer's first words only: the scan takes
 * the words of the table below from the start, fillers ("呃", "um") and
 * punctuation between them, and stops at the first word that is not in it.
 * "yes I want my pension" is a yes; "my name is not John" says nothing,
 * because "my" stops the scan before "not". Of the words read, the last
 * firm one decides ("嗯，不是" is a no: 嗯 is only a murmur; "不是，是的"
 * a yes); a word of doubt ("不知道", "not sure", "是不是") or a question
 * ("...吗", "?") makes it unknown. A one-character Chinese word (是, 对,
 * 好, 行, 不) counts only when a boundary follows it, so "是我的账号" and
 * "对我来说" are not answers.
 */
#include <string.h>

#include "common/sb_utf8.h"
#include "router/run/stage_internal.h"

enum { W_FILLER, W_WEAK_YES, W_YES, W_NO, W_DOUBT };

typedef struct {
    const char *text;       /* lower case; English words separated by one space */
    int what;
} word;

/* Longer entries before the shorter ones they start with is not needed:
 * the scan takes the longest match. */
static const word WORDS[] = {
    /* Chinese: yes */
    {"是的", W_YES}, {"是啊", W_YES}, {"是呀", W_YES}, {"是", W_YES}, {"对的", W_YES}, {"对", W_YES},
    {"没错", W_YES}, {"没问题", W_YES}, {"好的", W_YES}, {"好啊", W_YES}, {"好", W_YES}, {"可以", W_YES},
    {"行", W_YES}, {"确认", W_YES}, {"确定", W_YES}, {"当然", W_YES}, {"正确", W_YES}, {"不错", W_YES},
    {"要的", W_YES}, {"需要", W_YES}, {"没错儿", W_YES}, {"对头", W_YES},
    /* as speech recognition writes them: homophones of 的, drawled particles */
    {"是滴", W_YES}, {"是地", W_YES}, {"对滴", W_YES}, {"对地", W_YES}, {"好滴", W_YES}, {"好嘞", W_YES},
    {"好哒", W_YES}, {"行吧", W_YES}, {"中", W_YES}, {"嗯呢", W_WEAK_YES}, {"嗯哼", W_WEAK_YES}, {"恩恩", W_WEAK_YES},
    {"嗯", W_WEAK_YES}, {"嗯嗯", W_WEAK_YES}, {"恩", W_WEAK_YES}, {"哦", W_WEAK_YES}, {"噢", W_WEAK_YES},
    /* Chinese: no */
    {"不是", W_NO}, {"不对", W_NO}, {"不用", W_NO}, {"不用了", W_NO}, {"不要", W_NO}, {"不要了", W_NO},
    {"不行", W_NO}, {"不好", W_NO}, {"不可以", W_NO}, {"不需要", W_NO}, {"不", W_NO}, {"没有", W_NO},
    {"错了", W_NO}, {"错", W_NO}, {"否", W_NO}, {"算了", W_NO}, {"别", W_NO}, {"不必", W_NO},
    {"不确认", W_NO}, {"搞错了", W_NO},
    {"不用啦", W_NO}, {"不要啦", W_NO}, {"不了", W_NO}, {"不是滴", W_NO}, {"不是地", W_NO},
    /* Chinese: doubt, questions */
    {"不知道", W_DOUBT}, {"不确定", W_DOUBT}, {"不清楚", W_DOUBT}, {"不晓得", W_DOUBT}, {"是不是", W_DOUBT},
    {"对不对", W_DOUBT}, {"好不好", W_DOUBT}, {"行不行", W_DOUBT}, {"可不可以", W_DOUBT}, {"吗", W_DOUBT},
    {"说不好", W_DOUBT}, {"不一定", W_DOUBT}, {"中不中", W_DOUBT},
    /* Chinese: fillers */
    {"啊", W_FILLER}, {"呀", W_FILLER}, {"吧", W_FILLER}, {"呢", W_FILLER}, {"嘛", W_FILLER},
    {"啦", W_FILLER}, {"了", W_FILLER}, {"呃", W_FILLER}, {"额", W_FILLER}, {"那个", W_FILLER},
    {"喂", W_FILLER}, {"哎", W_FILLER}, {"唉", W_FILLER}, {"哈", W_FILLER}, {"就是", W_FILLER},
    {"的", W_FILLER}, {"谢谢", W_FILLER}, {"谢了", W_FILLER}, {"多谢", W_FILLER}, {"麻烦了", W_FILLER},
    /* English: yes */
    {"yes", W_YES}, {"yeah", W_YES}, {"yea", W_YES}, {"yah", W_YES}, {"ya", W_YES}, {"yep", W_YES},
    {"yup", W_YES}, {"sure", W_YES}, {"ok", W_YES}, {"okay", W_YES}, {"okey", W_YES}, {"o k", W_YES},
    {"correct", W_YES}, {"right", W_YES}, {"that's right", W_YES}, {"that is right", W_YES},
    {"that's correct", W_YES}, {"absolutely", W_YES}, {"of course", W_YES}, {"definitely", W_YES},
    {"alright", W_YES}, {"all right", W_YES}, {"affirmative", W_YES}, {"exactly", W_YES},
    {"no problem", W_YES}, {"sure thing", W_YES}, {"go ahead", W_YES}, {"please do", W_YES},
    {"i think so", W_YES}, {"uh huh", W_WEAK_YES}, {"mhm", W_WEAK_YES}, {"mm", W_WEAK_YES},
    {"hmm", W_FILLER},
    /* English: no */
    {"no", W_NO}, {"nope", W_NO}, {"nah", W_NO}, {"naw", W_NO}, {"not really", W_NO}, {"not", W_NO},
    {"no thanks", W_NO}, {"no thank you", W_NO}, {"wrong", W_NO}, {"that's wrong", W_NO},
    {"incorrect", W_NO}, {"negative", W_NO}, {"never", W_NO}, {"no way", W_NO}, {"don't", W_NO},
    {"noe", W_NO}, {"nay", W_NO}, {"na", W_NO},
    {"do not", W_NO}, {"i don't think so", W_NO}, {"not at all", W_NO}, {"cancel", W_NO},
    /* English: doubt */
    {"not sure", W_DOUBT}, {"i'm not sure", W_DOUBT}, {"don't know", W_DOUBT}, {"i don't know", W_DOUBT},
    {"maybe", W_DOUBT}, {"perhaps", W_DOUBT}, {"dunno", W_DOUBT},
    /* English: fillers */
    {"uh", W_FILLER}, {"um", W_FILLER}, {"umm", W_FILLER}, {"er", W_FILLER}, {"erm", W_FILLER},
    {"well", W_FILLER}, {"oh", W_FILLER}, {"please", W_FILLER}, {"thanks", W_FILLER},
    {"thank you", W_FILLER}, {"it is", W_FILLER}, {"it's", W_FILLER}, {"that's it", W_FILLER},
    {"i mean", W_FILLER}, {"actually", W_FILLER}, {"sorry", W_FILLER}, {"so", W_FILLER},
};

/* A phrase given up on: what to say when a caller will not or cannot give
 * a slot. Found anywhere in the answer (after the answer offered no value). */
static const char *const REFUSALS[] = {
    "不方便", "不想说", "不想告诉", "不告诉", "不能说", "不知道", "不记得", "记不得", "忘了", "想不起来",
    "跳过", "不提供", "没有", "保密",
    "rather not", "don't want to", "do not want to", "won't say", "can't say", "cannot say",
    "don't know", "do not know", "dont know", "no idea", "don't remember", "can't remember", "forgot",
    "skip", "prefer not", "pass", "don't have", "not telling", "none",
};

/* The answer, lower case, each run of punctuation and space one space;
 * curly apostrophes straight, a question mark the doubt word 吗. Bytes of
 * other scripts are kept. from (if not NULL, cap entries) gets the offset
 * in `in` of each byte written. */
#define PUT(c, i) do { if (from) from[n] = (i); out[n++] = (char)(c); } while (0)
static size_t simplify(const char *in, char *out, size_t cap, size_t *from) {
    size_t n = 0;
    bool space = true;
    for (const unsigned char *p = (const unsigned char *)in; *p && n + 6 < cap;) {
        size_t len = sb_utf8_valid(p, strlen((const char *)p));
        uint32_t cp = *p;
        if (len > 1) sb_utf8_decode(p, len, &cp);
        if (!len) len = 1;
        bool sep = cp < 0x80 ? !(cp == '\'' || (cp >= '0' && cp <= '9') || ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z'))
                             : (cp >= 0x3000 && cp <= 0x303F) || (cp >= 0xFF00 && cp <= 0xFF0F) ||
                               (cp >= 0xFF1A && cp <= 0xFF20) || cp == 0x2026 || cp == 0x2014 || cp == 0xFF5E;
        size_t at = (size_t)((const char *)p - in);
        if (cp == 0x2019 || cp == 0x2018) { PUT('\'', at); space = false; p += len; continue; }
        if (cp == '?' || cp == 0xFF1F) {
            if (!space) PUT(' ', at);
            for (size_t k = 0; k < 3; k++) PUT("吗"[k], at);
            PUT(' ', at);
            space = true;
            p += len;
            continue;
        }
        if (sep) {
            if (!space) PUT(' ', at);
            space = true;
        } else {
            for (size_t k = 0; k < len; k++) PUT(cp >= 'A' && cp <= 'Z' ? p[k] | 0x20 : p[k], at + k);
            space = false;
        }
        p += len;
    }
    out[n] = 0;
    return n;
}

static bool ascii_word_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '\''; }

static const word *word_at(const char *t);

/* Whether t (after a one-character word) is the end of the answer or goes
 * on with another word of the table: "是。" and "对对对" are answers,
 * "是我的账号" and "是 4410032" are not (the latter is a correction's "是"). */
static bool ends_answer(const char *t) {
    while (*t == ' ') t++;
    return !*t || word_at(t);
}

/* The longest word of the table at t (NULL: none). A word ending in an
 * ASCII letter must end the text's word; a one-character Chinese word must
 * end the answer or be followed by another word of the table. */
static const word *word_at(const char *t) {
    const word *best = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < SB_ARRAY_LEN(WORDS); i++) {
        size_t l = strlen(WORDS[i].text);
        if (l <= best_len || strncmp(t, WORDS[i].text, l)) continue;
        char next = t[l];
        if (ascii_word_char(WORDS[i].text[l - 1]) && ascii_word_char(next)) continue;
        if (l == 3 && (unsigned char)WORDS[i].text[0] >= 0x80 && WORDS[i].what != W_FILLER &&
            WORDS[i].what != W_DOUBT && !ends_answer(t + l))
            continue;
        best = &WORDS[i];
        best_len = l;
    }
    return best;
}

rt_yesno rt_caller_lead(const char *answer, size_t *rest) {
    char s[512];
    size_t from[512];
    size_t n = simplify(answer, s, sizeof s, from);
    int firm = -1, weak = 0;
    const char *t = s;
    for (;;) {
        while (*t == ' ') t++;
        const word *w = *t ? word_at(t) : NULL;
        if (!w) break;
        if (w->what == W_DOUBT) { firm = W_DOUBT; break; }
        if (w->what == W_YES || w->what == W_NO) firm = w->what;
        weak |= w->what == W_WEAK_YES;
        t += strlen(w->text);
    }
    if (rest) *rest = (size_t)(t - s) < n ? from[t - s] : strlen(answer);
    if (firm == W_DOUBT) return RT_UNKNOWN;
    if (firm >= 0) return firm == W_YES ? RT_YES : RT_NO;
    return weak ? RT_YES : RT_UNKNOWN;
}

rt_yesno rt_caller_yesno(const char *answer) { return rt_caller_lead(answer, NULL); }

bool rt_caller_refuses(const char *answer) {
    char s[512];
    simplify(answer, s, sizeof s, NULL);
    for (size_t i = 0; i < SB_ARRAY_LEN(REFUSALS); i++) {
        const char *at = strstr(s, REFUSALS[i]);
        size_t l = strlen(REFUSALS[i]);
        if (!at) continue;
        bool ascii = !((unsigned char)REFUSALS[i][0] & 0x80);
        if (ascii && ((at > s && ascii_word_char(at[-1])) || ascii_word_char(at[l]))) continue;
        return true;
    }
    return false;
}

bool rt_caller_may_ask(const char *answer) {
    size_t rest = 0;
    if (rt_caller_refuses(answer)) return false;
    return rt_caller_lead(answer, &rest) == RT_UNKNOWN || rt_says_something(answer + rest);
}
