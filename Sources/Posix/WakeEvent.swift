#if canImport(Glibc)
import Glibc
#endif
import CWorkerShims

/// An eventfd that wakes an event loop waiting in `Reactor.wait`: `signal()` from any
/// thread or task, `drain()` by the loop once it is awake. Lets an actor's loop wait for
/// its bus, a deadline and "something was queued" in one reactor call, with no task
/// started just to be cancelled as a wake-up.
public final class WakeEvent: Sendable {
    public let fileDescriptor: Int32

    /// Without an eventfd (the process is out of descriptors) the fd is -1, which poll(2)
    /// ignores: the loop then wakes only for its bus and its deadlines, never wrongly.
    public init() {
        fileDescriptor = (try? systemCall("eventfd") { ecw_eventfd_nonblocking() }) ?? -1
    }

    deinit { if fileDescriptor >= 0 { close(fileDescriptor) } }

    public func signal() {
        var one: UInt64 = 1
        _ = write(fileDescriptor, &one, 8)
    }

    public func drain() {
        var counter: UInt64 = 0
        _ = read(fileDescriptor, &counter, 8)
    }
}
