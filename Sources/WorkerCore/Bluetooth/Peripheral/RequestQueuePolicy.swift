/// The bounded queue of protocol-bluetooth §1: requests wait for the model backend; one beyond
/// `maxQueued` (counting the one running) is answered `busy` at once.
public struct RequestQueuePolicy: Sendable, Equatable {
    public let maxQueued: Int
    public init(maxQueued: Int) { self.maxQueued = max(1, maxQueued) }

    public func admits(waiting: Int, running: Int) -> Bool { waiting + running < maxQueued }

    public static let busyError = "busy: the worker's request queue is full (bluetooth.maxQueuedRequests); try again shortly"
}
