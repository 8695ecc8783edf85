#if canImport(Glibc)
import Glibc
#endif
import CWorkerShims
import Tasks

/// How a child process ended.
public enum ChildOutcome: Sendable, Equatable, CustomStringConvertible {
    case exited(Int32)
    case killedBySignal(Int32)
    case timedOut(milliseconds: Int64)
    case couldNotStart(String)

    public var succeeded: Bool { self == .exited(0) }

    public var description: String {
        switch self {
        case .exited(let code): return "exited with status \(code)"
        case .killedBySignal(let signal): return "killed by signal \(signal)"
        case .timedOut(let ms): return "timed out after \(ms) ms and was killed"
        case .couldNotStart(let why): return "could not start: \(why)"
        }
    }
}

/// What a child wrote on one stream (or on stdout and stderr together), cut at a limit.
public struct CapturedOutput: Sendable, Equatable {
    /// The first bytes, up to the limit.
    public var bytes: [UInt8] = []
    /// How many bytes came after the limit and were read and dropped.
    public var droppedBytes = 0

    public init(bytes: [UInt8] = [], droppedBytes: Int = 0) {
        self.bytes = bytes
        self.droppedBytes = droppedBytes
    }

    public var text: String { String(decoding: bytes, as: UTF8.self) }

    /// The lines to log: the output's lines (empty ones skipped), then, if it was cut, a
    /// note saying how much was left out.
    public var logLines: [String] {
        var lines = text.split(whereSeparator: { $0 == "\n" || $0 == "\r\n" }).map(String.init)
        if droppedBytes > 0 {
            lines.append("[output cut after \(bytes.count) bytes: \(droppedBytes) more bytes not logged]")
        }
        return lines
    }
}

/// The one way this program runs another: in its own process group, with exactly the
/// environment given, stdin from bytes in memory (or /dev/null), no descriptor of ours
/// but the output pipes, a time limit, and output read through the reactor and capped.
/// When the child ends (or times out) its whole group is killed, so nothing it started in
/// the background outlives it. It is waited for through a pidfd on the reactor: no thread
/// blocks in waitpid. Operator hooks (`HookRunner`) and the sandbox's container engine
/// both run through it.
public enum ChildProcess {
    /// How long output is still read after the child's group is killed: a descendant that
    /// left the group could hold a pipe open for ever.
    static let drainNanoseconds: UInt64 = 500_000_000

    /// How a run ended and what it wrote. With `mergeOutput` stderr went into `stdout`.
    public struct Result: Sendable, Equatable {
        public var outcome: ChildOutcome
        public var stdout: CapturedOutput
        public var stderr: CapturedOutput
        /// From the spawn to the child's end (or its kill).
        public var durationMs: Int64
    }

    /// Runs `executable` (an absolute path) with `arguments` (argv[1...]) and exactly
    /// `environment` until it exits or `timeoutMs` passes (or the task is cancelled), then
    /// kills its process group. `stdin` is the child's whole standard input (nil:
    /// /dev/null); each of stdout and stderr keeps its first `outputLimit` bytes and counts
    /// the rest, so the child never blocks on a full pipe and nothing large is buffered.
    public static func run(
        _ executable: String, arguments: [String], environment: [String: String],
        stdin: [UInt8]? = nil, timeoutMs: Int64, outputLimit: Int,
        mergeOutput: Bool = false
    ) async -> Result {
        let started = monotonicNanoseconds()
        func failed(_ why: String) -> Result {
            Result(outcome: .couldNotStart(why), stdout: CapturedOutput(), stderr: CapturedOutput(), durationMs: 0)
        }
        var input: Int32 = -1
        if let stdin {
            input = stdin.withUnsafeBytes { ecw_memfd_with("stdin", $0.baseAddress, $0.count) }
            if input < 0 { return failed("memfd_create: \(String(cString: strerror(-input)))") }
        }
        defer { if input >= 0 { close(input) } }
        var outFds: [Int32] = [-1, -1]
        guard ecw_pipe_from_child(&outFds) == 0 else { return failed("pipe: \(String(cString: strerror(errno)))") }
        defer { close(outFds[0]) }
        var errFds: [Int32] = [-1, -1]
        if !mergeOutput {
            guard ecw_pipe_from_child(&errFds) == 0 else {
                close(outFds[1])
                return failed("pipe: \(String(cString: strerror(errno)))")
            }
        }
        defer { if errFds[0] >= 0 { close(errFds[0]) } }
        var pidfd: Int32 = -1
        let pid: Int32 = withCStrings([executable] + arguments) { argv in
            withCStrings(environment.map { "\($0.key)=\($0.value)" }) { env in
                ecw_spawn(executable, argv, env, input, outFds[1], mergeOutput ? outFds[1] : errFds[1], &pidfd)
            }
        }
        // Only the child keeps the write ends: its exit (and its group's) is end of file.
        close(outFds[1])
        if errFds[1] >= 0 { close(errFds[1]) }
        if pid < 0 { return failed(String(cString: strerror(-pid))) }
        defer { if pidfd >= 0 { close(pidfd) } }
        let reader = outFds[0], errReader = errFds[0]
        return await withTaskGroup(of: (Int, CapturedOutput)?.self) { group in
            group.addTask { (1, await collect(reader, limit: outputLimit)) }
            if errReader >= 0 { group.addTask { (2, await collect(errReader, limit: outputLimit)) } }
            let outcome = await waitForExit(pid, pidfd: pidfd, timeoutMs: timeoutMs)
            let durationMs = Int64((monotonicNanoseconds() - started) / 1_000_000)
            group.addTask {
                try? await Task.sleep(nanoseconds: drainNanoseconds)
                return nil
            }
            var result = Result(outcome: outcome, stdout: CapturedOutput(), stderr: CapturedOutput(), durationMs: durationMs)
            var pending = errReader >= 0 ? 2 : 1
            while pending > 0, let next = await group.next() {
                guard let (stream, collected) = next else {
                    group.cancelAll()  // drain bound passed: the collectors return what they have
                    continue
                }
                if stream == 1 { result.stdout = collected } else { result.stderr = collected }
                pending -= 1
            }
            group.cancelAll()
            return result
        }
    }

