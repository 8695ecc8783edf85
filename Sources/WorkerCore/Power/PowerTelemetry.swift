/// One reading of the host's power state (modes-and-power §3.1). nil means unknown: it is never
/// sent, and it never holds work.
public struct PowerTelemetry: Sendable, Equatable {
    /// onExternalPower / onACPower.
    public var onExternalPower: Bool?
    /// The system batteries' combined charge, 0–100.
    public var batteryPct: Int?
    /// `platform_profile` is `low-power`.
    public var lowPowerMode: Bool?
    /// The worst state over every sensor: what `maxThermalState` compares.
    public var thermalState: ThermalState?
    /// What the heartbeat sends as `thermalState`: past `fair` only for a CPU/SoC zone
    /// past its passive trip point, or a throttled CPU (`ThermalSensor.heartbeatState`).
    public var heartbeatThermalState: ThermalState?
    /// The CPU's throttle counters rose since the previous reading.
    public var throttled: Bool = false
    /// 0–100, between the last two samples of `/proc/stat`.
    public var cpuUsagePct: Double?
    /// `cpuUsagePct` without the worker's own processes and its model server's: what
    /// `maxCpuUsagePct` compares and what the heartbeat sends as `cpuUsagePct` (the
    /// coordinator defers pulls above 85 %, and the worker's own work must not make it
    /// look busy). nil when they could not be told apart; then the host's figure is used.
    public var otherCpuUsagePct: Double?
    /// 0–100.
    public var memoryUsagePct: Double?
    public var deviceType: DeviceType?
    /// Where `deviceType` came from.
    public var deviceTypeSource: DeviceTypeSource?
    /// A system battery discharges while a non-battery supply is online.
    public var draining: Bool
    public var hasSystemBattery: Bool
    /// Milliseconds since the epoch when the reading was taken.
    public var updatedAtMs: Int64

    public init(
        onExternalPower: Bool? = nil, batteryPct: Int? = nil, lowPowerMode: Bool? = nil,
        thermalState: ThermalState? = nil, cpuUsagePct: Double? = nil, memoryUsagePct: Double? = nil,
        deviceType: DeviceType? = nil, draining: Bool = false, hasSystemBattery: Bool = false,
        updatedAtMs: Int64
    ) {
        self.onExternalPower = onExternalPower
        self.batteryPct = batteryPct
        self.lowPowerMode = lowPowerMode
        self.thermalState = thermalState
        heartbeatThermalState = thermalState
        self.cpuUsagePct = cpuUsagePct
        self.memoryUsagePct = memoryUsagePct
        self.deviceType = deviceType
        self.draining = draining
        self.hasSystemBattery = hasSystemBattery
        self.updatedAtMs = updatedAtMs
    }

    /// The heartbeat's `powerTelemetry` in both vocabularies the coordinator accepts, and
    /// the JSON of `edgecoder-worker telemetry --json`. A key whose value is unknown is
    /// left out (never -1 or null). The coordinator's schema takes every percentage as a
    /// number in 0–100: the battery goes as a whole percent, CPU and memory with one
    /// decimal, each clamped to 0–100. `thermalState` and `cpuUsagePct` are the figures
    /// meant for the coordinator's power policy (`heartbeatThermalState`, the other load).
    public var heartbeatJSON: JSONValue {
        var object = JSONObject()
        let battery = batteryPct.map { JSONValue.int(min(100, max(0, $0))) }
        object["onExternalPower"] = onExternalPower.map(JSONValue.bool)
        object["batteryLevelPct"] = battery
        object["lowPowerMode"] = lowPowerMode.map(JSONValue.bool)
        object["onACPower"] = onExternalPower.map(JSONValue.bool)
        object["batteryPct"] = battery
        object["thermalState"] = heartbeatThermalState.map { .string($0.rawValue) }
        object["cpuUsagePct"] = PowerTelemetry.percentJSON(otherCpuUsagePct ?? cpuUsagePct)
        object["memoryUsagePct"] = PowerTelemetry.percentJSON(memoryUsagePct)
        object["deviceType"] = deviceType.map { .string($0.rawValue) }
        object["updatedAtMs"] = .int(updatedAtMs)
        return .object(object)
    }

    /// The config's `telemetry.deviceType`, when set, replaces what the host says.
    public mutating func overrideDeviceType(_ configured: DeviceType?) {
        guard let configured else { return }
        deviceType = configured
        deviceTypeSource = .config
    }

    static func percentJSON(_ value: Double?) -> JSONValue? {
        guard let value, value.isFinite else { return nil }
        return .double((min(100, max(0, value)) * 10).rounded() / 10)
    }
}

/// A full reading: the telemetry and every raw value behind it, for `doctor`.
public struct PowerReading: Sendable, Equatable {
    public var telemetry: PowerTelemetry
    public var supplies: [PowerSupply]
    public var sensors: [ThermalSensor]
    /// `sys/firmware/acpi/platform_profile` as read.
    public var platformProfile: SysfsAttributes.Read?
    /// `sys/class/dmi/id/chassis_type` as read.
    public var chassisType: SysfsAttributes.Read?
    /// Whether `proc/stat` gave a sample this time and whether a previous one existed.
    public var cpuSampled: Bool
    public var cpuHadPreviousSample: Bool
    /// Whether `proc/meminfo` gave both MemTotal and MemAvailable.
    public var memoryRead: Bool
    /// The split of the CPU figure into the worker's own load and the rest, when known.
    public var cpuShare: CPUShare?
    /// How the model server's processes were found (for `doctor`).
    public var ownProcesses: String?
    /// What showed a virtual machine or a container.
    public var virtualization = Virtualization()
    /// How the CPU's throttling was read, for `doctor`.
    public var throttle: String?

