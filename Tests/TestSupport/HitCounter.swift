import Synchronization

/// A count that tasks and threads bump, read once they are done.
public final class HitCounter: Sendable {
    private let value = Mutex(0)
    public init() {}
    public func increment() { value.withLock { $0 += 1 } }
    public var count: Int { value.withLock { $0 } }
}
