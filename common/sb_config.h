/* sb_config.h - the YAML configuration (docs/config.md), loaded and validated.
 *
 * sb_config_load() reads the file with libyaml (only config.c sees yaml.h),
 * checks every key against the schema and returns plain structs. Anything
 * wrong - invalid YAML, an unknown or duplicate key, a wrong type, an
 * impossible value, a missing model file - is rejected with the first error
 * as "FILE:LINE:COLUMN: key.path: what was expected".
 *
 * Relative paths resolve against the directory of the config file and are
 * stored absolute. Sections that later issues interpret (pipelines, and the
 * raw cache section) are also kept as a generic node tree with positions, so
 * their validators can report errors the same way.
 */
#ifndef SB_CONFIG_H
#define SB_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/sb_common.h"

struct stat;

#define SB_CONFIG_MAX_BYTES   (4u << 20)    /* a config is a few KB; refuse junk early */
#define SB_CONFIG_MAX_DEPTH   64
#define SB_CONFIG_MAX_NAME    64            /* model / pipeline names */
#define SB_CONFIG_MAX_THREADS 256
#define SB_CONFIG_MIN_CTX     16
#define SB_CONFIG_MAX_CTX     (1 << 20)
#define SB_CONFIG_MAX_PARALLEL 64           /* sequences per worker: a batch holds at most 64 */
#define SB_CONFIG_MAX_KV_MB   (1 << 20)     /* 1 TiB of KV: past any box this runs on */

/* ------------------------------------------------------ generic node tree */

typedef enum { SB_CFG_SCALAR, SB_CFG_MAP, SB_CFG_SEQ } sb_config_kind;

typedef struct sb_config_node sb_config_node;
typedef struct { sb_config_node *key, *value; } sb_config_pair;

struct sb_config_node {
    sb_config_kind kind;
    int line, col;              /* 1-based position where the node starts */
    /* SB_CFG_SCALAR */
    char *value;                /* NUL-terminated */
    size_t len;
    bool quoted;                /* '…', "…", | or >: a string, never a number/null */
    /* SB_CFG_MAP: keys are scalars, unique */
    sb_config_pair *pairs;
    size_t n_pairs;
    /* SB_CFG_SEQ */
    sb_config_node **items;
    size_t n_items;
};

/* The value for `key` in a map node, or NULL (also when map is not a map). */
const sb_config_node *sb_config_node_get(const sb_config_node *map, const char *key);
/* A plain null (~, null, or nothing) scalar. */
bool sb_config_node_is_null(const sb_config_node *n);
/* YAML text -> *root (NULL for an empty document), the caller frees it with
 * sb_config_tree_free. Errors are "PATH:LINE:COL: why" in err: SB_EINVAL for
 * invalid YAML or what the loader refuses (aliases, tags, duplicate keys,
 * several documents), SB_ENOMEM. */
int sb_config_tree_parse(const char *text, size_t len, const char *path, sb_config_node **root, char *err);
void sb_config_tree_free(sb_config_node *n);

/* ----------------------------------------------------------- the config */

typedef enum { SB_KV_F16, SB_KV_F32 } sb_kv_type;

typedef struct {
    char *name;                 /* the key under models: [A-Za-z0-9_-], <= 64 */
    int line, col;              /* where the entry starts */
    /* A local model: gguf is set. A remote OpenAI-compatible one: upstream. */
    char *gguf;                 /* absolute path of a readable regular file */
    int threads;                /* [1, 256], default 1 */
    int ctx;                    /* [16, 2^20], default 2048 */
    sb_kv_type kv_type;         /* f16 (default) | f32 */
    int idle_unload_s;          /* 0 = "keep"; N = "unload-after:N" */
    int kv_mb;                  /* the worker's KV pool in MiB; 0 = unset: the worker sizes it */
    int lookup;                 /* prompt-lookup draft length [0, 16]; 0 = off (docs/SPECULATIVE.md) */
    char *draft;                /* another local model of the config drafting for this one, or NULL */
    char *adapter;              /* an encoder's LoRA adapter file (absolute path), or NULL */
    uint64_t adapter_size;      /* its identity when loaded, so a retrained adapter counts as a change */
    int64_t adapter_mtime_ns;
    /* adapters: {NAME: FILE}: more adapters a request picks by name */
    char **adapter_names, **adapter_paths;
    size_t n_adapters;
    uint64_t adapters_id;       /* a hash of their sizes and mtimes: retrained counts as changed */
    char *upstream;             /* http(s)://host[:port][/path] */
    char *upstream_model;       /* model name sent upstream; default the entry name */
    char *api_key_env;          /* env var holding the upstream key, or NULL */
    int timeout_ms;             /* upstream request timeout, default 30000 */
    /* Both kinds */
    int parallel;               /* [1, 64]; 0 = unset. Local: sequences the worker runs at once (unset: the
                                 * worker's default); remote: calls in flight upstream (unset: 16) */
    int max_queue;              /* requests waiting behind the running one, default 8 */
    int max_tokens;             /* default per-request cap, default 512 (<= ctx) */
    int deadline_ms;            /* default per-request deadline, default 120000 */
    /* Identity of the GGUF file when loaded, so a file replaced in place
     * counts as a changed model on reload. */
    uint64_t gguf_dev, gguf_ino, gguf_size;
    int64_t gguf_mtime_ns;
} sb_config_model;

