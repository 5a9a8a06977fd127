/* sup_internal.h - what supervisor.c (the loop) and sup_proc.c (fork/exec,
 * exit statuses, the state file) share. Not part of the module's API. */
#ifndef SB_SUP_INTERNAL_H
#define SB_SUP_INTERNAL_H

#include <event2/util.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/sb_config.h"
#include "ipc/sb_ipc.h"
#include "supervisor/sb_supervisor.h"

struct event;
struct event_base;

typedef enum { KIND_WORKER, KIND_ROUTER } child_kind;

typedef enum {
    ST_WAITING,     /* no process: restart backoff, or an old generation holds the socket */
    ST_STARTING,    /* forked; probing its socket with `health` */
    ST_READY,
    ST_FAILED,      /* given up: exit 2 or a crash loop; SIGHUP retries */
    ST_STOPPING,    /* SIGTERM sent during shutdown */
    ST_STOPPED,
} child_state;

typedef struct sup sup;
typedef struct child child;

/* One supervised slot: a model's worker or the router. Its process comes
 * and goes; the slot stays until the model leaves the config. */
struct child {
    child *next;
    sup *s;
    child_kind kind;
    char *name;                 /* model name, or "router" */
    char label[SB_CONFIG_MAX_NAME + 16];    /* "worker 'NAME'" or "router", for logs */
    char *sock;                 /* DIR/NAME.sock */
    const sb_config_model *m;   /* worker: its entry in s->cfg (updated on reload) */
    pid_t pid;                  /* 0: no process */
    pid_t wait_for_pid;         /* a retiree that may still hold our socket */
    child_state state;
    int64_t since_unix_ms;      /* of the last state change */
    uint64_t spawned_ns, ready_ns;
    double last_ready_ms;       /* spawn -> ready, last time */
    sb_restart_policy policy;
    int starts, restarts;
    char last_exit[64];         /* "exited with status 1", "killed by signal 9 (Killed)" */
    char reason[SB_ERR_LEN + 32]; /* why failed */
    struct event *timer;        /* backoff, readiness probe, old-socket wait */
    sb_ipc_aclient *probe;
    bool probe_pending;
};

/* A process of an older generation (its model changed or was removed on
 * reload): SIGTERM'd, draining, SIGKILL'd at the deadline, never restarted. */
typedef struct retiree {
    struct retiree *next;
    sup *s;
    char name[SB_CONFIG_MAX_NAME + 1];
    pid_t pid;
    struct event *kill_timer;
} retiree;

enum { STOP_NONE = 0, STOP_ROUTER = 1, STOP_WORKERS = 2 };

struct sup {
    sb_supervisor_opts opts;
    char *config_path;          /* absolute (realpath) */
    sb_config *cfg;
    struct event_base *base;
    struct event *sig_chld, *sig_term, *sig_int, *sig_hup, *stop_timer;
    child *children;            /* workers in config order, then the router */
    retiree *retirees;
    int stopping;               /* STOP_* phase */
    bool announced_ready;       /* "runtime up": nothing is starting any more */
    bool said_ready;            /* "ready": /health answers 200 (sup_ready.c), once */
    bool ready_pending;         /* a `health` call to the router is out */
    sb_ipc_aclient *ready_probe;
    struct event *ready_timer;
    uint64_t started_ns;
    int lock_fd;
    char *state_path, *lock_path;
};

const char *sup_state_name(child_state st);
int64_t sup_unix_ms(void);
/* "exited with status N" / "killed by signal N (Name)[, core dumped]". */
void sup_describe_status(int status, char *out, size_t cap);
/* fork + exec `/proc/self/exe worker|router ...` for c. 0 and *pid, or
 * SB_EIO (+ err) when fork failed or exec failed in the child (which then
 * exits 127 and is reaped as a crash). */
int  sup_spawn(child *c, pid_t *pid, char *err);
/* The router's slot, or NULL (--no-router, or no router in this build). */
child *sup_router_child(sup *s);
/* Rewrite DIR/state.json atomically (write a temp file, rename). */
void sup_write_state(sup *s);
void sup_on_retiree_kill(evutil_socket_t fd, short what, void *arg);
/* sup_ready.c: log the one "ready: ..." line once every child is ready and
 * the router says every local model is up. Call on every child that becomes
 * ready; a no-op once said or while stopping. */
void sup_ready_check(sup *s);
void sup_ready_on_timer(evutil_socket_t fd, short what, void *arg);
/* Drop the readiness probe and its timer (shutdown). */
void sup_ready_stop(sup *s);

#endif
