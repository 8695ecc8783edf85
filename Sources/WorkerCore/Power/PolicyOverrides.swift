/// Where a policy value comes from, for `policy show`.
public enum PolicySource: String, Sendable {
    case builtIn = "default"
    case config
    case host
}

/// The per-host policy overrides of modes-and-power §3.2: `policy set KEY VALUE` on this host,
/// persisted in the state directory, applied over the config file's policy.
public struct PolicyOverrides: Sendable, Equatable {
    public private(set) var values: JSONObject

    public init(values: JSONObject = JSONObject()) { self.values = values }

    /// The effective policy and the source of each key.
    public func apply(to config: WorkerConfig) -> (policy: PowerPolicy, sources: [String: PolicySource]) {
        var policy = config.policy
        var sources: [String: PolicySource] = [:]
        for key in PowerPolicy.keys { sources[key] = config.policyKeysInFile.contains(key) ? .config : .builtIn }
        for member in values.members where policy.set(key: member.key, json: member.value) == nil {
            sources[member.key] = .host
        }
        return (policy, sources)
    }

    public enum Change: Sendable, Equatable {
        case set(key: String, value: JSONValue)
        case unset(key: String)
    }

    /// Applies a change if the result is a valid policy; otherwise says what is wrong,
    /// in the words of the config file's checks.
    public func applying(_ change: Change, over config: WorkerConfig) -> Result<PolicyOverrides, ConfigProblem> {
        var next = self
        switch change {
        case .set(let key, let value):
            guard PowerPolicy.keys.contains(key) else {
                return .failure(ConfigProblem(path: key, message: "unknown policy key; the keys are \(PowerPolicy.keys.joined(separator: ", "))"))
            }
            var probe = PowerPolicy()
            if let problem = probe.set(key: key, json: value) { return .failure(ConfigProblem(path: key, message: problem.message)) }
            next.values[key] = value
        case .unset(let key):
            guard PowerPolicy.keys.contains(key) else {
                return .failure(ConfigProblem(path: key, message: "unknown policy key; the keys are \(PowerPolicy.keys.joined(separator: ", "))"))
            }
            next.values[key] = nil
        }
        let policy = next.apply(to: config).policy
        if policy.resumeBatteryPct < policy.minBatteryPct {
            return .failure(
                ConfigProblem(
                    path: "resumeBatteryPct", message: "must be at least minBatteryPct (\(policy.minBatteryPct)), would be \(policy.resumeBatteryPct)"
                ))
        }
        return .success(next)
    }

    public var json: JSONValue { .object(values) }

    /// Restores overrides from their file; an unknown key or a bad value makes the file
    /// suspect (it is quarantined rather than half-applied).
    public static func from(json value: JSONValue) -> PolicyOverrides? {
        guard let object = value.objectValue else { return nil }
        var probe = PowerPolicy()
        for member in object.members where probe.set(key: member.key, json: member.value) != nil { return nil }
        return PolicyOverrides(values: object)
    }

    /// A value typed on the command line: JSON when it parses (`true`, `30`), else a string (`fair`).
    public static func value(fromArgument text: String) -> JSONValue {
        (try? JSON.parse(text, maxDepth: 2)) ?? .string(text)
    }
}

extension PowerPolicy {
    /// `policy show`: each key with its value and source.
    public static func showJSON(_ policy: PowerPolicy, sources: [String: PolicySource]) -> JSONValue {
        let values = policy.json.objectValue ?? JSONObject()
        var out = JSONObject()
        for member in values.members {
            out[member.key] = ["value": member.value, "source": .string((sources[member.key] ?? .builtIn).rawValue)]
        }
        return .object(out)
    }
}
