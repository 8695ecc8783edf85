/// The kinds of events an operator reads in `edgecoder-worker events` (modes-and-power §2.5, service §1).
/// Their raw values are the stable names in the JSON output.
public enum EventKind: String, Sendable, CaseIterable {
    case modeChange = "mode-change"
    case modeRefused = "mode-refused"
    case downgrade
    case networkRestored = "network-restored"
    case hookRan = "hook-ran"
    case stateRecovered = "state-recovered"
    case daemonStarted = "daemon-started"
    case daemonStopped = "daemon-stopped"
    case policyChanged = "policy-changed"
    case powerHold = "power-hold"
    case powerResume = "power-resume"
    /// The coordinator switched the model (protocol-coordinator §7).
    case modelSwitched = "model-switched"
    /// A reload (SIGHUP, `systemctl reload`) applied a config file (service §2).
    case configReloaded = "config-reloaded"
    /// A reload refused an invalid config file; the running one is kept.
    case configRefused = "config-refused"
    /// Pulls in mode on stopped for a local reason of the worker's own (the model backend
    /// not ready, the circuit breaker, a heartbeat gap, the coordinator's sandboxRequired).
    case workHeld = "work-held"
    /// Pulls in mode on resumed after such a hold.
    case workResumed = "work-resumed"
    /// How code subtasks are answered changed (a container engine found or lost).
    case executionChanged = "execution-changed"
}

/// An event before the log numbers and times it.
public struct EventDraft: Sendable, Equatable {
    public var kind: EventKind
    public var from: Mode?
    public var to: Mode?
    public var reason: String
    public init(kind: EventKind, from: Mode? = nil, to: Mode? = nil, reason: String) {
        self.kind = kind
        self.from = from
        self.to = to
        self.reason = reason
    }
}

/// One recorded event.
public struct WorkerEvent: Sendable, Equatable {
    /// Increases by one per event over the life of the state directory.
    public var seq: Int64
    public var timeMs: Int64
    public var kind: EventKind
    public var from: Mode?
    public var to: Mode?
    public var reason: String

    public var json: JSONValue {
        var object = JSONObject([
            ("seq", .int(seq)), ("timeMs", .int(timeMs)), ("time", .string(formatUTC(milliseconds: timeMs))), ("kind", .string(kind.rawValue)),
        ])
        if let from { object["from"] = .string(from.rawValue) }
        if let to { object["to"] = .string(to.rawValue) }
        object["reason"] = .string(reason)
        return .object(object)
    }

    public static func from(json value: JSONValue) -> WorkerEvent? {
        guard let seq = value["seq"]?.intValue, let time = value["timeMs"]?.intValue,
            let kind = value["kind"]?.stringValue.flatMap(EventKind.init(rawValue:)),
            let reason = value["reason"]?.stringValue
        else { return nil }
        return WorkerEvent(
            seq: seq, timeMs: time, kind: kind,
            from: value["from"]?.stringValue.flatMap(Mode.init(rawValue:)),
            to: value["to"]?.stringValue.flatMap(Mode.init(rawValue:)), reason: reason)
    }

    /// One line for people: time, kind, transition, reason.
    public var line: String {
        var text = "\(formatUTC(milliseconds: timeMs))  \(kind.rawValue)"
        if let from, let to, from != to { text += "  \(from.rawValue) -> \(to.rawValue)" } else if let to { text += "  \(to.rawValue)" }
        return text + "  " + reason
    }
}

/// The bounded event log: the newest `capacity` events, oldest first.
public struct EventLog: Sendable, Equatable {
    public static let defaultCapacity = 1_000
    public let capacity: Int
    public private(set) var events: [WorkerEvent] = []
    public private(set) var nextSeq: Int64

    public init(capacity: Int = EventLog.defaultCapacity, events: [WorkerEvent] = [], nextSeq: Int64 = 1) {
        self.capacity = max(1, capacity)
        self.events = Array(events.suffix(self.capacity))
        self.nextSeq = max(nextSeq, (events.last?.seq ?? 0) + 1)
    }

    @discardableResult
    public mutating func append(_ draft: EventDraft, timeMs: Int64) -> WorkerEvent {
        let event = WorkerEvent(seq: nextSeq, timeMs: timeMs, kind: draft.kind, from: draft.from, to: draft.to, reason: draft.reason)
        nextSeq += 1
        events.append(event)
        if events.count > capacity { events.removeFirst(events.count - capacity) }
        return event
    }

    /// Events with a sequence number above `seq`.
    public func after(_ seq: Int64) -> ArraySlice<WorkerEvent> {
        let start = events.firstIndex(where: { $0.seq > seq }) ?? events.endIndex
        return events[start...]
    }

    public var json: JSONValue {
        ["nextSeq": .int(nextSeq), "events": .array(events.map(\.json))]
    }

    /// Restores a log from its file. Unreadable entries make the whole file suspect,
    /// so the caller quarantines it instead of silently dropping lines.
    public static func from(json value: JSONValue, capacity: Int = EventLog.defaultCapacity) -> EventLog? {
        guard let next = value["nextSeq"]?.intValue, let array = value["events"]?.arrayValue else { return nil }
        var events: [WorkerEvent] = []
        events.reserveCapacity(array.count)
        for item in array {
            guard let event = WorkerEvent.from(json: item) else { return nil }
            events.append(event)
        }
        return EventLog(capacity: capacity, events: events, nextSeq: next)
    }
}
