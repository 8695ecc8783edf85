/// One metric family of Prometheus' text exposition format: a name, its HELP and TYPE,
/// and its samples.
public struct MetricFamily: Sendable, Equatable {
    public enum Kind: String, Sendable { case counter, gauge }

    public struct Sample: Sendable, Equatable {
        /// Label names and values, in the order they are written.
        public var labels: [(name: String, value: String)]
        public var value: Double

        public init(_ labels: [(name: String, value: String)], _ value: Double) {
            self.labels = labels
            self.value = value
        }

        /// A sample without labels.
        public init(_ value: Double) {
            self.init([], value)
        }

        public static func == (a: Sample, b: Sample) -> Bool {
            a.value.bitPattern == b.value.bitPattern && a.labels.map(\.name) == b.labels.map(\.name)
                && a.labels.map(\.value) == b.labels.map(\.value)
        }
    }

    /// The samples' name: counters end in `_total`, as the 0.0.4 format writes them.
    public var name: String
    public var help: String
    public var kind: Kind
    /// Empty when the value is unknown now (no battery, no process): HELP and TYPE still
    /// say the family exists.
    public var samples: [Sample]

    public init(_ name: String, _ kind: Kind, _ help: String, _ samples: [Sample]) {
        self.name = name
        self.kind = kind
        self.help = help
        self.samples = samples
    }
}

/// Prometheus' text exposition format, version 0.0.4 (what node_exporter's textfile
/// collector and a scrape read).
public enum PrometheusText {
    public static let contentType = "text/plain; version=0.0.4; charset=utf-8"

    /// The families in order, each as `# HELP`, `# TYPE` and its sample lines; ends in a newline.
    public static func render(_ families: [MetricFamily]) -> String {
        var text = ""
        for family in families {
            text += "# HELP \(family.name) \(escapeHelp(family.help))\n"
            text += "# TYPE \(family.name) \(family.kind.rawValue)\n"
            for sample in family.samples {
                text += family.name
                if !sample.labels.isEmpty {
                    text += "{" + sample.labels.map { "\($0.name)=\"\(escapeLabelValue($0.value))\"" }.joined(separator: ",") + "}"
                }
                text += " \(formatValue(sample.value))\n"
            }
        }
        return text
    }

    /// A label value between double quotes: backslash, double quote and line feed escaped.
    public static func escapeLabelValue(_ value: String) -> String { escape(value, quote: true) }

    /// HELP text: backslash and line feed escaped (a double quote stays as it is there).
    public static func escapeHelp(_ text: String) -> String { escape(text, quote: false) }

    private static func escape(_ text: String, quote: Bool) -> String {
        var out = ""
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\\": out += "\\\\"
            case "\"" where quote: out += "\\\""
            case "\n": out += "\\n"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out
    }

    /// Integers without a fraction (what a counter of events is), `NaN`, `+Inf`, `-Inf`.
    public static func formatValue(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded() && abs(value) < 9.0e15 { return String(Int64(value)) }
        return "\(value)"
    }

    /// `[a-zA-Z_:][a-zA-Z0-9_:]*`: the names Prometheus accepts for a metric.
    public static func isValidMetricName(_ name: String) -> Bool {
        isValidName(name, colons: true)
    }

    /// `[a-zA-Z_][a-zA-Z0-9_]*`, not starting with `__` (reserved for Prometheus itself).
    public static func isValidLabelName(_ name: String) -> Bool {
        isValidName(name, colons: false) && !name.hasPrefix("__")
    }

    private static func isValidName(_ name: String, colons: Bool) -> Bool {
        guard let first = name.utf8.first else { return false }
        func letter(_ b: UInt8) -> Bool { (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x5F || (colons && b == 0x3A) }
        return letter(first) && name.utf8.allSatisfy { letter($0) || ($0 >= 0x30 && $0 <= 0x39) }
    }
}

/// The daemon's own process as `/proc/PID` shows it, for the process families.
public struct ProcessUsage: Sendable, Equatable {
    public var residentBytes: Int64
    public var cpuSeconds: Double

