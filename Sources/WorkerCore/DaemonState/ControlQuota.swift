/// How many control connections each peer may hold (issue 12 §3): any local user can
/// connect (the socket is 0666 so a refused reader learns why), so one user alone must
/// not fill the daemon's places, and root and the daemon's user always find one.
/// Root and the daemon's user count against a pool of their own; everyone else shares
/// the other pool, each user at most `perUser` of it. Decided at accept time from the
/// peer's credentials, before anything is read.
public struct ControlQuota: Sendable, Equatable {
    /// Places for each user other than root and the daemon's user.
    public let perUser: Int
    /// Places for all of those users together.
    public let shared: Int
    /// Places kept for root and the daemon's user, whatever the others hold.
    public let privileged: Int

    private var openByUser: [UInt32: Int] = [:]
    private var sharedOpen = 0
    private var privilegedOpen = 0

    /// The daemon's limits: 8 per user, 64 shared, 16 kept for root and the daemon's user.
    public init(perUser: Int = 8, shared: Int = 64, privileged: Int = 16) {
        self.perUser = perUser
        self.shared = shared
        self.privileged = privileged
    }

    /// Why a connection was refused.
    public enum Refusal: Sendable, Equatable {
        case userFull(uid: UInt32, limit: Int)
        case sharedFull(limit: Int)
        case privilegedFull(limit: Int)

        /// What the refused peer (and the log) reads.
        public var message: String {
            switch self {
            case .userFull(let uid, let limit):
                return "too many control connections: uid \(uid) already holds \(limit), the most one user may; close some and retry"
            case .sharedFull(let limit):
                return "too many control connections: other users hold all \(limit) places; retry later (root and the daemon's user are still served)"
            case .privilegedFull(let limit):
                return "too many control connections: root and the daemon's user already hold \(limit); close some (events --follow?) and retry"
            }
        }
    }

    /// Takes a place for a peer, or says why not.
    public mutating func enter(uid: UInt32, privileged isPrivileged: Bool) -> Refusal? {
        if isPrivileged {
            guard privilegedOpen < privileged else { return .privilegedFull(limit: privileged) }
            privilegedOpen += 1
            return nil
        }
        let held = openByUser[uid, default: 0]
        guard held < perUser else { return .userFull(uid: uid, limit: perUser) }
        guard sharedOpen < shared else { return .sharedFull(limit: shared) }
        openByUser[uid] = held + 1
        sharedOpen += 1
        return nil
    }

    /// Gives back a place taken by `enter`.
    public mutating func leave(uid: UInt32, privileged isPrivileged: Bool) {
        if isPrivileged {
            privilegedOpen -= 1
            return
        }
        sharedOpen -= 1
        let held = openByUser[uid, default: 1] - 1
        openByUser[uid] = held > 0 ? held : nil
    }

    /// Connections open now: (root and the daemon's user, everyone else).
    public var open: (privileged: Int, shared: Int) { (privilegedOpen, sharedOpen) }
}
