extension CoordinatorLink {
    /// Whether this session is registered with the coordinator (the one source of truth:
    /// `status.registered` shows it when published), with the mesh token calls carry. The
    /// token is not the registration: one loaded from an earlier session is what a resume
    /// goes on with, a rejected worker keeps its own, and a coordinator may register
    /// without giving one. One caller registers at a time; the others wait for it here.
    enum Registration: Sendable {
        /// Not registered (yet, or any more).
        case unregistered(meshToken: String?)
        /// One caller is registering; `waiters` go on when its attempt ends, whatever it was.
        case registering(meshToken: String?, waiters: [CheckedContinuation<Void, Never>])
        case registered(meshToken: String?)

        var meshToken: String? {
            switch self {
            case .unregistered(let token), .registering(let token, _), .registered(let token): token
            }
        }

        var isRegistered: Bool { if case .registered = self { true } else { false } }

        /// The case, for the debug trace of its changes (never the token).
        var phase: String {
            switch self {
            case .unregistered(let token): token == nil ? "unregistered" : "unregistered (a mesh token kept)"
            case .registering(_, let waiters): waiters.isEmpty ? "registering" : "registering (\(waiters.count) waiting)"
            case .registered: "registered"
            }
        }

        /// Makes the caller the one registering: false while another caller is, or once registered.
        mutating func beginAttempt() -> Bool {
            guard case .unregistered(let token) = self else { return false }
            self = .registering(meshToken: token, waiters: [])
            return true
        }

        /// Waits for the attempt under way to end; goes on at once when none is.
        mutating func wait(_ waiter: CheckedContinuation<Void, Never>) {
            guard case .registering(let token, let waiters) = self else { return waiter.resume() }
            self = .registering(meshToken: token, waiters: waiters + [waiter])
        }

        /// The attempt under way registered, with `meshToken` from now on.
        mutating func registered(with meshToken: String?) {
            let waiters = endAttempt()
            self = .registered(meshToken: meshToken)
            for waiter in waiters { waiter.resume() }
        }

        /// The attempt under way ended without registering (a failure, a hold, a rejection,
        /// a cancel): its waiters go on and look again. Nothing when it registered.
        mutating func attemptEnded() {
            for waiter in endAttempt() { waiter.resume() }
        }

        /// The coordinator no longer takes this registration: a 401 (it forgot the agent or
        /// rotated its token: the token goes) or a rejection (the token stays). An attempt
        /// under way goes on, its waiters waiting.
        mutating func lapse(keepingMeshToken: Bool) {
            let token = keepingMeshToken ? meshToken : nil
            if case .registering(_, let waiters) = self {
                self = .registering(meshToken: token, waiters: waiters)
            } else {
                self = .unregistered(meshToken: token)
            }
        }

        /// Out of `.registering` (to unregistered): the waiters to resume.
        private mutating func endAttempt() -> [CheckedContinuation<Void, Never>] {
            guard case .registering(let token, let waiters) = self else { return [] }
            self = .unregistered(meshToken: token)
            return waiters
        }
    }
}