/* knowledge.NAME: a retrieval base (docs/KNOWLEDGE.md, kb/sb_kb.h). */
typedef struct {
    char *name;                 /* [A-Za-z0-9_-], <= 64 */
    int line, col;
    char *path;                 /* absolute SQLite file (created by `kb add`) */
    char *embed_model;          /* names a local model of models: (an encoder) */
    int chunk_tokens;           /* [64, 510], default 200: one e5 window */
    int overlap;                /* [0, 128], default 32; < chunk_tokens */
    bool pull;                  /* the router pulls it from cache.sync's cloud (docs/KNOWLEDGE.md "Sync") */
    char *adapter;              /* a name of embed_model's adapters: its questions are embedded through it; NULL: none */
    const char *adapter_path;   /* that adapter's file (the model entry's), or NULL */
} sb_config_kb;

typedef struct {
    char *path;                 /* the file as given */
    char *base_dir;             /* its directory, absolute */
    struct {
        char *dir;              /* sockets; default BASE/run */
        char *http;             /* "host:port" as written; default 127.0.0.1:8080 */
        char *http_host;        /* without brackets for IPv6 */
        int http_port;
        char *api_key_env;      /* at most one of these two; both NULL = no key */
        char *api_key_file;     /* absolute, readable */
        char *api_keys_file;    /* named keys with roles (router/apikeys.c), or NULL */
        char *secret_key_file;  /* absolute, readable: the AES-256 key of what is sealed at rest; NULL: none */
        int log_level;          /* SB_LOG_*, default SB_LOG_INFO */
        int drain_ms;           /* SIGTERM drain deadline, default 10000 */
        struct {                /* runtime.retention: days kept, 0 = not purged (router/retention.c) */
            int traces_days, sessions_days, feedback_days;
        } retention;
    } runtime;
    sb_config_model *models;    /* in file order, at least one */
    size_t n_models;
    struct {
        bool enabled;           /* the section is present */
        char *path;             /* absolute; default RUNTIME_DIR/cache.sqlite */
        int max_mb;             /* [1, 2^20], default 256 */
        int ttl_s;              /* 0 = never expires; default 86400 */
        struct {                /* cache.sync: the cloud tier (docs/cache-sync.md) */
            char *url;          /* NULL: no periodic sync */
            char *edge_id;
            char *secret_file;  /* absolute; the file holds this edge's HMAC key */
            char *ca_file;      /* absolute PEM CA bundle for an https:// url; NULL = system store */
            int interval_s;     /* [5, 86400], default 300 */
        } sync;
        const sb_config_node *node;     /* the raw section */
    } cache;
    struct {                    /* console: call traces, the operator console, feedback */
        int traces;             /* calls kept in the trace ring, [0, 100000]; default 200; 0 = off */
        bool show_caller_text;  /* traces show the caller's words; default false (masked) */
        char *feedback_path;    /* absolute; default RUNTIME_DIR/feedback.sqlite */
        char *otel_file;        /* absolute; finished calls appended as OTLP/JSON lines; NULL = off */
    } console;
    struct {                    /* sessions: conversations' state (router/sessions.c) */
        char *store;            /* absolute SQLite file; default RUNTIME_DIR/sessions.sqlite */
        int sweep_s;            /* expired sessions are purged this often, [1, 86400]; default 60 */
    } sessions;
    sb_config_kb *kbs;          /* knowledge:, in file order */
    size_t n_kbs;
    const sb_config_node *pipelines;    /* map NAME -> map, or NULL; see router */
    sb_config_node *root;
} sb_config;

