import Foundation
import TestSupport
import Testing
import Telemetry
import WorkerCore

private let now: Int64 = 1_750_000_000_000

struct HostScenario: Sendable, CustomTestStringConvertible {
    var name: String
    var build: @Sendable (FakeTree) -> Void
    var expected: PowerTelemetry
    var testDescription: String { name }
}

private func expect(
    external: Bool?, battery: Int? = nil, hasBattery: Bool = false, draining: Bool = false,
    lowPower: Bool? = nil, thermal: ThermalState? = nil, sent: ThermalState?? = .none, device: DeviceType
) -> PowerTelemetry {
    var telemetry = PowerTelemetry(
        onExternalPower: external, batteryPct: battery, lowPowerMode: lowPower, thermalState: thermal,
        deviceType: device, draining: draining, hasSystemBattery: hasBattery, updatedAtMs: now)
    // What the heartbeat sends: the policy's reading unless a scenario says otherwise.
    if case .some(let sent) = sent { telemetry.heartbeatThermalState = sent }
    return telemetry
}

extension PowerTelemetry {
    /// Without where the device type came from (the sources have tests of their own).
    var withoutSource: PowerTelemetry {
        var copy = self
        copy.deviceTypeSource = nil
        return copy
    }
}

@Suite struct TelemetryReaderHostTests {
    static let scenarios: [HostScenario] = [
        HostScenario(
            name: "a desktop without battery",
            build: { tree in
                tree.chassis("3")
                tree.directory("sys/class/power_supply")
            }, expected: expect(external: true, device: .desktop)),

        HostScenario(
            name: "a laptop discharging at 42 %",
            build: { tree in
                tree.chassis("10")
                tree.supply("AC", ["type": "Mains", "online": "0"])
                tree.supply(
                    "BAT0",
                    ["type": "Battery", "status": "Discharging", "capacity": "42", "energy_full": "50000000", "present": "1", "scope": "System"])
            }, expected: expect(external: false, battery: 42, hasBattery: true, device: .laptop)),

        HostScenario(
            name: "a laptop on Mains",
            build: { tree in
                tree.chassis("9")
                tree.supply("AC", ["type": "Mains", "online": "1"])
                tree.supply("BAT0", ["type": "Battery", "status": "Charging", "capacity": "80"])
            }, expected: expect(external: true, battery: 80, hasBattery: true, device: .laptop)),

        HostScenario(
            name: "USB-C power",
            build: { tree in
                tree.chassis("31")
                tree.supply("ucsi-source-psy-USBC000:001", ["type": "USB", "online": "1", "usb_type": "C [PD] PD_PPS"])
                tree.supply("BAT0", ["type": "Battery", "status": "Charging", "capacity": "55"])
            }, expected: expect(external: true, battery: 55, hasBattery: true, device: .laptop)),

        HostScenario(
            name: "two batteries with different energy_full",
            build: { tree in
                tree.chassis("10")
                tree.supply("AC", ["type": "Mains", "online": "0"])
                tree.supply("BAT0", ["type": "Battery", "status": "Discharging", "capacity": "90", "energy_full": "50000000"])
                tree.supply("BAT1", ["type": "Battery", "status": "Discharging", "capacity": "30", "energy_full": "20000000"])
            }, expected: expect(external: false, battery: 73, hasBattery: true, device: .laptop)),

        HostScenario(
            name: "a Bluetooth mouse battery on a desktop does not count",
            build: { tree in
                tree.supply("hid-00:11:22:33:44:55-battery", ["type": "Battery", "scope": "Device", "status": "Discharging", "capacity": "5"])
            }, expected: expect(external: true, device: .desktop)),

        HostScenario(
            name: "a Bluetooth mouse battery on a laptop does not count",
            build: { tree in
                tree.supply("AC", ["type": "Mains", "online": "0"])
                tree.supply("BAT0", ["type": "Battery", "status": "Discharging", "capacity": "60"])
                tree.supply("hid-00:11:22:33:44:55-battery", ["type": "Battery", "scope": "Device", "status": "Discharging", "capacity": "5"])
            }, expected: expect(external: false, battery: 60, hasBattery: true, device: .laptop)),

        HostScenario(
            name: "Mains online while the battery still discharges",
            build: { tree in
                tree.chassis("10")
                tree.supply("AC", ["type": "Mains", "online": "1"])
                tree.supply("BAT0", ["type": "Battery", "status": "Discharging", "capacity": "60"])
            }, expected: expect(external: true, battery: 60, hasBattery: true, draining: true, device: .laptop)),

        HostScenario(
            name: "an adapter named ADP1",
            build: { tree in
                tree.supply("ADP1", ["type": "Mains", "online": "1"])
                tree.supply("BAT0", ["type": "Battery", "status": "Not charging", "capacity": "80"])
            }, expected: expect(external: true, battery: 80, hasBattery: true, device: .laptop)),

        HostScenario(
            name: "an adapter named ACAD, unplugged",
            build: { tree in
                tree.supply("ACAD", ["type": "Mains", "online": "0"])
                tree.supply("BAT1", ["type": "Battery", "status": "Discharging", "capacity": "35"])
            }, expected: expect(external: false, battery: 35, hasBattery: true, device: .laptop)),

        HostScenario(
            name: "Not charging without an adapter entry",
            build: { tree in
                tree.supply("BAT0", ["type": "Battery", "status": "Not charging", "capacity": "77"])
            }, expected: expect(external: true, battery: 77, hasBattery: true, device: .laptop)),

        HostScenario(
            name: "platform_profile low-power",
            build: { tree in
                tree.chassis("3")
                tree.write("sys/firmware/acpi/platform_profile", "low-power\n")
            }, expected: expect(external: true, lowPower: true, device: .desktop)),

        HostScenario(
            name: "platform_profile balanced",
            build: { tree in
                tree.write("sys/firmware/acpi/platform_profile", "balanced\n")
            }, expected: expect(external: true, lowPower: false, device: .desktop)),

        HostScenario(
            name: "hwmon sensors without thermal zones",
            build: { tree in
                tree.hwmon(0, name: "coretemp", temps: ["45000", "80000"])
                tree.hwmon(1, name: "nvme", temps: ["38850"])
            }, expected: expect(external: true, thermal: .serious, sent: .fair, device: .desktop)),

        HostScenario(
            name: "a thermal zone with trip points, and its hwmon mirror",
            build: { tree in
                tree.thermalZone(0, type: "acpitz", temp: "80000", trips: [("critical", "110000"), ("passive", "95000")])
                tree.hwmon(0, name: "acpitz", temps: ["80000"])
            }, expected: expect(external: true, thermal: .nominal, device: .desktop)),

        HostScenario(
            name: "a thermal zone past its passive trip",
            build: { tree in
                tree.thermalZone(0, type: "acpitz", temp: "96000", trips: [("passive", "95000"), ("critical", "110000")])
            }, expected: expect(external: true, thermal: .serious, device: .desktop)),

        HostScenario(
            name: "a thermal zone without trip points",
            build: { tree in
                tree.thermalZone(0, type: "x86_pkg_temp", temp: "76000")
                tree.thermalZone(1, type: "acpitz", temp: "30000", trips: [("critical", "110000")])
            }, expected: expect(external: true, thermal: .serious, sent: .fair, device: .desktop)),

        HostScenario(
            name: "a supply entry that is a file, not a directory",
            build: { tree in
                tree.write("sys/class/power_supply/BAT0", "garbage")
            }, expected: expect(external: true, device: .desktop)),
    ]

