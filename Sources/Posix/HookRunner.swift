#if canImport(Glibc)
import Glibc
#endif
import CWorkerShims

/// How an operator hook ended.
public enum HookOutcome: Sendable, Equatable, CustomStringConvertible {
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

/// What a command wrote on stdout and stderr together, cut at a limit.
public struct HookOutput: Sendable, Equatable {
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

/// Runs an operator's hook command with `/bin/sh -c`, in its own process group, with a
/// minimal environment and no descriptor of the daemon's but the output pipe. When the
/// shell ends (or times out) the whole group is killed, so nothing it started in the
/// background outlives it. The child is waited for through a pidfd on the reactor (no
/// thread blocks in waitpid) and its output read through the reactor too.
public enum HookRunner {
    /// The PATH a hook gets when the daemon has none.
    public static let defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    /// Output past this many bytes is dropped (and counted), never logged.
    public static let defaultOutputLimit = 8_192
    /// How long output is still read after the hook's group is killed: a descendant that
    /// left the group could hold the pipe open for ever.
    static let drainNanoseconds: UInt64 = 500_000_000

    /// The whole environment of a hook: PATH and LANG (the daemon's, or defaults) and
    /// `variables`. Nothing else of the daemon's: under systemd it holds
    /// CREDENTIALS_DIRECTORY (where the registration token is), NOTIFY_SOCKET and more.
    public static func environment(_ variables: [String: String], inherited: (String) -> String? = inheritedVariable) -> [String: String] {
        var environment = variables
        environment["PATH"] = inherited("PATH").flatMap { $0.isEmpty ? nil : $0 } ?? defaultPath
        environment["LANG"] = inherited("LANG").flatMap { $0.isEmpty ? nil : $0 } ?? "C.UTF-8"
        return environment
    }

    public static func inheritedVariable(_ name: String) -> String? { getenv(name).map { String(cString: $0) } }

    /// Runs `command` with `HookRunner.environment(variables)` until it exits or
    /// `timeoutMs` passes (or the task is cancelled), then kills its process group.
    public static func run(_ command: String, environment variables: [String: String], timeoutMs: Int64,
                           outputLimit: Int = defaultOutputLimit) async -> (outcome: HookOutcome, output: HookOutput) {
        var fds: [Int32] = [-1, -1]
        guard ecw_pipe_from_child(&fds) == 0 else { return (.couldNotStart("pipe: \(String(cString: strerror(errno)))"), HookOutput()) }
        let reader = fds[0]
        defer { close(reader) }
        var pidfd: Int32 = -1
        let pid: Int32 = withCStrings(environment(variables).map { "\($0.key)=\($0.value)" }) { env in
            ecw_spawn_shell(command, env, fds[1], &pidfd)
        }
        // Only the child keeps the write end: its exit (and its group's) is end of file.
        close(fds[1])
        if pid < 0 { return (.couldNotStart(String(cString: strerror(-pid))), HookOutput()) }
        defer { if pidfd >= 0 { close(pidfd) } }
        return await withTaskGroup(of: HookOutput?.self) { group in
            group.addTask { await collect(reader, limit: outputLimit) }
            let outcome = await waitForExit(pid, pidfd: pidfd, timeoutMs: timeoutMs)
            group.addTask {
                try? await Task.sleep(nanoseconds: drainNanoseconds)
                return nil
            }
            var output = HookOutput()
            while let next = await group.next() {
                if let collected = next {
                    output = collected
                    break
                }
                group.cancelAll()  // drain bound passed: the collector returns what it has
            }
            group.cancelAll()
            return (outcome, output)
        }
    }

    /// Waits for the shell to exit, then kills its process group (whatever it left
    /// running) and reaps it; on timeout or cancellation kills the group first.
    private static func waitForExit(_ pid: Int32, pidfd: Int32, timeoutMs: Int64) async -> HookOutcome {
        let started = monotonicNanoseconds()
        let deadline = started + UInt64(timeoutMs) * 1_000_000
        while true {
            var code: Int32 = 0
            var signo: Int32 = 0
            let exited = ecw_exited(pid, &code, &signo)
            if exited == 1 {
                // The shell is a zombie until reaped, so its pid (the group's id) cannot be
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
    private static func collect(_ fd: Int32, limit: Int) async -> HookOutput {
        var output = HookOutput()
        var chunk = [UInt8](repeating: 0, count: 16_384)
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

    /// Runs a command whose output is short (a version line): stdout and stderr
    /// together, up to `limit` bytes.
    public static func capture(_ command: String, timeoutMs: Int64, limit: Int = 4_096) async -> (outcome: HookOutcome, output: String) {
        let (outcome, output) = await run(command, environment: [:], timeoutMs: timeoutMs, outputLimit: limit)
        return (outcome, output.text)
    }

    private static func withCStrings<T>(_ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> T) -> T {
        var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
        pointers.append(nil)
        defer { for pointer in pointers { free(pointer) } }
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}
