/// Turning the contents of sysfs and procfs attribute files into values. Every function
/// here takes what a file held (nil when it was missing or unreadable) and answers nil
/// ("unknown") for anything it cannot vouch for: a wrong number does more harm to a
/// policy than an absent one, because an absent one never holds work (modes-and-power §3.2).
public enum SysfsText {
    /// Longest attribute text accepted; sysfs attributes are at most a page.
    public static let maxValueBytes = 4096

    /// The text of a one-value attribute without its trailing newline or surrounding
    /// blanks. nil when missing, empty, longer than `maxValueBytes`, not UTF-8, or
    /// holding a NUL or another control byte (a binary file is not an attribute).
    public static func value(_ bytes: [UInt8]?) -> String? {
        guard let bytes else { return nil }
        var start = 0
        var end = bytes.count
        while start < end, isBlank(bytes[start]) { start += 1 }
        while end > start, isBlank(bytes[end - 1]) { end -= 1 }
        guard start < end, end - start <= maxValueBytes else { return nil }
        for byte in bytes[start..<end] where byte < 0x20 || byte == 0x7F { return nil }
        return String(validating: bytes[start..<end], as: UTF8.self)
    }

    /// A decimal integer attribute within `range`; nil for anything else (`abc`, `1e3`,
    /// `0x10`, an overflow, a value outside the range).
    public static func integer(_ bytes: [UInt8]?, in range: ClosedRange<Int64>) -> Int64? {
        guard let text = value(bytes), let number = Int64(text, radix: 10), range.contains(number) else { return nil }
        return number
    }

    /// What a person should see for raw bytes in `doctor`: the trimmed text with any
    /// invalid UTF-8 replaced, cut at 256 characters.
    public static func display(_ bytes: [UInt8]) -> String {
        var end = bytes.count
        while end > 0, isBlank(bytes[end - 1]) { end -= 1 }
        let text = String(decoding: bytes[0..<end], as: UTF8.self)
        return text.count > 256 ? String(text.prefix(256)) + "…" : text
    }

    static func isBlank(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x0A || byte == 0x09 || byte == 0x0D
    }
}

/// The attribute files of one sysfs directory as read: a file that does not exist has
/// no entry; one that exists but could not be read keeps the reason, for `doctor`.
public struct SysfsAttributes: Sendable, Equatable {
    public enum Read: Sendable, Equatable {
        case value([UInt8])
        /// The read failed; the system's description of why ("Is a directory", …).
        case failed(String)
    }

    public var reads: [String: Read]

    public init(_ reads: [String: Read] = [:]) { self.reads = reads }

    /// Convenience for tests and fakes: attribute name to file text.
    public init(text: [String: String]) {
        reads = text.mapValues { .value(Array($0.utf8)) }
    }

    /// The bytes of `name`, nil when missing or unreadable.
    public subscript(name: String) -> [UInt8]? {
        if case .value(let bytes) = reads[name] { return bytes }
        return nil
    }

    /// Each attribute that exists, in `order`: its text, or `{"error": why}`.
    public func json(order: [String]) -> JSONValue {
        var object = JSONObject()
        for name in order {
            switch reads[name] {
            case .value(let bytes): object[name] = .string(SysfsText.display(bytes))
            case .failed(let why): object[name] = ["error": .string(why)]
            case nil: break
            }
        }
        return .object(object)
    }
}

/// One entry of `sys/class/power_supply`, classified by the rules of modes-and-power §3.1.
public struct PowerSupply: Sendable, Equatable {
    /// The attribute files the classification reads, in the order `doctor` shows them.
    public static let attributeNames = ["type", "scope", "present", "online", "status", "capacity", "energy_full", "charge_full"]

    public enum Kind: String, Sendable, CaseIterable {
        case mains = "Mains", usb = "USB", battery = "Battery", ups = "UPS", wireless = "Wireless"

        /// The kernel's `type` text. Older kernels and some chargers name the USB flavour
        /// in `type` itself (`USB_C`, `USB_PD`, `USB_DCP`, …, and `BrickID` on
        /// Chromebooks): all of them are USB power.
        public init?(sysfsType text: String) {
            if let kind = Kind(rawValue: text) { self = kind; return }
            if text.hasPrefix("USB_") || text == "BrickID" { self = .usb; return }
            return nil
        }
    }

    public enum Status: String, Sendable, CaseIterable {
        case charging = "Charging", discharging = "Discharging", full = "Full"
        case notCharging = "Not charging", unknown = "Unknown"
    }

