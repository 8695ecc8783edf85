/// The daemon's configuration: configuration §1. Every key has a default, so an
/// absent or empty file is a valid config; every key is validated, and an unknown
/// key is an error (a typo must never be silently ignored).
public struct WorkerConfig: Sendable, Equatable {
    public var agentId: String?

    public struct Coordinator: Sendable, Equatable {
        public var url: String?
        public var registrationToken: String?
        public var heartbeatIntervalMs: Int64 = 15_000
        public var pullIntervalMs: Int64 = 5_000
        public var stopGraceMs: Int64 = 10_000
        public var connectTimeoutMs: Int64 = 5_000
        public var requestTimeoutMs: Int64 = 30_000
        public var maxResponseBytes: Int64 = 1_048_576
        /// Allows an `http://` url to a host that is not loopback: the registration and
        /// mesh tokens then cross the network in clear text.
        public var allowInsecureHttp = false
        /// Holds pulls after a heartbeat gap while the last hour holds claims, so that the
        /// coordinator's behaviour monitor sees the gap at most once; off for a
        /// coordinator that does not monitor.
        public var gapGuard = true
        public init() {}
    }
    public var coordinator = Coordinator()

    public enum BackendKind: String, Sendable, CaseIterable { case ollama, openai }
    public enum OpenAIEndpoint: String, Sendable, CaseIterable { case completions, chat }
    public struct Backend: Sendable, Equatable {
        public var kind: BackendKind = .ollama
        public var url: String = "http://127.0.0.1:11434"
        public var model: String = "qwen2.5-coder:1.5b"
        public var timeoutMs: Int64 = 120_000
        public var openaiEndpoint: OpenAIEndpoint = .completions
        public var maxOutputBytes: Int64 = 262_144
        /// Tokens generated for a coordinator subtask (Bluetooth requests carry their own).
        public var maxTokens: Int64 = 512
        /// Ollama's `think`, sent with every request: thinking models otherwise think by
        /// default and can spend `num_predict` on it, leaving no answer.
        public var think = false
        /// Ollama's `keep_alive`, sent with every request: a Go duration (`"30m"`) or
        /// seconds as a number (-1 keeps the model loaded for good).
        public var keepAlive: JSONValue = "30m"
        /// Sent as `Authorization: Bearer`; else the systemd credential `backend-api-key`.
        /// Never logged, never in status.
        public var apiKey: String?
        /// Whether the coordinator may make this worker pull and switch models (protocol-coordinator §7);
        /// the default of the per-host policy key `allowRemoteModelSwitch`.
        public var allowRemoteModelSwitch = false
        /// Registry hosts (lowercased, `host` or `host:port`) a coordinator's model switch
        /// may name; by default a name that carries a registry host is refused.
        public var allowedModelRegistries: [String] = []
        /// Allows `apiKey` with an `http://` url to a host that is not loopback: the key
        /// then crosses the network in clear text.
        public var allowInsecureHttp = false
        public init() {}
    }
    public var backend = Backend()

    public var policy = PowerPolicy()
    /// The policy keys the config file sets (for `policy show`'s sources).
    public var policyKeysInFile: Set<String> = []

    /// What to do on a metered connection (NetworkManager's `Metered`, service §2).
    public enum MeteredAction: String, Sendable, CaseIterable { case hold, allow }
    public struct Network: Sendable, Equatable {
        public var pathLossGraceMs: Int64 = 1_500
        /// `hold`: no pulls while the primary connection is metered; `allow`: pull anyway.
        public var onMetered: MeteredAction = .hold
        public init() {}
    }
    public var network = Network()

