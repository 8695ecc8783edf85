/// The three compute modes of modes-and-power §1.
public enum Mode: String, Sendable, CaseIterable {
    case off, on, bluetooth
}

/// The persisted mode: what was selected, since when, and why.
public struct ModeState: Sendable, Equatable {
    public var mode: Mode
    /// Milliseconds since the epoch of the last change.
    public var sinceMs: Int64
    public var reason: String
    /// True while the mode is `bluetooth` because the daemon downgraded itself (modes-and-power §2.3);
    /// it decides whether a restored path records `network-restored` (modes-and-power §2.4).
    public var downgraded: Bool
    /// When `network-restored` was recorded for the current downgrade (modes-and-power §2.4), so it
    /// is noted once per outage, not at every restart.
    public var restoredAtMs: Int64?
    /// Set while mode `off` is a pause (`mode off --for`): the mode to return to, and when.
    public var pause: Pause?

    /// A pause's end: at `untilMs` (wall clock) the mode returns to `resumeMode`.
    public struct Pause: Sendable, Equatable {
        public var resumeMode: Mode
        public var untilMs: Int64
        public init(resumeMode: Mode, untilMs: Int64) {
            self.resumeMode = resumeMode
            self.untilMs = untilMs
        }
    }

    public init(mode: Mode, sinceMs: Int64, reason: String, downgraded: Bool = false, restoredAtMs: Int64? = nil, pause: Pause? = nil) {
        self.mode = mode
        self.sinceMs = sinceMs
        self.reason = reason
        self.downgraded = downgraded
        self.restoredAtMs = restoredAtMs
        self.pause = pause
    }

    /// A fresh install starts in `off` (modes-and-power §2.1).
    public static func fresh(nowMs: Int64) -> ModeState {
        ModeState(mode: .off, sinceMs: nowMs, reason: "fresh install")
    }

    public var json: JSONValue {
        var object = JSONObject([
            ("mode", .string(mode.rawValue)), ("sinceMs", .int(sinceMs)), ("reason", .string(reason)), ("downgraded", .bool(downgraded)),
        ])
        if let restoredAtMs { object["restoredAtMs"] = .int(restoredAtMs) }
        if let pause { object["pause"] = ["resumeMode": .string(pause.resumeMode.rawValue), "untilMs": .int(pause.untilMs)] }
        return .object(object)
    }

    public static func from(json value: JSONValue) -> ModeState? {
        guard let mode = value["mode"]?.stringValue.flatMap(Mode.init(rawValue:)),
            let since = value["sinceMs"]?.intValue,
            let reason = value["reason"]?.stringValue
        else { return nil }
        // A pause is only ever written on mode off, to return to another mode.
        var pause: Pause?
        if let resume = value["pause"]?["resumeMode"]?.stringValue.flatMap(Mode.init(rawValue:)), resume != .off, mode == .off,
            let until = value["pause"]?["untilMs"]?.intValue
        {
            pause = Pause(resumeMode: resume, untilMs: until)
        } else if value["pause"] != nil {
            return nil
        }
        return ModeState(
            mode: mode, sinceMs: since, reason: reason, downgraded: value["downgraded"]?.boolValue ?? false,
            restoredAtMs: value["restoredAtMs"]?.intValue, pause: pause)
    }
}

/// Something that asks for a mode change.
public enum ModeRequest: Sendable, Equatable {
    /// `edgecoder-worker mode X` from an operator (with a note on who, for the event).
    case operatorSet(Mode, by: String)
    /// `edgecoder-worker mode off --for DURATION`: off now, back to the mode before at the deadline.
    case operatorPause(forMs: Int64, by: String)
    /// The daemon's pause timer: the deadline may have passed.
    case pauseEnded
    /// The network path was lost while in `on` (modes-and-power §2.3).
    case pathLost(reason: String)
    /// The network path is satisfied again (modes-and-power §2.4).
    case pathRestored(interface: String)
}

