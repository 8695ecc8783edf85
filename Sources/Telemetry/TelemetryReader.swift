// Power telemetry from sysfs and procfs (modes-and-power §3.1). Filled in by the power issue.

#if canImport(Glibc)
import Glibc
#endif
import Posix
import WorkerCore

/// Reads the host's power telemetry from sysfs and procfs below `root` (modes-and-power §3.1). Every
/// file is small and read whole, with a size limit; a file that is missing or cannot be
/// read is "unknown", never an error. CPU usage needs two samples of `proc/stat`, so the
/// reader keeps the previous one: the first reading has no `cpuUsagePct`, and a one-shot
/// caller reads twice, about 250 ms apart.
public struct TelemetryReader: Sendable {
    /// Largest attribute file read; sysfs attributes are at most a page.
    public static let attributeLimit = 65_536
    /// Entries looked at per directory: a hostile or broken tree costs bounded time.
    public static let maxEntries = 256
    /// Trip points looked at per thermal zone.
    public static let maxTripPoints = 32

    /// The directory holding `sys` and `proc`: `/`, or a fake tree in tests.
    public let root: String
    /// `root` without its trailing slashes, so paths join with one.
    private let prefix: String
    private var previousCPU: CPUTimes?
    /// The worker's own processes, sampled with `proc/stat` so their share is taken out
    /// of the figure the policy compares; nil: the host's figure only.
    private var own: OwnProcesses?
    private var previousOwn: [ProcessSample]?
    private var previousServerCgroup: CgroupUsage?
    private var previousThrottle: UInt64?
    /// Read once: a host does not become a virtual machine while it runs.
    private var virtualization: Virtualization?

    public init(root: String = "/", own: OwnProcesses? = nil) {
        self.root = root
        var prefix = root
        while prefix.hasSuffix("/") { prefix.removeLast() }
        self.prefix = prefix
        self.own = own
    }

    /// Takes one reading. `nowMs` is milliseconds since the epoch, the reading's
    /// `updatedAtMs`.
    public mutating func read(nowMs: Int64 = wallClockMilliseconds()) -> PowerReading {
        let stat = TelemetryReader.readHead(path("proc/stat"), limit: 4096)
        let sample = CPUTimes.parse(procStat: stat)
        var cpuUsage: Double?
        if let sample, let previousCPU { cpuUsage = CPUTimes.usagePct(from: previousCPU, to: sample) }
        let hadPrevious = previousCPU != nil
        var share: CPUShare?
        var server: OwnProcesses.Server?
        if var own, sample != nil {
            let (processes, found, cgroup) = own.sample()
            self.own = own
            server = found
            if let sample, let previousCPU, let previousOwn {
                share = CPUShare.between(
                    host: previousCPU, sample, own: previousOwn, processes,
                    server: previousServerCgroup, cgroup, ticksPerSecond: TelemetryReader.ticksPerSecond)
            }
            previousOwn = processes
            previousServerCgroup = cgroup
        }
        let virtualization = self.virtualization ?? readVirtualization()
        self.virtualization = virtualization
        let (throttleTotal, throttleFiles) = readThrottleCounts()
        let throttled = CPUThrottle.throttled(previous: previousThrottle, current: throttleTotal)
        let throttleText: String
        if let throttleTotal {
            throttleText =
                "\(throttleFiles) thermal_throttle counters, total \(throttleTotal)"
                + (previousThrottle == nil
                    ? " (first reading)" : throttled ? ", rose since the last reading: the CPU is throttled" : ", unchanged since the last reading")
        } else {
            throttleText = "no thermal_throttle counters in sys/devices/system/cpu (not an Intel CPU, or a virtual one)"
        }
        if throttleTotal != nil { previousThrottle = throttleTotal }
        // A sample that fails leaves the previous one, so the next success still has a base.
        if let sample { previousCPU = sample }
        var reading = PowerReading.assemble(
            supplies: readSupplies(),
            sensors: readThermalZones() + readHwmonSensors(),
            platformProfile: TelemetryReader.readAttribute(path("sys/firmware/acpi/platform_profile")),
            chassisType: TelemetryReader.readAttribute(path("sys/class/dmi/id/chassis_type")),
            cpuUsagePct: cpuUsage, cpuSampled: sample != nil, cpuHadPreviousSample: hadPrevious,
            meminfo: TelemetryReader.readAttribute(path("proc/meminfo")).bytes,
            nowMs: nowMs, virtualization: virtualization, throttled: throttled)
        reading.throttle = throttleText
        reading.telemetry.otherCpuUsagePct = share?.otherPct
        reading.cpuShare = share
        reading.ownProcesses = server.map { found in
            ((own?.workerPID ?? 0) > 1 ? "worker pid \(own?.workerPID ?? 0); " : "no worker process; ") + found.description
        }
        return reading
    }

    func path(_ relative: String) -> String { prefix + "/" + relative }

    /// Clock ticks per second, the unit of `proc/stat`.
    static let ticksPerSecond: Double = {
        let ticks = sysconf(Int32(_SC_CLK_TCK))
        return ticks > 0 ? Double(ticks) : 100
    }()

    func readVirtualization() -> Virtualization {
        var dmi: [String: [UInt8]] = [:]
        for file in Virtualization.dmiFiles {
            if let bytes = TelemetryReader.readAttribute(path("sys/class/dmi/id/\(file)")).bytes { dmi[file] = bytes }
        }
        return Virtualization.detect(
            dmi: dmi, cpuinfo: TelemetryReader.readHead(path("proc/cpuinfo"), limit: 65_536),
            systemdContainer: TelemetryReader.readAttribute(path("run/systemd/container")).bytes,
            dockerenv: fileExists(path(".dockerenv")), containerenv: fileExists(path("run/.containerenv")))
    }

