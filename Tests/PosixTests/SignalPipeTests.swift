#if canImport(Glibc)
import Glibc
#endif
import Posix
import Testing

/// The real handlers in the test process: SIGHUP and SIGINT sent to it arrive as values
/// through the pipe. Sent to the process, as systemd does: `raise` would aim at the
/// calling thread, and the concurrency pool's threads block these signals. One pipe at a
/// time (the handler writes to the latest), so serialized; the default dispositions come
/// back afterwards.
@Suite(.serialized) struct SignalPipeDelivery {
    @Test func aSignalSentToTheProcessArrivesAsItsNumber() async throws {
        let signals = try SignalPipe()
        defer { restoreDefaultHandlers() }
        kill(getpid(), SIGHUP)
        #expect(try await signals.next() == SIGHUP)
    }

    @Test func signalsSentBeforeAnyoneWaitsAreDeliveredInOrder() async throws {
        let signals = try SignalPipe()
        defer { restoreDefaultHandlers() }
        kill(getpid(), SIGINT)
        kill(getpid(), SIGHUP)
        #expect(try await signals.next() == SIGINT)
        #expect(try await signals.next() == SIGHUP)
    }

    @Test func aWaitingReaderWakesWhenTheSignalComes() async throws {
        let signals = try SignalPipe()
        defer { restoreDefaultHandlers() }
        let reader = Task { try await signals.next() }
        try await Task.sleep(nanoseconds: 20_000_000)
        kill(getpid(), SIGHUP)
        #expect(try await reader.value == SIGHUP)
    }

    @Test func aCancelledReaderStopsWaiting() async throws {
        let signals = try SignalPipe()
        defer { restoreDefaultHandlers() }
        let reader = Task { try await signals.next() }
        try await Task.sleep(nanoseconds: 10_000_000)
        reader.cancel()
        await #expect(throws: CancellationError.self) { try await reader.value }
    }

    @Test(arguments: [(SIGTERM, "SIGTERM"), (SIGINT, "SIGINT"), (SIGHUP, "SIGHUP"), (SIGUSR1, "signal \(SIGUSR1)")])
    func namesTheSignalsItHandles(signal: Int32, name: String) {
        #expect(SignalPipe.name(signal) == name)
    }
}

/// SIGPIPE stays as the test process had it: only what the pipe took over goes back.
func restoreDefaultHandlers() {
    for signo in [SIGTERM, SIGINT, SIGHUP] { signal(signo, SIG_DFL) }
}