    @Test(arguments: scenarios)
    func readsTheHostAsSpec31Says(scenario: HostScenario) {
        let tree = FakeTree()
        scenario.build(tree)
        var reader = TelemetryReader(root: tree.root)
        #expect(reader.read(nowMs: now).telemetry.withoutSource == scenario.expected)
    }

    @Test(arguments: [
        ("8", DeviceType.laptop), ("9", .laptop), ("10", .laptop), ("14", .laptop), ("31", .laptop), ("32", .laptop),
        ("30", .tablet),
        ("17", .server), ("23", .server), ("28", .server), ("29", .server),
        ("3", .desktop), ("4", .desktop), ("5", .desktop), ("6", .desktop), ("7", .desktop), ("13", .desktop),
        ("15", .desktop), ("16", .desktop), ("24", .desktop), ("35", .desktop), ("36", .desktop),
    ])
    func everyChassisFamilyIsRecognisedEvenWithABattery(code: String, expected: DeviceType) {
        let tree = FakeTree()
        tree.chassis(code)
        tree.supply("BAT0", ["type": "Battery", "status": "Discharging", "capacity": "50"])
        var reader = TelemetryReader(root: tree.root)
        #expect(reader.read(nowMs: now).telemetry.deviceType == expected)
    }

    @Test(arguments: [("1", true, DeviceType.laptop), ("1", false, .desktop), ("2", true, .laptop), ("12", false, .desktop)])
    func unlistedChassisCodesFallBackOnTheBattery(code: String, battery: Bool, expected: DeviceType) {
        let tree = FakeTree()
        tree.chassis(code)
        if battery { tree.supply("BAT0", ["type": "Battery", "capacity": "50"]) }
        var reader = TelemetryReader(root: tree.root)
        #expect(reader.read(nowMs: now).telemetry.deviceType == expected)
    }

