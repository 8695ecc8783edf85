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
static volatile sig_atomic_t signals_received = 0;
static volatile unsigned forced_exit_after[2] = {0, 0};
static volatile int forced_exit_status = 1;

// alarm() keeps one timer: arm it for `seconds` unless one already ends sooner.
static void arm_forced_exit(unsigned seconds) {
    if (seconds == 0) return;
    unsigned left = alarm(seconds);
    if (left != 0 && left < seconds) alarm(left);
}

static void on_signal(int signo) {
    int saved = errno;
    unsigned char byte = (unsigned char)signo;
    if (signal_write_fd >= 0) {
        // A full pipe means a wake-up is already pending: dropping the byte is fine.
        ssize_t ignored = write(signal_write_fd, &byte, 1);
        (void)ignored;
    }
    // SIGHUP asks for a reload, not a stop: it never arms the forced exit.
    if (signo != SIGHUP) {
        if (signals_received < 2) signals_received++;
        arm_forced_exit(forced_exit_after[signals_received - 1]);
    }
    errno = saved;
}

static void on_forced_exit(int signo) {
    (void)signo;
    static const char message[] =
        "<3>edgecoder-worker: the stop did not finish in time after the signal; exiting now "
        "(state files are replaced atomically: none is half-written)\n";
    ssize_t ignored = write(2, message, sizeof(message) - 1);
    (void)ignored;
    _exit(forced_exit_status);
}

int ecw_arm_forced_exit(unsigned after_first, unsigned after_second, int status) {
    forced_exit_after[0] = after_first;
    forced_exit_after[1] = after_second;
    forced_exit_status = status;
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_handler = on_forced_exit;
    sigfillset(&action.sa_mask);
    if (sigaction(SIGALRM, &action, NULL) != 0) return -errno;
    // A signal that came before this call still counts.
    if (signals_received > 0) arm_forced_exit(forced_exit_after[signals_received - 1]);
    return 0;
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
int ecw_pipe_from_child(int fds[2]) {
    if (pipe2(fds, O_CLOEXEC) != 0) return -1;
    int flags = fcntl(fds[0], F_GETFL);
    if (flags < 0 || fcntl(fds[0], F_SETFL, flags | O_NONBLOCK) != 0) {
        int saved = errno;
        close(fds[0]);
        close(fds[1]);
        errno = saved;
        return -1;
    }
    return 0;
}
int ecw_accept_nonblocking(int fd) { return accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC); }

#include <linux/netlink.h>
#include <sys/prctl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>

int ecw_netlink_open(int protocol, uint32_t groups, int rcvbuf) {
    int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, protocol);
    if (fd < 0) return -errno;
    if (rcvbuf > 0) {
        // Best effort: the kernel caps it at rmem_max without privilege.
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    }
    struct sockaddr_nl address;
    memset(&address, 0, sizeof(address));
    address.nl_family = AF_NETLINK;
    address.nl_groups = groups;
    if (bind(fd, (struct sockaddr *)&address, sizeof(address)) != 0) {
        int saved = errno;
        close(fd);
        return -saved;
    }
    return fd;
}

void ecw_set_thread_name(const char *name) {
    prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0);
}

int ecw_bt_mgmt_open(void) {
    // struct sockaddr_hci of <bluetooth/hci.h>, written out: libbluetooth stays behind its
    // own wrapper (BlueZ/AdapterDiagnostics.swift).
    struct { sa_family_t family; unsigned short device; unsigned short channel; } address;
    int fd = socket(AF_BLUETOOTH, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 1 /* BTPROTO_HCI */);
    if (fd < 0) return -errno;
    memset(&address, 0, sizeof(address));
    address.family = AF_BLUETOOTH;
    address.device = 0xFFFF;  // HCI_DEV_NONE
    address.channel = 3;      // HCI_CHANNEL_CONTROL
    if (bind(fd, (struct sockaddr *)&address, sizeof(address)) != 0) {
        int saved = errno;
        close(fd);
        return -saved;
    }
    return fd;
}

int ecw_spawn(const char *path, char *const argv[], char *const envp[], int stdin_fd, int stdout_fd, int stderr_fd, int *pidfd) {
    *pidfd = -1;
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t defaults;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGHUP);
    sigaddset(&defaults, SIGPIPE);
    sigaddset(&defaults, SIGALRM);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    if (stdin_fd >= 0) {
        posix_spawn_file_actions_adddup2(&actions, stdin_fd, 0);
    } else {
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    }
    if (stdout_fd >= 0) posix_spawn_file_actions_adddup2(&actions, stdout_fd, 1);
    if (stderr_fd >= 0) posix_spawn_file_actions_adddup2(&actions, stderr_fd, 2);
    // Not every descriptor is close-on-exec (libcurl's sockets, libraries' own): the
    // child must see none of the daemon's connections. glibc 2.34 and later.
    posix_spawn_file_actions_addclosefrom_np(&actions, 3);

    pid_t pid;
    int rc = posix_spawn(&pid, path, &actions, &attr, argv, envp);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) return -rc;
#ifdef SYS_pidfd_open
    long fd = syscall(SYS_pidfd_open, pid, 0);
    if (fd >= 0) {
        fcntl((int)fd, F_SETFD, FD_CLOEXEC);
        *pidfd = (int)fd;
    }
#endif
    return pid;
}

#include <sys/mman.h>

int ecw_memfd_with(const char *name, const void *bytes, size_t length) {
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0) return -errno;
    size_t done = 0;
    while (done < length) {
        ssize_t n = write(fd, (const char *)bytes + done, length - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            int saved = n < 0 ? errno : EIO;
            close(fd);
            return -saved;
        }
        done += (size_t)n;
    }
    if (lseek(fd, 0, SEEK_SET) != 0) {
        int saved = errno;
        close(fd);
        return -saved;
    }
    return fd;
}

int ecw_reap(int pid, int *status) {
    int rc = waitpid(pid, status, WNOHANG);
    if (rc < 0) return -errno;
    return rc == 0 ? 0 : 1;
}

int ecw_exited(int pid, int *code, int *signo) {
    siginfo_t info;
    memset(&info, 0, sizeof(info));
    if (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) != 0) return -errno;
    if (info.si_pid == 0) return 0;
    *code = info.si_code == CLD_EXITED ? info.si_status : -1;
    *signo = info.si_code == CLD_EXITED ? 0 : info.si_status;
    return 1;
}
