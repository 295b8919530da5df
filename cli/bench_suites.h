// The suites of `subternary bench` (each takes argv after the suite name).
#ifndef ST_CLI_BENCH_SUITES_H
#define ST_CLI_BENCH_SUITES_H

int st_bench_spec(int argc, char **argv);
int st_bench_governor(int argc, char **argv);
int st_bench_ctx(int argc, char **argv);
int st_bench_contention(int argc, char **argv);
int st_bench_profile(int argc, char **argv);
int st_bench_nodes(int argc, char **argv);
int st_bench_batch(int argc, char **argv);
int st_bench_all(int argc, char **argv);

#endif