    public init(
        telemetry: PowerTelemetry, supplies: [PowerSupply], sensors: [ThermalSensor],
        platformProfile: SysfsAttributes.Read?, chassisType: SysfsAttributes.Read?,
        cpuSampled: Bool, cpuHadPreviousSample: Bool, memoryRead: Bool
    ) {
        self.telemetry = telemetry
        self.supplies = supplies
        self.sensors = sensors
        self.platformProfile = platformProfile
        self.chassisType = chassisType
        self.cpuSampled = cpuSampled
        self.cpuHadPreviousSample = cpuHadPreviousSample
        self.memoryRead = memoryRead
    }

    /// Applies the rules of modes-and-power §3.1 to what was read. `supplies` are already classified;
    /// hwmon sensors that mirror a thermal zone are marked here.
    public static func assemble(
        supplies: [PowerSupply], sensors: [ThermalSensor],
        platformProfile: SysfsAttributes.Read?, chassisType: SysfsAttributes.Read?,
        cpuUsagePct: Double?, cpuSampled: Bool, cpuHadPreviousSample: Bool,
        meminfo: [UInt8]?, nowMs: Int64, virtualization: Virtualization = Virtualization(),
        throttled: Bool = false
    ) -> PowerReading {
        let sensors = ThermalSensor.markingMirrors(sensors)
        let hasBattery = supplies.contains { $0.role == .systemBattery }
        let memory = MemoryInfo.usagePct(meminfo: meminfo)
        let (deviceType, deviceTypeSource) = DeviceType.resolve(
            chassisType: chassisType.bytes, hasSystemBattery: hasBattery,
            virtualization: virtualization)
        var telemetry = PowerTelemetry(
            onExternalPower: PowerSupply.externalPower(supplies),
            batteryPct: PowerSupply.combinedBatteryPct(supplies),
            lowPowerMode: PlatformProfile.lowPowerMode(platformProfile.bytes),
            thermalState: ThermalSensor.worstState(sensors),
            cpuUsagePct: cpuUsagePct,
            memoryUsagePct: memory,
            deviceType: deviceType,
            draining: PowerSupply.draining(supplies),
            hasSystemBattery: hasBattery,
            updatedAtMs: nowMs)
        telemetry.deviceTypeSource = deviceTypeSource
        telemetry.throttled = throttled
        telemetry.heartbeatThermalState = ThermalSensor.heartbeatState(sensors, throttled: throttled)
        var reading = PowerReading(
            telemetry: telemetry, supplies: supplies, sensors: sensors, platformProfile: platformProfile,
            chassisType: chassisType, cpuSampled: cpuSampled, cpuHadPreviousSample: cpuHadPreviousSample,
            memoryRead: memory != nil)
        reading.virtualization = virtualization
        return reading
    }

    /// Everything `doctor` shows about power: the telemetry, each supply and sensor with
    /// its raw values and meaning, and the other sources.
    public var doctorJSON: JSONValue {
        func raw(_ read: SysfsAttributes.Read?) -> JSONValue {
            switch read {
            case .value(let bytes)?: return .string(SysfsText.display(bytes))
            case .failed(let why)?: return ["error": .string(why)]
            case nil: return .null
            }
        }
        var object = JSONObject()
        object["telemetry"] = telemetry.heartbeatJSON
        object["draining"] = .bool(telemetry.draining)
        object["hasSystemBattery"] = .bool(telemetry.hasSystemBattery)
        object["powerSupplies"] = .array(supplies.map(\.json))
        object["thermalSensors"] = .array(sensors.map(\.json))
        object["platformProfile"] = raw(platformProfile)
        object["chassisType"] = raw(chassisType)
        object["deviceTypeFrom"] = .string((telemetry.deviceTypeSource ?? .fallback(hasSystemBattery: telemetry.hasSystemBattery)).description)
        object["virtualization"] = ["machine": .optional(virtualization.machine), "container": .optional(virtualization.container)]
        object["thermal"] = [
            "policy": .string(
                "thermalState \(telemetry.thermalState?.rawValue ?? "unknown"): the worst over every sensor, compared with maxThermalState"),
            "heartbeat": .string(
                "thermalState \(telemetry.heartbeatThermalState?.rawValue ?? "unknown (omitted)"): past fair only for a CPU/SoC thermal zone past its passive trip point or a throttled CPU; other sensors cap at fair"
            ),
            "throttle": .string(throttle ?? "not read"),
        ]
        object["cpu"] = .string(
            cpuSampled
                ? (cpuHadPreviousSample ? "two samples of proc/stat" : "first sample of proc/stat; usage needs a second")
                : "proc/stat unreadable")
        object["memory"] = .string(memoryRead ? "proc/meminfo" : "proc/meminfo unreadable or without MemAvailable")
        if let share = cpuShare {
            object["cpuShare"] = [
                "hostPct": PowerTelemetry.percentJSON(share.hostPct) ?? .null,
                "ownPct": PowerTelemetry.percentJSON(share.ownPct) ?? .null,
                "otherPct": PowerTelemetry.percentJSON(share.otherPct) ?? .null,
                "compared": "otherPct (the worker and its model server do not count against maxCpuUsagePct; the heartbeat sends it as cpuUsagePct)",
            ]
        }
        object["ownProcesses"] = .optional(ownProcesses)
        return .object(object)
    }
}

extension Optional where Wrapped == SysfsAttributes.Read {
    /// The bytes read, nil when missing or failed.
    public var bytes: [UInt8]? {
        if case .value(let bytes)? = self { return bytes }
        return nil
    }
}
