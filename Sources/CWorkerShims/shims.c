#define _GNU_SOURCE
#include "CWorkerShims.h"
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59
#endif

int ecw_peer_credentials(int fd, int32_t *pid, uint32_t *uid, uint32_t *gid) {
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return -errno;
    *pid = cred.pid;
    *uid = cred.uid;
    *gid = cred.gid;
    return 0;
}

int ecw_peer_groups(int fd, uint32_t *groups, int capacity) {
    socklen_t len = (socklen_t)(capacity * (int)sizeof(gid_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) != 0) {
        if (errno == ERANGE) return (int)(len / sizeof(gid_t));
        return -errno;
    }
    return (int)(len / sizeof(gid_t));
}

static volatile int signal_write_fd = -1;

static void on_signal(int signo) {
    int saved = errno;
    unsigned char byte = (unsigned char)signo;
    if (signal_write_fd >= 0) {
        // A full pipe means a wake-up is already pending: dropping the byte is fine.
        ssize_t ignored = write(signal_write_fd, &byte, 1);
        (void)ignored;
    }
    errno = saved;
}

int ecw_install_signal_pipe(int write_fd) {
    signal_write_fd = write_fd;
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    int signals[] = {SIGTERM, SIGINT, SIGHUP};
    for (unsigned i = 0; i < sizeof(signals) / sizeof(signals[0]); i++) {
        if (sigaction(signals[i], &action, NULL) != 0) return -errno;
    }
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

void ecw_reset_signals(void) {
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
}

#include <fcntl.h>
#include <sys/eventfd.h>

int ecw_eventfd_nonblocking(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }
int ecw_pipe_nonblocking(int fds[2]) { return pipe2(fds, O_NONBLOCK | O_CLOEXEC); }
int ecw_accept_nonblocking(int fd) { return accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC); }
