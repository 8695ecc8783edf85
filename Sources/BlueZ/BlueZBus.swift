import Logging
import DBus

/// What the peripheral and the central both do with the bus: open it, and follow
/// bluetoothd (its name, its objects, their properties).
enum BlueZBus {
    /// The system bus, or the bus at `address` (tests).
    static func open(address: String?) throws(BusFailure) -> Bus {
        if let address { return try Bus.connect(address: address) }
        return try Bus.system()
    }

    /// Subscribes to bluetoothd's comings and goings, its InterfacesAdded/Removed and its
    /// PropertiesChanged, and asks who owns org.bluez now (`owner` gets nil when nobody).
    /// No sender in the rules: sd-bus cannot match a well-known sender name locally
    /// against a unique one, so each handler checks that bluetoothd sent it. The
    /// handlers may hold their owner strongly: releasing the slots ends the cycle.
    static func follow(_ bus: Bus,
                       nameOwnerChanged: @escaping (BusMessage) -> Void,
                       objectsChanged: @escaping (BusMessage) -> Void,
                       propertiesChanged: @escaping (BusMessage) -> Void,
                       owner: @escaping (String?) -> Void) throws(BusFailure) -> [BusSlot] {
        let slots = [
            try bus.addMatch("type='signal',interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='org.bluez'", handler: nameOwnerChanged),
            try bus.addMatch("type='signal',interface='org.freedesktop.DBus.ObjectManager',path='/'", handler: objectsChanged),
            try bus.addMatch("type='signal',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',path_namespace='/org/bluez'",
                             handler: propertiesChanged),
        ]
        try bus.call(destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                     member: "GetNameOwner", arguments: [.string("org.bluez")]) { result in
            if case .success(let args) = result, let name = args.first?.stringValue, !name.isEmpty { owner(name) } else { owner(nil) }
        }
        return slots
    }

    /// The new owner of org.bluez from a NameOwnerChanged signal ("" when it left), or
    /// nil when the signal is not the bus daemon's about org.bluez.
    static func newOwner(_ message: BusMessage) -> String? {
        guard message.sender == "org.freedesktop.DBus", let args = try? message.arguments(), args.count == 3,
              args[0].stringValue == "org.bluez" else { return nil }
        return args[2].stringValue ?? ""
    }
}

/// An actor that owns a bus connection and drives it from the reactor: the loop that
/// (re)connects, processes and waits, shared by the peripheral and the central.
protocol BusDriving: Actor {
    var bus: Bus? { get }
    var busWaiter: Task<Void, Never>? { get set }
    var reconnectDelayMs: Int64 { get }
    var logger: Logger { get }
    /// Opens the bus and sets `bus` (nil when it cannot, with the reason recorded).
    func connectBus()
    func dropBus(reason: String)
    /// Runs after each round of processing (publishing state, for example).
    func processed() async
}

extension BusDriving {
    func busLoop() async {
        while !Task.isCancelled {
            if bus == nil {
                connectBus()
                if bus == nil {
                    await processed()
                    try? await Task.sleep(nanoseconds: UInt64(reconnectDelayMs) * 1_000_000)
                    continue
                }
            }
            guard let bus else { continue }
            do {
                while try bus.process() {}
            } catch {
                logger.warning("the system bus connection failed: \(error); reconnecting")
                dropBus(reason: "the system bus connection was lost: \(error)")
                continue
            }
            await processed()
            // Suspends until the fd is ready, the timeout passes, or kickBus() (something
            // was queued, a call with a timeout was made), never holding the actor.
            let waiter = busWaitTask(fd: bus.fileDescriptor, events: bus.events, deadlineUsec: bus.timeoutUsec)
            busWaiter = waiter
            await withTaskCancellationHandler { await waiter.value } onCancel: { waiter.cancel() }
            busWaiter = nil
        }
    }

    func kickBus() { busWaiter?.cancel() }
}
