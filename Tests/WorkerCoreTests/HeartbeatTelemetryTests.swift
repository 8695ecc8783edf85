import Testing
@testable import WorkerCore

/// The heartbeat's powerTelemetry as the coordinator's power policy reads it: the
/// model server's cgroup, virtualization, the CPU-zone thermal rule, throttling.
@Suite struct CgroupParsingTests {
    @Test func readsUsageMicrosecondsFromCPUStat() {
        let stat = "usage_usec 292316706\nuser_usec 260954812\nsystem_usec 31361894\nnr_periods 0\n"
        #expect(Cgroup.usageMicroseconds(cpuStat: Array(stat.utf8)) == 292_316_706)
        #expect(Cgroup.usageMicroseconds(cpuStat: Array("user_usec 5\nusage_usec 7".utf8)) == 7)
    }

    @Test(arguments: [
        "", "\n", "usage_usec", "usage_usec ", "usage_usec -5", "usage_usec 5x", "usage_usec 0x10",
        "usage_usec 99999999999999999999999", "usage_usec 1 2", "user_usec 5", "usage_usec 5\nusage_usec 6",
        "usage_usec\t5", "Usage_usec 5", "usage_usec 1e6", "\u{0}\u{1}\u{2}",
    ])
    func refusesBrokenOrHostileCPUStat(text: String) {
        #expect(Cgroup.usageMicroseconds(cpuStat: Array(text.utf8)) == nil)
    }

    @Test func refusesMissingAndOversizedCPUStat() {
        #expect(Cgroup.usageMicroseconds(cpuStat: nil) == nil)
        let padded = Array("usage_usec 5\n".utf8) + [UInt8](repeating: UInt8(ascii: "x"), count: Cgroup.maxStatBytes)
        #expect(Cgroup.usageMicroseconds(cpuStat: padded) == nil)
        #expect(Cgroup.usageMicroseconds(cpuStat: [0xFF, 0xFE, 0x00, 0x0A]) == nil)
    }

    @Test func readsTheUnifiedCgroupOfAProcess() {
        let hybrid = "12:cpu,cpuacct:/system.slice/ollama.service\n1:name=systemd:/system.slice/ollama.service\n0::/system.slice/ollama.service\n"
        #expect(Cgroup.unifiedPath(procCgroup: Array(hybrid.utf8)) == "/system.slice/ollama.service")
        #expect(Cgroup.unifiedPath(procCgroup: Array("0::/\n".utf8)) == nil, "the root cgroup is everything")
        for hostile in [
            "", "1:cpu:/x\n", "0::relative/x.service", "0::/a/../b.service", "0::/a//b.service", "0::/a/\u{7}.service", "0::/./x.service",
        ] {
            #expect(Cgroup.unifiedPath(procCgroup: Array(hostile.utf8)) == nil, "\(hostile)")
        }
        #expect(Cgroup.unifiedPath(procCgroup: nil) == nil)
        #expect(Cgroup.cleanPath("/" + String(repeating: "a", count: Cgroup.maxPathBytes)) == nil)
    }

    @Test(arguments: [
        ("/system.slice/ollama.service", "/system.slice/ollama.service"),
        ("/system.slice/ollama.service/runner", "/system.slice/ollama.service"),
        ("/system.slice/docker-0123abcd.scope", "/system.slice/docker-0123abcd.scope"),
        (
            "/user.slice/user-1000.slice/user@1000.service/app.slice/llama.service",
            "/user.slice/user-1000.slice/user@1000.service/app.slice/llama.service"
        ),
    ])
    func cutsAProcessCgroupAtItsUnit(path: String, unit: String) {
        #expect(Cgroup.unitPath(of: path) == unit)
    }

    @Test(arguments: [
        "/user.slice/user-1000.slice/session-2.scope", "/init.scope", "/user.slice/user-1000.slice/user@1000.service",
        "/system.slice", "/", "/machine.slice/../x.service",
    ])
    func refusesUnitsThatHoldMoreThanTheServer(path: String) {
        #expect(Cgroup.unitPath(of: path) == nil)
    }

    @Test func acceptsOnlyPlainServiceNames() {
        #expect(Cgroup.serviceName("ollama.service") == "ollama.service")
        #expect(Cgroup.serviceName("llama-server@8080.service") == "llama-server@8080.service")
        for bad in [
            ".service", "../x.service", "a/b.service", "ollama", "ollama.scope", "x y.service", "..service",
            String(repeating: "a", count: 300) + ".service",
        ] {
            #expect(Cgroup.serviceName(bad) == nil, "\(bad)")
        }
    }

