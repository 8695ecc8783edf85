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

    /// A file descriptor and the poll(2) events a waiter wants of it.
    public struct Interest: Sendable, Equatable {
        public var fd: Int32
        public var events: Int16
        public init(fd: Int32, events: Int16) {
            self.fd = fd
            self.events = events
        }
    }

    private struct Waiter {
        var interests: [Interest]
        /// CLOCK_MONOTONIC nanoseconds at which the wait ends without readiness.
        var deadlineNs: UInt64?
        var continuation: CheckedContinuation<Bool, any Error>
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
        // The thread holds the reactor for good (it is shared and never ends).
        try startDetachedThread(named: "ecw-reactor") { [self] in loop() }
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
        _ = try await wait([Interest(fd: fd, events: events)], deadlineNs: nil)
    }

    /// Suspends until one of `interests` is ready (true) or the CLOCK_MONOTONIC time
    /// `deadlineNs` passes (false): one call for "the bus or my wake-up fd, or my next
    /// timer", so an event loop needs no timer task of its own. Throws CancellationError
    /// when the task is cancelled.
    public func wait(_ interests: [Interest], deadlineNs: UInt64?) async throws -> Bool {
        let id = state.withLock { state -> UInt64 in
            state.nextID += 1
            state.pending.insert(state.nextID)
            return state.nextID
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Bool, any Error>) in
                let cancelled = state.withLock { state -> Bool in
                    state.pending.remove(id)
                    if state.cancelledEarly.remove(id) != nil { return true }
                    state.waiters[id] = Waiter(interests: interests, deadlineNs: deadlineNs, continuation: continuation)
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
        // Each waiter's id and the range of its entries in `fds`.
        var owners: [(id: UInt64, range: Range<Int>)] = []
        var backoff = FailureBackoff()
        while true {
            fds.removeAll(keepingCapacity: true)
            owners.removeAll(keepingCapacity: true)
            fds.append(pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0))
            var nearest: UInt64?
            state.withLock { state in
                for (id, waiter) in state.waiters {
                    let start = fds.count
                    for interest in waiter.interests { fds.append(pollfd(fd: interest.fd, events: interest.events, revents: 0)) }
                    owners.append((id, start..<fds.count))
                    if let deadline = waiter.deadlineNs { nearest = min(nearest ?? deadline, deadline) }
                }
            }
            var timeoutMs: Int32 = -1
            if let nearest {
                let now = monotonicNanoseconds()
                // Rounded up, so a deadline is never reported before it has passed.
                timeoutMs = nearest <= now ? 0 : Int32(clamping: (nearest - now + 999_999) / 1_000_000)
            }
            let (rc, code) = fds.withUnsafeMutableBufferPointer { fds in
                let rc = poll(fds.baseAddress!, nfds_t(fds.count), timeoutMs)
                return (rc, rc < 0 ? errno : 0)
            }
            if rc < 0 {
                if code == EINTR { continue }
                preconditionErrnoIsNotABug(code, call: "poll")
                // ENOMEM, or EINVAL (more descriptors than RLIMIT_NOFILE), may persist:
                // pause instead of spinning; the waiters stay registered for the next try.
                let (pause, isFirst) = backoff.failed()
                if isFirst {
                    logger.error(
                        "poll failed: \(String(cString: strerror(code))); retrying, with pauses growing to \(FailureBackoff.longestPauseNanoseconds / 1_000_000) ms, until it works"
                    )
                }
                sleepNanoseconds(pause)
                continue
            }
            if let failures = backoff.succeeded() { logger.notice("poll works again after \(failures) failed tries") }
            if fds[0].revents != 0 {
                var counter: UInt64 = 0
                _ = read(wakeFD, &counter, 8)
            }
            let now = monotonicNanoseconds()
            var ready: [(CheckedContinuation<Bool, any Error>, Result<Bool, SystemError>)] = []
            state.withLock { state in
                for (id, range) in owners {
                    guard let waiter = state.waiters[id] else { continue }
                    let fired = fds[range].filter { $0.revents != 0 }
                    if !fired.isEmpty {
                        state.waiters.removeValue(forKey: id)
                        let invalid = fired.contains { $0.revents & Int16(POLLNVAL) != 0 }
                        ready.append((waiter.continuation, invalid ? .failure(SystemError("poll", errno: EBADF)) : .success(true)))
                    } else if let deadline = waiter.deadlineNs, deadline <= now {
                        state.waiters.removeValue(forKey: id)
                        ready.append((waiter.continuation, .success(false)))
                    }
                }
            }
            for (continuation, result) in ready {
                switch result {
                case .success(let value): continuation.resume(returning: value)
                case .failure(let error): continuation.resume(throwing: error)
                }
            }
        }
    }
}
