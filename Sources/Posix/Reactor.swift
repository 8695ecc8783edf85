#if canImport(Glibc)
import Glibc
#endif
import CWorkerShims
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

    private init() throws(SystemError) {
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
            let rc = poll(&fds, nfds_t(fds.count), -1)
            if rc < 0 { continue }  // EINTR; anything else cannot happen with valid arrays
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
