#if canImport(Glibc)
import Glibc
#endif
import Posix
import Testing

/// The one spawner (hooks and the sandbox's engine) with real children: argv passed as
/// is, stdin from memory, stdout and stderr apart and each capped, nothing left behind.
@Suite(.serialized) struct ChildProcessTests {
    @Test func argumentsReachTheProgramAsTheyAreWithNoShellBetween() async {
        let result = await ChildProcess.run(
            "/bin/echo", arguments: ["$HOME", "a b", "`id`", ";"], environment: [:], timeoutMs: 5_000, outputLimit: 1_000)
        #expect(result.outcome == .exited(0))
        #expect(result.stdout.text == "$HOME a b `id` ;\n")
    }

    @Test func stdinComesFromMemoryAndALargeOneNeverBlocks() async {
        let input = [UInt8](repeating: UInt8(ascii: "x"), count: 3 << 20)
        let result = await ChildProcess.run("/usr/bin/wc", arguments: ["-c"], environment: [:], stdin: input, timeoutMs: 10_000, outputLimit: 1_000)
        #expect(result.outcome == .exited(0))
        #expect(result.stdout.text.trimmingPrefix(while: { $0 == " " }) == "\(3 << 20)\n")
        let none = await ChildProcess.run("/usr/bin/wc", arguments: ["-c"], environment: [:], timeoutMs: 5_000, outputLimit: 1_000)
        #expect(none.stdout.text == "0\n", "no stdin is /dev/null")
    }

    @Test func stdoutAndStderrAreReadApartAndEachCappedWhileTheWriterRunsOn() async {
        let script = "head -c 5000000 /dev/zero; head -c 3000000 /dev/zero >&2; echo end >&2"
        let result = await ChildProcess.run("/bin/sh", arguments: ["-c", script], environment: [:], timeoutMs: 20_000, outputLimit: 1_000)
        #expect(result.outcome == .exited(0), "a child writing more than the limit must not block on a full pipe")
        #expect(result.stdout.bytes.count == 1_000 && result.stdout.droppedBytes == 5_000_000 - 1_000)
        #expect(result.stderr.bytes.count == 1_000 && result.stderr.droppedBytes == 3_000_004 - 1_000)
    }

    @Test func mergedOutputKeepsTheOrderOfOneStream() async {
        let result = await ChildProcess.run(
            "/bin/sh", arguments: ["-c", "echo a; echo b >&2; echo c"], environment: [:], timeoutMs: 5_000,
            outputLimit: 1_000, mergeOutput: true)
        #expect(result.stdout.text == "a\nb\nc\n")
        #expect(result.stderr.bytes.isEmpty)
    }

    @Test func theChildSeesNoDescriptorOfOursButItsStdinStdoutAndStderr() async {
        // Opened without O_CLOEXEC, as a library's socket might be.
        let leaked = open("/dev/null", O_RDONLY)
        defer { close(leaked) }
        let result = await ChildProcess.run(
            "/bin/sh", arguments: ["-c", "ls /proc/$$/fd; readlink /proc/$$/fd/0"], environment: [:],
            stdin: Array("x".utf8), timeoutMs: 5_000, outputLimit: 1_000)
        let lines = result.stdout.text.split(separator: "\n").map(String.init)
        #expect(lines.dropLast().sorted() == ["0", "1", "2"], "open in the child: \(result.stdout.text)")
        #expect(lines.last?.hasPrefix("/memfd:stdin") == true, "stdin is the memory file: \(result.stdout.text)")
    }

    @Test func theChildSeesExactlyTheEnvironmentGiven() async {
        setenv("CREDENTIALS_DIRECTORY", "/run/credentials/x", 1)
        defer { unsetenv("CREDENTIALS_DIRECTORY") }
        let result = await ChildProcess.run("/usr/bin/env", arguments: [], environment: ["ONLY": "this"], timeoutMs: 5_000, outputLimit: 1_000)
        #expect(result.stdout.text == "ONLY=this\n")
    }

    @Test func aChildThatCannotStartSaysWhy() async {
        let result = await ChildProcess.run("/nonexistent/program", arguments: [], environment: [:], timeoutMs: 5_000, outputLimit: 1_000)
        #expect(result.outcome == .couldNotStart("No such file or directory"))
    }

    @Test func theTimeLimitKillsTheGroupAndSaysHowLongItRan() async {
        let started = monotonicNanoseconds()
        let result = await ChildProcess.run(
            "/bin/sh", arguments: ["-c", "echo started; sleep 300"], environment: [:], timeoutMs: 300, outputLimit: 1_000)
        guard case .timedOut(let ms) = result.outcome else { Issue.record("outcome \(result.outcome)"); return }
        #expect(ms >= 300 && ms < 3_000)
        #expect(result.durationMs >= 300)
        #expect(result.stdout.text == "started\n", "what it wrote before the kill is kept")
        #expect(monotonicNanoseconds() - started < 3_000_000_000)
    }

    @Test func findsExecutablesOnAPathAndRefusesTheRest() {
        #expect(findExecutable("sh", searchPath: "/nonexistent:/bin") == "/bin/sh")
        #expect(findExecutable("sh", searchPath: "") == nil)
        #expect(findExecutable("", searchPath: "/bin") == nil)
        #expect(findExecutable("/bin/sh", searchPath: "") == "/bin/sh")
        #expect(findExecutable("/etc/passwd", searchPath: "") == nil, "not executable")
        #expect(findExecutable("bin", searchPath: "/") == nil, "a directory is not a program")
        #expect(findExecutable("no-such-program-here", searchPath: "/bin:/usr/bin") == nil)
    }
}
