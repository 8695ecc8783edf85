/// What the EdgeCoder coordinator's behaviour monitor sees of this worker, kept by the
/// worker itself so that honest operation never looks like abuse. The coordinator bans an
/// agent for good (and gossips the ban) on patterns that ordinary faults produce: three
/// fast results, three identical outputs, a heartbeat gap while claiming work, a storm of
/// registrations. Pure: events and times in, holds and verdicts out; the daemon persists
/// `json` in the state directory so a restart does not forget the last hour.
///
/// The monitor's rules, as the coordinator evaluates them at every `/register` and every
/// `/result` over the agent's last hour (`MonitorRule`): a CRITICAL finding bans at once;
/// three HIGH or WARN findings within an hour ban; each evaluation that finds a rule adds
/// one finding.
public struct CoordinatorConduct: Sendable, Equatable {
    /// The coordinator's windows and ours, in milliseconds. Tests of the whole loop shrink
    /// them together with the dev coordinator's, so an hour's behaviour fits in a minute.
    public struct Limits: Sendable, Equatable {
        /// The monitor's window: everything older is forgotten by the coordinator.
        public var windowMs: Int64 = 3_600_000
        /// Ours: a heartbeat gap this long already counts (the coordinator's BHV006 fires
        /// over 5 minutes), so a late heartbeat or a slow clock cannot make a gap we missed.
        public var gapGuardMs: Int64 = 240_000
        /// A gap hold lasts until the gap or the claims left the coordinator's window, and
        /// this much more for clock differences between the two hosts.
        public var clockMarginMs: Int64 = 60_000

        public init() {}

        /// Every window divided by `divisor` (at least 1).
        public func scaled(by divisor: Int64) -> Limits {
            let d = max(1, divisor)
            var limits = Limits()
            limits.windowMs = windowMs / d
            limits.gapGuardMs = gapGuardMs / d
            limits.clockMarginMs = clockMarginMs / d
            return limits
        }
    }

    /// Registrations allowed in any window: the coordinator's storm rule (BHV008) fires at 10.
    public static let maxRegistrationsPerHour = 6
    /// Local failures in a row that open the circuit breaker.
    public static let breakerThreshold = 3
    /// The breaker's first hold, doubled for every further failure, up to the cap.
    public static let breakerBaseMs: Int64 = 30_000
    public static let breakerCapMs: Int64 = 15 * 60_000
    /// Results kept for the mirror of the monitor (the coordinator keeps an hour's worth;
    /// a worker cannot post more than a few a minute).
    static let maxResults = 512

    /// One posted result as the monitor records it.
    public struct Posted: Sendable, Equatable {
        public var atMs: Int64
        public var ok: Bool
        /// FNV-1a of the output's UTF-8: equal outputs, equal hashes (BHV003).
        public var outputHash: UInt64
        /// In UTF-16 code units, the length the coordinator measures (BHV002, BHV010).
        public var outputLength: Int
        public var durationMs: Int64

        public init(atMs: Int64, ok: Bool, output: String, durationMs: Int64) {
            self.init(atMs: atMs, ok: ok, outputHash: fnv1a(output), outputLength: output.utf16.count, durationMs: durationMs)
        }

        init(atMs: Int64, ok: Bool, outputHash: UInt64, outputLength: Int, durationMs: Int64) {
            self.atMs = atMs
            self.ok = ok
            self.outputHash = outputHash
            self.outputLength = outputLength
            self.durationMs = durationMs
        }
    }

    /// After a heartbeat gap while claims are in the window: pulls wait until `clearsAtMs`,
    /// and only `evaluationsLeft` more registrations or results may be sent before it.
    public struct GapHold: Sendable, Equatable {
        public var clearsAtMs: Int64
        public var evaluationsLeft: Int
        public var gapMs: Int64
    }

    /// Why pulling waits, with the time it may clear.
    public enum Hold: Sendable, Equatable {
        case heartbeatGap(untilMs: Int64)
        case localFailures(untilMs: Int64, failures: Int)

        public var reason: LocalHoldReason {
            switch self {
            case .heartbeatGap: return .heartbeatGap
            case .localFailures: return .localFailures
            }
        }

        public var untilMs: Int64 {
            switch self {
            case .heartbeatGap(let until), .localFailures(let until, _): return until
            }
        }
    }

    public var limits = Limits()
    public private(set) var lastHeartbeatAtMs: Int64?
    public private(set) var claims: [Int64] = []
    public private(set) var registrations: [Int64] = []
    public private(set) var results: [Posted] = []
    public private(set) var gap: GapHold?
    public private(set) var consecutiveLocalFailures = 0
    public private(set) var breakerUntilMs: Int64?
    /// Subtasks released (not answered) because the failure was the host's.
    public private(set) var released: Int64 = 0

