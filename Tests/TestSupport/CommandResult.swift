import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A finished command: its exit status and what it wrote.
public struct CommandResult {
    public var status: Int32
    public var stdout: String
    public var stderr: String

    public init(status: Int32, stdout: String, stderr: String) {
        self.status = status
        self.stdout = stdout
        self.stderr = stderr
    }
}

/// Runs a command to completion (with a deadline) and captures its output.
public func runCommand(_ executable: String, _ arguments: [String], environment: [String: String] = [:], timeout: TimeInterval = 20) throws
    -> CommandResult
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

/// Foundation's waitUntilExit can spin on Linux; poll instead, with a bound.
public func waitForExit(_ process: Process, seconds: Double) {
    let deadline = Date().addingTimeInterval(seconds)
    while process.isRunning && Date() < deadline { usleep(5_000) }
}