/* Load and validate. 0, or SB_EIO (cannot read), SB_EINVAL (invalid: err
 * holds "FILE:LINE:COL: …"), SB_ENOMEM. *out is NULL on failure. */
int  sb_config_load(const char *path, sb_config **out, char *err);
/* The same from memory; `path` names the text in messages and its
 * directory is the base for relative paths. */
int  sb_config_parse(const char *text, size_t len, const char *path,
                     sb_config **out, char *err);
void sb_config_free(sb_config *cfg);                /* NULL ok */

const sb_config_model *sb_config_find_model(const sb_config *cfg, const char *name);
const sb_config_kb *sb_config_find_kb(const sb_config *cfg, const char *name);
/* Same settings and same GGUF file identity: on SIGHUP, a worker whose model
 * compares equal keeps running. Positions are ignored. */
bool sb_config_equal_model(const sb_config_model *a, const sb_config_model *b);
/* Runtime settings every child depends on (dir, log level): when these
 * differ, every child must restart. */
bool sb_config_equal_runtime(const sb_config *a, const sb_config *b);

/* Format "FILE:LINE:COL: message" for a node of cfg into err; returns
 * SB_EINVAL. For validators of the generic sections (pipelines). */
int  sb_config_node_error(const sb_config *cfg, const sb_config_node *at, char *err,
                          const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* ----------------------------------------------------------- typed keys */

/* The one validator every section's loader uses - the config's sections
 * (runtime, models, cache, console, knowledge, pipelines) and the router's
 * stage kinds alike. A section declares its keys in a table next to the
 * code that loads it, in the module that owns it: name, type, bounds, and
 * where the value goes (an offset into the section's struct). The readers
 * below refuse unknown keys and wrong values, each mistake as
 * "FILE:LINE:COL: PATH.KEY: expected ..., got ..." (sb_config_node_error). */

typedef struct {
    const sb_config *cfg;
    char *err;
    const char *path;           /* the section's key path: "models.a", "pipelines.p.stages[0](x)" */
    /* Show a quoted scalar as 'TEXT' rather than as the string "TEXT":
     * the pipelines' messages have always written it so. */
    bool quoted_as_text;
} sb_cfg_ctx;

typedef enum {
    SB_KEY_OTHER,               /* known, read by the section's own code */
    SB_KEY_INT,                 /* an int in [lo, hi] */
    SB_KEY_NUM,                 /* a double in [lo, hi] */
    SB_KEY_BOOL,                /* true or false, unquoted: a bool */
    SB_KEY_STR,                 /* a string without NUL (lo 1: non-empty): a char *, replaced */
    SB_KEY_ENUM,                /* one of names (quoted or not): its index, an int */
    SB_KEY_PATH,                /* a path, made absolute against the config's directory; lo 1: a
                                   readable regular file. A char *, replaced */
} sb_key_type;

typedef struct {
    const char *name;
    sb_key_type type;
    double lo, hi;
    size_t offset;              /* where the value goes in the section's struct */
    const char *const *names;   /* SB_KEY_ENUM: the values, NULL-terminated */
} sb_cfg_key;
#define SB_CFG_KEYS_END { NULL, SB_KEY_OTHER, 0, 0, 0, NULL }
/* The error at node of c's config, "FILE:LINE:COL: " and the message. */
#define SB_CFG_FAIL(c, node, ...) sb_config_node_error((c)->cfg, (node), (c)->err, __VA_ARGS__)

/* map is a mapping whose keys are all in keys, and its typed ones are read
 * into base (want_map, keys_check and keys_read below, in that order). */
int sb_cfg_read_map(const sb_cfg_ctx *c, const sb_config_node *map, const sb_cfg_key *keys, void *base);
/* Every key of map is one of keys (a table ending with a NULL name); else
 * "PATH: unknown key 'K' (expected one of: ...)". 0 or SB_EINVAL. */
int sb_cfg_keys_check(const sb_cfg_ctx *c, const sb_config_node *map, const sb_cfg_key *keys);
/* The typed keys of the table that map has, into base + offset, in table
 * order (SB_KEY_OTHER ones are left to the caller). 0, SB_EINVAL, SB_ENOMEM. */
int sb_cfg_keys_read(const sb_cfg_ctx *c, const sb_config_node *map, const sb_cfg_key *keys, void *base);
/* One value v of key, for what a section reads by hand. */
int sb_cfg_int(const sb_cfg_ctx *c, const sb_config_node *v, const char *key, long long lo, long long hi,
               long long *out);
int sb_cfg_num(const sb_cfg_ctx *c, const sb_config_node *v, const char *key, double lo, double hi, double *out);
int sb_cfg_bool(const sb_cfg_ctx *c, const sb_config_node *v, const char *key, bool *out);
/* Replaces *out (freed) with a copy. */
int sb_cfg_str(const sb_cfg_ctx *c, const sb_config_node *v, const char *key, bool nonempty, char **out);
int sb_cfg_enum(const sb_cfg_ctx *c, const sb_config_node *v, const char *key, const char *const *names, int *out);
/* A string or a list of 1..max non-empty strings: *out (count of them) is
 * the caller's to free, also on failure. */
int sb_cfg_strs(const sb_cfg_ctx *c, const sb_config_node *v, const char *key, size_t max, char ***out,
                size_t *count);
/* A path relative to the config's directory, made absolute; must_read: a
 * readable regular file (*st its stat, when st is not NULL). Replaces *out. */
int sb_cfg_path(const sb_cfg_ctx *c, const sb_config_node *v, const char *key, bool must_read, char **out,
                struct stat *st);
/* p against base ("./" dropped); NULL when out of memory. */
char *sb_cfg_resolve(const char *base, const char *p);
/* v is a mapping; else "PATH: expected a mapping, got ...". */
int sb_cfg_want_map(const sb_cfg_ctx *c, const sb_config_node *v);
/* What a node is, for messages: "null", "a string", "a list", "a mapping". */
const char *sb_cfg_what(const sb_config_node *n);
/* A name of models, pipelines, stages, labels: 1-max of A-Z a-z 0-9 _ -. */
bool sb_cfg_valid_name(const char *s, size_t max);
/* An environment variable's name: [A-Za-z_][A-Za-z0-9_]*. */
bool sb_cfg_valid_env_name(const char *s);
/* false | true, quoted or not: the values of the config's own switches
 * (console.show_caller_text, knowledge.NAME.pull), read with sb_cfg_enum. */
extern const char *const sb_cfg_false_true[];

/* -------------------------------------------------------------- sections */

/* A section of the configuration: a top-level key ("runtime") or one
 * nested in another section ("cache.sync"). The module that owns a section
 * declares it next to its code - its keys, defaults and what a table
 * cannot say (a file's identity, a URL, one key against another) - and
 * exports the descriptor in its public header. The core (config.c) only
 * parses the file and runs the sections of sb_config_sections, a list the
 * top of the build defines (supervisor/config_sections.c), the way nginx's
 * core walks the module list its build generates: common/ names no module
 * above it, and the list is resolved when the program is linked. */
typedef struct {
    const char *name;           /* the key path: "runtime", "cache.sync" */
    /* Its keys, read into the sb_config (offsets into it) when the section
     * is present, after init and before load; NULL: load reads it all. */
    const sb_cfg_key *keys;
    /* Defaults, before the keys are read; n is NULL when the file has no
     * such section. 0 or SB_ENOMEM. NULL: none. */
    int (*init)(sb_config *cfg, const sb_config_node *n);
    /* The rest (c->path is the name; n NULL when absent): 0, SB_EINVAL
     * (SB_CFG_FAIL), SB_ENOMEM. The sections loaded before it are in cfg.
     * NULL: nothing more. */
    int (*load)(const sb_cfg_ctx *c, sb_config *cfg, const sb_config_node *n);
    /* Loaded after every other section (in list order among themselves):
     * it names what the others declare. */
    bool last;
} sb_cfg_section;

/* The sections, NULL-terminated. Their top-level names, in this order, are
 * the keys a configuration may have (what the "unknown key" error lists);
 * they load in this order too, the `last` ones at the end. A nested
 * section comes after the one it is in. */
extern const sb_cfg_section *const sb_config_sections[];

#endif
