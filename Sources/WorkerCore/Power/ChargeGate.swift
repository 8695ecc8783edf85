/// The charge gate of modes-and-power §2.2 as the daemon holds it: whether the selected
/// working mode's runtime waits for external power.
public enum ChargeGate: Sendable, Equatable {
    /// No reading yet: the first one decides whether a restored working mode may start.
    case unevaluated
    /// Nothing waits for power: the mode was chosen with power (or is off), or power returned.
    case open
    /// The selected working mode stays idle until external power returns.
    case blocked

    /// What a reading did to the gate, for the daemon to log and record.
    public enum Change: Sendable, Equatable {
        /// The first reading found a restored working mode on battery under runOnlyWhileCharging.
        case blockedAtStart
        /// External power returned: the waiting runtime starts.
        case opened
    }

    public var isBlocked: Bool { self == .blocked }

    /// A reading: the first decides on the restored mode; later ones only open a blocked
    /// gate when power returns. Unplugging never closes it: once running, the policy holds
    /// new work instead of stopping the runtime.
    public mutating func read(closed: Bool, workingModeSelected: Bool) -> Change? {
        switch self {
        case .unevaluated:
            self = workingModeSelected && closed ? .blocked : .open
            return isBlocked ? .blockedAtStart : nil
        case .blocked where !closed:
            self = .open
            return .opened
        case .open, .blocked:
            return nil
        }
    }

    /// A mode change `ModeRules` decided: a mode chosen now passed the gate (or is off), so
    /// nothing waits; a pause's end returns to a mode nobody chose now, which waits for power
    /// as after a restart (`waitsForPower`).
    public mutating func modeChanged(waitsForPower: Bool) {
        if waitsForPower {
            self = .blocked
        } else if isBlocked {
            self = .open
        }
    }
}