    /// What the supply counts as.
    public enum Role: String, Sendable, Equatable {
        /// Mains, USB, Wireless or UPS with system scope: may put the host on external power.
        case external
        /// A battery that powers the host.
        case systemBattery = "system-battery"
        /// `scope` is `Device`: a mouse's, keyboard's or headset's battery.
        case ignoredDeviceScope = "ignored: scope is Device"
        /// A battery bay that reports `present` 0.
        case ignoredNotPresent = "ignored: battery not present"
        /// `type` is missing or not one the kernel defines.
        case ignoredUnknownType = "ignored: unknown type"
    }

    public var name: String
    public var attributes: SysfsAttributes
    public var kind: Kind?
    public var role: Role
    /// `online`: true for 1 (fixed) and 2 (programmable, some USB chargers), false for 0.
    public var online: Bool?
    public var status: Status?
    /// `capacity`, 0–100.
    public var capacityPct: Int?
    /// `energy_full` in µWh, when readable and positive.
    public var energyFull: Int64?
    /// `charge_full` in µAh, when readable and positive.
    public var chargeFull: Int64?

    /// Classifies one supply from its attribute files.
    public static func classify(name: String, attributes: SysfsAttributes) -> PowerSupply {
        let kind = SysfsText.value(attributes["type"]).flatMap(Kind.init(sysfsType:))
        let deviceScope = SysfsText.value(attributes["scope"]) == "Device"
        let present = SysfsText.integer(attributes["present"], in: 0...1)
        let role: Role
        switch kind {
        case nil: role = .ignoredUnknownType
        case _ where deviceScope: role = .ignoredDeviceScope
        case .battery?: role = present == 0 ? .ignoredNotPresent : .systemBattery
        case .mains?, .usb?, .ups?, .wireless?: role = .external
        }
        let online = SysfsText.integer(attributes["online"], in: 0...2).map { $0 != 0 }
        let status = SysfsText.value(attributes["status"]).flatMap(Status.init(rawValue:))
        let capacity = SysfsText.integer(attributes["capacity"], in: 0...100).map { Int($0) }
        // Past 10^12 µWh (a megawatt-hour) the number is garbage, not a battery.
        let energyFull = SysfsText.integer(attributes["energy_full"], in: 1...1_000_000_000_000)
        let chargeFull = SysfsText.integer(attributes["charge_full"], in: 1...1_000_000_000_000)
        return PowerSupply(
            name: name, attributes: attributes, kind: kind, role: role, online: online, status: status,
            capacityPct: capacity, energyFull: energyFull, chargeFull: chargeFull)
    }

    /// modes-and-power §3.1 onExternalPower: true when a non-battery supply is online; when there is
    /// no such supply, true when a system battery is `Charging`, `Full` or `Not charging`;
    /// true when there is no system battery at all (what runs a desktop is external power).
    /// False when the supplies say otherwise; nil when what they say cannot be read. A
    /// non-battery supply whose `online` is unreadable defers to the batteries' status.
    public static func externalPower(_ supplies: [PowerSupply]) -> Bool? {
        let externals = supplies.filter { $0.role == .external }
        let batteries = supplies.filter { $0.role == .systemBattery }
        if externals.contains(where: { $0.online == true }) { return true }
        if batteries.isEmpty { return true }
        if !externals.isEmpty && externals.allSatisfy({ $0.online == false }) { return false }
        if batteries.contains(where: { [.charging, .full, .notCharging].contains($0.status) }) { return true }
        if batteries.contains(where: { $0.status == .discharging }) { return false }
        return nil
    }

    /// A system battery discharges while a non-battery supply is online: the charger is
    /// too weak for the load (modes-and-power §3.2 `holdWhileDraining`).
    public static func draining(_ supplies: [PowerSupply]) -> Bool {
        supplies.contains { $0.role == .external && $0.online == true }
            && supplies.contains { $0.role == .systemBattery && $0.status == .discharging }
    }

