import Logging
import StateStore
import WorkerCore

/// The model backend: the probe's view of it, and a coordinator's switch of the model.
extension WorkerState {
    /// The model every generation and probe uses: the config's, or the one a coordinator
    /// switched to (persisted; the heartbeat's `activeModel`).
    public var activeModel: String { model.active(configured: config.backend.model) }

    /// Whether the remote model switch is allowed on this host (policy over config).
    public var allowsRemoteModelSwitch: Bool { effectivePolicy.policy.allowRemoteModelSwitch }

    /// A switch's progress, for status and heartbeats.
    public func updateModelSwitch(_ status: ModelSwitchStatus?) {
        model.switchStatus = status
        updateServiceStatus()
    }

    /// Switches the model every later generation uses; returns once the choice is durable
    /// (it survives restarts). Switching back to the config's model forgets the switch.
    public func switchModel(to name: String, rolloutID: String?) async {
        let previous = activeModel
        let next: ActiveModel? =
            name == config.backend.model
            ? nil : ActiveModel(model: name, switchedFrom: config.backend.model, switchedAtMs: clock.wallMs(), rolloutID: rolloutID)
        model.switched = next
        record(
            EventDraft(
                kind: .modelSwitched, reason: "model \(previous) -> \(name) at the coordinator's request\(rolloutID.map { " (rollout \($0))" } ?? "")"
            ))
        logger.notice(
            "model switched from \(previous) to \(name) at the coordinator's request", [("event", EventKind.modelSwitched.rawValue), ("model", name)])
        updateServiceStatus()
        if let next {
            await persistDurably(WorkerStateFiles.activeModelFile, WorkerStateFiles.activeModelBytes(next))
        } else {
            try? await writer.remove(WorkerStateFiles.activeModelFile)
        }
    }

    public func updateModel(state: String, detail: String) {
        model.probe = ModelStatus.Probe(state: state, detail: detail, atMs: clock.wallMs())
        signals.modelReady.set(model.isReady)
    }

    public func updateModelParameterSize(_ billions: Double, model name: String) {
        model.parameterSize = ModelStatus.ParameterSize(model: name, billions: billions)
    }

    /// The heartbeat's `activeModelParamSize` (`ModelStatus.activeParameterSize`).
    public var activeModelParamSize: Double? { model.activeParameterSize(configured: config.backend.model) }

    /// The model backend's readiness as the probe last saw it: nil when ready, else why not
    /// and whether the probe has looked since a working mode began (`idle` until then).
    public var modelNotReady: (why: String, probed: Bool)? { model.notReady }

    /// Whether a task is running on the model now. llama.cpp's server does not answer
    /// its readiness probe while it generates, so the probe waits instead of reporting
    /// `unavailable` to the very clients being served.
    public var isGenerating: Bool { tasks.records.contains { $0.state == .running } }
}