    public init(limits: Limits = Limits()) { self.limits = limits }

    // MARK: Events

    /// The coordinator took a heartbeat at `nowMs`. A gap since the last one starts a gap
    /// hold until the gap's earlier heartbeat leaves the coordinator's window: while the
    /// gap is in the window, any claim in the window (one made before the gap, or the next
    /// pull's) makes the coordinator find BHV006 at every registration and result.
    public mutating func heartbeatAccepted(atMs nowMs: Int64, guardGaps: Bool = true) {
        forgetOld(nowMs)
        if guardGaps, let last = lastHeartbeatAtMs, nowMs - last > limits.gapGuardMs {
            let clears = last + limits.windowMs + limits.clockMarginMs
            if clears > nowMs {
                let evaluations = gap.map { $0.clearsAtMs > nowMs ? $0.evaluationsLeft : 1 } ?? 1
                gap = GapHold(clearsAtMs: max(clears, gap?.clearsAtMs ?? 0), evaluationsLeft: evaluations, gapMs: nowMs - last)
            }
        }
        lastHeartbeatAtMs = nowMs
    }

    /// A pull answered with a subtask.
    public mutating func claimed(atMs nowMs: Int64) {
        forgetOld(nowMs)
        claims.append(nowMs)
    }

    /// A registration was sent (the coordinator counts it whatever it answers).
    public mutating func registering(atMs nowMs: Int64) {
        forgetOld(nowMs)
        registrations.append(nowMs)
        spendEvaluation(nowMs)
    }

    /// A result was sent; `ok` results and posted failures alike are evaluated.
    public mutating func posting(_ result: Posted) {
        forgetOld(result.atMs)
        results.append(result)
        if results.count > CoordinatorConduct.maxResults { results.removeFirst(results.count - CoordinatorConduct.maxResults) }
        spendEvaluation(result.atMs)
    }

    /// The model answered: the breaker closes.
    public mutating func localSuccess() {
        consecutiveLocalFailures = 0
        breakerUntilMs = nil
    }

    /// A failure that was the host's (model server gone, model error, disk): the subtask
    /// was released, not answered. From the third in a row, pulls wait, longer each time.
    public mutating func localFailure(atMs nowMs: Int64) {
        consecutiveLocalFailures += 1
        released += 1
        guard consecutiveLocalFailures >= CoordinatorConduct.breakerThreshold else { return }
        let doublings = min(consecutiveLocalFailures - CoordinatorConduct.breakerThreshold, 20)
        breakerUntilMs = nowMs + min(CoordinatorConduct.breakerCapMs, CoordinatorConduct.breakerBaseMs << doublings)
    }

    /// A subtask released for a reason that is no local failure (a stop, a stale claim).
    public mutating func releasedWithoutFault() { released += 1 }

    // MARK: Decisions

    /// Why pulling must wait now, if it must.
    public func pullHold(nowMs: Int64) -> Hold? {
        if let gap, gap.clearsAtMs > nowMs { return .heartbeatGap(untilMs: gap.clearsAtMs) }
        if let until = breakerUntilMs, until > nowMs { return .localFailures(untilMs: until, failures: consecutiveLocalFailures) }
        return nil
    }

    /// Whether a registration or a result may be sent now: during a gap hold with claims
    /// in the window, the coordinator would count the gap again at each one.
    public func mayBeEvaluated(nowMs: Int64) -> Bool {
        guard let gap, gap.clearsAtMs > nowMs, claimsInWindow(nowMs) else { return true }
        return gap.evaluationsLeft > 0
    }

    /// Whether the coordinator may still hold a claim of ours in its window.
    func claimsInWindow(_ nowMs: Int64) -> Bool {
        claims.contains { $0 >= nowMs - limits.windowMs - limits.clockMarginMs }
    }

    /// When the next registration may be sent: now, or once the oldest of the hour's
    /// registrations leaves the window.
    public func registrationAllowedAtMs(nowMs: Int64) -> Int64 {
        let recent = registrations.filter { $0 > nowMs - limits.windowMs }
        guard recent.count >= CoordinatorConduct.maxRegistrationsPerHour else { return nowMs }
        return recent[recent.count - CoordinatorConduct.maxRegistrationsPerHour] + limits.windowMs + limits.clockMarginMs
    }

