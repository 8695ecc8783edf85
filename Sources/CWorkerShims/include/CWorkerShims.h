// Small C helpers for what Swift cannot express on Linux: GNU-only structs
// (struct ucred needs _GNU_SOURCE), and macros.
#ifndef CWORKERSHIMS_H
#define CWORKERSHIMS_H

#include <stdint.h>
#include <sys/types.h>

/// Reads SO_PEERCRED of a connected Unix socket. Returns 0 or -errno.
int ecw_peer_credentials(int fd, int32_t *pid, uint32_t *uid, uint32_t *gid);

/// Reads SO_PEERGROUPS (the peer's supplementary groups, Linux >= 4.13).
/// Returns the number of groups (may exceed capacity: call again larger), or -errno.
int ecw_peer_groups(int fd, uint32_t *groups, int capacity);

/// Installs `handler`-free signal handling: SIGTERM, SIGINT and SIGHUP write the
/// signal number as one byte to `write_fd` (a non-blocking pipe). Async-signal-safe.
/// SIGPIPE is ignored. Returns 0 or -errno.
int ecw_install_signal_pipe(int write_fd);

/// Makes the process end by itself `after_first` seconds after the first of those
/// signals and `after_second` seconds after the second (whichever comes sooner; 0 never),
/// with `status`, writing one line to stderr: a stop that hangs cannot outlive the bound,
/// whatever the rest of the process is doing. Uses alarm() and SIGALRM. Returns 0 or -errno.
int ecw_arm_forced_exit(unsigned after_first, unsigned after_second, int status);

/// Restores the default disposition of the signals above (used by children before exec).
void ecw_reset_signals(void);



// GNU extensions that Swift's Glibc module does not export.
int ecw_eventfd_nonblocking(void);
int ecw_pipe_nonblocking(int fds[2]);
/// A pipe whose read end is non-blocking (for the reactor) and write end blocking (a
/// child's stdout: a non-blocking one would make its writes fail with EAGAIN).
int ecw_pipe_from_child(int fds[2]);
int ecw_accept_nonblocking(int fd);

/// Opens a non-blocking AF_NETLINK socket of `protocol`, bound to the multicast
/// `groups`, with a receive buffer of `rcvbuf` bytes. Returns the fd or -errno.
int ecw_netlink_open(int protocol, uint32_t groups, int rcvbuf);

/// Names the calling thread (prctl PR_SET_NAME, variadic; the kernel keeps 15 bytes).
void ecw_set_thread_name(const char *name);

/// Opens the kernel's Bluetooth management channel (a raw HCI socket bound to
/// HCI_CHANNEL_CONTROL, no controller), non-blocking. Without CAP_NET_ADMIN the kernel
/// allows it to read settings only. Returns the fd or -errno.
int ecw_bt_mgmt_open(void);

/// Spawns the program at `path` (an absolute path: no PATH search) with `argv` in its
/// own process group with default signal handling, stdin from `stdin_fd` (/dev/null when
/// < 0), stdout to `stdout_fd` and stderr to `stderr_fd` (each inherited when < 0), every
/// other descriptor closed, and exactly `envp` as its environment.
/// Returns the pid (and a pidfd in *pidfd, or -1) or -errno.
int ecw_spawn(const char *path, char *const argv[], char *const envp[], int stdin_fd, int stdout_fd, int stderr_fd, int *pidfd);

/// A close-on-exec memory file (memfd_create) holding `length` bytes of `bytes`, its
/// offset back at 0: a child's stdin that never blocks the writer. Returns the fd or -errno.
int ecw_memfd_with(const char *name, const void *bytes, size_t length);

/// Whether `pid` has exited, without reaping it (its pid, and so its process group's
/// id, stays taken until `ecw_reap`): 1 with the exit code (or -1) and the signal that
/// killed it (or 0), 0 while it runs, -errno on error.
int ecw_exited(int pid, int *code, int *signo);

/// Reaps `pid` without blocking: returns 1 and the wait status when it has exited,
/// 0 when still running, -errno on error.
int ecw_reap(int pid, int *status);
#endif