    @Test func aRunningUnitListsProcesses() {
        #expect(Cgroup.hasProcesses(cgroupProcs: Array("1234\n5678\n".utf8)))
        #expect(!Cgroup.hasProcesses(cgroupProcs: Array("".utf8)))
        #expect(!Cgroup.hasProcesses(cgroupProcs: Array("x\n-1\n0\n".utf8)))
        #expect(!Cgroup.hasProcesses(cgroupProcs: nil))
    }

    @Test func theServersCgroupTimeIsOwnLoad() {
        // Two CPUs, 1 s at 100 ticks/s: 200 ticks, 150 busy (75 %).
        let earlier = CPUTimes(idle: 0, total: 0), later = CPUTimes(idle: 50, total: 200)
        let before = CgroupUsage(path: "/system.slice/ollama.service", usageMicroseconds: 10_000_000)
        let after = CgroupUsage(path: "/system.slice/ollama.service", usageMicroseconds: 11_000_000)  // one CPU-second
        let share = CPUShare.between(host: earlier, later, own: [], [], server: before, after, ticksPerSecond: 100)
        #expect(share?.hostPct == 75)
        #expect(share?.ownPct == 50)
        #expect(share?.otherPct == 25)
        let moved = CgroupUsage(path: "/system.slice/other.service", usageMicroseconds: 500_000)
        #expect(
            CPUShare.between(host: earlier, later, own: [], [], server: before, moved)?.ownPct == 25,
            "another cgroup's counter is not compared with the first: it counts whole, as a new process does")
        let found = CPUShare.between(host: earlier, later, own: [], [], server: nil, after)
        #expect(
            found?.ownPct == 75 && found?.otherPct == 0,
            "a server first measured in this interval counts whole, capped at the host: its loop is never read as other load")
        #expect(CgroupUsage.ticks(from: nil, to: nil, ticksPerSecond: 100) == 0)
        let backwards = CgroupUsage(path: before.path, usageMicroseconds: 1)
        #expect(CgroupUsage.ticks(from: before, to: backwards, ticksPerSecond: 100) == 0)
        #expect(CgroupUsage.ticks(from: before, to: after, ticksPerSecond: .nan) == 0)
        let runaway = CgroupUsage(path: before.path, usageMicroseconds: 99_000_000)
        #expect(CPUShare.between(host: earlier, later, own: [], [], server: before, runaway)?.otherPct == 0, "never more than the host")
    }
}

@Suite struct VirtualizationTests {
    static let flags = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu vme de pse hypervisor lahf_lm\n\nprocessor\t: 1\n"

    @Test(arguments: [
        (["sys_vendor": "QEMU\n"], "DMI sys_vendor QEMU"),
        (["product_name": "KVM\n"], "DMI product_name KVM"),
        (["sys_vendor": "innotek GmbH\n"], "DMI sys_vendor innotek GmbH"),
        (["sys_vendor": "VMware, Inc.\n"], "DMI sys_vendor VMware"),
        (["sys_vendor": "Amazon EC2\n"], "DMI sys_vendor Amazon EC2"),
        (["sys_vendor": "Microsoft Corporation\n", "product_name": "Virtual Machine\n"], "DMI Microsoft Corporation Virtual Machine"),
    ])
    func findsHypervisorsInDMI(dmi: [String: String], why: String) {
        let found = Virtualization.detect(
            dmi: dmi.mapValues { Array($0.utf8) }, cpuinfo: nil, systemdContainer: nil, dockerenv: false, containerenv: false)
        #expect(found.machine == why)
    }

