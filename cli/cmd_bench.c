// `subternary bench SUITE`: one entry point for every benchmark suite.
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"

struct suite {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
};

static const struct suite suites[] = {
    {NULL, NULL, NULL},
};

int st_cmd_bench(int argc, char **argv)
{
    if (argc >= 2)
        for (const struct suite *s = suites; s->name; s++)
            if (!strcmp(argv[1], s->name)) return s->run(argc - 1, argv + 1);
    fprintf(stderr, "usage: subternary bench SUITE [options]\nsuites:\n");
    for (const struct suite *s = suites; s->name; s++) fprintf(stderr, "  %-10s %s\n", s->name, s->help);
    return 2;
}
