extension CentralMachine {
    public enum Phase: Sendable, Equatable { case idle, connecting, resolving, subscribing, connected }

    /// The link to the worker, each phase holding only what is true in it: the worker's
    /// device object from the connect on, the deadline while the link is being made, the
    /// characteristics' paths once its services resolved. Losing the link is one
    /// assignment (`.idle`): nothing of the last worker stays behind for the next one.
    public enum Link: Sendable, Equatable {
        /// No worker: scanning, waiting out the backoff, or (`listOnly`) listing.
        case idle
        /// Connect sent to the device object; waiting for its answer.
        case connecting(device: String, deadlineMs: Int64)
        /// Connected; waiting for bluetoothd to resolve the worker's services.
        case resolving(device: String, deadlineMs: Int64)
        /// The notified characteristics asked for; `subscribed` holds the paths answered so far.
        case subscribing(device: String, deadlineMs: Int64, characteristics: [GattLayout.Role: String], subscribed: Set<String>)
        /// Every notified characteristic subscribed: requests are written.
        case connected(device: String, characteristics: [GattLayout.Role: String])

        public var phase: Phase {
            switch self {
            case .idle: .idle
            case .connecting: .connecting
            case .resolving: .resolving
            case .subscribing: .subscribing
            case .connected: .connected
            }
        }

        /// The worker's device object (its D-Bus path), from the connect on.
        public var device: String? {
            switch self {
            case .idle: nil
            case .connecting(let device, _), .resolving(let device, _), .subscribing(let device, _, _, _), .connected(let device, _): device
            }
        }

        /// When a link still being made has taken too long (`connectTimeoutMs` after the connect).
        public var deadlineMs: Int64? {
            switch self {
            case .idle, .connected: nil
            case .connecting(_, let deadlineMs), .resolving(_, let deadlineMs), .subscribing(_, let deadlineMs, _, _): deadlineMs
            }
        }

        /// The worker's characteristics by role, once its services resolved; else none.
        public var characteristics: [GattLayout.Role: String] {
            switch self {
            case .idle, .connecting, .resolving: [:]
            case .subscribing(_, _, let characteristics, _), .connected(_, let characteristics): characteristics
            }
        }
    }
}
