// Subcommands of the `subternary` binary.  Each takes the arguments after its
// name (argv[0] is the subcommand) and returns the process exit code.
#ifndef ST_CLI_COMMANDS_H
#define ST_CLI_COMMANDS_H

int st_cmd_model(int argc, char **argv);    // model info / gen / quantize
int st_cmd_logits(int argc, char **argv);
int st_cmd_tokenize(int argc, char **argv);
int st_cmd_bench(int argc, char **argv);
int st_cmd_generate(int argc, char **argv);
int st_cmd_worker(int argc, char **argv);
int st_cmd_serve(int argc, char **argv);
int st_cmd_client(int argc, char **argv);
int st_cmd_keygen(int argc, char **argv);

#endif
