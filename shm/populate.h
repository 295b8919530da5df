// Allocating a mapping's pages up front, with a thread per CPU.
#ifndef ST_SHM_POPULATE_H
#define ST_SHM_POPULATE_H

#include <stdint.h>

// MADV_POPULATE_WRITE over [base, +len) (base and len multiples of `grain`,
// a power of two), split into runs of whole grains among one thread per
// CPU this process may run on.  Populating is mostly the first touch of
// each page, which on a VM is the host backing guest memory, at a rate per
// vCPU: on the development VM 0.6-0.7 GB/s on one thread, 1.2-1.5 on two.
// Returns 0, or -1 with errno from the first run that failed (EINVAL: the
// kernel is older than 5.14).  Interrupted runs are restarted.
int st_shm_populate(void *base, uint64_t len, uint64_t grain);

#endif
