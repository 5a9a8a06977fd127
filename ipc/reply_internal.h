/* reply_internal.h - what the server's loop (server.c) and the reply side
 * (reply.c, any thread) share: the hub that carries frames from compute
 * threads to the loop, and the reply itself. Private to ipc/.
 */
#ifndef SB_IPC_REPLY_INTERNAL_H
#define SB_IPC_REPLY_INTERNAL_H

#include "ipc/sb_ipc.h"

#include <pthread.h>
#include <stdatomic.h>

enum { NOT_CANCELLED = 0, CANCEL_REQUESTED = 1, DISCONNECTED = 2 };
/* reply->guard: the cancel callback and the final response exclude each
 * other. Once the final response is queued the handler may free whatever
 * the callback's argument points to (a worker frees its job), so the
 * callback must neither run after that nor be running while it happens. */
enum { GUARD_OPEN = 0, GUARD_IN_CALLBACK = 1, GUARD_CLOSED = 2 };

typedef struct conn conn;

typedef struct qitem {
    struct qitem *next;
    sb_ipc_reply *reply;
    void *frame;                /* NULL: nothing to send (encode failed / dropped) */
    size_t len;
    bool final;
} qitem;

typedef struct {
    pthread_mutex_t mu;
    qitem *head, *tail;
    int efd;
    bool server_alive;
    int refs;
} hub;

struct sb_ipc_reply {
    sb_ipc_reply *prev, *next;  /* in conn->inflight (loop thread) */
    conn *conn;                 /* loop thread only; NULL once detached */
    hub *hub;
    uint64_t id;
    size_t max_frame;
    sb_mp_doc *doc;             /* keeps params alive */
    atomic_int cancelled;
    atomic_bool finished;
    atomic_int guard;           /* GUARD_*: see above */
    pthread_t cb_thread;        /* runs the cancel callback; valid while IN_CALLBACK */
    bool cancel_called;
    sb_ipc_cancel_fn cancel_fn;
    void *cancel_arg;
    sb_ipc_final_fn final_fn;
    void *final_arg;
    qitem final_item;           /* preallocated so a final reply cannot fail to queue */
};

/* Drops one reference; the last one frees the hub and its eventfd. */
void sb_ipc_hub_unref(hub *h);
/* Frees a reply whose final frame has been dequeued (or dropped), and its
 * reference on the hub. */
void sb_ipc_reply_destroy(sb_ipc_reply *r);
/* Any thread. Queues frame (taken over; NULL: nothing to send) for the loop
 * and wakes it. SB_ECANCEL once the server is gone (a final reply is then
 * destroyed here); SB_ENOMEM. */
int sb_ipc_hub_enqueue(sb_ipc_reply *r, void *frame, size_t len, bool final);

#endif
