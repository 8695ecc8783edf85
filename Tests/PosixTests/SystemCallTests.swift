#if canImport(Glibc)
import Glibc
#endif
import Posix
import Testing

@Suite struct SystemCallTests {
    @Test func retriesEINTRUntilTheCallWorks() throws {
        var tries = 0
        let result = try systemCall("fake") { () -> Int32 in
            tries += 1
            if tries < 3 {
                errno = EINTR
                return -1
            }
            return 42
        }
        #expect(result == 42)
        #expect(tries == 3)
    }

    @Test func aFailureOfTheWorldIsThrownWithItsErrno() {
        #expect(throws: SystemError("open", errno: ENOENT, detail: "/nonexistent/ecw")) {
            try systemCall("open", "/nonexistent/ecw") { open("/nonexistent/ecw", O_RDONLY) }
        }
    }

    @Test func aClosedDescriptorIsABugThatStopsTheProcess() async {
        await #expect(processExitsWith: .failure) {
            var byte: UInt8 = 0
            _ = try? systemCall("read") { read(-1, &byte, 1) }
        }
    }

    @Test func aBadPointerIsABugThatStopsTheProcess() async {
        await #expect(processExitsWith: .failure) {
            var fds: [Int32] = [-1, -1]
            _ = pipe(&fds)
            _ = try? systemCall("write") { write(fds[1], UnsafeRawPointer(bitPattern: 16), 1) }
        }
    }
}

@Suite struct FailureBackoffTests {
    @Test func pausesDoubleFromTenMillisecondsToOneSecondAndOnlyTheFirstIsLogged() {
        var backoff = FailureBackoff()
        let tries = (0..<10).map { _ in backoff.failed() }
        #expect(tries.map(\.pauseNanoseconds) == [10, 20, 40, 80, 160, 320, 640, 1_000, 1_000, 1_000].map { UInt64($0) * 1_000_000 })
        #expect(tries.map(\.isFirst) == [true] + Array(repeating: false, count: 9))
        #expect(backoff.failures == 10)
    }

    @Test func aSuccessEndsTheRunAndTheNextFailureStartsAgain() {
        var backoff = FailureBackoff()
        #expect(backoff.succeeded() == nil)
        _ = backoff.failed()
        _ = backoff.failed()
        #expect(backoff.succeeded() == 2)
        #expect(backoff.succeeded() == nil)
        let next = backoff.failed()
        #expect(next.pauseNanoseconds == FailureBackoff.firstPauseNanoseconds)
        #expect(next.isFirst)
    }

    @Test func manyFailuresNeitherOverflowNorPassTheLongestPause() {
        var backoff = FailureBackoff()
        for _ in 0..<200 { #expect(backoff.failed().pauseNanoseconds <= FailureBackoff.longestPauseNanoseconds) }
    }
}
