// `subternary`: one binary, one subcommand per job.
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"

struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
};

static const struct command commands[] = {
    {"model", st_cmd_model, "model info FILE | model gen ... | model quantize IN OUT TYPE"},
    {"logits", st_cmd_logits, "logits -m MODEL --tokens 1,2,3 -o OUT.f32"},
    {"tokenize", st_cmd_tokenize, "tokenize -m MODEL [--no-bos] < text"},
    {"generate", st_cmd_generate, "generate -m TARGET [-d DRAFT] (-p TEXT | --tokens IDS) -n N [...]"},
    {"serve", st_cmd_serve, "serve --target T [--draft D] [--listen ENDPOINT] [--slots N --queue N ...]"},
    {"client", st_cmd_client, "client [--connect ENDPOINT] (-p TEXT | --tokens IDS) | --stats [--prom] | --health"},
    {"keygen", st_cmd_keygen, "keygen NAME: a CURVE key pair (NAME.key, NAME.pub)"},
    {"bench", st_cmd_bench, "bench SUITE [options]"},
    {"worker", st_cmd_worker, "(internal) a worker process, started by the coordinator"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: subternary COMMAND [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "subternary: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
