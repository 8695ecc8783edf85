import DBus
import Foundation

/// A private dbus-daemon (the real one, from Debian's dbus package) for the sd-bus wrapper.
public final class PrivateBus {
    public let process = Process()
    private let temporary: TemporaryDirectory
    public var directory: String { temporary.path }
    public let address: String

    public init() throws {
        let temporary = TemporaryDirectory(prefix: "ecw-bus-")
        self.temporary = temporary
        address = "unix:path=\(temporary.path)/bus"
        process.executableURL = URL(fileURLWithPath: "/usr/bin/dbus-daemon")
        process.arguments = ["--session", "--nofork", "--nopidfile", "--address=\(address)"]
        // Not the test runner's pipes: swift test waits for every holder of its pipe to close it.
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        for _ in 0..<500 where !FileManager.default.fileExists(atPath: "\(directory)/bus") { usleep(10_000) }
        // The socket file exists from bind(); connections are taken only after listen()
        // and the daemon's start-up: on a busy machine a test connecting at once was refused.
        for _ in 0..<500 where (try? Bus.connect(address: address)) == nil { usleep(10_000) }
    }

    public func stop() {
        // SIGKILL: the child inherits the test runner's blocked SIGTERM.
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        temporary.remove()
    }
}
