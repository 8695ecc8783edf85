import Foundation
#if canImport(Glibc)
import Glibc
#endif
import TestSupport
import Testing
import WorkerCore

/// A fake sysfs/procfs tree: a laptop with one battery and an AC adapter.
struct FakeLaptop {
    let root: String
    init(in directory: String, onMains: Bool, batteryPct: Int) throws {
        root = directory + "/sysroot"
        try write("sys/class/power_supply/AC/type", "Mains")
        try write("sys/class/power_supply/BAT0/type", "Battery")
        try write("sys/class/power_supply/BAT0/present", "1")
        try write("sys/class/power_supply/BAT0/energy_full", "50000000")
        try write("sys/class/dmi/id/chassis_type", "10")
        try write("proc/meminfo", "MemTotal: 8000000 kB\nMemAvailable: 6000000 kB\n")
        try write("proc/stat", "cpu  100 0 100 10000 0 0 0 0 0 0\n")
        try set(onMains: onMains, batteryPct: batteryPct)
    }

    func write(_ path: String, _ text: String) throws {
        let full = root + "/" + path
        try FileManager.default.createDirectory(atPath: (full as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try (text + "\n").write(toFile: full, atomically: true, encoding: .utf8)
    }

    func set(onMains: Bool, batteryPct: Int) throws {
        try write("sys/class/power_supply/AC/online", onMains ? "1" : "0")
        try write("sys/class/power_supply/BAT0/status", onMains ? "Charging" : "Discharging")
        try write("sys/class/power_supply/BAT0/capacity", String(batteryPct))
    }
}

extension DaemonHarness {
    func startWithSysfs(_ root: String) throws {
        try start(extraArguments: ["--sysfs-root", root])
    }
}

@Suite(.serialized) struct ChargeGateAndPolicy {
    @Test func telemetryCommandPrintsTheHeartbeatKeysOfAFakeLaptop() throws {
        let dir = "/tmp/ecw-tel-" + UUID().uuidString.prefix(8)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let laptop = try FakeLaptop(in: dir, onMains: false, batteryPct: 42)
        let result = try runCommand(workerBinary, ["telemetry", "--json", "--sysfs-root", laptop.root])
        #expect(result.status == 0)
        let json = try JSON.parse(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        let keys = Set(json.objectValue?.keys ?? [])
        #expect(json.objectValue?.keys.first == "schemaVersion")
        #expect(
            keys == [
                "schemaVersion", "onExternalPower", "batteryLevelPct", "onACPower", "batteryPct", "memoryUsagePct", "deviceType", "updatedAtMs",
            ],
            "unknown values (lowPowerMode, thermalState, CPU with an unchanging /proc/stat) are omitted: \(keys)")
        #expect(json["batteryPct"] == 42 && json["batteryLevelPct"] == 42)
        #expect(json["onExternalPower"] == false && json["onACPower"] == false)
        #expect(json["deviceType"] == "laptop")
        let human = try runCommand(workerBinary, ["telemetry", "--sysfs-root", laptop.root])
        #expect(human.stdout.contains("battery:        42 %"))
    }

    @Test func switchingOnOnBatteryIsRefusedByTheChargeGate() throws {
        let daemon = try DaemonHarness(config: #"{"policy": {"runOnlyWhileCharging": true}}"#)
        let laptop = try FakeLaptop(in: daemon.root, onMains: false, batteryPct: 80)
        try daemon.startWithSysfs(laptop.root)
        for target in ["on", "bluetooth"] {
            let refused = try daemon.cli(["mode", target])
            #expect(refused.status == 3)
            #expect(refused.stderr.trimmingCharacters(in: .whitespacesAndNewlines) == "Runtime blocked: connect power to start.")
        }
        #expect(try daemon.cli(["mode"]).stdout.hasPrefix("off"))
        let events = try daemon.cli(["events"]).stdout
        #expect(events.contains("mode-refused  off -> on  not-charging"), "\(events)")
        #expect(events.contains("mode-refused  off -> bluetooth  not-charging"))

        // Plugged in: the same command works.
        try laptop.set(onMains: true, batteryPct: 80)
        let deadline = Date().addingTimeInterval(10)
        var result = try daemon.cli(["mode", "on"])
        while result.status != 0 && Date() < deadline {
            usleep(250_000)
            result = try daemon.cli(["mode", "on"])
        }
        #expect(result.status == 0, "after plugging in: \(result.stderr)")
        _ = try daemon.stop()
    }

    @Test func aRestoredModeWaitsForPowerAndStartsWithoutACommand() throws {
        let daemon = try DaemonHarness(config: #"{"policy": {"runOnlyWhileCharging": true}}"#)
        let laptop = try FakeLaptop(in: daemon.root, onMains: true, batteryPct: 80)
        try daemon.startWithSysfs(laptop.root)
        #expect(try daemon.cli(["mode", "on"]).status == 0)
        _ = try daemon.stop()

        try laptop.set(onMains: false, batteryPct: 80)
        try daemon.startWithSysfs(laptop.root)
        let mode = try daemon.cli(["mode"]).stdout
        #expect(mode.hasPrefix("on\n"), "the mode stays selected")
        #expect(mode.contains("runtime: blocked — not-charging: Runtime blocked: connect power to start."))
        #expect(try daemon.cli(["status"]).stdout.contains("charge gate blocked"))

        try laptop.set(onMains: true, batteryPct: 80)
        let deadline = Date().addingTimeInterval(10)
        var status = try daemon.cli(["status", "--json"]).stdout
        while status.contains("blocked: connect power") && Date() < deadline {
            usleep(250_000)
            status = try daemon.cli(["status", "--json"]).stdout
        }
        #expect(!status.contains("blocked: connect power"), "power returned: the gate opens by itself")
        #expect(try daemon.cli(["mode"]).stdout.hasPrefix("on\n"))
        #expect(try daemon.cli(["events"]).stdout.contains("external power connected"))
        _ = try daemon.stop()
    }

    @Test func aLowBatteryHoldsNewWorkAndStatusSaysWhy() throws {
        let daemon = try DaemonHarness()
        let laptop = try FakeLaptop(in: daemon.root, onMains: false, batteryPct: 15)
        try daemon.startWithSysfs(laptop.root)
        let json = try JSON.parse(try daemon.cli(["status", "--json"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(json["power"]?["decision"]?["allowed"] == false)
        #expect(json["power"]?["decision"]?["reason"] == "battery-low")
        #expect(json["power"]?["telemetry"]?["batteryPct"] == 15)
        #expect(json["power"]?["ageMs"]?.intValue.map { $0 >= 0 && $0 < 10_000 } == true)
        #expect(json["power"]?["held"]?["battery-low"] == 0, "nothing asked for work yet")
        #expect(try daemon.cli(["status"]).stdout.contains("new work HELD: battery-low"))
        _ = try daemon.stop()
    }

    @Test func modeOffReadsTheHostOnlyWhenStatusAsks() throws {
        let daemon = try DaemonHarness()
        let laptop = try FakeLaptop(in: daemon.root, onMains: false, batteryPct: 80)
        try daemon.startWithSysfs(laptop.root)
        func power() throws -> JSONValue? {
            try JSON.parse(try daemon.cli(["status", "--json"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines))["power"]
        }
        let first = try power()
        #expect(first?["telemetry"]?["batteryPct"] == 80)
        // A working mode re-reads every 5 s; mode off must not: 7 s later only the read this
        // status asks for (its reading is stale) has been made.
        try laptop.set(onMains: false, batteryPct: 42)
        sleep(7)
        let later = try power()
        let before = first?["reads"]?.intValue ?? -1, after = later?["reads"]?.intValue ?? -1
        #expect(after == before + 1, "mode off: no periodic read (\(before) reads, then \(after))")
        #expect(later?["telemetry"]?["batteryPct"] == 42, "status shows the host as it is now")
        #expect(later?["ageMs"]?.intValue.map { $0 < 1_000 } == true, "a fresh reading: \(String(describing: later?["ageMs"]))")
        _ = try daemon.stop()
    }

    @Test func policySetPersistsValidatesAndShowsItsSource() throws {
        let daemon = try DaemonHarness(config: #"{"policy": {"maxCpuUsagePct": 80}}"#)
        let laptop = try FakeLaptop(in: daemon.root, onMains: true, batteryPct: 90)
        try daemon.startWithSysfs(laptop.root)
        // resumeBatteryPct must stay at or above minBatteryPct: raise it first.
        let early = try daemon.cli(["policy", "set", "minBatteryPct", "40"])
        #expect(early.status == 2 && early.stderr.contains("resumeBatteryPct: must be at least minBatteryPct (40), would be 30"))
        #expect(try daemon.cli(["policy", "set", "resumeBatteryPct", "60"]).status == 0)
        #expect(try daemon.cli(["policy", "set", "minBatteryPct", "40"]).status == 0)
        #expect(try daemon.cli(["policy", "set", "maxThermalState", "serious"]).status == 0)
        let shown = try JSON.parse(try daemon.cli(["policy", "show", "--json"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(shown["minBatteryPct"] == ["value": 40, "source": "host"])
        #expect(shown["maxThermalState"] == ["value": "serious", "source": "host"])
        #expect(shown["maxCpuUsagePct"] == ["value": 80, "source": "config"])
        #expect(shown["resumeDwellSec"] == ["value": 30, "source": "default"])

        for (args, message) in [
            (["policy", "set", "minBatteryPct", "abc"], "must be an integer"),
            (["policy", "set", "minBatteryPct", "101"], "0…100"),
            (["policy", "set", "minBatteryPct", "70"], "resumeBatteryPct: must be at least minBatteryPct (70)"),
            (["policy", "set", "maxThermalState", "lukewarm"], "must be one of"),
            (["policy", "set", "turbo", "1"], "unknown policy key"),
        ] {
            let bad = try daemon.cli(args)
            #expect(bad.status == 2, "\(args)")
            #expect(bad.stderr.contains(message), "\(args): \(bad.stderr)")
        }
        #expect(try daemon.cli(["events"]).stdout.contains("policy-changed"))
        _ = try daemon.stop()

        try daemon.startWithSysfs(laptop.root)
        let again = try daemon.cli(["policy", "show"]).stdout
        #expect(again.contains("minBatteryPct         40  (host)"), "\(again)")
        #expect(try daemon.cli(["policy", "unset", "minBatteryPct"]).status == 0)
        #expect(try daemon.cli(["policy", "show"]).stdout.contains("minBatteryPct         20  (default)"))
        _ = try daemon.stop()
    }

    @Test(.enabled(if: getuid() == 0, "needs root to switch users with setpriv"))
    func aReaderCanShowThePolicyButNotChangeIt() throws {
        let daemon = try DaemonHarness(config: #"{"control": {"readGroup": "users"}}"#)
        try daemon.start()
        let member = (uid: 65534, gid: 65534, groups: [100])
        #expect(try daemon.cli(["policy", "show"], asUser: member).status == 0)
        let set = try daemon.cli(["policy", "set", "minBatteryPct", "50"], asUser: member)
        #expect(set.status == 77)
        #expect(!(try daemon.cli(["policy", "show"]).stdout.contains("(host)")))
        _ = try daemon.stop()
    }

    @Test func doctorShowsRawSuppliesAndWhyThePolicyDecides() throws {
        let dir = "/tmp/ecw-doc-" + UUID().uuidString.prefix(8)
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let laptop = try FakeLaptop(in: dir, onMains: false, batteryPct: 10)
        let result = try runCommand(
            workerBinary, ["doctor", "--json", "--sysfs-root", laptop.root, "--runtime-dir", dir + "/none", "--config", dir + "/none.json"])
        #expect(result.status == 1, "a battery too low for work and no daemon are problems")
        let json = try JSON.parse(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        let supplies = json["power"]?["powerSupplies"]?.arrayValue ?? []
        #expect(supplies.count == 2)
        #expect(result.stdout.contains("\"capacity\":\"10\""), "raw values are shown")
        #expect(json["decision"]?["reason"] == "battery-low")
        let holding = (json["checks"]?.arrayValue ?? []).filter { $0["holds"] == true }.map { $0["reason"]?.stringValue }
        #expect(holding == ["battery-low"])
        #expect((json["advice"]?.arrayValue ?? []).contains { $0.stringValue?.hasPrefix("battery-low") == true })
        #expect((json["problems"]?.arrayValue ?? []).contains { $0.stringValue?.hasPrefix("battery-low") == true })
        // The fake tree has no etc/machine-id: a problem, with the fix.
        #expect(json["machineId"]?["problem"]?.stringValue?.contains("machine-id is missing") == true)
        #expect((json["problems"]?.arrayValue ?? []).contains { $0.stringValue?.contains("systemd-machine-id-setup") == true })
        try FileManager.default.createDirectory(atPath: laptop.root + "/etc", withIntermediateDirectories: true)
        try "0123456789abcdef0123456789abcdef\n".write(toFile: laptop.root + "/etc/machine-id", atomically: true, encoding: .utf8)
        let again = try runCommand(
            workerBinary, ["doctor", "--json", "--sysfs-root", laptop.root, "--runtime-dir", dir + "/none", "--config", dir + "/none.json"])
        let fixed = try JSON.parse(again.stdout.trimmingCharacters(in: .whitespacesAndNewlines))
        #expect(fixed["machineId"]?["problem"] == .null)
        #expect(!(fixed["problems"]?.arrayValue ?? []).contains { $0.stringValue?.contains("machine-id") == true })
    }
}
