/* reply.c - the reply side of the wire protocol: the sb_ipc_reply_*
 * functions, which compute threads call (see server.c for the threading and
 * ownership rules). Each encodes its frame on the calling thread and pushes it
 * onto the hub, whose eventfd wakes the loop to write it out.
 */
#include "ipc/reply_internal.h"

#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

/* ================================================================= hub */

void sb_ipc_hub_unref(hub *h) {
    pthread_mutex_lock(&h->mu);
    int left = --h->refs;
    pthread_mutex_unlock(&h->mu);
    if (left) return;
    pthread_mutex_destroy(&h->mu);
    if (h->efd >= 0) close(h->efd);
    sb_free(h);
}

void sb_ipc_reply_destroy(sb_ipc_reply *r) {
    hub *h = r->hub;
    sb_mp_doc_free(r->doc);
    sb_free(r);
    sb_ipc_hub_unref(h);
}

int sb_ipc_hub_enqueue(sb_ipc_reply *r, void *frame, size_t len, bool final) {
    qitem *it;
    if (final) it = &r->final_item;
    else if (!(it = sb_malloc(sizeof *it))) { sb_free(frame); return SB_ENOMEM; }
    *it = (qitem){ .reply = r, .frame = frame, .len = len, .final = final };
    hub *h = r->hub;
    pthread_mutex_lock(&h->mu);
    if (!h->server_alive) {
        pthread_mutex_unlock(&h->mu);
        sb_free(frame);
        if (final) sb_ipc_reply_destroy(r); else sb_free(it);
        return SB_ECANCEL;
    }
    bool was_empty = !h->head;
    if (h->tail) h->tail->next = it; else h->head = it;
    h->tail = it;
    /* Written under the lock: once we unlock, the loop may free the reply
     * and the server may go, and with them the last ref on efd. */
    if (was_empty) {
        uint64_t one = 1;
        ssize_t w = write(h->efd, &one, sizeof one);
        (void)w;                /* EAGAIN: the counter is already non-zero */
    }
    pthread_mutex_unlock(&h->mu);
    return 0;
}

/* ======================================================= reply (any thread) */

/* Encode into a fresh buffer: compute threads have no writer of their own. */
typedef int (*encode_fn)(sb_mp_writer *w, const sb_ipc_reply *r, const void *a, const void *b);

static int encode_detached(const sb_ipc_reply *r, encode_fn fn, const void *a, const void *b,
                           void **frame, size_t *len) {
    sb_mp_writer *w;
    if (sb_mp_writer_new(&w)) return SB_ENOMEM;
    int rc = fn(w, r, a, b);
    if (!rc) rc = sb_mp_writer_detach(w, frame, len);
    sb_mp_writer_free(w);
    return rc;
}

static int enc_event(sb_mp_writer *w, const sb_ipc_reply *r, const void *a, const void *b) {
    return sb_ipc_encode_event(w, r->max_frame, r->id, a, b);
}
static int enc_ok(sb_mp_writer *w, const sb_ipc_reply *r, const void *a, const void *b) {
    return sb_ipc_encode_ok(w, r->max_frame, r->id, a);
}
static int enc_error(sb_mp_writer *w, const sb_ipc_reply *r, const void *a, const void *b) {
    return sb_ipc_encode_error(w, r->max_frame, r->id, a, b);
}

int sb_ipc_reply_event(sb_ipc_reply *r, const char *event, const sb_mp_writer *data) {
    if (atomic_load(&r->cancelled)) return SB_ECANCEL;
    void *frame;
    size_t len;
    int rc = encode_detached(r, enc_event, event, data, &frame, &len);
    if (rc) return rc;
    return sb_ipc_hub_enqueue(r, frame, len, false);
}

static int finish(sb_ipc_reply *r, encode_fn fn, const void *a, const void *b) {
    if (atomic_exchange(&r->finished, true)) {
        sb_error("ipc: second final response for request %llu ignored", (unsigned long long)r->id);
        return SB_EINVAL;
    }
    if (r->final_fn) r->final_fn(r->final_arg);
    /* Close the guard so the cancel callback can no longer start; if it is
     * running on the loop thread right now, wait for it (it only sets a
     * flag), unless it is this very call's caller. */
    for (;;) {
        int g = GUARD_OPEN;
        if (atomic_compare_exchange_weak(&r->guard, &g, GUARD_CLOSED) || g == GUARD_CLOSED) break;
        if (g == GUARD_IN_CALLBACK && pthread_equal(r->cb_thread, pthread_self())) {
            atomic_store(&r->guard, GUARD_CLOSED);
            break;
        }
        sched_yield();
    }
    void *frame = NULL;
    size_t len = 0;
    int rc = 0;
    if (atomic_load(&r->cancelled) != DISCONNECTED) {
        rc = encode_detached(r, fn, a, b, &frame, &len);
        if (rc == SB_EINVAL || rc == SB_ERANGE) {
            /* The handler built a bad or oversized result: the client still
             * deserves an answer it can parse. */
            char msg[128];
            snprintf(msg, sizeof msg, rc == SB_ERANGE ? "response exceeds the frame limit"
                                                      : "handler produced malformed msgpack");
            sb_error("ipc: request %llu: %s", (unsigned long long)r->id, msg);
            if (encode_detached(r, enc_error, SB_IPC_INTERNAL, msg, &frame, &len)) frame = NULL;
        }
    }
    int qrc = sb_ipc_hub_enqueue(r, frame, len, true);
    return rc ? rc : qrc;
}

int sb_ipc_reply_ok(sb_ipc_reply *r, const sb_mp_writer *result) {
    return finish(r, enc_ok, result, NULL);
}

int sb_ipc_reply_error(sb_ipc_reply *r, const char *code, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return finish(r, enc_error, code, msg);
}

bool sb_ipc_reply_cancelled(const sb_ipc_reply *r) { return atomic_load(&r->cancelled) != 0; }

void sb_ipc_reply_on_cancel(sb_ipc_reply *r, sb_ipc_cancel_fn fn, void *arg) {
    r->cancel_fn = fn;
    r->cancel_arg = arg;
}

void sb_ipc_reply_on_final(sb_ipc_reply *r, sb_ipc_final_fn fn, void *arg) {
    r->final_fn = fn;
    r->final_arg = arg;
}
