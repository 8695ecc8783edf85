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

/// Runs an operator's hook command with `/bin/sh -c`, in its own process group so a
/// timeout kills everything it started, waiting through a pidfd on the reactor (no
/// thread blocks in waitpid).
public enum HookRunner {
    public static func run(_ command: String, environment: [String: String], timeoutMs: Int64, outputTo output: Int32 = -1) async -> HookOutcome {
        var pidfd: Int32 = -1
        let pid: Int32 = withCStrings(environment.map { "\($0.key)=\($0.value)" }) { env in
            ecw_spawn_shell(command, env, output, &pidfd)
        }
        if output >= 0 { close(output) }
        if pid < 0 { return .couldNotStart(String(cString: strerror(-pid))) }
        defer { if pidfd >= 0 { close(pidfd) } }
        let started = monotonicNanoseconds()
        let deadline = started + UInt64(timeoutMs) * 1_000_000
        while true {
            var status: Int32 = 0
            let reaped = ecw_reap(pid, &status)
            if reaped == 1 {
                // WIFEXITED / WEXITSTATUS / WTERMSIG are macros; their arithmetic is stable.
                if status & 0x7F == 0 { return .exited((status >> 8) & 0xFF) }
                return .killedBySignal(status & 0x7F)
            }
            if reaped < 0 { return .couldNotStart("waitpid: \(String(cString: strerror(-reaped)))") }
            let now = monotonicNanoseconds()
            if now >= deadline || Task.isCancelled {
                kill(-pid, SIGKILL)
                var ignored: Int32 = 0
                while ecw_reap(pid, &ignored) == 0 { usleep(1_000) }
                return .timedOut(milliseconds: Int64((now - started) / 1_000_000))
            }
            if pidfd >= 0 {
                // Readable when the child exits; bounded by the deadline.
                let fd = pidfd
                let wait = deadline - now
                _ = await race({ try? await Reactor.shared.waitReadable(fd) }, { try? await Task.sleep(nanoseconds: wait) })
            } else {
                try? await Task.sleep(nanoseconds: min(20_000_000, deadline - now))
            }
        }
    }

    /// Runs a command whose output is short (a version line): stdout and stderr are
    /// collected in a pipe and read once it exits, up to `limit` bytes.
    public static func capture(_ command: String, timeoutMs: Int64, limit: Int = 4_096) async -> (outcome: HookOutcome, output: String) {
        var fds: [Int32] = [-1, -1]
        guard ecw_pipe_nonblocking(&fds) == 0 else { return (.couldNotStart("pipe: \(String(cString: strerror(errno)))"), "") }
        defer { close(fds[0]) }
        let outcome = await run(command, environment: [:], timeoutMs: timeoutMs, outputTo: fds[1])
        var bytes = [UInt8](repeating: 0, count: limit)
        let count = read(fds[0], &bytes, limit)
        return (outcome, String(decoding: bytes.prefix(max(0, count)), as: UTF8.self))
    }

    private static func withCStrings<T>(_ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> T) -> T {
        var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
        pointers.append(nil)
        defer { for pointer in pointers { free(pointer) } }
        return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}