    @Test func cpuUsageComesFromTwoSamplesNotSinceBoot() {
        let tree = FakeTree()
        tree.procStat(user: 100, system: 100, idle: 700, iowait: 100)
        var reader = TelemetryReader(root: tree.root)
        let first = reader.read(nowMs: now)
        #expect(first.telemetry.cpuUsagePct == nil)
        #expect(first.cpuSampled)
        tree.procStat(user: 300, system: 200, idle: 1300, iowait: 200)
        #expect(reader.read(nowMs: now).telemetry.cpuUsagePct == 30)
        // No time passed: unknown, not 0 or 100.
        #expect(reader.read(nowMs: now).telemetry.cpuUsagePct == nil)
    }

    @Test func aFailedCPUSampleKeepsThePreviousOneAsBase() {
        let tree = FakeTree()
        tree.procStat(user: 100, system: 100, idle: 700, iowait: 100)
        var reader = TelemetryReader(root: tree.root)
        _ = reader.read(nowMs: now)
        tree.write("proc/stat", "abc")
        #expect(reader.read(nowMs: now).telemetry.cpuUsagePct == nil)
        tree.procStat(user: 300, system: 200, idle: 1300, iowait: 200)
        #expect(reader.read(nowMs: now).telemetry.cpuUsagePct == 30)
    }

    @Test func procStatWithHugeInterruptLinesIsStillRead() {
        let tree = FakeTree()
        let intr = "intr " + Array(repeating: "12345", count: 40_000).joined(separator: " ")
        tree.write("proc/stat", "cpu  100 0 100 700 100 0 0 0 0 0\n\(intr)\n")
        var reader = TelemetryReader(root: tree.root)
        _ = reader.read(nowMs: now)
        tree.write("proc/stat", "cpu  300 0 200 1300 200 0 0 0 0 0\n\(intr)\n")
        #expect(reader.read(nowMs: now).telemetry.cpuUsagePct == 30)
    }

    @Test func memoryUsageComesFromMeminfo() {
        let tree = FakeTree()
        tree.meminfo(totalKB: 16_000_000, availableKB: 4_000_000)
        var reader = TelemetryReader(root: tree.root)
        #expect(reader.read(nowMs: now).telemetry.memoryUsagePct == 75)
    }

