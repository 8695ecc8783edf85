import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Testing
import WorkerCore

/// The built `edgecoder-worker` binary, next to the test bundle in the build directory.
let workerBinary: String = {
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

struct CommandResult {
    var status: Int32
    var stdout: String
    var stderr: String
}

/// Runs a command to completion (with a deadline) and captures its output.
func runCommand(_ executable: String, _ arguments: [String], environment: [String: String] = [:], timeout: TimeInterval = 20) throws -> CommandResult
{
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    var env = ProcessInfo.processInfo.environment
    env.removeValue(forKey: "NOTIFY_SOCKET")
    for (key, value) in environment { env[key] = value }
    process.environment = env
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    try process.run()
    // Read both pipes concurrently so a chatty child never blocks on a full pipe.
    nonisolated(unsafe) var outData = Data()
    nonisolated(unsafe) var errData = Data()
    let group = DispatchGroup()
    group.enter()
    DispatchQueue.global().async {
        outData = out.fileHandleForReading.readDataToEndOfFile(); group.leave()
    }
    group.enter()
    DispatchQueue.global().async {
        errData = err.fileHandleForReading.readDataToEndOfFile(); group.leave()
    }
    let deadline = Date().addingTimeInterval(timeout)
    while process.isRunning && Date() < deadline { usleep(10_000) }
    if process.isRunning {
        kill(process.processIdentifier, SIGKILL)
        waitForExit(process, seconds: 5)
        throw HarnessError("\(executable) \(arguments.joined(separator: " ")) did not finish within \(timeout) s")
    }
    group.wait()
    return CommandResult(
        status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self), stderr: String(decoding: errData, as: UTF8.self))
}

/// Calls `body` with a sockaddr_un for `path`.
func withUnixAddress(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> Int32) -> Int32 {
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
        let bytes = Array(path.utf8)
        raw.copyBytes(from: bytes)
        raw[bytes.count] = 0
    }
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
    }
}

/// Foundation's waitUntilExit can spin on Linux; poll instead, with a bound.
func waitForExit(_ process: Process, seconds: Double) {
    let deadline = Date().addingTimeInterval(seconds)
    while process.isRunning && Date() < deadline { usleep(5_000) }
}

struct HarnessError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A datagram socket playing systemd's notification socket.
final class NotifySocket {
    let path: String
    let fd: Int32

    init(path: String) throws {
        self.path = path
        fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { throw HarnessError("socket: \(errno)") }
        let rc = withUnixAddress(path) { bind(fd, $0, $1) }
        guard rc == 0 else { throw HarnessError("bind \(path): \(errno)") }
    }

    deinit {
        close(fd)
        unlink(path)
    }

    /// The next datagram, or nil after `timeout` seconds.
    func receive(timeout: Double) -> String? {
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        guard poll(&pfd, 1, Int32(timeout * 1000)) == 1 else { return nil }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = recv(fd, &buffer, buffer.count, 0)
        return n > 0 ? String(decoding: buffer[0..<n], as: UTF8.self) : nil
    }

    /// Waits for a datagram containing `needle`; returns every datagram seen up to it.
    func waitFor(_ needle: String, timeout: Double) -> [String]? {
        let deadline = Date().addingTimeInterval(timeout)
        var seen: [String] = []
        while Date() < deadline {
            guard let message = receive(timeout: deadline.timeIntervalSinceNow) else { break }
            seen.append(message)
            if message.contains(needle) { return seen }
        }
        return nil
    }
}

/// A daemon started from the real binary with its own temporary directories.
final class DaemonHarness {
    let root: String
    var stateDirectory: String { root + "/state" }
    var runtimeDirectory: String { root + "/run" }
    var configPath: String { root + "/config.json" }
    var controlSocket: String { runtimeDirectory + "/control.sock" }
    private(set) var process: Process?
    private(set) var notify: NotifySocket?
    var logPath: String { root + "/daemon.log" }

    init(config: String = "{}") throws {
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
    func start(extraEnvironment: [String: String] = [:], extraArguments: [String] = []) throws -> [String] {
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
    func stop(signal: Int32 = SIGTERM, timeout: Double = 5) throws -> (status: Int32, seconds: Double) {
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
    var stderr: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Runs a client subcommand against this daemon.
    func cli(_ arguments: [String], asUser user: (uid: Int, gid: Int, groups: [Int])? = nil, timeout: TimeInterval = 20) throws -> CommandResult {
        let args = arguments + ["--runtime-dir", runtimeDirectory]
        guard let user else { return try runCommand(workerBinary, args, timeout: timeout) }
        let groups = user.groups.isEmpty ? ["--clear-groups"] : ["--groups", user.groups.map(String.init).joined(separator: ",")]
        return try runCommand("/usr/bin/setpriv", ["--reuid", String(user.uid), "--regid", String(user.gid)] + groups + [workerBinary] + args)
    }

    func readState(_ name: String) -> String? {
        try? String(contentsOfFile: stateDirectory + "/" + name, encoding: .utf8)
    }
}

/// A raw connection to the control socket, for sending what the CLI never would.
final class RawControlConnection {
    let fd: Int32
    private var buffer: [UInt8] = []

    init(path: String) throws {
        fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        let rc = withUnixAddress(path) { connect(fd, $0, $1) }
        guard rc == 0 else { throw HarnessError("connect \(path): errno \(errno)") }
    }

    deinit { close(fd) }

    func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + offset, $0.count - offset, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { throw HarnessError("send: errno \(errno)") }
            offset += n
        }
    }

    func send(_ text: String) throws { try send(Array(text.utf8)) }

    /// The next line as JSON, or nil when the daemon closed the connection or nothing came in time.
    func receiveJSON(timeout: Double = 5) throws -> JSONValue? {
        let deadline = Date().addingTimeInterval(timeout)
        while true {
            if let newline = buffer.firstIndex(of: 0x0A) {
                let line = Array(buffer[..<newline])
                buffer.removeSubrange(...newline)
                return try JSON.parse(line)
            }
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let remaining = deadline.timeIntervalSinceNow
            guard remaining > 0, poll(&pfd, 1, Int32(remaining * 1000)) == 1 else { return nil }
            var chunk = [UInt8](repeating: 0, count: 65_536)
            let n = recv(fd, &chunk, chunk.count, 0)
            if n <= 0 { return nil }
            buffer.append(contentsOf: chunk[0..<n])
        }
    }
}