    @Test func realHardwareIsNotAVirtualMachine() {
        let dmi = ["sys_vendor": "LENOVO\n", "product_name": "20XW0026GE\n", "board_vendor": "LENOVO\n", "bios_vendor": "LENOVO\n"]
        let plain = "processor\t: 0\nflags\t\t: fpu vme de pse lahf_lm\n"
        let found = Virtualization.detect(
            dmi: dmi.mapValues { Array($0.utf8) }, cpuinfo: Array(plain.utf8), systemdContainer: nil, dockerenv: false, containerenv: false)
        #expect(found == Virtualization())
        let microsoft = ["sys_vendor": "Microsoft Corporation\n", "product_name": "Surface Laptop 4\n"]
        #expect(
            Virtualization.detect(
                dmi: microsoft.mapValues { Array($0.utf8) }, cpuinfo: nil, systemdContainer: nil, dockerenv: false, containerenv: false
            ).machine == nil)
    }

    @Test func readsTheHypervisorCPUFlagFromTheFirstFlagsLine() {
        #expect(Virtualization.hasHypervisorFlag(cpuinfo: Array(Self.flags.utf8)))
        for hostile in [
            "", "flags", "flags: hypervisorx", "flags : xhypervisor", "model name: hypervisor", "\u{0}flags: hypervisor",
            "flags: fpu\nflags: hypervisor",
        ] {
            #expect(!Virtualization.hasHypervisorFlag(cpuinfo: Array(hostile.utf8)), "\(hostile)")
        }
        #expect(!Virtualization.hasHypervisorFlag(cpuinfo: nil))
        let huge = [UInt8](repeating: UInt8(ascii: "a"), count: 2 << 20) + Array("\nflags: hypervisor\n".utf8)
        #expect(!Virtualization.hasHypervisorFlag(cpuinfo: huge), "past the first MiB is not looked at")
    }

    @Test func findsContainersByTheirMarkers() {
        func detect(_ marker: String?, docker: Bool = false, podman: Bool = false) -> String? {
            Virtualization.detect(dmi: [:], cpuinfo: nil, systemdContainer: marker.map { Array($0.utf8) }, dockerenv: docker, containerenv: podman)
                .container
        }
        #expect(detect("lxc\n") == "lxc")
        #expect(detect(nil, docker: true) == "docker")
        #expect(detect(nil, podman: true) == "podman")
        #expect(detect("../../etc\n", docker: true) == "docker", "a marker that is not a name is not repeated")
        #expect(detect(String(repeating: "x", count: 100), docker: false) == nil)
        #expect(detect(nil) == nil)
    }

    @Test(
        arguments: [
            // chassis, battery, machine, container, expected type, source description
            ("23", false, nil, nil, DeviceType.server, "chassis_type 23"),
            ("10", true, nil, nil, .laptop, "chassis_type 10"),
            ("3", false, nil, nil, .desktop, "chassis_type 3"),
            ("1", false, "DMI sys_vendor QEMU", nil, .server, "virtual machine (DMI sys_vendor QEMU)"),
            ("10", true, "CPU flag hypervisor", nil, .server, "virtual machine (CPU flag hypervisor)"),
            (nil, false, nil, "docker", .server, "container (docker) on a host that is not a laptop or tablet"),
            ("10", false, nil, "docker", .laptop, "chassis_type 10"),
            (nil, true, nil, "docker", .laptop, "fallback: has a system battery"),
            ("3", false, nil, "podman", .server, "container (podman) on a host that is not a laptop or tablet"),
            (nil, false, nil, nil, .desktop, "fallback: no system battery"),
            ("garbage", true, nil, nil, .laptop, "fallback: has a system battery"),
        ] as [(String?, Bool, String?, String?, DeviceType, String)])
    func resolvesTheDeviceType(chassis: String?, battery: Bool, machine: String?, container: String?, type: DeviceType, source: String) {
        let (found, from) = DeviceType.resolve(
            chassisType: chassis.map { Array($0.utf8) }, hasSystemBattery: battery,
            virtualization: Virtualization(machine: machine, container: container))
        #expect(found == type)
        #expect(from.description == source)
    }

    @Test func theConfigOverridesTheDeviceType() {
        var telemetry = PowerTelemetry(deviceType: .laptop, updatedAtMs: 1)
        telemetry.overrideDeviceType(nil)
        #expect(telemetry.deviceType == .laptop)
        telemetry.overrideDeviceType(.server)
        #expect(telemetry.deviceType == .server && telemetry.deviceTypeSource == .config)
        #expect(telemetry.heartbeatJSON["deviceType"] == "server")
    }
}

@Suite struct HeartbeatThermalTests {
    static let passive = [TripPoint(kind: .passive, milliC: 95_000), TripPoint(kind: .critical, milliC: 105_000)]

    func zone(_ type: String, _ milliC: Int64, trips: [TripPoint] = []) -> ThermalSensor {
        ThermalSensor(source: .thermalZone, name: "thermal_zone0", label: type, rawTemp: .value(Array("\(milliC)\n".utf8)), trips: trips)
    }

    func hwmon(_ name: String, _ milliC: Int64) -> ThermalSensor {
        ThermalSensor(source: .hwmon, name: "hwmon0/temp1_input", label: name, rawTemp: .value(Array("\(milliC)\n".utf8)))
    }

