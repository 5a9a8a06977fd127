/* sb_feedback.h - operators' corrections of routed calls (SQLite).
 *
 * A supervisor who sees a call routed to the wrong desk marks the right
 * intent (POST /v1/calls/ID/feedback). Each mark is one row, keyed by the
 * call id (marking the call again replaces it), with the caller's words so
 * misroutes become examples: the TSV export is the `label<TAB>utterance`
 * format of an intent stage's examples_file and of tools/eval_routing.py.
 * The file is created 0600: it holds callers' words.
 */
#ifndef SB_FEEDBACK_H
#define SB_FEEDBACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sb_feedback sb_feedback;

typedef struct {
    const char *call_id, *pipeline;
    const char *predicted;          /* the intent the router chose */
    const char *intent;             /* the operator's */
    const char *utterance;          /* the caller's words */
    int64_t time;                   /* Unix seconds */
} sb_feedback_row;

/* Open (create: make the file, 0600, and its table). 0, SB_ENOTFOUND (no
 * file and !create), SB_EIO, SB_EFORMAT (not a feedback database). */
int  sb_feedback_open(const char *path, bool create, sb_feedback **out, char *err);
void sb_feedback_close(sb_feedback *f);                 /* NULL ok */
int  sb_feedback_put(sb_feedback *f, const sb_feedback_row *row, char *err);

/* Delete the marks made before `before` (Unix seconds): how many, or
 * SB_EIO (< 0). A purge that deleted any leaves no copy of their words in the
 * file or its WAL (secure_delete, a truncating checkpoint). */
int  sb_feedback_purge_before(sb_feedback *f, int64_t before, char *err);

/* Erasure: delete the mark of call_id (NULL: none) and every mark whose
 * utterance match() says holds what is erased (match NULL: none), leaving
 * no copy in the file or its WAL. How many, or SB_EIO (< 0). */
typedef bool (*sb_feedback_match_fn)(void *arg, const char *text, size_t len);
int  sb_feedback_erase(sb_feedback *f, const char *call_id, sb_feedback_match_fn match, void *arg, char *err);

/* Every row of pipeline (NULL: all), oldest first, as TSV lines
 * "intent\tutterance\n" handed to out; out returning non-zero stops with
 * that code. In the utterance, tabs and line breaks (\n \r \v \f, the
 * 0x1c-0x1e separators, U+0085, U+2028, U+2029) become spaces, and one
 * starting with = + - or @ gets a leading ' (a spreadsheet would run it as
 * a formula). */
typedef int (*sb_feedback_out_fn)(void *arg, const char *line, size_t len);
int  sb_feedback_tsv(sb_feedback *f, const char *pipeline, sb_feedback_out_fn out, void *arg, char *err);

/* Counts per (predicted, intent) pair, most frequent first. */
typedef void (*sb_feedback_pair_fn)(void *arg, const char *pipeline, const char *predicted, const char *intent,
                                    int64_t n);
int  sb_feedback_confusion(sb_feedback *f, sb_feedback_pair_fn fn, void *arg, char *err);

#endif
