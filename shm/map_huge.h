// Which parts of a mapping the kernel maps with huge (PMD) entries.
#ifndef ST_SHM_MAP_HUGE_H
#define ST_SHM_MAP_HUGE_H

#include <stdbool.h>
#include <stdint.h>

// huge[i] tells whether all of chunk i of [addr, addr + len) (chunk bytes
// each, the last one shorter) is mapped by huge entries: a THP or hugetlb
// folio under one PMD.  Asks PAGEMAP_SCAN (Linux 6.7); -1 where the kernel
// cannot say, with every chunk false.
int st_map_huge_chunks(const void *addr, uint64_t len, uint64_t chunk, bool *huge /*[ceil(len / chunk)]*/);
// How many of those chunks are mapped huge; -1 where the kernel cannot say
// (or memory for the flags runs out).
int64_t st_map_huge_count(const void *addr, uint64_t len, uint64_t chunk);

#endif
