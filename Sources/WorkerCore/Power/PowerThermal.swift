/// A trip point of a thermal zone (`trip_point_N_type`, `trip_point_N_temp`).
public struct TripPoint: Sendable, Equatable {
    public enum Kind: String, Sendable, CaseIterable {
        case active, passive, hot, critical
    }
    public var kind: Kind
    public var milliC: Int64

    public init(kind: Kind, milliC: Int64) {
        self.kind = kind
        self.milliC = milliC
    }

    /// A trip from its two files; nil when either is unusable. Temperatures at or below
    /// 0 °C are how drivers mark a disabled trip (iwlwifi writes −274 °C), and above
    /// 200 °C no trip is real.
    public static func parse(type: [UInt8]?, temp: [UInt8]?) -> TripPoint? {
        guard let kind = SysfsText.value(type).flatMap(Kind.init(rawValue:)),
            let milliC = SysfsText.integer(temp, in: 1...200_000)
        else { return nil }
        return TripPoint(kind: kind, milliC: milliC)
    }
}

/// Where a sensor's temperature crosses into `fair`, `serious` and `critical`, in
/// millidegrees Celsius: a reading below `fairAt` is nominal, below `seriousAt` fair,
/// below `criticalAt` serious, else critical.
public struct ThermalBoundaries: Sendable, Equatable {
    public var fairAt: Int64
    public var seriousAt: Int64
    public var criticalAt: Int64
    /// Whether trip points set any boundary.
    public var fromTripPoints: Bool

    /// modes-and-power §3.1: 60, 75 and 90 °C for a sensor without trip points.
    public static let defaults = ThermalBoundaries(fairAt: 60_000, seriousAt: 75_000, criticalAt: 90_000, fromTripPoints: false)

    public init(fairAt: Int64, seriousAt: Int64, criticalAt: Int64, fromTripPoints: Bool) {
        self.fairAt = fairAt
        self.seriousAt = seriousAt
        self.criticalAt = criticalAt
        self.fromTripPoints = fromTripPoints
    }

    /// modes-and-power §3.1 with trip points: fair from passive−10 °C, serious from passive, critical
    /// from critical−5 °C. The lowest trip of a kind counts; a `hot` trip counts as a
    /// critical one (it is the firmware's last stop before acting). `active` trips (fans)
    /// do not count. A zone with only one of passive and critical takes the other
    /// boundaries from the defaults, kept in order so no state is skipped backwards.
    public static func from(trips: [TripPoint]) -> ThermalBoundaries {
        let passive = trips.filter { $0.kind == .passive }.map(\.milliC).min()
        let critical = trips.filter { $0.kind == .critical || $0.kind == .hot }.map(\.milliC).min()
        if passive == nil && critical == nil { return .defaults }
        var boundaries = ThermalBoundaries.defaults
        boundaries.fromTripPoints = true
        if let passive {
            boundaries.fairAt = passive - 10_000
            boundaries.seriousAt = passive
        }
        if let critical {
            boundaries.criticalAt = critical - 5_000
        }
        if passive == nil {
            boundaries.seriousAt = min(boundaries.seriousAt, boundaries.criticalAt)
            boundaries.fairAt = min(boundaries.fairAt, boundaries.seriousAt)
        } else {
            boundaries.criticalAt = max(boundaries.criticalAt, boundaries.seriousAt)
        }
        return boundaries
    }

    public func state(milliC: Int64) -> ThermalState {
        if milliC < fairAt { return .nominal }
        if milliC < seriousAt { return .fair }
        if milliC < criticalAt { return .serious }
        return .critical
    }
}

/// One temperature sensor: a thermal zone or an hwmon `temp*_input`.
public struct ThermalSensor: Sendable, Equatable {
    public enum Source: String, Sendable {
        case thermalZone = "thermal-zone"
        case hwmon
    }

    /// Readings outside this range (millidegrees) are a broken or absent sensor.
    public static let plausibleMilliC: ClosedRange<Int64> = -60_000...200_000

