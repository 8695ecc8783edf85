import Glibc
import Posix

extension Bus {
    /// Dispatches every message and timer sd-bus has ready; throws when the connection failed.
    public func dispatchReady() throws(BusFailure) {
        while try process() {}
    }

    /// The end of a round of driving the connection, the same for every loop that drives
    /// one: what the round queued (notifications, calls, replies) is flushed as far as the
    /// socket takes it without blocking, then the wait is set up for the bus's input (or
    /// output it still holds), `wake`, the caller's `extra` descriptors, and the earlier of
    /// `deadlineNs` (monotonic) and sd-bus's own next timeout (a call's reply deadline).
    public func prepareWait(wake: WakeEvent, extra: [Reactor.Interest] = [], deadlineNs: UInt64?) -> BusWait {
        if events & Int16(POLLOUT) != 0 { _ = try? process() }
        var deadline = deadlineNs
        if let busUsec = timeoutUsec {
            let busNs = busUsec &* 1_000
            deadline = min(deadline ?? busNs, busNs)
        }
        // sd-bus asks for nothing while it has nothing to send and no call pending; input
        // (a signal, a method call) can still come.
        let interests = [
            Reactor.Interest(fd: fileDescriptor, events: events == 0 ? Int16(POLLIN) : events),
            Reactor.Interest(fd: wake.fileDescriptor, events: Int16(POLLIN)),
        ]
        return BusWait(interests: interests + extra, deadlineNs: deadline, wake: wake)
    }
}

/// A wait set up by `Bus.prepareWait`: a value, so that an actor can await it without
/// handing its (non-Sendable) connection across.
public struct BusWait: Sendable {
    public let interests: [Reactor.Interest]
    public let deadlineNs: UInt64?
    let wake: WakeEvent

    /// Waits on the reactor until one of the descriptors is ready or the deadline passes,
    /// then clears the wake-up.
    public func wait() async {
        _ = try? await Reactor.shared.wait(interests, deadlineNs: deadlineNs)
        wake.drain()
    }
}