    /// Waits for the child to exit, then kills its process group (whatever it left
    /// running) and reaps it; on timeout or cancellation kills the group first.
    private static func waitForExit(_ pid: Int32, pidfd: Int32, timeoutMs: Int64) async -> ChildOutcome {
        let started = monotonicNanoseconds()
        let deadline = started + UInt64(max(0, timeoutMs)) * 1_000_000
        while true {
            var code: Int32 = 0
            var signo: Int32 = 0
            let exited = ecw_exited(pid, &code, &signo)
            if exited == 1 {
                // The child is a zombie until reaped, so its pid (the group's id) cannot be
                // reused yet: the kill reaches only what it left behind.
                kill(-pid, SIGKILL)
                reap(pid)
                return signo == 0 ? .exited(code) : .killedBySignal(signo)
            }
            if exited < 0 { return .couldNotStart("waitid: \(String(cString: strerror(-exited)))") }
            let now = monotonicNanoseconds()
            if now >= deadline || Task.isCancelled {
                kill(-pid, SIGKILL)
                reap(pid)
                return .timedOut(milliseconds: Int64((now - started) / 1_000_000))
            }
            if pidfd >= 0 {
                // Readable when the child exits; bounded by the deadline.
                let wait = deadline - now
                _ = await race({ try? await Reactor.shared.waitReadable(pidfd) }, { try? await Task.sleep(nanoseconds: wait) })
            } else {
                try? await Task.sleep(nanoseconds: min(20_000_000, deadline - now))
            }
        }
    }

    private static func reap(_ pid: Int32) {
        var ignored: Int32 = 0
        while ecw_reap(pid, &ignored) == 0 { usleep(1_000) }
    }

    /// Reads the pipe to its end (or until cancelled), keeping the first `limit` bytes
    /// and counting the rest: the writer never blocks on a full pipe.
    private static func collect(_ fd: Int32, limit: Int) async -> CapturedOutput {
        var output = CapturedOutput()
        var chunk = [UInt8](repeating: 0, count: 65_536)
        while true {
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n == 0 { return output }
            if n < 0 {
                guard errno == EAGAIN || errno == EINTR else { return output }
                do { try await Reactor.shared.waitReadable(fd) } catch { return output }
                continue
            }
            let kept = max(0, min(n, limit - output.bytes.count))
            output.bytes.append(contentsOf: chunk[0..<kept])
            output.droppedBytes += n - kept
        }
    }

    private static func withCStrings<T>(_ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> T) -> T {
        var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
        pointers.append(nil)
        defer { for pointer in pointers { free(pointer) } }
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}

/// The program's name found on `searchPath` (colon-separated) as an executable file, or
/// the name itself when it holds a slash and is executable; nil when there is none.
public func findExecutable(_ name: String, searchPath: String) -> String? {
    guard !name.isEmpty else { return nil }
    if name.contains("/") { return access(name, X_OK) == 0 ? name : nil }
    for directory in searchPath.split(separator: ":") where !directory.isEmpty {
        let candidate = "\(directory)/\(name)"
        var info = stat()
        if stat(candidate, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, access(candidate, X_OK) == 0 { return candidate }
    }
    return nil
}