    public var source: Source
    /// `thermal_zone0`, or `hwmon2/temp1_input`.
    public var name: String
    /// The zone's `type`, or the hwmon's `name`.
    public var label: String?
    /// An hwmon sensor's `temp*_label` ("Package id 0", "Composite").
    public var sensorLabel: String?
    /// The raw temperature file, for `doctor`.
    public var rawTemp: SysfsAttributes.Read?
    public var milliC: Int64?
    public var trips: [TripPoint]
    public var boundaries: ThermalBoundaries
    /// Set on an hwmon sensor that the kernel made from a thermal zone (same name as the
    /// zone's type): the zone, with its trip points, speaks for it.
    public var mirrorOf: String?

    public init(
        source: Source, name: String, label: String? = nil, sensorLabel: String? = nil,
        rawTemp: SysfsAttributes.Read?, trips: [TripPoint] = [], mirrorOf: String? = nil
    ) {
        self.source = source
        self.name = name
        self.label = label
        self.sensorLabel = sensorLabel
        self.rawTemp = rawTemp
        if case .value(let bytes) = rawTemp {
            milliC = SysfsText.integer(bytes, in: ThermalSensor.plausibleMilliC)
        } else {
            milliC = nil
        }
        self.trips = trips
        boundaries = ThermalBoundaries.from(trips: trips)
        self.mirrorOf = mirrorOf
    }

    /// nil when the temperature is unknown or the sensor mirrors a zone.
    public var state: ThermalState? {
        guard mirrorOf == nil, let milliC else { return nil }
        return boundaries.state(milliC: milliC)
    }

    /// modes-and-power §3.1: the worst state over every sensor; nil when no sensor gives one.
    public static func worstState(_ sensors: [ThermalSensor]) -> ThermalState? {
        sensors.compactMap(\.state).max()
    }

    /// Marks each hwmon sensor whose hwmon name is the type of a thermal zone present.
    public static func markingMirrors(_ sensors: [ThermalSensor]) -> [ThermalSensor] {
        let zoneTypes = Set(sensors.filter { $0.source == .thermalZone }.compactMap(\.label))
        return sensors.map { sensor in
            var sensor = sensor
            if sensor.source == .hwmon, let hwmonName = sensor.label, zoneTypes.contains(hwmonName) {
                sensor.mirrorOf = hwmonName
            }
            return sensor
        }
    }

    public var json: JSONValue {
        var object = JSONObject()
        object["source"] = .string(source.rawValue)
        object["name"] = .string(name)
        if let label { object["label"] = .string(label) }
        if let sensorLabel { object["sensorLabel"] = .string(sensorLabel) }
        switch rawTemp {
        case .value(let bytes)?: object["rawTemp"] = .string(SysfsText.display(bytes))
        case .failed(let why)?: object["rawTemp"] = ["error": .string(why)]
        case nil: object["rawTemp"] = .null
        }
        if let milliC { object["tempMilliC"] = .int(milliC) }
        object["tripPoints"] = .array(trips.map { ["type": .string($0.kind.rawValue), "tempMilliC": .int($0.milliC)] })
        object["boundaries"] = [
            "fairAtMilliC": .int(boundaries.fairAt), "seriousAtMilliC": .int(boundaries.seriousAt),
            "criticalAtMilliC": .int(boundaries.criticalAt),
            "from": .string(boundaries.fromTripPoints ? "trip points" : "defaults 60/75/90 °C"),
        ]
        if let mirrorOf { object["ignored"] = .string("mirrors thermal zone type \(mirrorOf)") }
        object["state"] = state.map { .string($0.rawValue) } ?? .null
        object["kind"] = .string(kind.rawValue)
        object["heartbeatState"] = heartbeatState.map { .string($0.rawValue) } ?? .null
        return .object(object)
    }
}

/// What a sensor measures, from a thermal zone's `type` or an hwmon's `name`.
public enum ThermalSensorKind: String, Sendable, Equatable {
    case cpu, drive, gpu, other