    public struct Bluetooth: Sendable, Equatable {
        public var adapter: String?
        public var maxRequestBytes: Int64 = 65_536
        public var maxQueuedRequests: Int64 = 8
        /// The pause between two notifications. Not 0 (refused): bluetoothd 5.66 spreads
        /// back-to-back notifications over its parallel ATT bearers (EATT) and clients
        /// get them out of order (docs/operating/bluetooth.md, "Pacing").
        public var chunkPacingMs: Int64 = 10
        /// Whether `chunkPacingMs` is paid per chunk or per 512 bytes (docs/operating/bluetooth.md, "Pacing").
        public var pacing: BluetoothPacingMode = .auto
        public var maxClients: Int64 = 1
        /// The most tokens a Bluetooth request may ask for; nil: `backend.maxTokens`.
        public var maxTokens: Int64?
        /// What link the characteristics require (protocol-bluetooth §3).
        public var security: BluetoothSecurity = .open
        /// Who answers Just Works pairings while `security` is `encrypted` (PairingAgentChoice).
        public var pairingAgent: BluetoothPairingAgentSetting = .auto
        /// Which devices may become clients (protocol-bluetooth §3).
        public var allowedClients: BluetoothAllowedClients = .any
        /// A client this long without a request loses its slot to a device that wants it.
        public var clientIdleSec: Int64 = 120
        public init() {}
    }
    public var bluetooth = Bluetooth()

    /// Code subtasks: whether their programs run, and in what (docs/operating/sandbox.md).
    public struct Execution: Sendable, Equatable {
        public var mode: ExecutionMode = .auto
        /// The container engine's command: a name looked up on `PATH` or an absolute path.
        public var engine = "podman"
        /// Global arguments before `run` (`--runtime runc` where crun cannot run).
        public var engineArguments: [String] = []
        public var image = "localhost/edgecoder-sandbox:1"
        public var timeoutMs: Int64 = 4_000
        public init() {}

        /// Printable ASCII without spaces, at most 4 KiB: one word of the engine's command
        /// line, never split or quoted (the config's and the `sandbox` commands' check).
        public static func isWord(_ text: String) -> Bool {
            !text.isEmpty && text.utf8.count <= 4_096 && text.unicodeScalars.allSatisfy { $0.value > 0x20 && $0.value < 0x7F }
        }
    }
    public var execution = Execution()

    public struct Hooks: Sendable, Equatable {
        public var networkRestored: String?
        public var timeoutMs: Int64 = 10_000
        public init() {}
    }
    public var hooks = Hooks()

    /// The device types an operator may name in `telemetry.deviceType`.
    public enum ConfiguredDeviceType: String, Sendable, CaseIterable {
        case desktop, laptop, server
        public var deviceType: DeviceType {
            switch self {
            case .desktop: return .desktop
            case .laptop: return .laptop
            case .server: return .server
            }
        }
    }
    public struct Telemetry: Sendable, Equatable {
        /// Replaces the `deviceType` the host's chassis and virtualization give (the
        /// coordinator never limits a `server`); nil: what the host says.
        public var deviceType: ConfiguredDeviceType?
        public init() {}
    }
    public var telemetry = Telemetry()

    public struct Control: Sendable, Equatable {
        /// Members of this group may read status and events over the control socket.
        public var readGroup: String = "edgecoder"
        public init() {}
    }
    public var control = Control()

    public struct Log: Sendable, Equatable {
        public var level: LogLevelName = .info
        public init() {}
    }
    public var log = Log()

    public init() {}
}

/// The names of log levels as written in the config file.
public enum LogLevelName: String, Sendable, CaseIterable {
    case debug, info, notice, warning, error
}

/// The host power policy of modes-and-power §3.2. Defaults here, overridable in the config file
/// and per host with `policy set`.
public struct PowerPolicy: Sendable, Equatable {
    public var runOnlyWhileCharging = false
    public var minBatteryPct: Int64 = 20
    public var resumeBatteryPct: Int64 = 30
    public var holdWhileDraining = true
    public var pauseOnLowPowerMode = true
    public var maxThermalState: ThermalState = .fair
    public var maxCpuUsagePct: Int64 = 90
    public var resumeDwellSec: Int64 = 30
    /// Whether the coordinator may make this host pull and switch models: it downloads
    /// gigabytes, so a host can refuse what the fleet's config allows (docs/reference/model-backends.md).
    public var allowRemoteModelSwitch = false
    public init() {}
}

/// Thermal states, ordered from coolest to hottest.
public enum ThermalState: String, Sendable, CaseIterable, Comparable {
    case nominal, fair, serious, critical
    var rank: Int { ThermalState.allCases.firstIndex(of: self)! }
    public static func < (a: ThermalState, b: ThermalState) -> Bool { a.rank < b.rank }
}

