/// A machine's phase as one line, remembered so that its adapter logs each change once at
/// debug level (`log.level debug`): how a session went, step by step, without a line per
/// event. Pure: the adapter owns it and logs what `changed` returns.
public struct PhaseTrace: Sendable {
    private var last = ""

    public init() {}

    /// `line` when it differs from the one seen before, else nil.
    public mutating func changed(to line: String) -> String? {
        guard line != last else { return nil }
        last = line
        return line
    }
}

extension PeripheralMachine {
    /// Where registration, the pairing agent and the request queue stand, and how many
    /// clients are served (no addresses: the trace may be shared).
    public var phaseLine: String {
        "registration \(registrar.phaseLine), agent \(pairingAgent.registration), request \(requests.phaseLine), clients \(clientTable.sessions.count)"
    }
}

extension PeripheralRegistrar {
    var phaseLine: String {
        switch link {
        case .unbound: "unbound"
        case .bound(let path, let application, let advertisement): "\(path) (application \(application), advertisement \(advertisement))"
        }
    }
}

extension PeripheralRequestQueue {
    var phaseLine: String {
        switch current {
        case .idle: "idle, \(waiting.count) waiting"
        case .running(let item, _): "#\(item.ticket) running, \(waiting.count) waiting"
        case .stopping(let item, let why): "#\(item.ticket) stopping (\(why)), \(waiting.count) waiting"
        }
    }
}

extension CentralMachine {
    /// The link to the worker and how many requests wait for an answer (no addresses).
    public var phaseLine: String { "link \(link.phase), \(requests.pending.count) pending" }
}
