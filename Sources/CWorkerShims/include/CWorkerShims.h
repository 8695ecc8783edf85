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
#endif
