#if canImport(Glibc)
import Glibc
#endif

/// How an operator hook ended (the outcome of any child process).
public typealias HookOutcome = ChildOutcome
/// What a hook wrote on stdout and stderr together, cut at a limit.
public typealias HookOutput = CapturedOutput

/// Runs an operator's hook command with `/bin/sh -c` through `ChildProcess`: its own
/// process group, a minimal environment, no descriptor of the daemon's but the output
/// pipe (stdout and stderr together), the whole group killed when the shell ends.
public enum HookRunner {
    /// The PATH a hook gets when the daemon has none.
    public static let defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    /// Output past this many bytes is dropped (and counted), never logged.
    public static let defaultOutputLimit = 8_192
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
    public static func run(
        _ command: String, environment variables: [String: String], timeoutMs: Int64,
        outputLimit: Int = defaultOutputLimit
    ) async -> (outcome: HookOutcome, output: HookOutput) {
        let result = await ChildProcess.run(
            "/bin/sh", arguments: ["-c", command], environment: environment(variables),
            timeoutMs: timeoutMs, outputLimit: outputLimit, mergeOutput: true)
        return (result.outcome, result.stdout)
    }

    /// Runs a command whose output is short (a version line): stdout and stderr
    /// together, up to `limit` bytes.
    public static func capture(_ command: String, timeoutMs: Int64, limit: Int = 4_096) async -> (outcome: HookOutcome, output: String) {
        let (outcome, output) = await run(command, environment: [:], timeoutMs: timeoutMs, outputLimit: limit)
        return (outcome, output.text)
    }
}
