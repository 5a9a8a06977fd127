/* sb_cmd.h - the subcommands of bin/switchboard: a table of contents.
 *
 * Each command takes the arguments after its name (argv[0] is the command
 * name), prints --help on request, and returns a process exit code
 * (SB_EXIT_*). The dispatch table is in supervisor/main.c.
 */
#ifndef SB_CMD_H
#define SB_CMD_H

int sb_cmd_inspect(int argc, char **argv);   /* worker/cli/cli_inspect.c */
int sb_cmd_tokenize(int argc, char **argv);  /* worker/cli/cli_tokenize.c */
int sb_cmd_logits(int argc, char **argv);    /* worker/cli/cli_engine.c */
int sb_cmd_chat_prompt(int argc, char **argv); /* worker/cli/cli_chat.c */
int sb_cmd_generate(int argc, char **argv);  /* worker/cli/cli_engine.c */
int sb_cmd_bench(int argc, char **argv);     /* worker/cli/cli_engine.c */
int sb_cmd_tune(int argc, char **argv);      /* worker/cli/cli_tune.c */
int sb_cmd_bench_batch(int argc, char **argv); /* worker/cli/cli_bench_batch.c: bench --parallel */
int sb_cmd_perplexity(int argc, char **argv); /* worker/cli/cli_perplexity.c */
int sb_cmd_quantize(int argc, char **argv);  /* worker/cli/cli_quantize.c */
int sb_cmd_embed(int argc, char **argv);     /* worker/cli/cli_embed.c */
int sb_cmd_convert_e5(int argc, char **argv); /* worker/cli/cli_embed.c */
int sb_cmd_worker(int argc, char **argv);    /* worker/serve.c */
int sb_cmd_cache(int argc, char **argv);     /* cache/sync/cli_cache.c */
int sb_cmd_feedback(int argc, char **argv);  /* cache/cli_feedback.c */
int sb_cmd_cloud(int argc, char **argv);     /* cache/cloud/cloud.c */
int sb_cmd_router(int argc, char **argv);    /* router/router.c */
int sb_cmd_route(int argc, char **argv);     /* router/cli_route.c */
int sb_cmd_kb(int argc, char **argv);       /* kb/cli_kb.c */
int sb_cmd_privacy(int argc, char **argv);  /* privacy/cli_privacy.c: detect, eval */
int sb_cmd_privacy_all(int argc, char **argv);  /* supervisor/cli_erase.c: erase, else the above */
int sb_cmd_run(int argc, char **argv);       /* supervisor/cli_run.c */
int sb_cmd_ask(int argc, char **argv);       /* supervisor/cli_ask.c */
int sb_cmd_test(int argc, char **argv);      /* supervisor/cli_test.c */

#endif
