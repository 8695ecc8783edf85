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

/// Restores the default disposition of the signals above (used by children before exec).
void ecw_reset_signals(void);



// GNU extensions that Swift's Glibc module does not export.
int ecw_eventfd_nonblocking(void);
int ecw_pipe_nonblocking(int fds[2]);
int ecw_accept_nonblocking(int fd);

/// Opens a non-blocking AF_NETLINK socket of `protocol`, bound to the multicast
/// `groups`, with a receive buffer of `rcvbuf` bytes. Returns the fd or -errno.
int ecw_netlink_open(int protocol, uint32_t groups, int rcvbuf);

/// Spawns `/bin/sh -c command` in its own process group with default signal
/// handling, stdin from /dev/null, stdout/stderr inherited, and `envp` added to the
/// environment. Returns the pid (and a pidfd in *pidfd, or -1) or -errno.
int ecw_spawn_shell(const char *command, char *const extra_env[], int stdout_fd, int *pidfd);

/// Reaps `pid` without blocking: returns 1 and the wait status when it has exited,
/// 0 when still running, -errno on error.
int ecw_reap(int pid, int *status);
#endif