/// One problem in a config file: the key's dotted path and what is wrong with it.
public struct ConfigProblem: Error, Sendable, Equatable, CustomStringConvertible {
    public var path: String
    public var message: String
    public init(path: String, message: String) {
        self.path = path
        self.message = message
    }
    public var description: String { path.isEmpty ? message : "\(path): \(message)" }
}

/// A config file that cannot be used, with every problem found (not just the first),
/// so an operator fixes the file in one pass.
public struct ConfigError: Error, Sendable, Equatable, CustomStringConvertible {
    public var problems: [ConfigProblem]
    public init(_ problems: [ConfigProblem]) { self.problems = problems }
    public var description: String { problems.map(\.description).joined(separator: "\n") }
}

extension WorkerConfig {
    /// Larger files are not configs; refusing them early keeps a mistake (a log file
    /// passed as --config) from costing memory.
    public static let maxFileBytes = 1_048_576

    /// Parses and validates config bytes. Empty or whitespace-only text is an error:
    /// an operator who wrote an empty file probably lost its content.
    public static func parse(_ bytes: [UInt8]) throws(ConfigError) -> WorkerConfig {
        if bytes.count > maxFileBytes {
            throw ConfigError([ConfigProblem(path: "", message: "the file is \(bytes.count) bytes; a config is at most \(maxFileBytes) bytes")])
        }
        let value: JSONValue
        do {
            value = try JSON.parse(bytes)
        } catch {
            throw ConfigError([ConfigProblem(path: "", message: "not valid JSON: \(error)")])
        }
        return try decode(value)
    }

    public static func decode(_ value: JSONValue) throws(ConfigError) -> WorkerConfig {
        var reader = ConfigReader()
        var config = WorkerConfig()
        guard let root = reader.object(value, path: "") else { throw ConfigError(reader.problems) }
        reader.members(of: root, path: "") { reader, key, value, path in
            if let row = ConfigKey.byPath[key], row.section == nil { return row.read(&reader, value, path, &config) }
            guard ConfigKey.sections.contains(key) else { return reader.unknown(path) }
            guard let object = reader.object(value, path: path) else { return }
            reader.members(of: object, path: path) { reader, _, value, path in
                if let row = ConfigKey.byPath[path] { return row.read(&reader, value, path, &config) }
                // Its config key is backend.allowRemoteModelSwitch; one place to set it.
                if path == "policy.allowRemoteModelSwitch" {
                    return reader.problem(
                        path, "set backend.allowRemoteModelSwitch in the config (policy set allowRemoteModelSwitch overrides it per host)")
                }
                reader.unknown(path)
            }
            checkAcrossKeys(of: key, &reader, config)
        }
        if !reader.problems.isEmpty { throw ConfigError(reader.problems) }
        return config
    }

    /// The checks that need more than one key of a section, once the section is read.
    static func checkAcrossKeys(of section: String, _ reader: inout ConfigReader, _ config: WorkerConfig) {
        switch section {
        case "coordinator":
            if let url = config.coordinator.url, !config.coordinator.allowInsecureHttp, let problem = HTTPURL.cleartextProblem(url) {
                reader.problem("coordinator.url", problem)
            }
        case "backend":
            if config.backend.apiKey != nil, !config.backend.allowInsecureHttp,
                let problem = HTTPURL.cleartextProblem(config.backend.url, sending: "backend.apiKey", allowedBy: "backend.allowInsecureHttp")
            {
                reader.problem("backend.apiKey", problem)
            }
        case "policy":
            if config.policy.resumeBatteryPct < config.policy.minBatteryPct {
                reader.problem(
                    "policy.resumeBatteryPct",
                    "must be at least policy.minBatteryPct (\(config.policy.minBatteryPct)), got \(config.policy.resumeBatteryPct)")
            }
        default: break
        }
    }