/// What the rest of the world looks like when a mode request is decided. Later parts
/// (the power gate, the path monitor) fill it; the decision stays one pure function.
public struct ModeContext: Sendable, Equatable {
    /// `policy.runOnlyWhileCharging` as in force on this host.
    public var runOnlyWhileCharging: Bool
    /// Whether the host is on external power; nil when not yet known.
    public var onExternalPower: Bool?
    public var nowMs: Int64
    /// Why mode `on` could not join any coordinator with the config in force (the example
    /// placeholder URL), or nil: an operator's `mode on` is refused with it.
    public var coordinatorProblem: String?

    public init(runOnlyWhileCharging: Bool = false, onExternalPower: Bool? = nil, nowMs: Int64, coordinatorProblem: String? = nil) {
        self.runOnlyWhileCharging = runOnlyWhileCharging
        self.onExternalPower = onExternalPower
        self.nowMs = nowMs
        self.coordinatorProblem = coordinatorProblem
    }

    public var chargeGateClosed: Bool {
        ModeContext.chargeGateClosed(runOnlyWhileCharging: runOnlyWhileCharging, onExternalPower: onExternalPower)
    }

    /// The charge gate of modes-and-power §2.2 is closed when the policy demands power and the
    /// host is known to be without it. Unknown power does not close it: a host whose
    /// supplies cannot be read is treated like a desktop.
    public static func chargeGateClosed(runOnlyWhileCharging: Bool, onExternalPower: Bool?) -> Bool {
        runOnlyWhileCharging && onExternalPower == false
    }
}

/// The outcome of a mode request.
public struct ModeDecision: Sendable, Equatable {
    public enum Outcome: Sendable, Equatable {
        case changed
        case unchanged
        /// Refused, with the operator-facing message.
        case refused(message: String)
    }
    public var outcome: Outcome
    public var state: ModeState
    /// Events to record, in order (modes-and-power §2.5: every change, refusal, downgrade, restore).
    public var events: [EventDraft]
}

/// The message of modes-and-power §2.2, word for word.
public let chargeGateMessage = "Runtime blocked: connect power to start."

