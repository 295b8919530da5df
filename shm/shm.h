// shm/: the memory every process part stands on.  Public face of the
// subsystem; each part has its own small header:
//   shm/region.h     shared regions (one file per NUMA node, header, sections)
//   shm/private_tmpfs.h  a tmpfs instance of our own, for transparent huge pages
//   shm/topology.h   NUMA nodes and virtual node splitting
//   shm/kv.h         transactional KV cache
//   shm/sync.h       abortable barriers and work counters
//   shm/uring_read.h io_uring file reading for model loading
//   shm/map_huge.h   which parts of a mapping are mapped huge
// shm/ knows nothing of ZeroMQ, sessions or kernels.
#ifndef ST_SHM_SHM_H
#define ST_SHM_SHM_H

#include "shm/kv.h"
#include "shm/map_huge.h"
#include "shm/region.h"
#include "shm/sync.h"
#include "shm/topology.h"
#include "shm/uring_read.h"

#endif
