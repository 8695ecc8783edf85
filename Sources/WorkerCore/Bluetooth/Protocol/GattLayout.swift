/// The worker's GATT service of protocol-bluetooth §1 as one declarative table: the service, each
/// characteristic with its UUID, object path and flags, and what the peripheral does with
/// it (the way `bluer`'s `Characteristic { read, write, notify }` declares a service).
/// The D-Bus objects, the peripheral's dispatch, the central's discovery and the tests'
/// stand-in bluetoothd all read this table: adding a characteristic or changing its flags
/// is one edit here.
public enum GattLayout {
    /// What the peripheral does with a characteristic.
    public enum Role: String, Sendable, CaseIterable {
        /// Clients write requests into it.
        case request
        /// Answers are notified on it; its read value is the last chunk sent.
        case response
        /// The worker's model state and battery, notified and readable.
        case status
    }

    /// A GATT characteristic property, spelled as BlueZ's `Flags` spells it (gatt-api.txt).
    public enum Property: String, Sendable {
        case read
        case write
        case writeWithoutResponse = "write-without-response"
        case notify

        public var allowsRead: Bool { self == .read }
        public var allowsWrite: Bool { self == .write || self == .writeWithoutResponse }
    }

    public struct Characteristic: Sendable, Equatable {
        public var role: Role
        public var uuid: String
        /// The object path of the characteristic in the worker's application.
        public var path: String
        public var properties: [Property]

        public var flags: [String] { properties.map(\.rawValue) }
        public var readable: Bool { properties.contains(.read) }
        public var writable: Bool { properties.contains { $0.allowsWrite } }
        public var notifies: Bool { properties.contains(.notify) }
    }

    /// The application's root (its ObjectManager).
    public static let root = "/org/edgecoder/worker"
    public static let servicePath = root + "/service0"
    public static let advertisementPath = root + "/advertisement0"
    public static let serviceUUID = BluetoothUUID.service

    /// The characteristics, in the order BlueZ lists them.
    public static let characteristics: [Characteristic] = [
        // write-without-response too: EdgeCoder's clients use both, and BlueZ then passes
        // every write as a no-reply call (so errors travel in the protocol's own response).
        Characteristic(
            role: .request, uuid: BluetoothUUID.request, path: servicePath + "/request",
            properties: [.write, .writeWithoutResponse]),
        // No CCCD objects: BlueZ adds the descriptor itself for notify characteristics.
        Characteristic(
            role: .response, uuid: BluetoothUUID.response, path: servicePath + "/response",
            properties: [.notify, .read]),
        Characteristic(
            role: .status, uuid: BluetoothUUID.status, path: servicePath + "/status",
            properties: [.notify, .read]),
    ]

    public static func characteristic(_ role: Role) -> Characteristic {
        characteristics.first { $0.role == role }!
    }

    public static func characteristic(path: String) -> Characteristic? {
        characteristics.first { $0.path == path }
    }

    public static func characteristic(uuid: String) -> Characteristic? {
        let wanted = uuid.lowercased()
        return characteristics.first { $0.uuid == wanted }
    }

    /// The characteristics a client subscribes to.
    public static var notified: [Characteristic] { characteristics.filter(\.notifies) }
}
