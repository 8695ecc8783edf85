#if canImport(Glibc)
import Glibc
#endif
import CWorkerShims
import Posix
import Synchronization
import Testing
import TestSupport

/// A non-blocking pipe, closed at the end of the test.
final class TestPipe: Sendable {
    let readFD: Int32
    let writeFD: Int32

    init() throws {
        var fds: [Int32] = [0, 0]
        guard ecw_pipe_nonblocking(&fds) == 0 else { throw SystemError("pipe2", errno: errno) }
        readFD = fds[0]
        writeFD = fds[1]
    }

    func write(_ byte: UInt8 = 1) {
        var byte = byte
        _ = Glibc.write(writeFD, &byte, 1)
    }

    /// Fills the pipe until the kernel refuses more: the write end is then not writable.
    func fill() {
        let chunk = [UInt8](repeating: 0, count: 65_536)
        while chunk.withUnsafeBytes({ Glibc.write(writeFD, $0.baseAddress, $0.count) }) > 0 {}
    }

    func drain() {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while buffer.withUnsafeMutableBytes({ read(readFD, $0.baseAddress, $0.count) }) > 0 {}
    }

    deinit {
        close(readFD)
        close(writeFD)
    }
}

/// Whether a task has finished, for asserting that a wait is still waiting.
final class Flag: Sendable {
    private let state = Mutex(false)
    var value: Bool { state.withLock { $0 } }
    func set() { state.withLock { $0 = true } }
}

/// The indices of the waits that resumed.
final class Resumed: Sendable {
    private let state = Mutex<Set<Int>>([])
    var value: Set<Int> { state.withLock { $0 } }
    func insert(_ index: Int) { state.withLock { _ = $0.insert(index) } }
}

@Suite struct ReactorWaits {
    @Test func aReadableWaitResumesWhenDataArrivesAndNotBefore() async throws {
        let pipe = try TestPipe()
        let done = Flag()
        let waiter = Task {
            try await Reactor.shared.waitReadable(pipe.readFD)
            done.set()
        }
        try await Task.sleep(nanoseconds: 30_000_000)
        #expect(!done.value, "nothing to read yet")
        pipe.write()
        try await waiter.value
        #expect(done.value)
    }

    @Test func aReadableWaitResumesWhenTheWriterHangsUp() async throws {
        var fds: [Int32] = [0, 0]
        #expect(ecw_pipe_nonblocking(&fds) == 0)
        let (readFD, writeFD) = (fds[0], fds[1])
        defer { close(readFD) }
        let waiter = Task { try await Reactor.shared.waitReadable(readFD) }
        try await Task.sleep(nanoseconds: 10_000_000)
        close(writeFD)
        try await waiter.value
    }

    @Test func aWritableWaitOnAPipeWithRoomReturnsAtOnce() async throws {
        let pipe = try TestPipe()
        try await Reactor.shared.waitWritable(pipe.writeFD)
    }

    @Test func aWritableWaitOnAFullPipeResumesWhenTheReaderDrainsIt() async throws {
        let pipe = try TestPipe()
        pipe.fill()
        let done = Flag()
        let waiter = Task {
            try await Reactor.shared.waitWritable(pipe.writeFD)
            done.set()
        }
        try await Task.sleep(nanoseconds: 30_000_000)
        #expect(!done.value, "the pipe is full")
        pipe.drain()
        try await waiter.value
        #expect(done.value)
    }

    @Test func cancellingAWaitThrowsCancellationErrorAndTheReactorKeepsServing() async throws {
        let pipe = try TestPipe()
        let waiter = Task { try await Reactor.shared.waitReadable(pipe.readFD) }
        try await Task.sleep(nanoseconds: 10_000_000)
        waiter.cancel()
        await #expect(throws: CancellationError.self) { try await waiter.value }

        let next = Task { try await Reactor.shared.waitReadable(pipe.readFD) }
        pipe.write()
        try await next.value
    }

    @Test func aWaitInATaskAlreadyCancelledThrowsAtOnce() async throws {
        let pipe = try TestPipe()
        let waiter = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            try await Reactor.shared.waitReadable(pipe.readFD)
        }
        await #expect(throws: CancellationError.self) { try await waiter.value }
    }

    @Test func manyWaitersOnDifferentDescriptorsEachResumeForTheirOwn() async throws {
        let pipes = try (0..<8).map { _ in try TestPipe() }
        let resumed = Resumed()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, pipe) in pipes.enumerated() {
                group.addTask {
                    try await Reactor.shared.waitReadable(pipe.readFD)
                    resumed.insert(index)
                }
            }
            try await Task.sleep(nanoseconds: 20_000_000)
            for index in [5, 2] { pipes[index].write() }
            #expect(await waitUntil { resumed.value == [2, 5] })
            try await Task.sleep(nanoseconds: 20_000_000)
            #expect(resumed.value == [2, 5], "only the pipes written to")
            for pipe in pipes { pipe.write() }
            try await group.waitForAll()
        }
        #expect(resumed.value.count == 8)
    }
}