    @Test func theCLIsJSONHasExactlyTheHeartbeatKeys() {
        let tree = FakeTree()
        tree.chassis("10")
        tree.supply("AC", ["type": "Mains", "online": "0"])
        tree.supply("BAT0", ["type": "Battery", "status": "Discharging", "capacity": "42"])
        tree.write("sys/firmware/acpi/platform_profile", "balanced\n")
        tree.thermalZone(0, type: "acpitz", temp: "50000")
        tree.procStat(user: 100, system: 100, idle: 700, iowait: 100)
        tree.meminfo(totalKB: 8_000_000, availableKB: 2_000_000)
        var reader = TelemetryReader(root: tree.root + "/")
        _ = reader.read(nowMs: now)
        tree.procStat(user: 300, system: 200, idle: 1300, iowait: 200)
        let json = reader.read(nowMs: now).telemetry.heartbeatJSON
        #expect(
            json.serialized
                == #"{"onExternalPower":false,"batteryLevelPct":42,"lowPowerMode":false,"onACPower":false,"batteryPct":42,"thermalState":"nominal","cpuUsagePct":30,"memoryUsagePct":75,"deviceType":"laptop","updatedAtMs":1750000000000}"#
        )
    }

    @Test func aHostWithNothingReadableStillAnswers() {
        let tree = FakeTree()
        var reader = TelemetryReader(root: tree.root)
        #expect(
            reader.read(nowMs: now).telemetry.heartbeatJSON.serialized
                == #"{"onExternalPower":true,"onACPower":true,"deviceType":"desktop","updatedAtMs":1750000000000}"#)
        var missingRoot = TelemetryReader(root: tree.root + "/does-not-exist")
        #expect(missingRoot.read(nowMs: now).telemetry.withoutSource == expect(external: true, device: .desktop))
    }

    @Test func doctorShowsEverySupplyAndSensorWithRawValuesAndMeaning() {
        let tree = FakeTree()
        tree.supply("AC", ["type": "Mains", "online": "1"])
        tree.supply("BAT0", ["type": "Battery", "status": "Discharging", "capacity": "abc"])
        tree.supply("hid-mouse-battery", ["type": "Battery", "scope": "Device", "capacity": "5"])
        tree.directory("sys/class/power_supply/BAT0/energy_full")
        for n in [10, 2, 1] { tree.thermalZone(n, type: "zone\(n)", temp: "40000") }
        tree.hwmon(0, name: "coretemp", temps: ["55000"])
        tree.write("sys/class/hwmon/hwmon0/temp1_label", "Package id 0\n")
        var reader = TelemetryReader(root: tree.root)
        let reading = reader.read(nowMs: now)
        let doctor = reading.doctorJSON
        let supplies = doctor["powerSupplies"]?.arrayValue ?? []
        #expect(supplies.map { $0["name"]?.stringValue } == ["AC", "BAT0", "hid-mouse-battery"])
        #expect(supplies[1]["raw"]?["capacity"] == "abc")
        #expect(supplies[1]["raw"]?["energy_full"]?["error"] == "Is a directory")
        #expect(supplies[1]["capacityPct"] == nil)
        #expect(supplies[1]["role"] == "system-battery")
        #expect(supplies[2]["role"] == "ignored: scope is Device")
        let sensors = doctor["thermalSensors"]?.arrayValue ?? []
        #expect(sensors.map { $0["name"]?.stringValue } == ["thermal_zone1", "thermal_zone2", "thermal_zone10", "hwmon0/temp1_input"])
        #expect(sensors[3]["sensorLabel"] == "Package id 0")
        #expect(sensors[3]["state"] == "nominal")
        #expect(doctor["telemetry"] == reading.telemetry.heartbeatJSON)
        #expect(doctor["draining"] == true)
    }
}

/// Ways a file can be broken; each must read as unknown.
enum Broken: String, Sendable, CaseIterable {
    case empty, letters, outOfRange, negative, huge, nulBytes, binary, missing, directory, fifo

    func apply(_ tree: FakeTree, _ relative: String) {
        tree.remove(relative)
        switch self {
        case .empty: tree.write(relative, "")
        case .letters: tree.write(relative, "abc\n")
        case .outOfRange: tree.write(relative, "150\n")
        case .negative: tree.write(relative, "-5\n")
        case .huge: tree.write(relative, "99999999999999999999999999\n")
        case .nulBytes: tree.write(relative, bytes: [0x34, 0x32, 0x00, 0x0A])
        case .binary: tree.write(relative, bytes: [0xFF, 0xFE, 0x00, 0x80, 0x01])
        case .missing: break
        case .directory: tree.directory(relative)
        case .fifo: tree.fifo(relative)
        }
    }

