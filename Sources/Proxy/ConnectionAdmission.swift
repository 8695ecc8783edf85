/// Who may open one more connection to a server with a global cap and a cap per client
/// address, and which open connection makes room (issue #26): clients that stopped reading
/// must not lock everyone else out, so at a cap the connection that has made no progress
/// for longest is evicted, provided it has been still for at least `minimumStillNs`
/// (a connection busy reading or writing is never cut for a newcomer).
public enum ConnectionAdmission {
    /// One open connection as the decision sees it.
    public struct Open: Sendable, Equatable {
        public var id: Int
        public var address: String
        /// CLOCK_MONOTONIC time of its last byte read or written (or of its accept).
        public var lastProgressNs: UInt64
        public init(id: Int, address: String, lastProgressNs: UInt64) {
            self.id = id
            self.address = address
            self.lastProgressNs = lastProgressNs
        }
    }

    public struct Limits: Sendable, Equatable {
        public var total: Int
        public var perAddress: Int
        public var minimumStillNs: UInt64
        public init(total: Int, perAddress: Int, minimumStillNs: UInt64) {
            self.total = total
            self.perAddress = perAddress
            self.minimumStillNs = minimumStillNs
        }
    }

    public enum Decision: Sendable, Equatable {
        case admit
        /// Admit after closing this connection.
        case admitEvicting(id: Int)
        /// Refuse; the reason is for the client.
        case refuse(String)
    }

    public static func decide(open: [Open], address: String, limits: Limits, nowNs: UInt64) -> Decision {
        let sameAddress = open.filter { $0.address == address }
        if sameAddress.count >= max(0, limits.perAddress) {
            guard let stalest = stalest(sameAddress, limits: limits, nowNs: nowNs) else {
                return .refuse("too many connections from \(address); try again")
            }
            return .admitEvicting(id: stalest.id)
        }
        if open.count >= max(0, limits.total) {
            guard let stalest = stalest(open, limits: limits, nowNs: nowNs) else { return .refuse("too many connections; try again") }
            return .admitEvicting(id: stalest.id)
        }
        return .admit
    }

    /// The connection still for longest, if it has been still for the minimum; ties go to
    /// the lowest id (the oldest connection), so the choice is stable.
    static func stalest(_ candidates: [Open], limits: Limits, nowNs: UInt64) -> Open? {
        let oldest = candidates.min { ($0.lastProgressNs, $0.id) < ($1.lastProgressNs, $1.id) }
        guard let oldest, nowNs >= oldest.lastProgressNs, nowNs - oldest.lastProgressNs >= limits.minimumStillNs else { return nil }
        return oldest
    }
}
