/// Whether the network path is satisfied (modes-and-power §4): a non-loopback interface that is up
/// and running, has a global address, and carries a default route of the same family.
public struct PathStatus: Sendable, Equatable {
    public var satisfied: Bool
    /// The interface carrying the path (or the best candidate's name when unsatisfied).
    public var interface: String?
    public var reason: String

    public init(satisfied: Bool, interface: String?, reason: String) {
        self.satisfied = satisfied
        self.interface = interface
        self.reason = reason
    }
}

/// The kernel's links, addresses and default routes as last told by rtnetlink.
public struct PathTable: Sendable, Equatable {
    public private(set) var links: [Int32: RtLink] = [:]
    public private(set) var addresses: Set<RtAddress> = []
    public private(set) var defaultRoutes: Set<RtRoute> = []

    public init() {}

    /// Applies one message; returns whether the table changed.
    @discardableResult
    public mutating func apply(_ message: RtnetlinkMessage) -> Bool {
        switch message {
        case .link(let link, let deleted):
            if deleted {
                guard links.removeValue(forKey: link.index) != nil else { return false }
                // A deleted link takes its addresses and routes with it.
                addresses = addresses.filter { $0.index != link.index }
                defaultRoutes = defaultRoutes.filter { !$0.outputInterfaces.contains(link.index) }
                return true
            }
            if links[link.index] == link { return false }
            links[link.index] = link
            return true
        case .address(let address, let deleted):
            // Flags change in place (DAD finishing): an address is keyed without them.
            let existing = addresses.first { $0.family == address.family && $0.index == address.index && $0.address == address.address }
            if deleted {
                guard let existing else { return false }
                addresses.remove(existing)
                return true
            }
            if existing == address { return false }
            if let existing { addresses.remove(existing) }
            addresses.insert(address)
            return true
        case .route(let route, let deleted):
            guard route.isDefault else { return false }
            let existing = defaultRoutes.first {
                $0.family == route.family && $0.outputInterfaces == route.outputInterfaces && $0.priority == route.priority
                    && $0.gateway == route.gateway
            }
            if deleted {
                guard let existing else { return false }
                defaultRoutes.remove(existing)
                return true
            }
            if existing == route { return false }
            if let existing { defaultRoutes.remove(existing) }
            defaultRoutes.insert(route)
            return true
        case .done, .error, .overrun, .other:
            return false
        }
    }

    /// Forgets everything before a fresh dump (after an overrun).
    public mutating func reset() { self = PathTable() }

    public func evaluate() -> PathStatus {
        if defaultRoutes.isEmpty {
            let up = links.values.filter { !$0.isLoopback && $0.isUp && $0.isRunning }.map(\.name).sorted()
            return PathStatus(
                satisfied: false, interface: nil,
                reason: up.isEmpty
                    ? "no interface is up and running, and there is no default route" : "no default route (up: \(up.joined(separator: ", ")))")
        }
        var problems: [String] = []
        // Lowest metric first, IPv4 before IPv6 on ties, so the answer is stable.
        let routes = defaultRoutes.sorted { ($0.priority, $0.family.rawValue) < ($1.priority, $1.family.rawValue) }
        for route in routes {
            for index in route.outputInterfaces {
                guard let link = links[index] else {
                    problems.append("the \(route.family.name) default route leads through an unknown interface \(index)")
                    continue
                }
                if link.isLoopback { problems.append("the \(route.family.name) default route leads through loopback \(link.name)"); continue }
                if !link.isUp { problems.append("\(link.name) is down"); continue }
                if !link.isRunning { problems.append("\(link.name) has no carrier"); continue }
                let global = addresses.contains { $0.index == index && $0.family == route.family && $0.isGlobal }
                if !global { problems.append("\(link.name) has no global \(route.family.name) address"); continue }
                return PathStatus(satisfied: true, interface: link.name, reason: "\(route.family.name) default route via \(link.name)")
            }
        }
        let first = routes.first?.outputInterfaces.first.flatMap { links[$0]?.name }
        return PathStatus(satisfied: false, interface: first, reason: problems.isEmpty ? "no usable default route" : problems.joined(separator: "; "))
    }
}

/// What the path watcher asks the daemon to do.
public enum PathAction: Sendable, Equatable {
    /// Unsatisfied for the whole grace: downgrade if in `on` (modes-and-power §2.3).
    case lost(reason: String)
    /// Satisfied again after a loss that lasted the grace (modes-and-power §2.4).
    case restored(interface: String)
}

/// The grace of modes-and-power §4 as a state machine over observed statuses and an injected
/// monotonic clock: a flap shorter than the grace produces nothing.
public struct PathWatch: Sendable, Equatable {
    public let graceMs: Int64
    public private(set) var status: PathStatus?
    /// When the current status began (monotonic ms).
    public private(set) var sinceMs: Int64 = 0
    /// Whether `.lost` was emitted for the current outage.
    public private(set) var lossReported = false

    public init(graceMs: Int64) { self.graceMs = graceMs }

    /// The monotonic time at which `tick` will report a loss, if one is pending.
    public var deadlineMs: Int64? {
        guard let status, !status.satisfied, !lossReported else { return nil }
        return sinceMs + graceMs
    }

    public mutating func observe(_ new: PathStatus, nowMs: Int64) -> [PathAction] {
        defer { status = new }
        guard let old = status else {
            sinceMs = nowMs
            // At start, an already-satisfied path may end a downgrade persisted by an
            // earlier run; the mode rules decide whether that is news.
            if new.satisfied, let interface = new.interface { return [.restored(interface: interface)] }
            return tick(nowMs: nowMs, pending: new)
        }
        if old.satisfied != new.satisfied { sinceMs = nowMs }
        if new.satisfied {
            defer { lossReported = false }
            if !old.satisfied && lossReported, let interface = new.interface { return [.restored(interface: interface)] }
            return []
        }
        return tick(nowMs: nowMs, pending: new)
    }

    public mutating func tick(nowMs: Int64) -> [PathAction] {
        guard let status else { return [] }
        return tick(nowMs: nowMs, pending: status)
    }

    private mutating func tick(nowMs: Int64, pending: PathStatus) -> [PathAction] {
        guard !pending.satisfied, !lossReported, nowMs - sinceMs >= graceMs else { return [] }
        lossReported = true
        return [.lost(reason: "network path lost: \(pending.reason)")]
    }
}