    @Test(arguments: [
        ("x86_pkg_temp", ThermalSensorKind.cpu), ("cpu-thermal", .cpu), ("cpu0-thermal", .cpu), ("soc_thermal", .cpu),
        ("soc_dts0", .cpu), ("acpitz", .cpu), ("TCPU", .cpu), ("B0D4", .cpu), ("bigcore0-thermal", .cpu),
        ("gpu-thermal", .gpu), ("iwlwifi_1", .other), ("pch_skylake", .other), ("INT3400 Thermal", .other), ("nvme", .drive),
    ])
    func classifiesThermalZoneTypes(type: String, kind: ThermalSensorKind) {
        #expect(ThermalSensorKind.ofZone(type: type) == kind)
    }

    @Test(arguments: [
        ("coretemp", ThermalSensorKind.cpu), ("k10temp", .cpu), ("zenpower", .cpu), ("nvme", .drive), ("drivetemp", .drive),
        ("amdgpu", .gpu), ("nouveau", .gpu), ("iwlwifi_1", .other), ("acpitz", .other),
    ])
    func classifiesHwmonNames(name: String, kind: ThermalSensorKind) {
        #expect(ThermalSensorKind.ofHwmon(name: name) == kind)
    }

    @Test func aHotDriveIsSeriousForThePolicyButOnlyFairForTheCoordinator() {
        let drive = hwmon("nvme", 80_000)
        #expect(drive.state == .serious, "the policy's own rule: the worst sensor at 60/75/90 °C")
        #expect(drive.heartbeatState == .fair)
        let reading = PowerReading.assemble(
            supplies: [], sensors: [drive, zone("x86_pkg_temp", 50_000, trips: Self.passive)],
            platformProfile: nil, chassisType: nil, cpuUsagePct: nil, cpuSampled: false,
            cpuHadPreviousSample: false, meminfo: nil, nowMs: 1)
        #expect(reading.telemetry.thermalState == .serious)
        #expect(reading.telemetry.heartbeatThermalState == .fair)
        #expect(reading.telemetry.heartbeatJSON["thermalState"] == "fair")
        #expect(reading.doctorJSON["thermal"]?["heartbeat"]?.stringValue?.contains("fair") == true)
    }

    @Test func aCPUZonePastItsPassiveTripIsSerious() {
        #expect(zone("x86_pkg_temp", 96_000, trips: Self.passive).heartbeatState == .serious)
        #expect(zone("x86_pkg_temp", 90_000, trips: Self.passive).heartbeatState == .fair)
        #expect(zone("x86_pkg_temp", 101_000, trips: Self.passive).heartbeatState == .critical)
        #expect(zone("gpu-thermal", 96_000, trips: Self.passive).heartbeatState == .fair, "a GPU zone caps at fair")
        #expect(zone("iwlwifi_1", 120_000, trips: Self.passive).heartbeatState == .fair)
    }

    @Test func aCPUZoneWithoutAPassiveTripSpeaksOnlyNearItsCriticalTrip() {
        #expect(zone("cpu-thermal", 95_000).heartbeatState == .fair, "no trip points: the defaults cap at fair")
        let criticalOnly = [TripPoint(kind: .critical, milliC: 110_000)]
        #expect(zone("acpitz", 95_000, trips: criticalOnly).state == .serious)
        #expect(zone("acpitz", 95_000, trips: criticalOnly).heartbeatState == .fair)
        #expect(zone("acpitz", 106_000, trips: criticalOnly).heartbeatState == .critical)
    }

    @Test func throttlingIsSeriousAtLeast() {
        let cool = [zone("x86_pkg_temp", 40_000, trips: Self.passive)]
        #expect(ThermalSensor.heartbeatState(cool, throttled: false) == .nominal)
        #expect(ThermalSensor.heartbeatState(cool, throttled: true) == .serious)
        #expect(ThermalSensor.heartbeatState([], throttled: true) == .serious)
        #expect(ThermalSensor.heartbeatState([], throttled: false) == nil)
        #expect(ThermalSensor.heartbeatState([zone("x86_pkg_temp", 101_000, trips: Self.passive)], throttled: true) == .critical)
    }

    @Test func sumsThrottleCountersAndSeesThemRise() {
        #expect(CPUThrottle.total(counts: [Array("3\n".utf8), Array("4\n".utf8), nil, Array("x\n".utf8)]) == 7)
        #expect(CPUThrottle.total(counts: []) == nil)
        #expect(CPUThrottle.total(counts: [Array("-1".utf8), Array("".utf8), Array("1e3".utf8)]) == nil)
        #expect(CPUThrottle.total(counts: [Array("18446744073709551615".utf8), Array("1".utf8)]) == nil, "an overflow is no answer")
        #expect(CPUThrottle.throttled(previous: 7, current: 8))
        #expect(!CPUThrottle.throttled(previous: 7, current: 7))
        #expect(!CPUThrottle.throttled(previous: 7, current: 2), "a CPU went offline")
        #expect(!CPUThrottle.throttled(previous: nil, current: 8), "a first reading says nothing")
        #expect(CPUThrottle.isCPUDirectory("cpu0") && CPUThrottle.isCPUDirectory("cpu127"))
        #expect(!CPUThrottle.isCPUDirectory("cpufreq") && !CPUThrottle.isCPUDirectory("cpuidle") && !CPUThrottle.isCPUDirectory("cpu"))
    }
}