    /// The system batteries' combined charge (modes-and-power §3.1): each `capacity` weighted by
    /// `energy_full` when every battery has it, else by `charge_full` when every battery
    /// has that (µWh and µAh never mix), else a plain average; rounded to a whole percent.
    /// nil without a system battery, and when any system battery's capacity is unknown:
    /// the others alone would be a confident wrong number.
    public static func combinedBatteryPct(_ supplies: [PowerSupply]) -> Int? {
        let batteries = supplies.filter { $0.role == .systemBattery }
        guard !batteries.isEmpty else { return nil }
        var capacities: [Double] = []
        for battery in batteries {
            guard let capacity = battery.capacityPct else { return nil }
            capacities.append(Double(capacity))
        }
        let weights: [Double]
        if batteries.allSatisfy({ $0.energyFull != nil }) {
            weights = batteries.map { Double($0.energyFull!) }
        } else if batteries.allSatisfy({ $0.chargeFull != nil }) {
            weights = batteries.map { Double($0.chargeFull!) }
        } else {
            weights = Array(repeating: 1, count: batteries.count)
        }
        let total = weights.reduce(0, +)
        let weighted = zip(capacities, weights).reduce(0) { $0 + $1.0 * $1.1 } / total
        return Int(min(100, max(0, weighted)).rounded())
    }

    /// For `doctor`: the raw attributes and what they were taken to mean.
    public var json: JSONValue {
        var object = JSONObject()
        object["name"] = .string(name)
        object["raw"] = attributes.json(order: PowerSupply.attributeNames)
        object["kind"] = kind.map { .string($0.rawValue) } ?? .null
        object["role"] = .string(role.rawValue)
        if let online { object["online"] = .bool(online) }
        if let status { object["status"] = .string(status.rawValue) }
        if let capacityPct { object["capacityPct"] = .int(capacityPct) }
        if let energyFull { object["energyFull"] = .int(energyFull) }
        if let chargeFull { object["chargeFull"] = .int(chargeFull) }
        return .object(object)
    }
}

/// `sys/firmware/acpi/platform_profile`.
public enum PlatformProfile {
    /// Every profile name the kernel defines (include/linux/platform_profile.h).
    public static let knownProfiles: Set<String> = [
        "low-power", "cool", "quiet", "balanced", "balanced-performance", "performance", "custom", "max-power",
    ]

    /// True for `low-power`, false for another known profile, nil when the file is missing
    /// or holds something that is not a profile name.
    public static func lowPowerMode(_ contents: [UInt8]?) -> Bool? {
        guard let text = SysfsText.value(contents), knownProfiles.contains(text) else { return nil }
        return text == "low-power"
    }
}

/// The `deviceType` vocabulary of the coordinator (it also knows `phone`, which no Linux
/// host reports).
public enum DeviceType: String, Sendable, CaseIterable {
    case laptop, desktop, server, tablet

    /// The SMBIOS chassis type codes of modes-and-power §3.1; nil for the codes it does not list
    /// (1 Other, 2 Unknown, 11 Hand Held, 12 Docking Station, 33 IoT Gateway, …).
    public init?(chassisCode code: Int64) {
        switch code {
        case 8, 9, 10, 14, 31, 32: self = .laptop
        case 30: self = .tablet
        case 17, 23, 28, 29: self = .server
        case 3...7, 13, 15, 16, 24, 35, 36: self = .desktop
        default: return nil
        }
    }

    /// From `sys/class/dmi/id/chassis_type` (the kernel prints the SMBIOS byte without
    /// its lock bit, 0–127); nil when the file is missing, garbage or an unlisted code.
    public init?(chassisType contents: [UInt8]?) {
        guard let code = SysfsText.integer(contents, in: 0...127), let type = DeviceType(chassisCode: code) else { return nil }
        self = type
    }

    /// modes-and-power §3.1: the chassis type when it is known, else `laptop` with a system battery
    /// and `desktop` without.
    public static func resolve(chassisType contents: [UInt8]?, hasSystemBattery: Bool) -> DeviceType {
        DeviceType(chassisType: contents) ?? (hasSystemBattery ? .laptop : .desktop)
    }
}

/// Whether the host is a virtual machine or a container, from what `systemd-detect-virt`
/// reads: the DMI strings a hypervisor's firmware sets, the CPU's `hypervisor` flag,
/// and the markers container managers leave (`/run/systemd/container`, `/.dockerenv`,
/// `/run/.containerenv`). Pure: the files' bytes in.
public struct Virtualization: Sendable, Equatable {
    /// What says it is a virtual machine ("DMI sys_vendor QEMU", "CPU flag hypervisor").
    public var machine: String?
    /// The container manager ("docker", "podman", what `/run/systemd/container` names).
    public var container: String?

    public init(machine: String? = nil, container: String? = nil) {
        self.machine = machine
        self.container = container
    }

    /// The DMI files read, in the order they are looked at.
    public static let dmiFiles = ["sys_vendor", "product_name", "board_vendor", "bios_vendor"]

