import Logging
import Posix

/// An actor that owns a bus connection and drives it from the reactor: one loop that
/// (re)connects, dispatches, runs its owner's deadlines and waits for the bus's fd, its
/// own wake-up or the next deadline in one reactor call. The BlueZ peripheral and central
/// and the host bus link run it; none starts a task of its own for its bus.
package protocol BusDriving: Actor {
    var bus: Bus? { get }
    nonisolated var wake: WakeEvent { get }
    var reconnectDelayMs: Int64 { get }
    var logger: Logger { get }
    /// Opens the bus and sets `bus` (nil when it cannot, with the reason recorded).
    func connectBus()
    /// The connection failed: forget it (and what hangs on it) for `reason`.
    func dropBus(reason: String)
    /// Runs after each round of dispatching (a machine's clock tick); returns the
    /// monotonic time (ms) of the owner's next deadline, nil for none.
    func processed() async -> Int64?
}

extension BusDriving {
    /// Runs until the task is cancelled; a lost connection is opened again after
    /// `reconnectDelayMs`.
    package func busLoop() async {
        while !Task.isCancelled {
            if bus == nil {
                connectBus()
                if bus == nil {
                    _ = await processed()
                    try? await Task.sleep(nanoseconds: UInt64(reconnectDelayMs) * 1_000_000)
                    continue
                }
            }
            guard let bus else { continue }
            do {
                try bus.dispatchReady()
            } catch {
                logger.warning("the system bus connection failed: \(error); reconnecting")
                dropBus(reason: "the system bus connection was lost: \(error)")
                continue
            }
            let deadlineMs = await processed()
            guard self.bus === bus else { continue }
            await bus.prepareWait(wake: wake, deadlineNs: deadlineMs.map { UInt64(max(0, $0)) * 1_000_000 }).wait()
        }
    }

    /// Wakes the loop now (something was queued from outside a bus handler).
    package nonisolated func kickBus() { wake.signal() }
}