    /// Go's `time.ParseDuration` syntax, which Ollama reads `keep_alive` strings with.
    public static func isGoDuration(_ text: String) -> Bool {
        var rest = Substring(text)
        if rest.first == "-" || rest.first == "+" { rest.removeFirst() }
        if rest == "0" { return true }
        guard !rest.isEmpty else { return false }
        let units = ["ns", "us", "µs", "ms", "s", "m", "h"]
        while !rest.isEmpty {
            let number = rest.prefix { $0.isASCII && ($0.isNumber || $0 == ".") }
            guard !number.isEmpty, number.filter({ $0 == "." }).count <= 1, number != "." else { return false }
            rest = rest.dropFirst(number.count)
            guard let unit = units.sorted(by: { $0.count > $1.count }).first(where: { rest.hasPrefix($0) }) else { return false }
            rest = rest.dropFirst(unit.count)
        }
        return true
    }

    public static func isAdapterName(_ name: String) -> Bool {
        guard name.hasPrefix("hci"), name.count > 3, name.count <= 6 else { return false }
        return name.dropFirst(3).allSatisfy { $0.isASCII && $0.isNumber }
    }

    static func isPosixName(_ name: String) -> Bool {
        name.unicodeScalars.allSatisfy { $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "_" || $0 == "-") }
    }
}

/// A string shortened and stripped of control characters, safe to echo in an error.
public func printable(_ text: String, limit: Int = 80) -> String {
    var out = ""
    for scalar in text.unicodeScalars.prefix(limit) {
        out.unicodeScalars.append(scalar.value < 0x20 || scalar.value == 0x7F ? "?" : scalar)
    }
    if text.unicodeScalars.count > limit { out += "…" }
    return out
}

/// Reads JSON values against expectations and collects every problem with its path.
struct ConfigReader {
    var problems: [ConfigProblem] = []

    mutating func problem(_ path: String, _ message: String) {
        problems.append(ConfigProblem(path: path, message: message))
    }

    mutating func unknown(_ path: String) {
        problem(path, "unknown key (the keys: docs/reference/configuration.md, or man edgecoder-worker)")
    }

    mutating func object(_ value: JSONValue, path: String) -> JSONObject? {
        if case .object(let object) = value { return object }
        problem(path, "must be an object, got \(value.typeDescription)")
        return nil
    }

    mutating func members(of object: JSONObject, path: String, _ body: (inout ConfigReader, String, JSONValue, String) -> Void) {
        for member in object.members {
            let childPath = path.isEmpty ? member.key : "\(path).\(member.key)"
            body(&self, member.key, member.value, childPath)
        }
    }

    mutating func string(_ value: JSONValue, path: String, maxLength: Int = 256, nonEmpty: Bool = false) -> String? {
        guard case .string(let s) = value else {
            problem(path, "must be a string, got \(value.typeDescription)")
            return nil
        }
        if nonEmpty && s.isEmpty { problem(path, "must not be empty"); return nil }
        if s.utf8.count > maxLength { problem(path, "must be at most \(maxLength) bytes, got \(s.utf8.count)"); return nil }
        return s
    }

    mutating func bool(_ value: JSONValue, path: String) -> Bool? {
        if case .bool(let b) = value { return b }
        problem(path, "must be true or false, got \(value.typeDescription)")
        return nil
    }

    mutating func int(_ value: JSONValue, path: String, _ range: ClosedRange<Int64>) -> Int64? {
        guard let number = value.intValue else {
            if case .double = value {
                problem(path, "must be a whole number in \(range.lowerBound)…\(range.upperBound), got \(value.serialized)")
            } else {
                problem(path, "must be an integer, got \(value.typeDescription)")
            }
            return nil
        }
        guard range.contains(number) else {
            problem(path, "must be in \(range.lowerBound)…\(range.upperBound), got \(number)")
            return nil
        }
        return number
    }

    /// Ollama's `keep_alive`: a Go duration string (`"30m"`, `"1h30m"`, `"0"`, `"-1m"`) or
    /// a whole number of seconds (negative: keep loaded for good).
    mutating func keepAlive(_ value: JSONValue, path: String) -> JSONValue? {
        if case .int = value { return value }
        guard let text = string(value, path: path, maxLength: 32, nonEmpty: true) else { return nil }
        if WorkerConfig.isGoDuration(text) { return value }
        problem(path, "must be a duration like \"30m\", \"1h\" or \"0\", or a number of seconds (-1: forever), got \"\(printable(text))\"")
        return nil
    }

