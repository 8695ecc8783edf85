import WorkerCore

/// What the state directory held at start. A file that could not be used was moved aside
/// and is listed in `recovered` (in the order the files were read); its value starts
/// from the default.
public struct RestoredWorkerState: Sendable {
    public var mode: ModeState
    public var events: EventLog
    public var policy: PolicyOverrides
    /// Tasks that were running when the daemon stopped are marked interrupted.
    public var tasks: TaskHistory
    /// The coordinator's model switch as persisted; whether it still applies is the config's to say.
    public var activeModel: ActiveModel?
    public var conduct: CoordinatorConduct
    /// The configured agent id, else the persisted one, else a new one to persist.
    public var agentID: String
    public var recovered: [RecoveredStateFile]
}

extension WorkerStateFiles {
    /// Reads every state file the daemon keeps (service §1.3): anything that cannot be read
    /// is moved aside and reported, never fatal. The agent id file is read only when the
    /// config sets none (`configuredAgentID`); without a usable one `deriveAgentID` makes one.
    public func restore(nowMs now: Int64, configuredAgentID: String?, deriveAgentID: () -> String) -> RestoredWorkerState {
        var recovered: [RecoveredStateFile] = []
        let events = loadOrRecover(WorkerStateFiles.eventsFile, nowMs: now, into: &recovered) { EventLog.from(json: $0) }

        var mode: ModeState
        switch loadJSON(WorkerStateFiles.modeFile, nowMs: now, decode: { ModeState.from(json: $0) }) {
        case .absent: mode = .fresh(nowMs: now)
        case .loaded(let loaded): mode = loaded
        case .recovered(let file):
            mode = ModeState(mode: .off, sinceMs: now, reason: "mode file was unreadable and moved aside; starting in off")
            recovered.append(file)
        }

        let policy = loadOrRecover(WorkerStateFiles.policyFile, nowMs: now, into: &recovered) { PolicyOverrides.from(json: $0) }

        var tasks = loadOrRecover(WorkerStateFiles.tasksFile, nowMs: now, into: &recovered) { TaskHistory.from(json: $0) } ?? TaskHistory()
        tasks.markRunningInterrupted(atMs: now)
        // Whole-text files of tasks the history no longer keeps (a stop between the two writes).
        let keptTexts = tasks.textFileNames
        for name in directory.names() where TaskText.isFileName(name) && !keptTexts.contains(name) {
            try? directory.remove(name)
        }

        let activeModel = loadOrRecover(WorkerStateFiles.activeModelFile, nowMs: now, into: &recovered) { ActiveModel.from(json: $0) }
        let conduct = loadOrRecover(WorkerStateFiles.conductFile, nowMs: now, into: &recovered) { CoordinatorConduct.from(json: $0) }

        let agentID: String
        if let configuredAgentID {
            agentID = configuredAgentID
        } else {
            switch loadAgentID(nowMs: now) {
            case .loaded(let id): agentID = id
            case .absent: agentID = deriveAgentID()
            case .recovered(let file): agentID = deriveAgentID(); recovered.append(file)
            }
        }

        return RestoredWorkerState(
            mode: mode, events: events ?? EventLog(), policy: policy ?? PolicyOverrides(), tasks: tasks, activeModel: activeModel,
            conduct: conduct ?? CoordinatorConduct(), agentID: agentID, recovered: recovered)
    }

    /// `loadJSON`'s value; nil when the file is absent or was moved aside (then added to `recovered`).
    private func loadOrRecover<T: Sendable>(
        _ name: String, nowMs: Int64, into recovered: inout [RecoveredStateFile], decode: (JSONValue) -> T?
    ) -> T? {
        switch loadJSON(name, nowMs: nowMs, decode: decode) {
        case .absent: return nil
        case .loaded(let value): return value
        case .recovered(let file):
            recovered.append(file)
            return nil
        }
    }
}