    public init(residentBytes: Int64, cpuSeconds: Double) {
        self.residentBytes = residentBytes
        self.cpuSeconds = cpuSeconds
    }

    /// From `/proc/PID/stat` (utime + stime in ticks), `/proc/PID/statm` (resident pages
    /// second), the clock tick rate and the page size; nil when either file is unusable.
    public static func parse(stat: [UInt8], statm: [UInt8], ticksPerSecond: Int64, pageBytes: Int64) -> ProcessUsage? {
        guard ticksPerSecond > 0, pageBytes > 0, statm.count <= 4_096,
            let sample = ProcessSample.parse(stat: stat)
        else { return nil }
        let fields = statm.split(whereSeparator: { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\n") })
        guard fields.count >= 2, fields[1].count <= 18, !fields[1].isEmpty,
            fields[1].allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
            let pages = Int64(String(decoding: fields[1], as: UTF8.self))
        else { return nil }
        let (bytes, overflow) = pages.multipliedReportingOverflow(by: pageBytes)
        return ProcessUsage(residentBytes: overflow ? Int64.max : bytes, cpuSeconds: Double(sample.ticks) / Double(ticksPerSecond))
    }
}

/// `edgecoder-worker metrics`: the families made from `status --json` (the daemon's answer
/// over the control socket) and the daemon's process usage. Pure: a value missing from an
/// older or broken answer gives zero for a counter and no sample for a gauge.
public enum WorkerMetrics {
    public static let prefix = "edgecoder_worker_"
    /// The model states `status` reports (`idle` before the first probe).
    public static let modelStates = ["idle", "ready", "loading", "unavailable", "unauthorized"]

    public static func families(status: JSONValue, process: ProcessUsage?) -> [MetricFamily] {
        let counters = status["counters"]
        let coordinator = status["coordinator"]
        let bluetooth = status["bluetooth"]
        let power = status["power"]
        func count(_ value: JSONValue?) -> Double { Double(max(0, value?.intValue ?? 0)) }
        func counter(_ name: String, _ help: String, _ value: JSONValue?) -> MetricFamily {
            MetricFamily(prefix + name + "_total", .counter, help, [.init(count(value))])
        }
        /// Every known label value (zero included, so a rate() has a series from the
        /// start), then any the daemon reported that this client does not know.
        func byReason(_ name: String, _ help: String, _ object: JSONValue?, known: [String]) -> MetricFamily {
            let reported = object?.objectValue?.keys ?? []
            let reasons = known + reported.filter { !known.contains($0) }
            return MetricFamily(
                prefix + name + "_total", .counter, help,
                reasons.map { .init([("reason", $0)], count(object?[$0])) })
        }
        /// The enum pattern: one sample per state, 1 for the current one.
        func states(_ name: String, _ label: String, _ help: String, _ current: String?, known: [String]) -> MetricFamily {
            let all = known + (current.map { known.contains($0) ? [] : [$0] } ?? [])
            return MetricFamily(prefix + name, .gauge, help, all.map { .init([(label, $0)], $0 == current ? 1 : 0) })
        }
        let decision = power?["decision"]?["reason"]?.stringValue
        let battery = power?["telemetry"]?["batteryPct"]?.doubleValue
        let backoffMs = coordinator?["backoffMs"]?.doubleValue ?? 0
        let version = status["daemon"]?["version"]?.stringValue

        return [
            MetricFamily(
                prefix + "info", .gauge, "The daemon's version and agent id; the value is always 1.",
                version.map { [.init([("version", $0), ("agent_id", status["agentId"]?.stringValue ?? "")], 1)] } ?? []),
            MetricFamily(
                prefix + "uptime_seconds", .gauge, "Seconds since the daemon started.",
                status["daemon"]?["uptimeMs"]?.doubleValue.map { [.init(max(0, $0) / 1000)] } ?? []),
            counter("subtasks_done", "Subtasks answered successfully to the coordinator since the daemon started.", counters?["subtasksDone"]),
            counter("subtasks_failed", "Subtasks answered as failed to the coordinator since the daemon started.", counters?["subtasksFailed"]),
            byReason(
                "subtasks_released", "Claimed subtasks given back to the coordinator unanswered since the daemon started, by reason.",
                counters?["subtasksReleased"], known: SubtaskReleaseReason.allCases.map(\.rawValue)),
            byReason(
                "pulls_held", "Pulls of new work held since the daemon started, by reason (power policy and local reasons).",
                power?["held"], known: HoldReason.allCases.map(\.rawValue) + LocalHoldReason.allCases.map(\.rawValue)),
            counter("heartbeats_sent", "Heartbeats sent to the coordinator since the daemon started.", counters?["heartbeatsSent"]),
            counter("heartbeats_failed", "Heartbeats the coordinator did not take since the daemon started.", counters?["heartbeatsFailed"]),
            MetricFamily(
                prefix + "coordinator_backoff_seconds", .gauge, "Seconds the coordinator loop waits after failed calls; 0 when not backing off.",
                [.init(max(0, backoffMs) / 1000)]),
            MetricFamily(
                prefix + "coordinator_registered", .gauge, "1 when the worker is registered with the coordinator (mode on), else 0.",
                [.init(coordinator?["registered"]?.boolValue == true ? 1 : 0)]),
            counter(
                "bluetooth_requests_served", "Bluetooth requests answered successfully since mode bluetooth last started.",
                bluetooth?["requestsServed"]),
            counter(
                "bluetooth_requests_failed", "Bluetooth requests that failed or stopped since mode bluetooth last started.",
                bluetooth?["requestsFailed"]),
            counter(
                "bluetooth_requests_refused", "Bluetooth requests refused as bad input since mode bluetooth last started.",
                bluetooth?["requestsRejected"]),
            counter(
                "bluetooth_requests_cancelled", "Bluetooth requests their client cancelled since mode bluetooth last started.",
                bluetooth?["requestsCancelled"]),
            counter(
                "bluetooth_notified_bytes", "Bytes notified to Bluetooth clients since mode bluetooth last started.", bluetooth?["bytesNotified"]),
            MetricFamily(
                prefix + "bluetooth_clients_refused_total", .counter,
                "Bluetooth clients refused since mode bluetooth last started: full (bluetooth.maxClients) or not-allowed (bluetooth.allowedClients).",
                [
                    .init([("reason", "full")], count(bluetooth?["clientsRefused"])),
                    .init([("reason", "not-allowed")], count(bluetooth?["clientsNotAllowed"])),
                ]),
            counter(
                "bluetooth_clients_cooled_down", "Bluetooth clients cut off for too much bad input since mode bluetooth last started.",
                bluetooth?["clientsCooledDown"]),
            states(
                "mode", "mode", "The selected mode: 1 for the current one.", status["mode"]?["mode"]?.stringValue,
                known: Mode.allCases.map(\.rawValue)),
            states(
                "power_decision", "reason", "The power policy's decision: 1 for ok (work allowed) or for the reason work is held.",
                decision, known: ["ok"] + HoldReason.allCases.map(\.rawValue)),
            MetricFamily(
                prefix + "battery_percent", .gauge, "The battery's charge in percent; absent when the host reports no battery.",
                battery.map { [.init($0)] } ?? []),
            states(
                "model_state", "state", "The model server's state at the last probe: 1 for the current one.",
                status["backend"]?["modelState"]?.stringValue, known: modelStates),
            MetricFamily(
                prefix + "process_resident_memory_bytes", .gauge, "The daemon's resident memory in bytes.",
                process.map { [.init(Double($0.residentBytes))] } ?? []),
            MetricFamily(
                prefix + "process_cpu_seconds_total", .counter, "CPU time the daemon used (user and system) since it started, in seconds.",
                process.map { [.init($0.cpuSeconds)] } ?? []),
        ]
    }
}
