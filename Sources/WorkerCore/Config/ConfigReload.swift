/// What a reload (SIGHUP, `systemctl reload`) does with a new config file: the keys the
/// running daemon can take at once, and the ones that wait for a restart because taking
/// them live would drop a running subtask, a Bluetooth client or an open socket.
public struct ConfigReloadPlan: Sendable, Equatable {
    /// The config to run with from now on: the running one with the live keys of the file.
    public var applied: WorkerConfig
    /// Keys whose new value applies now.
    public var appliedKeys: [String]
    /// Whether the Bluetooth session must start again to apply them.
    public var restartsBluetooth: Bool { appliedKeys.contains(where: Self.restartingBluetooth.contains) }
    /// Keys whose value in the file differs from the running one and needs a restart.
    public var restartKeys: [String]

    /// Keys (dotted paths) a reload takes at once (the key table's `reload`). Every other
    /// key is read once, when the part that uses it starts.
    public static let liveKeys = Set(ConfigKey.all.filter { $0.reload == .live || $0.reload == .restartsBluetooth }.map(\.path))

    /// Live keys that start the Bluetooth session again (its clients are disconnected).
    public static let restartingBluetooth = Set(ConfigKey.all.filter { $0.reload == .restartsBluetooth }.map(\.path))

    /// Compares the running config with the file's. Pure: the daemon applies `applied`.
    /// Keys read when mode `on`'s runtime starts are live while it is stopped (so that
    /// `enroll` can point a daemon at a coordinator with a reload), waiting for a restart
    /// while it runs.
    public static func plan(running: WorkerConfig, file: WorkerConfig, coordinatorRunning: Bool = true) -> ConfigReloadPlan {
        var applied = running
        for key in ConfigKey.all {
            switch key.reload {
            case .live, .restartsBluetooth: key.copy(&applied, file)
            case .whenCoordinatorStarts: if !coordinatorRunning { key.copy(&applied, file) }
            case .restart: break
            }
        }
        let changedNow = changedKeys(running, applied)
        let waiting = changedKeys(applied, file)
        return ConfigReloadPlan(applied: applied, appliedKeys: changedNow, restartKeys: waiting)
    }

    /// The dotted keys whose values differ, in the order of `WorkerConfig.flattened`.
    public static func changedKeys(_ a: WorkerConfig, _ b: WorkerConfig) -> [String] {
        let left = a.flattened, right = b.flattened
        return zip(left, right).filter { $0.value != $1.value }.map(\.0.key)
    }
}

extension WorkerConfig {
    /// Every key as a dotted path with a comparable rendering of its value (secrets
    /// included, so a changed token counts as a change: never print the values), in the
    /// key table's order, so two configs flatten to aligned lists.
    public var flattened: [(key: String, value: String)] {
        ConfigKey.all.map { ($0.path, $0.render(self)) }
    }
}

/// The outcome of the last reload, for `status` (`daemon.configReload`).
public struct ConfigReloadStatus: Sendable, Equatable {
    public enum Outcome: String, Sendable { case applied, unchanged, refused }
    public var atMs: Int64
    public var outcome: Outcome
    /// Why the file was refused (every problem, with its key), when it was.
    public var problems: [String]
    public var appliedKeys: [String]
    /// Keys that differ between the file and what runs: they apply at the next restart.
    public var restartKeys: [String]

    public init(atMs: Int64, outcome: Outcome, problems: [String] = [], appliedKeys: [String] = [], restartKeys: [String] = []) {
        self.atMs = atMs
        self.outcome = outcome
        self.problems = problems
        self.appliedKeys = appliedKeys
        self.restartKeys = restartKeys
    }

    public var json: JSONValue {
        .object(
            JSONObject([
                ("at", .string(formatUTC(milliseconds: atMs))),
                ("outcome", .string(outcome.rawValue)),
                ("problems", .array(problems.map { .string($0) })),
                ("applied", .array(appliedKeys.map { .string($0) })),
                ("needsRestart", .array(restartKeys.map { .string($0) })),
            ]))
    }

    /// One line for the log and the event.
    public var line: String {
        switch outcome {
        case .refused:
            return "config reload refused, the running config is kept: " + problems.joined(separator: "; ")
        case .unchanged, .applied:
            var text = appliedKeys.isEmpty ? "config reloaded: nothing to apply" : "config reloaded: applied " + appliedKeys.joined(separator: ", ")
            if !restartKeys.isEmpty { text += "; needs a restart to apply: " + restartKeys.joined(separator: ", ") }
            return text
        }
    }
}