    /// Thermal zone types of CPU packages and SoCs: `x86_pkg_temp`, `cpu-thermal`,
    /// `cpu0-thermal`, `soc_thermal`, `soc_dts0`, `acpitz` (the ACPI zone the firmware
    /// cools the CPU by), Intel's processor zones `TCPU`/`B0D4`, Rockchip's
    /// `bigcore0-thermal`. A GPU zone (`gpu-thermal`) is not one.
    public static func ofZone(type: String?) -> ThermalSensorKind {
        guard let type else { return .other }
        let lower = type.lowercased()
        if lower.contains("gpu") { return .gpu }
        if ["acpitz", "tcpu", "tcpu_pci", "b0d4", "x86_pkg_temp"].contains(lower) { return .cpu }
        if lower.contains("cpu") || lower.contains("soc") || lower.contains("core") || lower.contains("pkg") || lower.contains("package") {
            return .cpu
        }
        if lower.contains("nvme") || lower.contains("disk") || lower.contains("drive") { return .drive }
        return .other
    }

    /// hwmon names: `coretemp`, `k10temp`, `zenpower`, `cpu_thermal` are CPUs; `nvme`,
    /// `drivetemp` drives; `amdgpu`, `nouveau`, `radeon`, `i915`, `xe` GPUs.
    public static func ofHwmon(name: String?) -> ThermalSensorKind {
        guard let name else { return .other }
        let lower = name.lowercased()
        if ["coretemp", "k10temp", "k8temp", "zenpower", "fam15h_power", "via_cputemp"].contains(lower) || lower.contains("cpu") { return .cpu }
        if lower == "nvme" || lower == "drivetemp" || lower.hasPrefix("nvme") { return .drive }
        if ["amdgpu", "nouveau", "radeon", "i915", "xe", "nvidia"].contains(lower) || lower.contains("gpu") { return .gpu }
        return .other
    }
}

extension ThermalSensor {
    public var kind: ThermalSensorKind {
        source == .thermalZone ? ThermalSensorKind.ofZone(type: label) : ThermalSensorKind.ofHwmon(name: label)
    }

    /// The state this sensor may give the heartbeat's `thermalState`, which the
    /// coordinator reads as "refuse all work" from `serious` on: only a CPU/SoC thermal
    /// zone with a passive trip point speaks past `fair` (a zone with only a critical trip
    /// speaks `critical` past it); every other sensor (a drive, a GPU, an hwmon sensor,
    /// a zone without trip points) caps at `fair`. nil as for `state`.
    public var heartbeatState: ThermalState? {
        guard let state else { return nil }
        guard source == .thermalZone, kind == .cpu else { return min(state, .fair) }
        if trips.contains(where: { $0.kind == .passive }) { return state }
        if state == .critical, trips.contains(where: { $0.kind == .critical || $0.kind == .hot }) { return .critical }
        return min(state, .fair)
    }

    /// The heartbeat's `thermalState`: the worst `heartbeatState`, `serious` at least
    /// while the CPU is throttled; nil when no sensor gives one and it is not throttled.
    public static func heartbeatState(_ sensors: [ThermalSensor], throttled: Bool) -> ThermalState? {
        let worst = sensors.compactMap(\.heartbeatState).max()
        guard throttled else { return worst }
        return max(worst ?? .serious, .serious)
    }
}

/// CPU thermal throttling from `/sys/devices/system/cpu/cpu*/thermal_throttle/
/// {core,package}_throttle_count` (x86): counters of throttling events since boot.
public enum CPUThrottle {
    /// The sum of the counters that parse; nil when none does.
    public static func total(counts: [[UInt8]?]) -> UInt64? {
        var sum: UInt64?
        for count in counts {
            guard let text = SysfsText.value(count), let value = decimal(text.utf8) else { continue }
            let (next, overflow) = (sum ?? 0).addingReportingOverflow(value)
            if overflow { return nil }
            sum = next
        }
        return sum
    }

    /// Throttled now: the counters rose since the previous reading. A first reading, or
    /// counters that fell (a CPU went offline), say nothing.
    public static func throttled(previous: UInt64?, current: UInt64?) -> Bool {
        guard let previous, let current else { return false }
        return current > previous
    }

    /// Whether a `cpu*` directory name is a CPU (`cpu12`), not `cpufreq` or `cpuidle`.
    public static func isCPUDirectory(_ name: String) -> Bool {
        guard name.hasPrefix("cpu"), name.count > 3, name.count <= 9 else { return false }
        return name.dropFirst(3).allSatisfy { $0 >= "0" && $0 <= "9" }
    }
}