    /// The monitor's findings over the last hour if `extra` were posted now (nil: as it
    /// stands). A failure is posted only when this finds nothing new.
    public func findings(nowMs: Int64, adding extra: Posted? = nil) -> [MonitorRule] {
        let cutoff = nowMs - limits.windowMs
        var posted = results.filter { $0.atMs >= cutoff }
        if let extra { posted.append(extra) }
        var found = MonitorRule.findings(posted)
        if registrations.filter({ $0 >= cutoff }).count >= 10 { found.append(.registrationStorm) }
        if let gap, gap.clearsAtMs > nowMs, claimsInWindow(nowMs) { found.append(.heartbeatGap) }
        return found
    }

    private mutating func spendEvaluation(_ nowMs: Int64) {
        guard var hold = gap, hold.clearsAtMs > nowMs, claimsInWindow(nowMs) else { return }
        hold.evaluationsLeft = max(0, hold.evaluationsLeft - 1)
        gap = hold
    }

    private mutating func forgetOld(_ nowMs: Int64) {
        let cutoff = nowMs - limits.windowMs - limits.clockMarginMs
        claims.removeAll { $0 < cutoff }
        registrations.removeAll { $0 < cutoff }
        results.removeAll { $0.atMs < cutoff }
        if let hold = gap, hold.clearsAtMs <= nowMs { gap = nil }
    }

    // MARK: Persistence

    /// Longest lists read back: more than an hour's worth of anything is hostile input.
    static let maxStoredEntries = 4_096

    public var json: JSONValue {
        var object = JSONObject()
        object["lastHeartbeatAtMs"] = .optional(lastHeartbeatAtMs)
        object["claims"] = .array(claims.map { .int($0) })
        object["registrations"] = .array(registrations.map { .int($0) })
        object["results"] = .array(
            results.map { result -> JSONValue in
                [
                    "atMs": .int(result.atMs), "ok": .bool(result.ok), "hash": .string(String(result.outputHash, radix: 16)),
                    "length": .int(Int64(result.outputLength)), "durationMs": .int(result.durationMs),
                ]
            })
        if let gap {
            object["gap"] = ["clearsAtMs": .int(gap.clearsAtMs), "evaluationsLeft": .int(Int64(gap.evaluationsLeft)), "gapMs": .int(gap.gapMs)]
        }
        object["consecutiveLocalFailures"] = .int(Int64(consecutiveLocalFailures))
        object["breakerUntilMs"] = .optional(breakerUntilMs)
        object["released"] = .int(released)
        return .object(object)
    }

    /// Reads what `json` wrote. Anything malformed is nil: the caller starts afresh and
    /// says so (a lost record errs towards pulling; the coordinator's window is an hour).
    public static func from(json value: JSONValue) -> CoordinatorConduct? {
        guard value.objectValue != nil else { return nil }
        func times(_ key: String) -> [Int64]? {
            guard let list = value[key]?.arrayValue, list.count <= maxStoredEntries else { return nil }
            let numbers = list.compactMap(\.intValue)
            return numbers.count == list.count ? numbers.sorted() : nil
        }
        guard let claims = times("claims"), let registrations = times("registrations"),
            let rawResults = value["results"]?.arrayValue, rawResults.count <= maxStoredEntries
        else { return nil }
        var conduct = CoordinatorConduct()
        conduct.claims = claims
        conduct.registrations = registrations
        for raw in rawResults {
            guard let at = raw["atMs"]?.intValue, let ok = raw["ok"]?.boolValue, let hashText = raw["hash"]?.stringValue,
                let hash = UInt64(hashText, radix: 16), let length = raw["length"]?.intValue, length >= 0, length <= Int64(Int32.max),
                let duration = raw["durationMs"]?.intValue
            else { return nil }
            conduct.results.append(Posted(atMs: at, ok: ok, outputHash: hash, outputLength: Int(length), durationMs: duration))
        }
        if let last = value["lastHeartbeatAtMs"], last != .null {
            guard let at = last.intValue else { return nil }
            conduct.lastHeartbeatAtMs = at
        }
        if let gap = value["gap"], gap != .null {
            guard let clears = gap["clearsAtMs"]?.intValue, let left = gap["evaluationsLeft"]?.intValue, (0...1).contains(left),
                let gapMs = gap["gapMs"]?.intValue
            else { return nil }
            conduct.gap = GapHold(clearsAtMs: clears, evaluationsLeft: Int(left), gapMs: gapMs)
        }
        guard let failures = value["consecutiveLocalFailures"]?.intValue, (0...1_000_000).contains(failures),
            let released = value["released"]?.intValue, released >= 0
        else { return nil }
        conduct.consecutiveLocalFailures = Int(failures)
        conduct.released = released
        if let until = value["breakerUntilMs"], until != .null {
            guard let at = until.intValue else { return nil }
            conduct.breakerUntilMs = at
        }
        return conduct
    }

