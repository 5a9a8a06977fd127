/* sb_sampler.h - token sampling (llama.cpp's default chain), stop strings for
 * streaming, and log-softmax helpers.
 *
 * The chain is llama.cpp's common_sampler default, in its order:
 *
 *     penalties -> top-k -> top-p -> min-p -> temperature -> draw
 *
 * with llama.cpp's semantics for each stage (src/llama-sampling.cpp):
 *  - penalties look at the last repeat_last_n accepted tokens. For a token seen
 *    `count` times there: a positive logit is divided by repeat_penalty, a
 *    logit <= 0 multiplied by it; then count * frequency_penalty and (once)
 *    presence_penalty are subtracted. Skipped when all three are neutral.
 *  - top-k keeps the k highest logits (k <= 0 or >= n_vocab: all).
 *  - top-p takes the softmax of what is left (temperature 1) and keeps the
 *    smallest prefix, by descending probability, whose mass reaches top_p
 *    (top_p >= 1: off).
 *  - min-p keeps the tokens whose probability is at least min_p times the
 *    largest one, i.e. logit >= max_logit + log(min_p) (min_p <= 0: off).
 *  - temperature divides the logits; the token is then drawn from their
 *    softmax with our own PRNG (xoshiro256** seeded by splitmix64), so a seed
 *    gives the same sequence on every machine - but not llama.cpp's sequence,
 *    which comes from std::mt19937.
 * Every filter keeps at least one token (llama.cpp's min_keep = 1).
 * temp <= 0 is greedy: the argmax after penalties, lowest id on ties (what
 * llama.cpp's temperature stage reduces to when temp <= 0).
 *
 * Ties between equal logits are always broken towards the lower token id, so
 * the result depends only on the logits, the parameters and the seed.
 *
 * Cost: no allocation per token, no sort of the vocabulary. The default chain
 * makes one pass over the logits (a blocked threshold scan feeding a k-sized
 * heap). top_k <= 0 with top_p < 1 takes three passes (max, exp and a mass
 * histogram, collect) and sorts only the tokens of the histogram bucket where
 * the mass crosses top_p.
 */
#ifndef SB_SAMPLER_H
#define SB_SAMPLER_H

#include <stddef.h>
#include <stdint.h>
#include "common/sb_common.h"

/* llama.cpp's LLAMA_DEFAULT_SEED: ask for a fresh random seed. */
#define SB_SEED_RANDOM 0xFFFFFFFFu

typedef struct {
    float    temp;              /* <= 0: greedy */
    int      top_k;             /* <= 0: off */
    float    top_p;             /* >= 1: off */
    float    min_p;             /* <= 0: off */
    float    repeat_penalty;    /* 1: off */
    int      repeat_last_n;     /* window for all penalties; 0: off. llama.cpp's
                                   -1 ("the context size") must be resolved by
                                   the caller, who knows the context. */
    float    presence_penalty, frequency_penalty;   /* 0: off */
    uint64_t seed;              /* SB_SEED_RANDOM: from the OS at creation */
} sb_sampling_params;

/* llama.cpp's CLI defaults (common/common.h, common_params_sampling):
 * temp 0.8, top_k 40, top_p 0.95, min_p 0.05, repeat_penalty 1.0 (llama.cpp
 * turned repetition penalties off by default), repeat_last_n 64, presence and
 * frequency 0, seed SB_SEED_RANDOM. */
void sb_sampling_defaults(sb_sampling_params *p);

typedef struct sb_sampler sb_sampler;

/* Validate p and size every scratch buffer for n_vocab (n_vocab >= 1).
 * SB_EINVAL (with err) for parameters outside their domain: NaN anywhere,
 * repeat_penalty <= 0, repeat_last_n < 0. (top_p <= 0 is allowed: as in
 * llama.cpp it keeps only the most likely token.) */
int  sb_sampler_new(const sb_sampling_params *p, int32_t n_vocab, sb_sampler **out, char *err);
void sb_sampler_free(sb_sampler *s);

