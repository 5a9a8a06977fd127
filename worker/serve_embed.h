/* serve_embed.h - the worker's encoder side (serve_embed.c), shared with
 * serve.c only; not an API. A worker whose GGUF is an encoder model
 * (sb_encoder_file_is_encoder) answers `embed` instead of generate/score. */
#ifndef SB_SERVE_EMBED_H
#define SB_SERVE_EMBED_H

#include <stdatomic.h>

#include "worker/engine/sb_encoder.h"
#include "ipc/sb_ipc.h"

/* Texts in one `embed` request: as many as a score request has candidates,
 * and ~900 KB of f64 vectors for e5-small, well inside a frame. */
#define SB_EMBED_MAX_TEXTS 256

/* Token caps (a text's tokens as `switchboard embed --tokens` lists them:
 * <s>, prefix, pieces, </s>). 8192 a text is 16 windows of 510, about
 * 5-13 s of e5-small on 2 cores (docs/EMBEDDINGS.md, "Speed"): longer than
 * any passage retrieval needs, short enough that one text cannot hold the
 * encoder for minutes. 65536 a request is eight such texts. Over either,
 * the request is refused with SB_IPC_INPUT_TOO_LONG before any encoding. */
#define SB_EMBED_MAX_TEXT_TOKENS 8192
#define SB_EMBED_MAX_REQUEST_TOKENS 65536

/* 1: the file at path is an encoder GGUF; 0: it is not (or cannot be read:
 * the decoder loader then reports why). */
int sb_serve_is_encoder_file(const char *path);

/* The adapters a request names ("adapter": NAME; --named-adapter). */
#define SB_SERVE_MAX_ADAPTERS 16
struct sb_lora;
typedef struct {
    const char *names[SB_SERVE_MAX_ADAPTERS];
    struct sb_lora *loras[SB_SERVE_MAX_ADAPTERS];
    int n;
} sb_serve_adapters;

/* Run one `embed` request on the compute thread and answer r (ok, error or
 * cancelled: checked between the layers of every window). All texts are
 * tokenized and checked against the caps first. The request's "adapter"
 * (none, or one of ads by name) applies to it alone; without one, the
 * encoder's own (--adapter, or none). wr is scratch. */
void sb_serve_embed(sb_encoder *e, const sb_serve_adapters *ads, sb_ipc_reply *r, const sb_mp_obj *params,
                    const atomic_int *cancel, sb_mp_writer *wr);

/* The `info` map of an encoder worker (docs/ipc.md). */
void sb_serve_encoder_info(const sb_encoder *e, const char *name, const char *path, sb_mp_writer *wr);

#endif