public enum ModeRules {
    /// The one decision function for mode changes. Values in, decision out, no I/O.
    public static func decide(_ request: ModeRequest, current: ModeState, context: ModeContext) -> ModeDecision {
        let now = context.nowMs
        switch request {
        case .operatorSet(let target, let who):
            if target == .on, let problem = context.coordinatorProblem {
                return ModeDecision(
                    outcome: .refused(message: problem), state: current,
                    events: [EventDraft(kind: .modeRefused, from: current.mode, to: target, reason: "\(problem) (\(who))")])
            }
            if target != .off && context.chargeGateClosed {
                return ModeDecision(
                    outcome: .refused(message: chargeGateMessage), state: current,
                    events: [
                        EventDraft(
                            kind: .modeRefused, from: current.mode, to: target,
                            reason: "not-charging: runOnlyWhileCharging is set and the host is on battery (\(who))")
                    ])
            }
            // `mode off` during a pause ends the pause: the operator chose off for good.
            if target == current.mode && !(target == .bluetooth && current.downgraded) && current.pause == nil {
                return ModeDecision(outcome: .unchanged, state: current, events: [])
            }
            // Choosing `bluetooth` explicitly ends a downgrade: the operator now owns it.
            let next = ModeState(mode: target, sinceMs: now, reason: "set by \(who)", downgraded: false)
            return ModeDecision(
                outcome: .changed, state: next,
                events: [EventDraft(kind: .modeChange, from: current.mode, to: target, reason: "set by \(who)")])

        case .operatorPause(let forMs, let who):
            // A second pause moves the deadline and keeps the mode the first would return to.
            let resume = current.pause?.resumeMode ?? current.mode
            guard resume != .off else {
                let message = "mode off --for returns to the mode before it, and the mode is already off: use 'mode off', or choose a mode first"
                return ModeDecision(
                    outcome: .refused(message: message), state: current,
                    events: [EventDraft(kind: .modeRefused, from: current.mode, to: .off, reason: "\(message) (\(who))")])
            }
            let until = now + forMs
            let reason =
                "paused by \(who) for \(PauseDuration.format(milliseconds: forMs)): back to \(resume.rawValue) at \(formatUTC(milliseconds: until))"
            let next = ModeState(
                mode: .off, sinceMs: current.mode == .off ? current.sinceMs : now, reason: reason,
                pause: ModeState.Pause(resumeMode: resume, untilMs: until))
            return ModeDecision(outcome: .changed, state: next, events: [EventDraft(kind: .modeChange, from: current.mode, to: .off, reason: reason)])

        case .pauseEnded:
            guard let pause = current.pause, current.mode == .off, now >= pause.untilMs else {
                return ModeDecision(outcome: .unchanged, state: current, events: [])
            }
            if pause.resumeMode == .on, let problem = context.coordinatorProblem {
                // The pause is over either way; off stays, saying why.
                let next = ModeState(mode: .off, sinceMs: current.sinceMs, reason: "the pause ended, but mode on is refused: \(problem)")
                return ModeDecision(
                    outcome: .refused(message: problem), state: next,
                    events: [EventDraft(kind: .modeRefused, from: .off, to: .on, reason: "the pause ended: \(problem)")])
            }
            // With the charge gate closed the mode is selected and its runtime waits for
            // power, as after a restart (the daemon blocks it).
            let reason = "the pause ended: back to \(pause.resumeMode.rawValue)"
            return ModeDecision(
                outcome: .changed, state: ModeState(mode: pause.resumeMode, sinceMs: now, reason: reason),
                events: [EventDraft(kind: .modeChange, from: .off, to: pause.resumeMode, reason: reason)])

        case .pathLost(let reason):
            if current.mode == .bluetooth && current.downgraded && current.restoredAtMs != nil {
                // Lost again after a restore was noted: the next restore is news again.
                var next = current
                next.restoredAtMs = nil
                return ModeDecision(outcome: .unchanged, state: next, events: [])
            }
            guard current.mode == .on else { return ModeDecision(outcome: .unchanged, state: current, events: []) }
            let next = ModeState(mode: .bluetooth, sinceMs: now, reason: "downgrade: \(reason)", downgraded: true)
            return ModeDecision(
                outcome: .changed, state: next,
                events: [EventDraft(kind: .downgrade, from: .on, to: .bluetooth, reason: reason)])

        case .pathRestored(let interface):
            // modes-and-power §2.4: note it, never climb back on our own.
            guard current.mode == .bluetooth && current.downgraded && current.restoredAtMs == nil else {
                return ModeDecision(outcome: .unchanged, state: current, events: [])
            }
            var next = current
            next.restoredAtMs = now
            return ModeDecision(
                outcome: .unchanged, state: next,
                events: [
                    EventDraft(
                        kind: .networkRestored, from: .bluetooth, to: .bluetooth,
                        reason: "network path satisfied again via \(interface); run `edgecoder-worker mode on` to rejoin the swarm")
                ])
        }
    }
}

/// Why the runtime of the selected mode is or is not running.
public struct RuntimeState: Sendable, Equatable {
    public enum Phase: String, Sendable { case idle, running, blocked }
    public var phase: Phase
    public var reason: String
    public init(phase: Phase, reason: String) {
        self.phase = phase
        self.reason = reason
    }

    /// The runtime for a mode. A persisted mode whose charge gate was closed at start
    /// stays selected but idle until power returns (modes-and-power §2.2); once running, unplugging
    /// only holds new work (the policy), it does not stop the runtime.
    public static func of(_ mode: ModeState, gateBlocked: Bool, runtimeAvailable: (Mode) -> String?) -> RuntimeState {
        if mode.mode == .off { return RuntimeState(phase: .idle, reason: "mode off") }
        if gateBlocked { return RuntimeState(phase: .blocked, reason: "not-charging: \(chargeGateMessage)") }
        if let missing = runtimeAvailable(mode.mode) { return RuntimeState(phase: .blocked, reason: missing) }
        return RuntimeState(phase: .running, reason: "mode \(mode.mode.rawValue)")
    }
}