/* Choose the next token from n_vocab logits. Does not modify the logits and
 * does not record the token: call sb_sampler_accept with the token actually
 * used (it may differ, e.g. a forced token). */
int32_t sb_sampler_sample(sb_sampler *s, const float *logits);
/* The same chain over the tokens whose bit is set in mask (bit t of
 * mask[t/32]; a grammar's allowed set): the others count as -inf logits at
 * every stage, so the draw is the unconstrained chain's renormalised over
 * the allowed tokens. Always returns an allowed token when there is one;
 * -1 when the mask is empty, -2 when the masked copy of the logits (made
 * on first use) cannot be allocated. Costs one pass over the logits on top
 * of sb_sampler_sample. */
int32_t sb_sampler_sample_masked(sb_sampler *s, const float *logits, const uint32_t *mask);
/* The distribution sb_sampler_sample draws from (speculative decoding's p):
 * its support into ids[] and probabilities summing to 1 into probs[] (both
 * n_vocab long), returning the count (>= 1; greedy: the argmax, prob 1).
 * Uses no randomness. */
int sb_sampler_dist(sb_sampler *s, const float *logits, int32_t *ids, float *probs);
/* The next number of the sampler's PRNG, uniform in [0, 1). */
double sb_sampler_uniform(sb_sampler *s);
/* Add a token to the penalty history (a no-op when penalties are off). */
void sb_sampler_accept(sb_sampler *s, int32_t token);
/* Forget the history and restart the PRNG from the seed in use, so that a
 * reset sampler repeats its sequence (a random seed is not redrawn). */
void sb_sampler_reset(sb_sampler *s);
/* The seed in use: the one given, or the one drawn for SB_SEED_RANDOM. */
uint64_t sb_sampler_seed(const sb_sampler *s);
const sb_sampling_params *sb_sampler_params(const sb_sampler *s);

/* log(sum(exp(logits[i]))), computed stably (max subtracted, double sum);
 * log P(token) = logits[token] - sb_logsumexp(logits, n). -INFINITY for n <= 0
 * or all -inf. */
double sb_logsumexp(const float *logits, int n);

/* ---- Stop strings for streaming ----
 *
 * Feed the text of each generated token; the matcher tells what can be sent
 * to the client now. It holds back (1) the longest tail that could be the
 * start of a stop string, so a stop split across tokens is still caught and
 * never half-sent, and (2) an incomplete UTF-8 sequence at the end (a byte
 * token can end mid-codepoint). Emitted text is always valid UTF-8: stray
 * invalid bytes become U+FFFD, one per maximal invalid subsequence (as
 * Python's errors="replace" and the WHATWG decoder do). Stops are matched on
 * the raw bytes. */
typedef struct sb_stop_matcher sb_stop_matcher;

/* stops: n_stops non-empty NUL-terminated strings (copied); n_stops may be 0,
 * then only UTF-8 holding applies. */
int  sb_stop_new(const char *const *stops, size_t n_stops, sb_stop_matcher **out, char *err);
void sb_stop_free(sb_stop_matcher *m);
void sb_stop_reset(sb_stop_matcher *m);

/* Feed len bytes. *emit and *emit_len receive the text that is safe to send now
 * (owned by the matcher, valid until the next call; may be empty). Returns 1
 * if a stop string matched: the emitted text ends just before it, the rest is
 * dropped and generation should end; later feeds emit nothing and return 1.
 * Returns 0 when no stop matched yet, SB_ENOMEM on allocation failure. */
int  sb_stop_feed(sb_stop_matcher *m, const char *piece, size_t len,
                  const char **emit, size_t *emit_len);
/* Generation ended without a stop: release the held bytes (an incomplete
 * UTF-8 tail becomes U+FFFD). Returns 0 or SB_ENOMEM. */
int  sb_stop_flush(sb_stop_matcher *m, const char **emit, size_t *emit_len);
/* Index of the stop string that matched, or -1. */
int  sb_stop_which(const sb_stop_matcher *m);

#endif