@Suite struct ModelParameterSizeTests {
    @Test(arguments: [
        ("1.5B", 1.5), ("7B", 7.0), ("7.6B", 7.6), ("494.03M", 0.49403), ("0.15M", 0.00015), ("1T", 1000.0),
        ("137m", 0.137), (" 8.0B ", 8.0), ("770K", 0.00077),
    ])
    func readsOllamasParameterSize(text: String, billions: Double) {
        #expect(ModelParameterSize.billions(text) == billions)
    }

    @Test(arguments: [
        "", "B", "1.5", "1.5X", "-1B", "+1B", "1..5B", ".5B", "5.B", "0B", "0.0M", "1e3B", "nanB", "infB",
        "1,5B", "1.5 B", "9999999999999999999T", String(repeating: "9", count: 30) + "B", "１B",
    ])
    func refusesWhatIsNotASize(text: String) {
        #expect(ModelParameterSize.billions(text) == nil)
    }

    @Test func theHeartbeatCarriesTheSizeWithTheModelOnly() {
        let with = CoordinatorWire.heartbeat(agentID: "a", telemetry: [:], activeModel: "qwen2.5-coder:1.5b", activeModelParamSize: 1.5)
        #expect(with["activeModelParamSize"] == .double(1.5))
        #expect(with.serialized.contains(#""activeModel":"qwen2.5-coder:1.5b","activeModelParamSize":1.5"#))
        let noModel = CoordinatorWire.heartbeat(agentID: "a", telemetry: [:], activeModel: nil, activeModelParamSize: 1.5)
        #expect(noModel["activeModelParamSize"] == nil)
        for bad in [Double.nan, .infinity, 0, -1] {
            #expect(
                CoordinatorWire.heartbeat(agentID: "a", telemetry: [:], activeModel: "m", activeModelParamSize: bad)["activeModelParamSize"] == nil)
        }
        #expect(CoordinatorWire.heartbeat(agentID: "a", telemetry: [:], activeModel: "m")["activeModelParamSize"] == nil)
    }
}

@Suite struct TelemetryConfigTests {
    @Test func acceptsTheThreeDeviceTypes() throws {
        for type in ["desktop", "laptop", "server"] {
            let config = try WorkerConfig.parse(Array(#"{"telemetry": {"deviceType": "\#(type)"}}"#.utf8))
            #expect(config.telemetry.deviceType?.rawValue == type)
        }
        #expect(try WorkerConfig.parse(Array(#"{"telemetry": {}}"#.utf8)).telemetry.deviceType == nil)
    }

    @Test(arguments: [
        (#"{"telemetry": {"deviceType": "tablet"}}"#, "telemetry.deviceType", "must be one of"),
        (#"{"telemetry": {"deviceType": "phone"}}"#, "telemetry.deviceType", "must be one of"),
        (#"{"telemetry": {"deviceType": 3}}"#, "telemetry.deviceType", "must be a string"),
        (#"{"telemetry": {"deviceType": ""}}"#, "telemetry.deviceType", "must be one of"),
        (#"{"telemetry": {"devicetype": "server"}}"#, "telemetry.devicetype", "unknown"),
        (#"{"telemetry": "server"}"#, "telemetry", "must be an object"),
    ])
    func refusesABadTelemetryKey(text: String, path: String, message: String) {
        var found: [ConfigProblem] = []
        do { _ = try WorkerConfig.parse(Array(text.utf8)) } catch { found = error.problems }
        #expect(found.count == 1, "\(found)")
        #expect(found.first?.path == path)
        #expect(found.first?.message.contains(message) == true, "\(found.first?.message ?? "none")")
    }

    @Test func theDeviceTypeChangesOnReload() throws {
        let running = WorkerConfig()
        let file = try WorkerConfig.parse(Array(#"{"telemetry": {"deviceType": "server"}}"#.utf8))
        let plan = ConfigReloadPlan.plan(running: running, file: file)
        #expect(plan.appliedKeys == ["telemetry.deviceType"])
        #expect(plan.restartKeys.isEmpty)
        #expect(plan.applied.telemetry.deviceType == .server)
    }
}
