import Foundation
#if canImport(Glibc)
import Glibc
#endif
import DBus
import TestSupport
import Testing
import WorkerCore

/// Stand-ins for logind, NetworkManager and power-profiles-daemon on a private bus: the
/// real ones need a booted systemd (the VM suite has that). Only the calls, properties
/// and signals the worker uses: Inhibit("sleep", …, "delay") answering a pipe's write
/// end (closing it is the release logind sees), PrepareForSleep, Metered, ActiveProfile.
final class StandInHostServices {
    let bus: Bus
    private var slots: [BusSlot] = []
    private(set) var owned: Set<String> = []
    private(set) var inhibitCalls: [[DBusValue]] = []
    /// The read ends of the inhibitor pipes handed out, oldest first.
    private(set) var inhibitorReadEnds: [Int32] = []
    private var writeEndsToClose: [Int32] = []
    var metered: UInt32 = 1
    var activeProfile = "power-saver"

    init(address: String, names: [String]) throws {
        bus = try Bus.connect(address: address)
        slots.append(try bus.exportObjects(under: "/") { [unowned self] message in answer(message) })
        for name in names {
            try bus.call(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "RequestName", arguments: [.string(name), .uint32(0)]
            ) { [unowned self] _ in owned.insert(name) }
        }
    }

    deinit { for fd in inhibitorReadEnds { close(fd) } }

    func answer(_ message: BusMessage) -> ObjectAnswer {
        switch (message.path, message.interface, message.member) {
        case ("/org/freedesktop/login1", "org.freedesktop.login1.Manager", "Inhibit"):
            inhibitCalls.append((try? message.arguments()) ?? [])
            var fds: [Int32] = [0, 0]
            guard pipe(&fds) == 0 else { return .error(DBusError(name: "org.freedesktop.DBus.Error.Failed", message: "pipe")) }
            inhibitorReadEnds.append(fds[0])
            // sd-bus sends a duplicate; ours is closed once the reply is built (after
            // this round of processing), so the worker's copy is the last write end:
            // its closing is EOF on the read end.
            writeEndsToClose.append(fds[1])
            return .reply([.unixFD(fds[1])])
        case ("/org/freedesktop/NetworkManager", "org.freedesktop.DBus.Properties", "Get"):
            return .reply([.variant(.uint32(metered))])
        case ("/net/hadess/PowerProfiles", "org.freedesktop.DBus.Properties", "Get"):
            return .reply([.variant(.string(activeProfile))])
        default:
            return .notHandled
        }
    }

    func setMetered(_ value: UInt32) throws {
        metered = value
        try bus.emitSignal(
            path: "/org/freedesktop/NetworkManager", interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
            arguments: [.string("org.freedesktop.NetworkManager"), .properties([("Metered", .uint32(value))]), .strings([])])
    }

    func prepareForSleep(_ starting: Bool) throws {
        try bus.emitSignal(
            path: "/org/freedesktop/login1", interface: "org.freedesktop.login1.Manager", member: "PrepareForSleep", arguments: [.bool(starting)])
    }

    /// Whether the worker closed the inhibitor it was handed `index`-th.
    func released(_ index: Int) -> Bool {
        guard index < inhibitorReadEnds.count else { return false }
        var pfd = pollfd(fd: inhibitorReadEnds[index], events: Int16(POLLIN), revents: 0)
        guard poll(&pfd, 1, 0) == 1 else { return false }
        var byte: UInt8 = 0
        return read(inhibitorReadEnds[index], &byte, 1) == 0
    }

    /// Processes the bus until `done` holds, checking it every 100 ms.
    @discardableResult
    func pump(timeout: Double = 10, until done: () throws -> Bool) rethrows -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        var lastCheck = Date.distantPast
        while Date() < deadline {
            while (try? bus.process()) == true {}
            for fd in writeEndsToClose { close(fd) }
            writeEndsToClose.removeAll()
            if Date().timeIntervalSince(lastCheck) >= 0.1 {
                lastCheck = Date()
                if try done() { return true }
            }
            usleep(2_000)
        }
        return false
    }
}

/// The daemon binary against the private bus as its system bus.
final class BusDaemon {
    let root = "/tmp/ecw-hostbus-" + UUID().uuidString.prefix(8).lowercased()
    let process = Process()
    var runtime: String { root + "/run" }
    var log: String { (try? String(contentsOfFile: root + "/daemon.log", encoding: .utf8)) ?? "" }

