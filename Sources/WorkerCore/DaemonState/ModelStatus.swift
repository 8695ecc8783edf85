/// The model backend as the daemon knows it: what the readiness probe last saw, the size
/// it gave, and a coordinator's switch. `status`, heartbeats and the Bluetooth status
/// characteristic read it; the probe and the model switch write it.
public struct ModelStatus: Sendable, Equatable {
    /// One answer of the readiness probe (`ready`, `idle`, `unavailable`, …), with when (wall clock).
    public struct Probe: Sendable, Equatable {
        public var state: String
        public var detail: String
        public var atMs: Int64

        public init(state: String, detail: String, atMs: Int64) {
            self.state = state
            self.detail = detail
            self.atMs = atMs
        }
    }

    /// A model's size in billions of parameters, for the model the backend gave it for.
    public struct ParameterSize: Sendable, Equatable {
        public var model: String
        public var billions: Double

        public init(model: String, billions: Double) {
            self.model = model
            self.billions = billions
        }
    }

    /// The probe's last answer; nil until it has answered once.
    public var probe: Probe?
    /// The model's size as the backend's probe last gave it.
    public var parameterSize: ParameterSize?
    /// A coordinator's model switch that still applies (protocol-coordinator §7); nil: the config's model.
    public var switched: ActiveModel?
    /// The switch in progress, or the last one's outcome.
    public var switchStatus: ModelSwitchStatus?

    public init(switched: ActiveModel? = nil) {
        self.switched = switched
    }

    /// The model every generation and probe uses: the config's (`configured`), or the one
    /// a coordinator switched to (persisted; the heartbeat's `activeModel`).
    public func active(configured: String) -> String { switched?.model ?? configured }

    /// The active model's size in billions of parameters, when the backend said (cached
    /// from its readiness probe, so heartbeats cost the server nothing); nil after a switch
    /// until the new model is probed.
    public func activeParameterSize(configured: String) -> Double? {
        guard let parameterSize, parameterSize.model == active(configured: configured) else { return nil }
        return parameterSize.billions
    }

    /// Whether the probe's last answer was `ready`.
    public var isReady: Bool { probe?.state == "ready" }

    /// The model backend's readiness as the probe last saw it: nil when ready, else why not
    /// and whether the probe has looked since a working mode began (`idle` until then).
    public var notReady: (why: String, probed: Bool)? {
        guard let probe else { return ("not probed yet", false) }
        if isReady { return nil }
        return ("\(probe.state): \(probe.detail)", probe.state != "idle")
    }
}
