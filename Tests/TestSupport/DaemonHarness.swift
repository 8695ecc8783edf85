import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// The built `edgecoder-worker` binary, next to the test bundle in the build directory.
public let workerBinary: String = {
    if let explicit = ProcessInfo.processInfo.environment["EDGECODER_WORKER_BIN"] { return explicit }
    let testBinary = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    var directory = testBinary.deletingLastPathComponent()
    // Swift Testing on Linux runs `<pkg>PackageTests.xctest` from the build directory.
    while directory.path != "/" {
        let candidate = directory.appendingPathComponent("edgecoder-worker").path
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        directory = directory.deletingLastPathComponent()
    }
    return FileManager.default.currentDirectoryPath + "/.build/debug/edgecoder-worker"
}()

/// A daemon started from the real binary with its own temporary directories.
public final class DaemonHarness {
    public let root: String
    public var stateDirectory: String { root + "/state" }
    public var runtimeDirectory: String { root + "/run" }
    public var configPath: String { root + "/config.json" }
    public var controlSocket: String { runtimeDirectory + "/control.sock" }
    public private(set) var process: Process?
    public private(set) var notify: NotifySocket?
    public var logPath: String { root + "/daemon.log" }

    public init(config: String = "{}") throws {
        root = "/tmp/ecw-it-" + UUID().uuidString.prefix(8).lowercased()
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        // Unprivileged test clients must reach the runtime directory.
        chmod(root, 0o755)
        try config.write(toFile: configPath, atomically: true, encoding: .utf8)
    }

    deinit {
        if let process, process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            waitForExit(process, seconds: 5)
        }
        try? FileManager.default.removeItem(atPath: root)
    }

    /// Starts the daemon and waits for READY=1. Returns the notifications up to READY.
    @discardableResult
    public func start(extraEnvironment: [String: String] = [:], extraArguments: [String] = []) throws -> [String] {
        let notify = try NotifySocket(path: root + "/notify-\(UUID().uuidString.prefix(6)).sock")
        self.notify = notify
        let process = Process()
        process.executableURL = URL(fileURLWithPath: workerBinary)
        process.arguments = ["run", "--config", configPath, "--state-dir", stateDirectory, "--runtime-dir", runtimeDirectory] + extraArguments
        var env = ProcessInfo.processInfo.environment
        env["NOTIFY_SOCKET"] = notify.path
        for (key, value) in extraEnvironment { env[key] = value }
        process.environment = env
        if !FileManager.default.fileExists(atPath: logPath) { FileManager.default.createFile(atPath: logPath, contents: nil) }
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        try log.seekToEnd()
        process.standardError = log
        try process.run()
        self.process = process
        guard let seen = notify.waitFor("READY=1", timeout: 15) else {
            throw HarnessError("the daemon sent no READY=1 within 15 s")
        }
        return seen
    }

    /// Sends SIGTERM and waits; returns the exit status and how long it took.
    public func stop(signal: Int32 = SIGTERM, timeout: Double = 5) throws -> (status: Int32, seconds: Double) {
        guard let process else { throw HarnessError("not started") }
        let started = Date()
        kill(process.processIdentifier, signal)
        while process.isRunning && Date().timeIntervalSince(started) < timeout { usleep(5_000) }
        let took = Date().timeIntervalSince(started)
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            waitForExit(process, seconds: 5)
            throw HarnessError("the daemon did not exit within \(timeout) s of signal \(signal)")
        }
        return (process.terminationStatus, took)
    }

    /// What the daemon wrote to stderr so far, over all its runs.
    public var stderr: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Runs a client subcommand against this daemon.
    public func cli(_ arguments: [String], asUser user: (uid: Int, gid: Int, groups: [Int])? = nil, timeout: TimeInterval = 20) throws
        -> CommandResult
    {
        let args = arguments + ["--runtime-dir", runtimeDirectory]
        guard let user else { return try runCommand(workerBinary, args, timeout: timeout) }
        let groups = user.groups.isEmpty ? ["--clear-groups"] : ["--groups", user.groups.map(String.init).joined(separator: ",")]
        return try runCommand("/usr/bin/setpriv", ["--reuid", String(user.uid), "--regid", String(user.gid)] + groups + [workerBinary] + args)
    }

    public func readState(_ name: String) -> String? {
        try? String(contentsOfFile: stateDirectory + "/" + name, encoding: .utf8)
    }
}