    init(busAddress: String, config: String = "{}") throws {
        try FileManager.default.createDirectory(atPath: root + "/sys", withIntermediateDirectories: true)
        try config.write(toFile: root + "/config.json", atomically: true, encoding: .utf8)
        FileManager.default.createFile(atPath: root + "/daemon.log", contents: nil)
        process.executableURL = URL(fileURLWithPath: workerBinary)
        // An empty sysfs root: no platform_profile, so power-profiles-daemon decides low power.
        process.arguments = [
            "run", "--config", root + "/config.json", "--state-dir", root + "/state", "--runtime-dir", runtime, "--sysfs-root", root + "/sys",
        ]
        var env = ProcessInfo.processInfo.environment
        env["DBUS_SYSTEM_BUS_ADDRESS"] = busAddress
        env.removeValue(forKey: "NOTIFY_SOCKET")
        process.environment = env
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: root + "/daemon.log"))
        process.standardOutput = FileHandle.nullDevice
        try process.run()
    }

    /// `status --json`, or nil while the daemon does not answer yet.
    func status() -> JSONValue? {
        let cli = Process()
        cli.executableURL = URL(fileURLWithPath: workerBinary)
        cli.arguments = ["status", "--json", "--runtime-dir", runtime]
        let out = Pipe()
        cli.standardOutput = out
        cli.standardError = FileHandle.nullDevice
        guard (try? cli.run()) != nil else { return nil }
        let data = out.fileHandleForReading.readDataToEndOfFile()
        cli.waitUntilExit()
        guard cli.terminationStatus == 0 else { return nil }
        return try? JSON.parse(Array(data))
    }

    func stop() -> Int32 {
        kill(process.processIdentifier, SIGTERM)
        let deadline = Date().addingTimeInterval(10)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL); usleep(100_000) }
        try? FileManager.default.removeItem(atPath: root)
        return process.isRunning ? -1 : process.terminationStatus
    }
}

@Suite(.serialized) struct HostServicesOverStandIns {
    @Test func standInLogindNetworkManagerAndPowerProfilesDriveSuspendMeteredAndLowPower() throws {
        let daemonBus = try PrivateBus()
        defer { daemonBus.stop() }
        let services = try StandInHostServices(
            address: daemonBus.address,
            names: ["org.freedesktop.login1", "org.freedesktop.NetworkManager", "net.hadess.PowerProfiles"])
        #expect(services.pump { services.owned.count == 3 })
        let worker = try BusDaemon(busAddress: daemonBus.address)
        defer { _ = worker.stop() }

        // Metered (1, yes) under the default onMetered hold; power-saver without a
        // platform_profile is low-power mode; one delay inhibitor for sleep.
        var status: JSONValue = .null
        #expect(
            services.pump {
                status = worker.status() ?? .null
                return status["host"]?["logind"]?["inhibitor"] == "held" && status["host"]?["networkManager"]?["metered"] == "yes"
                    && status["host"]?["powerProfiles"]?["activeProfile"] == "power-saver"
            }, "\(status["host"] ?? .null)\n\(worker.log)")
        #expect(
            services.inhibitCalls.first == [
                .string("sleep"), .string("edgecoder-worker"),
                .string("Finish taking work, save the journal and tell the coordinator"), .string("delay"),
            ])
        #expect(status["host"]?["hold"]?["reason"] == "metered")
        #expect(status["summary"]?.stringValue?.contains("new work held: metered") == true, "\(status["summary"] ?? .null)")
        #expect(status["power"]?["telemetry"]?["lowPowerMode"] == true, "\(status["power"] ?? .null)")
        #expect(status["power"]?["decision"]?["allowed"] == false)

        // No longer metered: the hold ends.
        try services.setMetered(2)
        #expect(services.pump { worker.status()?["host"]?["hold"] == .null })

        // Suspend: the inhibitor is closed once the worker is ready for it.
        try services.prepareForSleep(true)
        #expect(services.pump { services.released(0) }, "the delay inhibitor was released\n\(worker.log)")
        status = worker.status() ?? .null
        #expect(status["host"]?["logind"]?["sleep"] == "suspending")
        #expect(status["host"]?["hold"]?["reason"] == "host-sleeping")

        // Resume: a new inhibitor, awake, work allowed again.
        try services.prepareForSleep(false)
        #expect(
            services.pump {
                status = worker.status() ?? .null
                return services.inhibitCalls.count == 2 && status["host"]?["logind"]?["inhibitor"] == "held"
            }, "\(status["host"] ?? .null)")
        #expect(status["host"]?["logind"]?["sleep"] == "awake")
        #expect(status["host"]?["logind"]?["lastResume"]?.stringValue != nil)
        #expect(status["host"]?["hold"] == .null)
        #expect(worker.log.contains("the host is suspending"))
        #expect(worker.log.contains("the host resumed: reading power and the network path again"))
        #expect(worker.log.contains("reading the network path again"), "the path is dumped again after the resume")
        #expect(worker.stop() == 0)
    }

    @Test func withoutTheServicesOnTheBusTheWorkerRunsAndSaysWhatItSaw() throws {
        let daemonBus = try PrivateBus()
        defer { daemonBus.stop() }
        let worker = try BusDaemon(busAddress: daemonBus.address)
        defer { _ = worker.stop() }
        var status: JSONValue = .null
        for _ in 0..<100 {
            status = worker.status() ?? .null
            if status["host"]?["powerProfiles"]?["state"] == "absent" && status["host"]?["logind"]?["state"] == "absent"
                && status["host"]?["networkManager"]?["state"] == "absent"
            {
                break
            }
            usleep(100_000)
        }
        #expect(status["host"]?["systemBus"] == "connected", "\(status["host"] ?? .null)")
        #expect(status["host"]?["logind"]?["state"] == "absent")
        #expect(status["host"]?["networkManager"]?["state"] == "absent")
        #expect(status["host"]?["powerProfiles"]?["state"] == "absent")
        #expect(status["host"]?["hold"] == .null)
        #expect(!worker.log.contains("<4>") && !worker.log.contains("<3>"), "no warning or error for absent services: \(worker.log)")
        #expect(worker.stop() == 0)
    }
}
