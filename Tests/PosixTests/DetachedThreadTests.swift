import Foundation
import Posix
import Synchronization
import Testing

/// The one thread starter (#27): the body runs on a thread of its own, named for `top -H`.
@Suite struct DetachedThreadTests {
    @Test func theBodyRunsOnANamedThreadOfItsOwn() async throws {
        let seen = Mutex<String?>(nil)
        try startDetachedThread(named: "ecw-test-thread-name-too-long") {
            let comm = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? "?"
            seen.withLock { $0 = comm.trimmingCharacters(in: .whitespacesAndNewlines) }
        }
        var name: String?
        for _ in 0..<500 {
            name = seen.withLock { $0 }
            if name != nil { break }
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        #expect(name == "ecw-test-thread", "the kernel keeps 15 bytes of the name")
    }
}