    /// A temperature of 150 or −5 millidegrees is a real (cold) reading.
    var isValidTemperature: Bool { self == .outOfRange || self == .negative }
}

@Suite struct TelemetryReaderBrokenFileTests {
    @Test(arguments: Broken.allCases)
    func brokenFilesReadAsUnknownNeverAsAWrongValue(broken: Broken) {
        let tree = FakeTree()
        tree.supply("AC", ["type": "Mains"])
        tree.supply("BAT0", ["type": "Battery", "status": "Discharging"])
        broken.apply(tree, "sys/class/power_supply/AC/online")
        broken.apply(tree, "sys/class/power_supply/BAT0/capacity")
        broken.apply(tree, "sys/class/dmi/id/chassis_type")
        broken.apply(tree, "sys/firmware/acpi/platform_profile")
        tree.thermalZone(0, type: "acpitz", temp: "0")
        broken.apply(tree, "sys/class/thermal/thermal_zone0/temp")
        tree.hwmon(0, name: "coretemp", temps: ["0"])
        broken.apply(tree, "sys/class/hwmon/hwmon0/temp1_input")
        broken.apply(tree, "proc/stat")
        broken.apply(tree, "proc/meminfo")

        var reader = TelemetryReader(root: tree.root)
        _ = reader.read(nowMs: now)
        let telemetry = reader.read(nowMs: now).telemetry
        // The adapter's online is unknown, so the discharging battery decides.
        #expect(telemetry.onExternalPower == false)
        #expect(telemetry.batteryPct == nil)
        #expect(telemetry.hasSystemBattery)
        #expect(telemetry.deviceType == .laptop)
        #expect(telemetry.lowPowerMode == nil)
        #expect(telemetry.thermalState == (broken.isValidTemperature ? .nominal : nil))
        #expect(telemetry.cpuUsagePct == nil)
        #expect(telemetry.memoryUsagePct == nil)
        #expect(telemetry.draining == false)
    }

    @Test(arguments: Broken.allCases)
    func brokenSupplyTypeIgnoresTheSupply(broken: Broken) {
        let tree = FakeTree()
        tree.supply("BAT0", ["status": "Discharging", "capacity": "42"])
        broken.apply(tree, "sys/class/power_supply/BAT0/type")
        var reader = TelemetryReader(root: tree.root)
        let reading = reader.read(nowMs: now)
        #expect(reading.telemetry.hasSystemBattery == false)
        #expect(reading.telemetry.batteryPct == nil)
        #expect(reading.supplies.map(\.role) == [.ignoredUnknownType])
    }

    @Test(arguments: Broken.allCases)
    func brokenTripPointsFallBackToDefaults(broken: Broken) {
        let tree = FakeTree()
        tree.thermalZone(0, type: "acpitz", temp: "80000", trips: [("passive", "95000")])
        broken.apply(tree, "sys/class/thermal/thermal_zone0/trip_point_0_temp")
        var reader = TelemetryReader(root: tree.root)
        // With the trip, 80 °C would be nominal; without it the defaults make it serious.
        #expect(reader.read(nowMs: now).telemetry.thermalState == .serious)
    }
}

@Suite struct TelemetryReaderRealHostTests {
    @Test func readsThisHostTwiceIntoPlausibleValues() async throws {
        var reader = TelemetryReader()
        let first = reader.read(nowMs: now)
        #expect(first.cpuSampled)
        #expect(first.telemetry.cpuUsagePct == nil)
        try await Task.sleep(nanoseconds: 250_000_000)
        let second = reader.read(nowMs: now)
        let cpu = try #require(second.telemetry.cpuUsagePct)
        #expect((0...100).contains(cpu))
        let memory = try #require(second.telemetry.memoryUsagePct)
        #expect(memory > 0 && memory < 100)
        #expect(second.telemetry.deviceType != nil)
        #expect(second.doctorJSON["telemetry"] == second.telemetry.heartbeatJSON)
    }
}
