// The worker process: `subternary worker ...`, started by the coordinator.
//
// Exit codes: 0 clean shutdown (or the coordinator is gone); 2 bad
// arguments; 3 the region or its plans are unusable: do not respawn (the
// same start would fail again); 86 the crash test hook fired.
#ifndef ST_WORKER_WORKER_H
#define ST_WORKER_WORKER_H

#define ST_WORKER_EXIT_OK 0
#define ST_WORKER_EXIT_USAGE 2
#define ST_WORKER_EXIT_NO_RESPAWN 3
#define ST_WORKER_EXIT_TEST_CRASH 86

// Heartbeat period while idle.
#define ST_WORKER_HEARTBEAT_MS 100

int st_worker_main(int argc, char **argv);

#endif
