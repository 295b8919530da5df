// A file on a private huge=always tmpfs instance (see shm/private_tmpfs.h).
#include "shm/private_tmpfs.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/mount.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define HUGE_BYTES (UINT64_C(2) << 20)

// The steps that can fail, named in the error.
enum step {
    STEP_OK, STEP_SOCKET, STEP_FORK, STEP_UNSHARE, STEP_SETGROUPS, STEP_UID_MAP, STEP_GID_MAP,
    STEP_FSOPEN, STEP_HUGE, STEP_SIZE, STEP_CREATE, STEP_FSMOUNT, STEP_OPEN, STEP_SEND,
};
static const char *const step_names[] = {
    [STEP_OK] = "ok", [STEP_SOCKET] = "socketpair", [STEP_FORK] = "fork",
    [STEP_UNSHARE] = "unshare(user and mount namespaces)",
    [STEP_SETGROUPS] = "write /proc/self/setgroups", [STEP_UID_MAP] = "write /proc/self/uid_map",
    [STEP_GID_MAP] = "write /proc/self/gid_map", [STEP_FSOPEN] = "fsopen(tmpfs)",
    [STEP_HUGE] = "fsconfig(huge=always)", [STEP_SIZE] = "fsconfig(size)",
    [STEP_CREATE] = "fsconfig(create)", [STEP_FSMOUNT] = "fsmount",
    [STEP_OPEN] = "open(O_TMPFILE)", [STEP_SEND] = "sendmsg(fd)",
};

struct outcome {
    int32_t step; // enum step that failed, STEP_OK
    int32_t err;  // its errno
};

// Only system calls from here to the end of open_in_place: the user
// namespace child runs it after fork in a process that may have threads.
static int fail_at(struct outcome *o, enum step s)
{
    o->step = s;
    o->err = errno;
    return -1;
}

// Creates the instance and the file in the current namespaces; `size` is
// the instance's size limit in bytes, as text.
static int open_in_place(const char *size, struct outcome *o)
{
    int fs = (int)syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC);
    if (fs < 0) return fail_at(o, STEP_FSOPEN);
    int mnt = -1, fd = -1;
    if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "huge", "always", 0) < 0) {
        fail_at(o, STEP_HUGE);
    } else if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "size", size, 0) < 0) {
        fail_at(o, STEP_SIZE);
    } else if (syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) {
        fail_at(o, STEP_CREATE);
    } else if ((mnt = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
                                   MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC)) < 0) {
        fail_at(o, STEP_FSMOUNT);
    } else if ((fd = openat(mnt, ".", O_TMPFILE | O_RDWR, 0600)) < 0) { // no O_CLOEXEC
        fail_at(o, STEP_OPEN);
    } else {
        o->step = STEP_OK;
        o->err = 0;
    }
    if (mnt >= 0) close(mnt);
    close(fs);
    return fd;
}

static int write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = (ssize_t)strlen(text), put = write(fd, text, (size_t)n);
    int err = errno;
    close(fd);
    errno = err;
    return put == n ? 0 : -1;
}

// The child: new user and mount namespaces (which give it CAP_SYS_ADMIN
// over a mount namespace of its own), its own ids mapped, then the file,
// sent back over `sock` with the outcome.
static void child_open(int sock, const char *size, const char *uid_map, const char *gid_map)
{
    struct outcome o = {STEP_OK, 0};
    int fd = -1;
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) < 0) fail_at(&o, STEP_UNSHARE);
    else if (write_file("/proc/self/setgroups", "deny") < 0) fail_at(&o, STEP_SETGROUPS);
    else if (write_file("/proc/self/uid_map", uid_map) < 0) fail_at(&o, STEP_UID_MAP);
    else if (write_file("/proc/self/gid_map", gid_map) < 0) fail_at(&o, STEP_GID_MAP);
    else fd = open_in_place(size, &o);

    struct iovec iov = {.iov_base = &o, .iov_len = sizeof o};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};
    if (fd >= 0) {
        memset(&ctl, 0, sizeof ctl);
        m.msg_control = ctl.buf;
        m.msg_controllen = sizeof ctl.buf;
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    _exit(sendmsg(sock, &m, 0) == (ssize_t)sizeof o ? 0 : 1);
}

static int open_via_userns(const char *size, struct outcome *o)
{
    char uid_map[48], gid_map[48];
    snprintf(uid_map, sizeof uid_map, "%u %u 1\n", (unsigned)geteuid(), (unsigned)geteuid());
    snprintf(gid_map, sizeof gid_map, "%u %u 1\n", (unsigned)getegid(), (unsigned)getegid());
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) return fail_at(o, STEP_SOCKET);
    pid_t pid = fork();
    if (pid < 0) {
        fail_at(o, STEP_FORK);
        close(sv[0]);
        close(sv[1]);
        return -1;
    }
    if (pid == 0) {
        close(sv[0]);
        child_open(sv[1], size, uid_map, gid_map);
    }
    close(sv[1]);

    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = {.iov_base = o, .iov_len = sizeof *o};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                       .msg_controllen = sizeof ctl.buf};
    ssize_t got;
    do got = recvmsg(sv[0], &m, MSG_CMSG_CLOEXEC);
    while (got < 0 && errno == EINTR);
    int fd = -1;
    if (got != (ssize_t)sizeof *o) {
        o->step = STEP_SEND;
        o->err = got < 0 ? errno : EPROTO;
    } else {
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
            memcpy(&fd, CMSG_DATA(c), sizeof fd);
        if (o->step == STEP_OK && fd < 0) {
            o->step = STEP_SEND;
            o->err = EPROTO;
        }
    }
    close(sv[0]);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
    if (fd < 0) return -1;
    // MSG_CMSG_CLOEXEC kept the fd from leaking into a concurrent exec; the
    // region's fd is meant to be inherited by the workers, like a memfd.
    int fl = fcntl(fd, F_GETFD);
    if (fl < 0 || fcntl(fd, F_SETFD, fl & ~FD_CLOEXEC) < 0) {
        int err = errno;
        close(fd);
        o->step = STEP_OPEN;
        o->err = err;
        return -1;
    }
    return fd;
}

int st_private_tmpfs_open(uint64_t bytes, enum st_private_tmpfs_via via, char *why, size_t why_n)
{
    char size[32];
    uint64_t limit = (bytes + HUGE_BYTES - 1) / HUGE_BYTES * HUGE_BYTES;
    snprintf(size, sizeof size, "%" PRIu64, limit);
    struct outcome o = {STEP_OK, 0};
    int fd = -1;
    if (via != ST_PRIVATE_TMPFS_USERNS) fd = open_in_place(size, &o);
    bool retry = via == ST_PRIVATE_TMPFS_USERNS ||
                 (via == ST_PRIVATE_TMPFS_AUTO && fd < 0 && o.step == STEP_FSOPEN && o.err == EPERM);
    if (retry) fd = open_via_userns(size, &o);
    if (fd < 0 && why_n) snprintf(why, why_n, "%s: %s", step_names[o.step], strerror(o.err));
    return fd;
}
