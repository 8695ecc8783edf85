#if canImport(Glibc)
import Glibc
#endif
import CWorkerShims
import Logging
import Synchronization

/// One thread that waits in poll(2) for the daemon's file descriptors and resumes the
/// tasks waiting on them. Sockets stay non-blocking, so no Swift-concurrency thread
/// ever blocks in a system call (Dispatch's shared pool grows a thread a second on
/// Linux when its threads block).
public final class Reactor: Sendable {
    /// The process-wide reactor; its thread lives as long as the process.
    public static let shared: Reactor = {
        do { return try Reactor() } catch { fatalError("cannot start the I/O reactor: \(error)") }
    }()

    /// poll(2), or a stand-in for tests that cause a failure poll cannot be made to have.
    typealias Poll = @Sendable (UnsafeMutablePointer<pollfd>, nfds_t, Int32) -> Int32

    private struct Waiter {
        var fd: Int32
        var events: Int16
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var nextID: UInt64 = 0
        var waiters: [UInt64: Waiter] = [:]
        /// Ids handed out whose continuation is not registered yet.
        var pending: Set<UInt64> = []
        /// Pending ids cancelled before they registered.
        var cancelledEarly: Set<UInt64> = []
    }

    private let state = Mutex(State())
    private let wakeFD: Int32
    private let poll: Poll
    private let logger: Logger

    init(poll: @escaping Poll = { Glibc.poll($0, $1, $2) }, logger: Logger = Logger(label: "reactor")) throws(SystemError) {
        self.poll = poll
        self.logger = logger
        wakeFD = try systemCall("eventfd") { ecw_eventfd_nonblocking() }
        var thread = pthread_t()
        let context = Unmanaged.passRetained(self).toOpaque()
        let rc = pthread_create(&thread, nil, { raw in
            let reactor = Unmanaged<Reactor>.fromOpaque(raw!).takeUnretainedValue()
            reactor.loop()
            return nil
        }, context)
        if rc != 0 { throw SystemError("pthread_create", errno: rc) }
        pthread_detach(thread)
    }

    /// Suspends until `fd` is readable (or hung up, or in error). Throws
    /// CancellationError when the task is cancelled.
    public func waitReadable(_ fd: Int32) async throws {
        try await wait(fd: fd, events: Int16(POLLIN))
    }

    /// Suspends until `fd` is writable.
    public func waitWritable(_ fd: Int32) async throws {
        try await wait(fd: fd, events: Int16(POLLOUT))
    }

    private func wait(fd: Int32, events: Int16) async throws {
        let id = state.withLock { state -> UInt64 in
            state.nextID += 1
            state.pending.insert(state.nextID)
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let cancelled = state.withLock { state -> Bool in
                    state.pending.remove(id)
                    if state.cancelledEarly.remove(id) != nil { return true }
                    state.waiters[id] = Waiter(fd: fd, events: events, continuation: continuation)
                    return false
                }
                if cancelled { continuation.resume(throwing: CancellationError()) } else { wake() }
            }
        } onCancel: {
            let waiter = state.withLock { state -> Waiter? in
                if let waiter = state.waiters.removeValue(forKey: id) { return waiter }
                if state.pending.contains(id) { state.cancelledEarly.insert(id) }
                return nil
            }
            if let waiter {
                waiter.continuation.resume(throwing: CancellationError())
                wake()
            }
        }
    }

    private func wake() {
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    private func loop() {
        var fds: [pollfd] = []
        var ids: [UInt64] = []
        var backoff = FailureBackoff()
        while true {
            fds.removeAll(keepingCapacity: true)
            ids.removeAll(keepingCapacity: true)
            fds.append(pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0))
            state.withLock { state in
                for (id, waiter) in state.waiters {
                    ids.append(id)
                    fds.append(pollfd(fd: waiter.fd, events: waiter.events, revents: 0))
                }
            }
            let (rc, code) = fds.withUnsafeMutableBufferPointer { fds in
                let rc = poll(fds.baseAddress!, nfds_t(fds.count), -1)
                return (rc, rc < 0 ? errno : 0)
            }
            if rc < 0 {
                if code == EINTR { continue }
                preconditionErrnoIsNotABug(code, call: "poll")
                // ENOMEM, or EINVAL (more descriptors than RLIMIT_NOFILE), may persist:
                // pause instead of spinning; the waiters stay registered for the next try.
                let (pause, isFirst) = backoff.failed()
                if isFirst {
                    logger.error("poll failed: \(String(cString: strerror(code))); retrying, with pauses growing to \(FailureBackoff.longestPauseNanoseconds / 1_000_000) ms, until it works")
                }
                sleepNanoseconds(pause)
                continue
            }
            if let failures = backoff.succeeded() { logger.notice("poll works again after \(failures) failed tries") }
            if fds[0].revents != 0 {
                var counter: UInt64 = 0
                _ = read(wakeFD, &counter, 8)
            }
            var ready: [(CheckedContinuation<Void, any Error>, Bool)] = []
            state.withLock { state in
                for (index, id) in ids.enumerated() where fds[index + 1].revents != 0 {
                    if let waiter = state.waiters.removeValue(forKey: id) {
                        let invalid = fds[index + 1].revents & Int16(POLLNVAL) != 0
                        ready.append((waiter.continuation, invalid))
                    }
                }
            }
            for (continuation, invalid) in ready {
                if invalid { continuation.resume(throwing: SystemError("poll", errno: EBADF)) } else { continuation.resume() }
            }
        }
    }
}
