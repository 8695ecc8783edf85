#if canImport(Glibc)
import Glibc
#endif
import Posix
import Synchronization

/// The state directory's writes and removals, performed on one thread of their own so
/// that no Swift-concurrency thread ever waits for an fsync (on two cores or an SD card,
/// one write of the event log stalls whatever actor does it for tens of milliseconds).
///
/// Each write keeps `StateDirectory.write`'s guarantee (temp file, fsync, rename, fsync
/// of the directory). Operations on one file that are still queued are merged: the
/// newest content wins, and everyone waiting on an older one is resumed when the newest
/// is durable, since it supersedes theirs. Files are written in the order of their
/// latest submission; a caller that needs one file on disk before another touches a
/// second awaits the first (the journal and outbox do).
public final class DurableWriter: Sendable {
    /// The directory every operation of this writer is in.
    public let directory: StateDirectory
    private let queue: WriteQueue

    /// `onProblem` is called on the writer's thread with a description when an operation
    /// fails, and with nil when one succeeds again after failures.
    public convenience init(directory: StateDirectory, onProblem: @escaping @Sendable (String?) -> Void = { _ in }) {
        self.init(directory: directory, onProblem: onProblem, beforeEach: nil)
    }

    /// `beforeEach` runs on the writer's thread before each physical operation: tests
    /// hold the thread there to let submissions pile up, and record the order. `fault`,
    /// when it returns an error for a file and kind of operation (true: a removal), fails
    /// that operation with it instead of performing it: tests mock a full or read-only disk.
    init(
        directory: StateDirectory, onProblem: @escaping @Sendable (String?) -> Void,
        beforeEach: (@Sendable (String) -> Void)?, fault: (@Sendable (_ name: String, _ removal: Bool) -> (any Error)?)? = nil
    ) {
        self.directory = directory
        queue = WriteQueue(directory: directory, onProblem: onProblem, beforeEach: beforeEach, fault: fault)
    }

    deinit { queue.close() }

    /// Replaces `name` with `bytes` atomically and returns once it is durable; throws
    /// what made the write fail.
    public func write(_ name: String, mode: mode_t = 0o640, _ bytes: [UInt8]) async throws {
        try await write(name, mode: mode, render: { bytes })
    }

    /// `write`, with the content made by `render` on the writer's thread: a file
    /// rewritten many times while queued (the event log) is serialized only once.
    public func write(_ name: String, mode: mode_t = 0o640, render: @escaping @Sendable () -> [UInt8]) async throws {
        try await withCheckedThrowingContinuation { continuation in
            queue.enqueue(name, .write(mode: mode, render: render), waiter: continuation)
        }
    }

    /// Replaces `name` without waiting: for files whose durability the spec does not
    /// promise before an answer (event log, task history). A failure is reported
    /// through `onProblem` and `problem`.
    public func submit(_ name: String, mode: mode_t = 0o640, _ bytes: [UInt8]) {
        submit(name, mode: mode, render: { bytes })
    }

    /// `submit`, with the content made by `render` on the writer's thread.
    public func submit(_ name: String, mode: mode_t = 0o640, render: @escaping @Sendable () -> [UInt8]) {
        queue.enqueue(name, .write(mode: mode, render: render), waiter: nil)
    }

    /// Removes `name` (absent is fine) and returns once the removal is durable.
    public func remove(_ name: String) async throws {
        try await withCheckedThrowingContinuation { continuation in
            queue.enqueue(name, .remove, waiter: continuation)
        }
    }

    /// Removes `name` (absent is fine) without waiting; a failure is reported like `submit`'s.
    public func submitRemoval(_ name: String) {
        queue.enqueue(name, .remove, waiter: nil)
    }

    /// Returns once nothing is queued or being written: everything submitted before
    /// the call is durable (or has failed and been reported). Awaited at shutdown.
    public func flush() async {
        await withCheckedContinuation { continuation in queue.flush(continuation) }
    }

    /// Why the last operation failed, until one succeeds again.
    public var problem: String? { queue.problem }

    /// Physical operations performed so far (merged ones count once).
    var performedOperations: Int { queue.performed }

    /// Callers waiting on queued operations (not on the one being performed).
    var queuedWaiters: Int { queue.queuedWaiters }
}

/// The queue shared by a `DurableWriter` and its thread; the thread holds only this,
/// so the writer's deinit can tell it to finish.
private final class WriteQueue: Sendable {
    enum Kind: Sendable {
        case write(mode: mode_t, render: @Sendable () -> [UInt8])
        case remove
    }

    struct Operation {
        var name: String
        var kind: Kind
        var waiters: [CheckedContinuation<Void, any Error>]
    }

    struct State {
        /// In the order of each file's latest submission; one entry per file.
        var queued: [Operation] = []
        /// The thread is performing an operation it took from `queued`.
        var busy = false
        var flushWaiters: [CheckedContinuation<Void, Never>] = []
        var threadStarted = false
        var closed = false
        var problem: String?
        var performed = 0
    }