    /// `backend.allowedModelRegistries`: a list of registry hosts (`host` or `host:port`).
    mutating func registries(_ value: JSONValue, path: String) -> [String]? {
        guard case .array(let items) = value else {
            problem(path, "must be a list of registry hosts like [\"registry.example.com:5000\"], got \(value.typeDescription)")
            return nil
        }
        guard items.count <= 64 else { problem(path, "must list at most 64 hosts, got \(items.count)"); return nil }
        var hosts: [String] = []
        for (index, item) in items.enumerated() {
            guard let text = string(item, path: "\(path)[\(index)]", maxLength: 253, nonEmpty: true) else { return nil }
            guard ModelSwitchRequest.isRegistryHost(text) else {
                problem(
                    "\(path)[\(index)]",
                    "must be a registry host like \"registry.example.com\" or \"10.0.0.5:5000\" (no scheme, no path), got \"\(printable(text))\"")
                return nil
            }
            if !hosts.contains(text.lowercased()) { hosts.append(text.lowercased()) }
        }
        return hosts
    }

    /// A list of command-line words (`execution.engineArguments`).
    mutating func words(_ value: JSONValue, path: String, max: Int) -> [String]? {
        guard case .array(let items) = value else {
            problem(path, "must be a list of strings like [\"--runtime\", \"runc\"], got \(value.typeDescription)")
            return nil
        }
        guard items.count <= max else { problem(path, "must list at most \(max) arguments, got \(items.count)"); return nil }
        var words: [String] = []
        for (index, item) in items.enumerated() {
            guard let word = string(item, path: "\(path)[\(index)]", maxLength: 1024, nonEmpty: true) else { return nil }
            guard WorkerConfig.Execution.isWord(word) else {
                problem("\(path)[\(index)]", "must be printable ASCII without spaces, got \"\(printable(word))\"")
                return nil
            }
            words.append(word)
        }
        return words
    }

    /// `bluetooth.allowedClients`: `"any"`, `"bonded"` or a list of device addresses.
    mutating func allowedClients(_ value: JSONValue, path: String) -> BluetoothAllowedClients? {
        switch value {
        case .string(let s):
            if s == "any" { return .any }
            if s == "bonded" { return .bonded }
            problem(path, "must be \"any\", \"bonded\" or a list of addresses like [\"AA:BB:CC:DD:EE:FF\"], got \"\(printable(s))\"")
            return nil
        case .array(let items):
            guard !items.isEmpty else { problem(path, "must name at least one address (or be \"any\" or \"bonded\")"); return nil }
            guard items.count <= 256 else { problem(path, "must list at most 256 addresses, got \(items.count)"); return nil }
            var addresses: [String] = []
            for (index, item) in items.enumerated() {
                guard let text = string(item, path: "\(path)[\(index)]", maxLength: 64) else { return nil }
                guard let address = BluetoothAllowedClients.normalizedAddress(text) else {
                    problem("\(path)[\(index)]", "must be a Bluetooth address like \"AA:BB:CC:DD:EE:FF\", got \"\(printable(text))\"")
                    return nil
                }
                if !addresses.contains(address) { addresses.append(address) }
            }
            return .addresses(addresses)
        default:
            problem(path, "must be \"any\", \"bonded\" or a list of addresses, got \(value.typeDescription)")
            return nil
        }
    }

    mutating func choice<E: RawRepresentable & CaseIterable>(_ value: JSONValue, path: String, _: E.Type) -> E? where E.RawValue == String {
        guard let s = string(value, path: path) else { return nil }
        if let choice = E(rawValue: s) { return choice }
        problem(path, "must be one of \(E.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")), got \"\(printable(s))\"")
        return nil
    }

    mutating func url(_ value: JSONValue, path: String) -> String? {
        guard let s = string(value, path: path, maxLength: 2048, nonEmpty: true) else { return nil }
        if let problem = HTTPURL.validationProblem(s) {
            self.problem(path, problem)
            return nil
        }
        return s
    }
}

