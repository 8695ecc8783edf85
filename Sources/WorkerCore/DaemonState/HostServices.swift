/// What the host's own services say about suspend, metered networks and power profiles
/// (service §2), read over D-Bus by the daemon: logind, NetworkManager, power-profiles-daemon.
/// Each is absent on a server, which is not an error: status and `doctor` say what was seen.
public struct HostServices: Sendable, Equatable {
    /// Whether one service was found on the system bus.
    public enum Presence: Sendable, Equatable {
        /// Not looked for yet (the bus is not connected yet).
        case unknown
        case present
        /// Not on the bus (or the bus itself is missing), in words.
        case absent(String)

        public var json: JSONValue {
            switch self {
            case .unknown: return ["state": "unknown"]
            case .present: return ["state": "present"]
            case .absent(let why): return ["state": "absent", "reason": .string(why)]
            }
        }
    }

    /// Where suspend stands (logind's PrepareForSleep).
    public enum SleepPhase: String, Sendable {
        case awake
        /// PrepareForSleep(true) came: no new work; the checkpoint and heartbeat run.
        case preparing
        /// The delay inhibitor is released: the host may sleep at any moment.
        case suspending
    }

    /// The system bus: nil until tried; the reason when it cannot be reached.
    public var busProblem: String?
    public var busConnected = false
    public var logind: Presence = .unknown
    /// The delay inhibitor: held (logind waits for us before sleeping), or why not.
    public var inhibitor: String = "not taken"
    public var sleep: SleepPhase = .awake
    /// When the last resume happened (wall-clock ms), and how many there were.
    public var lastResumeMs: Int64?
    public var networkManager: Presence = .unknown
    /// NetworkManager's NMMetered value (0 unknown, 1 yes, 2 no, 3 guess-yes, 4 guess-no).
    public var meteredRaw: UInt32?
    public var powerProfiles: Presence = .unknown
    /// power-profiles-daemon's ActiveProfile (`power-saver`, `balanced`, `performance`).
    public var activeProfile: String?

    public init() {}

    /// Whether the primary connection is metered: yes (1) and guess-yes (3) are; nil
    /// when NetworkManager is absent or does not know.
    public var metered: Bool? { meteredRaw.flatMap(HostServices.isMetered) }

    public static func isMetered(_ raw: UInt32) -> Bool? {
        switch raw {
        case 1, 3: return true
        case 2, 4: return false
        default: return nil
        }
    }

    public static func meteredName(_ raw: UInt32) -> String {
        switch raw {
        case 1: return "yes"
        case 2: return "no"
        case 3: return "guess-yes"
        case 4: return "guess-no"
        default: return "unknown"
        }
    }

    /// The low-power mode the policy sees: the kernel's platform_profile when it says
    /// something (a host with one is driven by it, and power-profiles-daemon writes it
    /// anyway), else power-profiles-daemon's ActiveProfile (`power-saver` is low power).
    public static func lowPowerMode(platformProfile: Bool?, activeProfile: String?) -> Bool? {
        if let platformProfile { return platformProfile }
        switch activeProfile {
        case "power-saver": return true
        case "balanced", "performance": return false
        default: return nil
        }
    }

    /// Why new work is held for the host's sake now, if it is: suspend first (it ends
    /// everything), then a metered connection under `network.onMetered` hold, which
    /// concerns only work pulled over the network (`overNetwork`: not a Bluetooth request).
    public func hold(onMetered: WorkerConfig.MeteredAction, overNetwork: Bool = true) -> LocalHoldReason? {
        if sleep != .awake { return .hostSleeping }
        if overNetwork && onMetered == .hold && metered == true { return .metered }
        return nil
    }

    /// What a PrepareForSleep signal asks of the daemon, in order.
    public enum SleepStep: Sendable, Equatable {
        /// Stop taking new work (the hold above).
        case holdNewWork
        /// Make everything written so far durable (journal, outbox, task history).
        case checkpoint
        /// Tell the coordinator now, with the heartbeat.
        case heartbeat
        /// Close the delay inhibitor's fd: logind may suspend.
        case releaseInhibitor
        /// Take a new delay inhibitor for the next suspend.
        case takeInhibitor
        /// Power, the network path: what may have changed while asleep.
        case rereadPower
        case rereadPath
        case resumeWork
    }

    /// The one place that decides what PrepareForSleep(`starting`) does from `phase`:
    /// the next phase and the steps. A repeated signal does nothing twice.
    public static func prepareForSleep(_ starting: Bool, phase: SleepPhase) -> (phase: SleepPhase, steps: [SleepStep]) {
        switch (starting, phase) {
        case (true, .awake):
            return (.preparing, [.holdNewWork, .checkpoint, .heartbeat, .releaseInhibitor])
        case (true, .preparing), (true, .suspending):
            return (phase, [])
        case (false, .preparing), (false, .suspending):
            return (.awake, [.takeInhibitor, .rereadPower, .rereadPath, .heartbeat, .resumeWork])
        case (false, .awake):
            // A resume without its PrepareForSleep(true) (we started mid-suspend, or
            // missed it): the host slept all the same, so read everything again.
            return (.awake, [.rereadPower, .rereadPath, .heartbeat])
        }
    }

    /// `status --json`'s `host`.
    public var json: JSONValue {
        var logindObject = logind.json.objectValue ?? JSONObject()
        logindObject["inhibitor"] = .string(inhibitor)
        logindObject["sleep"] = .string(sleep.rawValue)
        logindObject["lastResume"] = lastResumeMs.map { .string(formatUTC(milliseconds: $0)) } ?? .null
        var nm = networkManager.json.objectValue ?? JSONObject()
        nm["metered"] = meteredRaw.map { .string(HostServices.meteredName($0)) } ?? .null
        var ppd = powerProfiles.json.objectValue ?? JSONObject()
        ppd["activeProfile"] = activeProfile.map(JSONValue.string) ?? .null
        return .object(
            JSONObject([
                ("systemBus", busConnected ? "connected" : .string(busProblem.map { "unavailable: \($0)" } ?? "not connected yet")),
                ("logind", .object(logindObject)),
                ("networkManager", .object(nm)),
                ("powerProfiles", .object(ppd)),
            ]))
    }
}
