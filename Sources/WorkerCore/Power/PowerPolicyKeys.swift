/// The policy keys of modes-and-power §3.2 by name, shared by the config file and `policy set`
/// so both accept exactly the same keys and values.
extension PowerPolicy {
    public enum SetProblem: Sendable, Equatable {
        case unknownKey
        case invalid(String)
        public var message: String {
            switch self {
            case .unknownKey: return "unknown policy key"
            case .invalid(let message): return message
            }
        }
    }

    public static let keys = [
        "runOnlyWhileCharging", "minBatteryPct", "resumeBatteryPct", "holdWhileDraining",
        "pauseOnLowPowerMode", "maxThermalState", "maxCpuUsagePct", "resumeDwellSec",
        "allowRemoteModelSwitch",
    ]

    /// Sets one key from a JSON value; returns what is wrong instead when it is.
    public mutating func set(key: String, json value: JSONValue) -> SetProblem? {
        func bool(_ apply: (inout PowerPolicy, Bool) -> Void) -> SetProblem? {
            guard case .bool(let b) = value else { return .invalid("must be true or false, got \(value.typeDescription)") }
            apply(&self, b)
            return nil
        }
        func int(_ range: ClosedRange<Int64>, _ apply: (inout PowerPolicy, Int64) -> Void) -> SetProblem? {
            guard let n = value.intValue else {
                return .invalid("must be an integer in \(range.lowerBound)…\(range.upperBound), got \(value.typeDescription)")
            }
            guard range.contains(n) else { return .invalid("must be in \(range.lowerBound)…\(range.upperBound), got \(n)") }
            apply(&self, n)
            return nil
        }
        switch key {
        case "runOnlyWhileCharging": return bool { $0.runOnlyWhileCharging = $1 }
        case "minBatteryPct": return int(0...100) { $0.minBatteryPct = $1 }
        case "resumeBatteryPct": return int(0...100) { $0.resumeBatteryPct = $1 }
        case "holdWhileDraining": return bool { $0.holdWhileDraining = $1 }
        case "pauseOnLowPowerMode": return bool { $0.pauseOnLowPowerMode = $1 }
        case "maxThermalState":
            guard case .string(let s) = value, let state = ThermalState(rawValue: s) else {
                return .invalid(
                    "must be one of \"nominal\", \"fair\", \"serious\", \"critical\", got \(value.serialized.count > 40 ? value.typeDescription : value.serialized)"
                )
            }
            maxThermalState = state
            return nil
        case "maxCpuUsagePct": return int(1...100) { $0.maxCpuUsagePct = $1 }
        case "resumeDwellSec": return int(0...3600) { $0.resumeDwellSec = $1 }
        case "allowRemoteModelSwitch": return bool { $0.allowRemoteModelSwitch = $1 }
        default: return .unknownKey
        }
    }

    /// The policy as JSON, keys in the order of modes-and-power §3.2.
    public var json: JSONValue {
        .object(
            JSONObject([
                ("runOnlyWhileCharging", .bool(runOnlyWhileCharging)),
                ("minBatteryPct", .int(minBatteryPct)),
                ("resumeBatteryPct", .int(resumeBatteryPct)),
                ("holdWhileDraining", .bool(holdWhileDraining)),
                ("pauseOnLowPowerMode", .bool(pauseOnLowPowerMode)),
                ("maxThermalState", .string(maxThermalState.rawValue)),
                ("maxCpuUsagePct", .int(maxCpuUsagePct)),
                ("resumeDwellSec", .int(resumeDwellSec)),
                ("allowRemoteModelSwitch", .bool(allowRemoteModelSwitch)),
            ]))
    }
}