    /// What `status` shows.
    public func statusJSON(nowMs: Int64) -> JSONValue {
        var object = JSONObject()
        object["hold"] = pullHold(nowMs: nowMs).map { .string($0.reason.rawValue) } ?? .null
        object["holdUntil"] = pullHold(nowMs: nowMs).map { .string(formatUTC(milliseconds: $0.untilMs)) } ?? .null
        object["consecutiveLocalFailures"] = .int(Int64(consecutiveLocalFailures))
        object["released"] = .int(released)
        let cutoff = nowMs - limits.windowMs
        object["registrationsLastHour"] = .int(Int64(registrations.filter { $0 >= cutoff }.count))
        object["resultsLastHour"] = .int(Int64(results.filter { $0.atMs >= cutoff }.count))
        object["monitorFindings"] = .array(findings(nowMs: nowMs).map { .string($0.rawValue) })
        return .object(object)
    }
}

/// The coordinator's behaviour rules over an agent's results of the last hour, mirrored so
/// the worker can tell before it posts a failure whether the post would be held against
/// it. Thresholds are the coordinator's.
public enum MonitorRule: String, Sendable, Equatable, CaseIterable {
    /// BHV001, CRITICAL: three or more results under 500 ms and an average under 1 s.
    case suspiciouslyFast = "BHV001-suspiciously-fast"
    /// BHV002, HIGH: five or more empty outputs, more than 60 % of all.
    case massEmpty = "BHV002-mass-empty"
    /// BHV003, CRITICAL: three or more consecutive identical outputs.
    case identicalOutputs = "BHV003-identical-outputs"
    /// BHV004, HIGH: a success rate under 15 % over ten or more results.
    case successCollapse = "BHV004-success-collapse"
    /// BHV006, HIGH: a heartbeat gap over 5 minutes while claiming work.
    case heartbeatGap = "BHV006-heartbeat-gap"
    /// BHV008, HIGH: ten or more registrations.
    case registrationStorm = "BHV008-registration-storm"
    /// BHV009, WARN: durations with a standard deviation under 50 ms over ten or more.
    case robotPrecision = "BHV009-robot-precision"
    /// BHV010, WARN: average output under 10 characters over five or more, success over 80 %.
    case tinyOutputs = "BHV010-tiny-outputs"

    public var bans: Bool { self == .suspiciouslyFast || self == .identicalOutputs }

    /// The result-based rules that `results` (the window, oldest first) trips.
    public static func findings(_ results: [CoordinatorConduct.Posted]) -> [MonitorRule] {
        guard !results.isEmpty else { return [] }
        var found: [MonitorRule] = []
        let total = Double(results.count)
        let durations = results.map { Double($0.durationMs) }
        let mean = durations.reduce(0, +) / total
        if results.filter({ $0.durationMs < 500 }).count >= 3 && mean < 1000 { found.append(.suspiciouslyFast) }
        let empty = results.filter { $0.outputLength == 0 }.count
        if empty >= 5 && Double(empty) / total > 0.6 { found.append(.massEmpty) }
        var run = 1, longest = 1
        for index in results.indices.dropFirst() {
            run = results[index].outputHash == results[index - 1].outputHash ? run + 1 : 1
            longest = max(longest, run)
        }
        if results.count >= 2 && longest >= 3 { found.append(.identicalOutputs) }
        let successRate = Double(results.filter(\.ok).count) / total
        if results.count >= 10 && successRate < 0.15 { found.append(.successCollapse) }
        if results.count >= 10 {
            let variance = durations.reduce(0) { $0 + ($1 - mean) * ($1 - mean) } / total
            if variance.squareRoot() < 50 { found.append(.robotPrecision) }
        }
        let meanLength = Double(results.reduce(0) { $0 + $1.outputLength }) / total
        if meanLength < 10 && results.count >= 5 && successRate > 0.8 { found.append(.tinyOutputs) }
        return found
    }
}

/// FNV-1a, 64 bits: a stable hash of a text's UTF-8 (Swift's `Hasher` is seeded per process).
func fnv1a(_ text: String) -> UInt64 {
    var hash: UInt64 = 0xcbf2_9ce4_8422_2325
    for byte in text.utf8 {
        hash ^= UInt64(byte)
        hash = hash &* 0x0000_0100_0000_01b3
    }
    return hash
}
