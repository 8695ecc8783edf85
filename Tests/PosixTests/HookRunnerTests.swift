#if canImport(Glibc)
import Glibc
#endif
import Posix
import Testing

/// The operator's hook (issue 12 §4) with real child processes: it sees none of the
/// daemon's descriptors or secrets, nothing it starts outlives it, and its output is cut
/// before it reaches the journal.
@Suite(.serialized) struct HookRunnerTests {
    @Test func theHookSeesNoDescriptorOfTheDaemonsButItsOutput() async throws {
        // Opened without O_CLOEXEC, as a library's socket might be.
        let leaked = open("/dev/null", O_RDONLY)
        #expect(leaked > 2)
        defer { close(leaked) }
        let (outcome, output) = await HookRunner.run("ls /proc/$$/fd", environment: [:], timeoutMs: 5_000)
        #expect(outcome == .exited(0))
        #expect(output.text.split(separator: "\n").sorted() == ["0", "1", "2"], "open in the hook: \(output.text)")
    }

    @Test func theEnvironmentIsPathLangAndTheGivenVariablesOnly() async throws {
        setenv("CREDENTIALS_DIRECTORY", "/run/credentials/edgecoder-worker.service", 1)
        defer { unsetenv("CREDENTIALS_DIRECTORY") }
        let (outcome, output) = await HookRunner.run(
            "env", environment: ["EDGECODER_EVENT": "network-restored", "EDGECODER_MODE": "bluetooth"],
            timeoutMs: 5_000)
        #expect(outcome == .exited(0))
        let names = Set(output.text.split(separator: "\n").compactMap { $0.split(separator: "=", maxSplits: 1).first.map(String.init) })
        // The shell adds PWD itself.
        #expect(names.subtracting(["PWD"]) == ["PATH", "LANG", "EDGECODER_EVENT", "EDGECODER_MODE"], "\(output.text)")
        #expect(output.text.contains("EDGECODER_EVENT=network-restored\n"))
        #expect(!output.text.contains("CREDENTIALS_DIRECTORY"))
    }

    @Test func pathAndLangComeFromTheDaemonOrDefaults() {
        let inherited = HookRunner.environment(
            ["EDGECODER_MODE": "bluetooth"], inherited: { ["PATH": "/opt/bin:/usr/bin", "LANG": "de_DE.UTF-8", "HOME": "/root"][$0] })
        #expect(inherited == ["PATH": "/opt/bin:/usr/bin", "LANG": "de_DE.UTF-8", "EDGECODER_MODE": "bluetooth"])
        let defaults = HookRunner.environment([:], inherited: { _ in nil })
        #expect(defaults == ["PATH": HookRunner.defaultPath, "LANG": "C.UTF-8"])
    }

    @Test func whatTheHookStartsInTheBackgroundDiesWhenItEnds() async throws {
        let started = monotonicNanoseconds()
        let (outcome, output) = await HookRunner.run("sleep 300 & echo $!", environment: [:], timeoutMs: 10_000)
        #expect(outcome == .exited(0))
        #expect(monotonicNanoseconds() - started < 5_000_000_000, "the background child kept the output open")
        let pid = try #require(output.text.split(separator: "\n").first.flatMap { Int32($0) })
        #expect(await eventuallyGone(pid), "sleep \(pid) outlived the hook")
    }

    @Test func aTimedOutHookIsKilledWithItsGroup() async throws {
        let (outcome, output) = await HookRunner.run("sleep 300 & echo $!; sleep 300", environment: [:], timeoutMs: 200)
        guard case .timedOut = outcome else { Issue.record("outcome \(outcome)"); return }
        let pid = try #require(output.text.split(separator: "\n").first.flatMap { Int32($0) })
        #expect(await eventuallyGone(pid))
    }

    @Test func outputPastTheLimitIsReadDroppedAndNotedNotLogged() async throws {
        let (outcome, output) = await HookRunner.run(
            "head -c 1000000 /dev/zero | tr '\\0' x; echo; echo done >&2", environment: [:],
            timeoutMs: 10_000, outputLimit: 1_000)
        #expect(outcome == .exited(0), "a hook writing more than the limit must not block on a full pipe")
        #expect(output.bytes.count == 1_000)
        #expect(output.droppedBytes == 1_000_000 + 1 + 5 - 1_000)
        #expect(output.logLines.count == 2)
        #expect(output.logLines.last == "[output cut after 1000 bytes: 999006 more bytes not logged]")
    }

    @Test func shortOutputIsLoggedLineByLineWithoutANote() async throws {
        let (_, output) = await HookRunner.run("echo one; echo; echo two >&2", environment: [:], timeoutMs: 5_000)
        #expect(output.logLines == ["one", "two"])
        #expect(output.droppedBytes == 0)
    }

    @Test func captureStillReadsAVersionLine() async {
        let (outcome, text) = await HookRunner.capture("echo 5.66", timeoutMs: 5_000, limit: 64)
        #expect(outcome == .exited(0))
        #expect(text == "5.66\n")
    }
}

/// Gone, or a zombie waiting for init: either way no longer running.
func eventuallyGone(_ pid: Int32) async -> Bool {
    for _ in 0..<200 {
        if kill(pid, 0) != 0 { return true }
        var stat = [UInt8](repeating: 0, count: 512)
        let fd = open("/proc/\(pid)/stat", O_RDONLY)
        if fd >= 0 {
            let n = read(fd, &stat, stat.count)
            close(fd)
            if n > 0, let close = stat.prefix(n).lastIndex(of: UInt8(ascii: ")")), close + 2 < n, stat[close + 2] == UInt8(ascii: "Z") { return true }
        }
        try? await Task.sleep(nanoseconds: 10_000_000)
    }
    return false
}