    let directory: StateDirectory
    let onProblem: @Sendable (String?) -> Void
    let beforeEach: (@Sendable (String) -> Void)?
    let fault: (@Sendable (String, Bool) -> (any Error)?)?
    private let state = Mutex(State())
    /// Counts submissions the thread has not looked at yet; the thread sleeps on it.
    private nonisolated(unsafe) let wakeups: UnsafeMutablePointer<sem_t>

    init(
        directory: StateDirectory, onProblem: @escaping @Sendable (String?) -> Void, beforeEach: (@Sendable (String) -> Void)?,
        fault: (@Sendable (String, Bool) -> (any Error)?)?
    ) {
        self.directory = directory
        self.onProblem = onProblem
        self.beforeEach = beforeEach
        self.fault = fault
        wakeups = .allocate(capacity: 1)
        sem_init(wakeups, 0, 0)
    }

    deinit {
        sem_destroy(wakeups)
        wakeups.deallocate()
    }

    var problem: String? { state.withLock { $0.problem } }
    var performed: Int { state.withLock { $0.performed } }
    var queuedWaiters: Int { state.withLock { $0.queued.reduce(0) { $0 + $1.waiters.count } } }

    func enqueue(_ name: String, _ kind: Kind, waiter: CheckedContinuation<Void, any Error>?) {
        let startFailed: SystemError? = state.withLock { state in
            var waiters = waiter.map { [$0] } ?? []
            if let index = state.queued.firstIndex(where: { $0.name == name }) {
                waiters = state.queued.remove(at: index).waiters + waiters
            }
            state.queued.append(Operation(name: name, kind: kind, waiters: waiters))
            if state.threadStarted { return nil }
            do throws(SystemError) {
                try startThread()
                state.threadStarted = true
                return nil
            } catch {
                return error
            }
        }
        if let startFailed {
            fail(everythingQueuedWith: startFailed)
            return
        }
        sem_post(wakeups)
    }

    func flush(_ waiter: CheckedContinuation<Void, Never>) {
        let idle = state.withLock { state -> Bool in
            if state.queued.isEmpty && !state.busy { return true }
            state.flushWaiters.append(waiter)
            return false
        }
        if idle { waiter.resume() }
    }

    func close() {
        let started = state.withLock { state -> Bool in
            state.closed = true
            return state.threadStarted
        }
        if started { sem_post(wakeups) }
    }

    /// Started with the first operation: a writer that never writes costs no thread.
    /// Called with the state locked.
    private func startThread() throws(SystemError) {
        try startDetachedThread(named: "ecw-state-write") { [self] in loop() }
    }

    /// Without a thread nothing can be written: every waiter hears why.
    private func fail(everythingQueuedWith error: SystemError) {
        let (operations, flushWaiters) = state.withLock { state in
            defer {
                state.queued = []
                state.flushWaiters = []
                state.problem = "cannot write the state directory \(directory.path): \(error)"
            }
            return (state.queued, state.flushWaiters)
        }
        onProblem("cannot write the state directory \(directory.path): \(error)")
        for operation in operations { for waiter in operation.waiters { waiter.resume(throwing: error) } }
        for waiter in flushWaiters { waiter.resume() }
    }

    private enum Next {
        case perform(Operation)
        case idle(flushWaiters: [CheckedContinuation<Void, Never>], closed: Bool)
    }

    private func loop() {
        while true {
            while sem_wait(wakeups) != 0 && errno == EINTR {}
            drain: while true {
                let next = state.withLock { state -> Next in
                    if state.queued.isEmpty {
                        state.busy = false
                        defer { state.flushWaiters = [] }
                        return .idle(flushWaiters: state.flushWaiters, closed: state.closed)
                    }
                    state.busy = true
                    return .perform(state.queued.removeFirst())
                }
                switch next {
                case .perform(let operation):
                    perform(operation)
                case .idle(let flushWaiters, let closed):
                    for waiter in flushWaiters { waiter.resume() }
                    if closed { return }
                    break drain
                }
            }
        }
    }

    private func perform(_ operation: Operation) {
        beforeEach?(operation.name)
        let result: Result<Void, any Error>
        do {
            if case .remove = operation.kind, let injected = fault?(operation.name, true) { throw injected }
            if case .write = operation.kind, let injected = fault?(operation.name, false) { throw injected }
            switch operation.kind {
            case .write(let mode, let render): try directory.write(operation.name, render(), mode: mode)
            case .remove: try directory.remove(operation.name)
            }
            result = .success(())
        } catch {
            result = .failure(error)
        }
        let change = state.withLock { state -> String?? in
            state.performed += 1
            switch result {
            case .success:
                guard state.problem != nil else { return .none }
                state.problem = nil
                return .some(nil)
            case .failure(let error):
                state.problem = "cannot write the state directory \(directory.path): \(error)"
                return .some(state.problem)
            }
        }
        if let change { onProblem(change) }
        for waiter in operation.waiters {
            switch result {
            case .success: waiter.resume()
            case .failure(let error): waiter.resume(throwing: error)
            }
        }
    }
}