    /// Vendor and product names that only a hypervisor's firmware uses (a prefix match,
    /// as systemd does).
    static let hypervisorNames = [
        "KVM", "OpenStack", "KubeVirt", "Amazon EC2", "QEMU", "VMware", "VMW", "innotek GmbH", "VirtualBox",
        "Xen", "Bochs", "Parallels", "BHYVE", "Hyper-V", "Apple Virtualization", "Google Compute Engine",
    ]

    /// - Parameters:
    ///   - dmi: `sys/class/dmi/id/<file>` by file name (see `dmiFiles`).
    ///   - cpuinfo: the head of `proc/cpuinfo` (its first `flags` line is enough).
    ///   - systemdContainer: `run/systemd/container`.
    public static func detect(
        dmi: [String: [UInt8]], cpuinfo: [UInt8]?, systemdContainer: [UInt8]?,
        dockerenv: Bool, containerenv: Bool
    ) -> Virtualization {
        var found = Virtualization()
        for file in dmiFiles {
            guard let text = SysfsText.value(dmi[file]) else { continue }
            if let name = hypervisorNames.first(where: { text.hasPrefix($0) }) {
                found.machine = "DMI \(file) \(name)"
                break
            }
        }
        if found.machine == nil, SysfsText.value(dmi["sys_vendor"]) == "Microsoft Corporation",
            SysfsText.value(dmi["product_name"]) == "Virtual Machine"
        {
            found.machine = "DMI Microsoft Corporation Virtual Machine"
        }
        if found.machine == nil, hasHypervisorFlag(cpuinfo: cpuinfo) { found.machine = "CPU flag hypervisor" }
        if let name = SysfsText.value(systemdContainer), name.utf8.count <= 64,
            name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" })
        {
            found.container = name
        } else if dockerenv {
            found.container = "docker"
        } else if containerenv {
            found.container = "podman"
        }
        return found
    }

    /// Whether the first `flags` line of `/proc/cpuinfo` has `hypervisor` (x86: the CPU
    /// runs under a hypervisor). At most 1 MiB is looked at.
    public static func hasHypervisorFlag(cpuinfo: [UInt8]?) -> Bool {
        guard let cpuinfo else { return false }
        for line in cpuinfo.prefix(1 << 20).split(separator: UInt8(ascii: "\n")) where line.starts(with: "flags".utf8) {
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { return false }
            return line[(colon + 1)...].split(whereSeparator: { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") })
                .contains { $0.elementsEqual("hypervisor".utf8) }
        }
        return false
    }
}

/// Where `deviceType` came from, for `telemetry` and `doctor`.
public enum DeviceTypeSource: Sendable, Equatable {
    /// `telemetry.deviceType` in the config.
    case config
    /// `sys/class/dmi/id/chassis_type`, with its code.
    case chassis(Int64)
    /// A virtual machine, and what showed it.
    case virtualMachine(String)
    /// A container on a host that is not a laptop or tablet.
    case container(String)
    /// No usable chassis type: laptop with a system battery, desktop without.
    case fallback(hasSystemBattery: Bool)

    public var description: String {
        switch self {
        case .config: return "config telemetry.deviceType"
        case .chassis(let code): return "chassis_type \(code)"
        case .virtualMachine(let why): return "virtual machine (\(why))"
        case .container(let manager): return "container (\(manager)) on a host that is not a laptop or tablet"
        case .fallback(let battery): return battery ? "fallback: has a system battery" : "fallback: no system battery"
        }
    }
}

extension DeviceType {
    /// What the heartbeat says: `server` for server chassis and virtual machines (the
    /// coordinator never limits a server), and for containers unless the chassis or a
    /// system battery says laptop or tablet (a container on a laptop is still on
    /// battery); else the chassis type; else `laptop` with a system battery, `desktop`
    /// without.
    public static func resolve(
        chassisType contents: [UInt8]?, hasSystemBattery: Bool,
        virtualization: Virtualization
    ) -> (DeviceType, DeviceTypeSource) {
        let code = SysfsText.integer(contents, in: 0...127)
        let chassis = code.flatMap(DeviceType.init(chassisCode:))
        if chassis == .server, let code { return (.server, .chassis(code)) }
        if let machine = virtualization.machine { return (.server, .virtualMachine(machine)) }
        if let container = virtualization.container, chassis != .laptop, chassis != .tablet, !hasSystemBattery {
            return (.server, .container(container))
        }
        if let chassis, let code { return (chassis, .chassis(code)) }
        return (hasSystemBattery ? .laptop : .desktop, .fallback(hasSystemBattery: hasSystemBattery))
    }
}
