// An unlinked file on a tmpfs instance of our own, mounted with huge=always,
// for regions that should get transparent huge pages where the system's
// shmem setting is "never" (Debian's default).  That setting applies only to
// the kernel's internal shmem mount (memfd, shared anonymous memory); a tmpfs
// instance follows its own huge= option.  An administrator's "deny" still
// wins: the kernel then gives no tmpfs huge pages at all.
//
// The instance is never attached to any directory (fsopen/fsmount, Linux
// 5.2), so nothing outside the process sees it; it lives while the file is
// open or mapped, and its size limit is the file's size.  Mounting needs
// CAP_SYS_ADMIN: as root it is done in place, otherwise by a short-lived
// child in a user and mount namespace of its own, which hands the file back
// over a socket.
#ifndef ST_SHM_PRIVATE_TMPFS_H
#define ST_SHM_PRIVATE_TMPFS_H

#include <stddef.h>
#include <stdint.h>

enum st_private_tmpfs_via {
    ST_PRIVATE_TMPFS_AUTO = 0,   // in place, else through a user namespace
    ST_PRIVATE_TMPFS_DIRECT = 1, // in place only (needs CAP_SYS_ADMIN)
    ST_PRIVATE_TMPFS_USERNS = 2, // through a user namespace only
};

// Opens a read-write file of `bytes` (a multiple of 2 MiB) on a fresh tmpfs
// instance with huge=always; the fd is inheritable across exec, like the
// regions' memfds.  Returns the fd, or -1 with the reason in `why`
// ("fsopen(tmpfs): Operation not permitted", ...).
int st_private_tmpfs_open(uint64_t bytes, enum st_private_tmpfs_via via, char *why, size_t why_n);

#endif