    /// The sum of every CPU's thermal_throttle counters, and how many files gave one.
    func readThrottleCounts() -> (UInt64?, Int) {
        let directory = path("sys/devices/system/cpu")
        var counts: [[UInt8]?] = []
        for cpu in (listDirectory(directory, maxEntries: 4_096) ?? []) where CPUThrottle.isCPUDirectory(cpu) {
            for counter in ["core_throttle_count", "package_throttle_count"] {
                if let bytes = TelemetryReader.readAttribute("\(directory)/\(cpu)/thermal_throttle/\(counter)").bytes { counts.append(bytes) }
            }
            if counts.count >= 2 * 1_024 { break }
        }
        return (CPUThrottle.total(counts: counts), counts.count)
    }

    func readSupplies() -> [PowerSupply] {
        let directory = path("sys/class/power_supply")
        return TelemetryReader.list(directory).map { name in
            var reads: [String: SysfsAttributes.Read] = [:]
            for attribute in PowerSupply.attributeNames {
                reads[attribute] = TelemetryReader.readAttribute("\(directory)/\(name)/\(attribute)")
            }
            return PowerSupply.classify(name: name, attributes: SysfsAttributes(reads))
        }
    }

    func readThermalZones() -> [ThermalSensor] {
        let directory = path("sys/class/thermal")
        return TelemetryReader.list(directory).filter { $0.hasPrefix("thermal_zone") }.map { zone in
            let zonePath = "\(directory)/\(zone)"
            var trips: [TripPoint] = []
            for n in 0..<TelemetryReader.maxTripPoints {
                let type = TelemetryReader.readAttribute("\(zonePath)/trip_point_\(n)_type")
                if type == nil { break }
                if let trip = TripPoint.parse(type: type.bytes, temp: TelemetryReader.readAttribute("\(zonePath)/trip_point_\(n)_temp").bytes) {
                    trips.append(trip)
                }
            }
            return ThermalSensor(
                source: .thermalZone, name: zone,
                label: SysfsText.value(TelemetryReader.readAttribute("\(zonePath)/type").bytes),
                rawTemp: TelemetryReader.readAttribute("\(zonePath)/temp"), trips: trips)
        }
    }

    func readHwmonSensors() -> [ThermalSensor] {
        let directory = path("sys/class/hwmon")
        var sensors: [ThermalSensor] = []
        for hwmon in TelemetryReader.list(directory) where hwmon.hasPrefix("hwmon") {
            let hwmonPath = "\(directory)/\(hwmon)"
            let name = SysfsText.value(TelemetryReader.readAttribute("\(hwmonPath)/name").bytes)
            for input in TelemetryReader.list(hwmonPath) where TelemetryReader.isTempInput(input) {
                let labelFile = "\(hwmonPath)/\(input.dropLast("input".count))label"
                sensors.append(
                    ThermalSensor(
                        source: .hwmon, name: "\(hwmon)/\(input)", label: name,
                        sensorLabel: SysfsText.value(TelemetryReader.readAttribute(labelFile).bytes),
                        rawTemp: TelemetryReader.readAttribute("\(hwmonPath)/\(input)")))
            }
        }
        return sensors
    }

    /// `temp<N>_input`.
    static func isTempInput(_ name: String) -> Bool {
        guard name.hasPrefix("temp") && name.hasSuffix("_input") else { return false }
        let digits = name.dropFirst(4).dropLast(6)
        return !digits.isEmpty && digits.allSatisfy { $0 >= "0" && $0 <= "9" }
    }

    /// One attribute file: nil when it does not exist, its bytes, or why it failed.
    static func readAttribute(_ path: String) -> SysfsAttributes.Read? {
        do {
            return .value(try readFile(path, limit: attributeLimit))
        } catch {
            if error.errno == ENOENT || error.errno == ENOTDIR { return nil }
            return .failed(error.errno == EFBIG ? "larger than \(attributeLimit) bytes" : error.errnoDescription)
        }
    }

    /// The first `limit` bytes of a file: `proc/stat` carries a line per interrupt after
    /// the one we need, long on big machines.
    static func readHead(_ path: String, limit: Int) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: limit)
        var count = 0
        while count < limit {
            let n = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + count, limit - count) }
            if n < 0 && errno == EINTR { continue }
            if n < 0 { return nil }
            if n == 0 { break }
            count += n
        }
        return Array(bytes[0..<count])
    }

    /// The entries of a directory (not `.` or `..`), at most `maxEntries`, in natural
    /// order (`thermal_zone2` before `thermal_zone10`); empty when it cannot be opened.
    static func list(_ path: String) -> [String] {
        (listDirectory(path, maxEntries: maxEntries) ?? []).sorted(by: naturalOrder)
    }

    static func naturalOrder(_ a: String, _ b: String) -> Bool {
        func split(_ s: String) -> (Substring, Int?) {
            let stem = s.prefix { !($0 >= "0" && $0 <= "9") }
            let digits = s.dropFirst(stem.count)
            return (stem, digits.count <= 18 && digits.allSatisfy({ $0 >= "0" && $0 <= "9" }) ? Int(digits) : nil)
        }
        let (stemA, numberA) = split(a)
        let (stemB, numberB) = split(b)
        if stemA == stemB, let numberA, let numberB, numberA != numberB { return numberA < numberB }
        return a < b
    }
}