/// The checks an http(s) URL from the config must pass before libcurl ever sees it.
public enum HTTPURL {
    public static func validationProblem(_ text: String) -> String? {
        let lower = text.lowercased()
        let rest: Substring
        if lower.hasPrefix("https://") {
            rest = text.dropFirst(8)
        } else if lower.hasPrefix("http://") {
            rest = text.dropFirst(7)
        } else {
            return "must be an http:// or https:// URL, got \"\(printable(text))\""
        }
        if text.unicodeScalars.contains(where: { $0.value <= 0x20 || $0.value == 0x7F }) {
            return "must not contain spaces or control characters"
        }
        let authority = rest.prefix(while: { $0 != "/" && $0 != "?" && $0 != "#" })
        if authority.isEmpty { return "has no host: \"\(printable(text))\"" }
        if authority.contains("@") { return "must not carry credentials (user@host); use coordinator.registrationToken" }
        return nil
    }

    /// Why a coordinator URL would send the tokens in clear text: `http://` to a host
    /// that is not loopback. nil for https and for loopback (127.0.0.0/8, ::1, localhost).
    /// `sending` names the secret, `allowedBy` the key that accepts the risk.
    public static func cleartextProblem(
        _ text: String, sending secret: String = "the registration and mesh tokens",
        allowedBy key: String = "coordinator.allowInsecureHttp"
    ) -> String? {
        guard text.lowercased().hasPrefix("http://"), let host = host(of: text), !isLoopback(host) else { return nil }
        return "http:// to \(printable(host)) would send \(secret) unencrypted; use https://, "
            + "or set \(key) to true (only on a network you trust); plain http is allowed to loopback addresses"
    }

    /// The host of an http(s) URL, brackets kept off an IPv6 literal, port dropped.
    public static func host(of text: String) -> String? {
        guard let scheme = text.firstRange(of: "://") else { return nil }
        let authority = text[scheme.upperBound...].prefix(while: { $0 != "/" && $0 != "?" && $0 != "#" })
        let hostPort = authority.split(separator: "@", omittingEmptySubsequences: false).last ?? authority
        if hostPort.hasPrefix("[") {
            guard let close = hostPort.firstIndex(of: "]") else { return nil }
            return String(hostPort[hostPort.index(after: hostPort.startIndex)..<close])
        }
        let host = hostPort.prefix(while: { $0 != ":" })
        return host.isEmpty ? nil : String(host)
    }

    /// 127.0.0.0/8 written as four decimal parts, ::1 (and its IPv4-mapped 127 form), localhost.
    public static func isLoopback(_ host: String) -> Bool {
        var lower = host.lowercased()
        if lower.hasSuffix(".") { lower.removeLast() }
        if lower == "localhost" || lower == "::1" || lower == "0:0:0:0:0:0:0:1" { return true }
        if lower.hasPrefix("::ffff:") { lower.removeFirst(7) }
        let parts = lower.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return false }
        let octets = parts.compactMap { part -> Int? in
            guard !part.isEmpty, part.count <= 3, part.allSatisfy({ $0.isASCII && $0.isNumber }) else { return nil }
            return Int(part).flatMap { $0 <= 255 ? $0 : nil }
        }
        return octets.count == 4 && octets[0] == 127
    }
}

/// Agent ids travel in every coordinator call and in the Bluetooth name; they are
/// restricted to characters that are safe in both.
public enum AgentID {
    /// The longest agent id accepted.
    public static let maxBytes = 128

    public static func validationProblem(_ id: String) -> String? {
        if id.isEmpty { return "must not be empty" }
        if id.utf8.count > maxBytes { return "must be at most \(maxBytes) characters, got \(id.utf8.count)" }
        let ok = id.unicodeScalars.allSatisfy {
            $0.isASCII && ($0.properties.isAlphabetic || ("0"..."9").contains($0) || $0 == "-" || $0 == "_" || $0 == ".")
        }
        return ok ? nil : "may hold only letters, digits, '-', '_' and '.', got \"\(printable(id))\""
    }
}
