#if canImport(Glibc)
import Glibc
#endif
import Logging
@testable import Posix
import Synchronization
import Tasks
import Testing

/// A poll(2) that fails with ENOMEM a given number of times, then is the real one; it
/// records when it was called. A mock: poll cannot be made to fail on demand.
private final class FailingPoll: Sendable {
    private let state: Mutex<(failuresLeft: Int, calls: [UInt64])>

    init(failures: Int) { state = Mutex((failures, [])) }

    var calls: [UInt64] { state.withLock { $0.calls } }

    func poll(_ fds: UnsafeMutablePointer<pollfd>, _ count: nfds_t, _ timeout: Int32) -> Int32 {
        let fail = state.withLock { state -> Bool in
            state.calls.append(monotonicNanoseconds())
            guard state.failuresLeft > 0 else { return false }
            state.failuresLeft -= 1
            return true
        }
        if fail {
            errno = ENOMEM
            return -1
        }
        return Glibc.poll(fds, count, timeout)
    }
}

@Suite struct ReactorBackoffTests {
    @Test func mockedPollFailureBacksOffLogsOnceAndThenServesTheWaiters() async throws {
        let failing = FailingPoll(failures: 4)
        let log = MemoryLogHandler()
        let reactor = try Reactor(poll: { failing.poll($0, $1, $2) }, logger: Logger(label: "reactor", handler: log))
        var fds: [Int32] = [-1, -1]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        var byte: UInt8 = 1
        #expect(write(fds[1], &byte, 1) == 1)
        let readEnd = fds[0]
        let served = await race(
            { (try? await reactor.waitReadable(readEnd)) != nil },
            { () async -> Bool in
                try? await Task.sleep(nanoseconds: 10_000_000_000)
                return false
            })
        #expect(served == .first(true))

        let calls = failing.calls
        #expect(calls.count >= 5)
        // Each failed try was followed by its pause: 10, 20, 40, 80 ms, not a spin.
        for index in 0..<min(4, calls.count - 1) {
            #expect(calls[index + 1] - calls[index] >= FailureBackoff.firstPauseNanoseconds << UInt64(index))
        }
        let errors = log.records.filter { $0.level == .error }
        #expect(errors.count == 1)
        #expect(errors.first?.message.contains("poll failed") == true)
        #expect(log.records.filter { $0.level == .notice }.map(\.message) == ["poll works again after 4 failed tries"])
    }
}
