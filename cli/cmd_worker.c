// `subternary worker`: the internal subcommand the coordinator execs.
#include "cli/commands.h"
#include "worker/worker.h"

int st_cmd_worker(int argc, char **argv) { return st_worker_main(argc, argv); }
