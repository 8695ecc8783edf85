#if canImport(Glibc)
import Glibc
#endif
import Logging
import DBus
import Posix
import WorkerCore

/// What the peripheral and the central both do with the bus: open it, follow bluetoothd
/// (its name, its objects, their properties) and decode what it says into `BlueZSignal`s
/// for their state machines. The one place that reads bluetoothd's D-Bus shapes.
enum BlueZBus {
    /// The system bus, or the bus at `address` (tests).
    static func open(address: String?) throws(BusFailure) -> Bus {
        if let address { return try Bus.connect(address: address) }
        return try Bus.system()
    }

    /// Subscribes to bluetoothd's comings and goings, its InterfacesAdded/Removed and its
    /// PropertiesChanged, and asks who owns org.bluez now. No sender in the rules: sd-bus
    /// cannot match a well-known sender name locally against a unique one, so a signal
    /// counts only when it comes from `owner()`, bluetoothd's unique name as followed.
    /// `signal` may hold its owner strongly: releasing the slots ends the cycle.
    static func follow(_ bus: Bus, owner: @escaping () -> String?, signal: @escaping (BlueZSignal) -> Void) throws(BusFailure) -> [BusSlot] {
        let slots = [
            try bus.addMatch("type='signal',interface='org.freedesktop.DBus',member='NameOwnerChanged',arg0='org.bluez'") { message in
                if let newOwner = newOwner(message) { signal(.owner(newOwner)) }
            },
            try bus.addMatch("type='signal',interface='org.freedesktop.DBus.ObjectManager',path='/'") { message in
                guard message.sender != nil, message.sender == owner() else { return }
                if let decoded = objectsChanged(message) { signal(decoded) }
            },
            try bus.addMatch("type='signal',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged',path_namespace='/org/bluez'") {
                message in
                guard message.sender != nil, message.sender == owner() else { return }
                if let decoded = propertiesChanged(message) { signal(decoded) }
            },
        ]
        try bus.call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            member: "GetNameOwner", arguments: [.string("org.bluez")]
        ) { result in
            if case .success(let args) = result, let name = args.first?.stringValue, !name.isEmpty {
                signal(.owner(name))
            } else {
                signal(.owner(nil))
            }
        }
        return slots
    }

    /// Asks bluetoothd for its whole object tree; the answer arrives as `.managedObjects`.
    static func loadObjects(_ bus: Bus, signal: @escaping (BlueZSignal) -> Void) {
        try? bus.call(destination: "org.bluez", path: "/", interface: "org.freedesktop.DBus.ObjectManager", member: "GetManagedObjects") { result in
            guard case .success(let args) = result else { return }
            signal(.managedObjects(managedObjects(args.first)))
        }
    }

    /// The new owner of org.bluez from a NameOwnerChanged signal ("" when it left), or
    /// nil when the signal is not the bus daemon's about org.bluez.
    static func newOwner(_ message: BusMessage) -> String? {
        guard message.sender == "org.freedesktop.DBus", let args = try? message.arguments(), args.count == 3,
            args[0].stringValue == "org.bluez"
        else { return nil }
        return args[2].stringValue ?? ""
    }

    static func objectsChanged(_ message: BusMessage) -> BlueZSignal? {
        guard let args = try? message.arguments(), args.count == 2, let path = args[0].stringValue else { return nil }
        switch message.member {
        case "InterfacesAdded":
            guard let interfaces = args[1].stringKeyedEntries else { return nil }
            return .interfacesAdded(path: path, decode(interfaces))
        case "InterfacesRemoved":
            guard let names = args[1].arrayValue?.compactMap(\.stringValue) else { return nil }
            return .interfacesRemoved(path: path, Set(names.compactMap(BlueZInterfaceName.init(rawValue:))))
        default:
            return nil
        }
    }

    static func propertiesChanged(_ message: BusMessage) -> BlueZSignal? {
        guard let path = message.path, let args = try? message.arguments(), args.count >= 2,
            let interface = args[0].stringValue, let changed = args[1].stringKeyedEntries
        else { return nil }
        guard let name = BlueZInterfaceName(rawValue: interface) else { return nil }
        if name == .gattCharacteristic, let value = changed["Value"]?.bytesValue { return .characteristicValue(path: path, value) }
        return .propertiesChanged(path: path, decode([name.rawValue: .properties(changed.map { ($0.key, $0.value) })]))
    }

    /// A `GetManagedObjects` answer (a{oa{sa{sv}}}); anything malformed is skipped.
    static func managedObjects(_ value: DBusValue?) -> [String: BlueZInterfaces] {
        guard case .dictionary(_, _, let entries)? = value else { return [:] }
        var tree: [String: BlueZInterfaces] = [:]
        for entry in entries {
            guard let path = entry.key.stringValue, let interfaces = entry.value.stringKeyedEntries else { continue }
            tree[path] = decode(interfaces)
        }
        return tree
    }

    /// One object's interfaces (a{sa{sv}}), decoded; values of the wrong type are ignored.
    static func decode(_ interfaces: [String: DBusValue]) -> BlueZInterfaces {
        var decoded = BlueZInterfaces()
        if let adapter = interfaces[BlueZInterfaceName.adapter.rawValue]?.stringKeyedEntries {
            decoded.adapter = .init(
                address: adapter["Address"]?.stringValue, powered: adapter["Powered"]?.boolValue,
                discovering: adapter["Discovering"]?.boolValue,
                discoverable: adapter["Discoverable"]?.boolValue)
        }
        decoded.advertisingManager = interfaces[BlueZInterfaceName.advertisingManager.rawValue] != nil
        if let device = interfaces[BlueZInterfaceName.device.rawValue]?.stringKeyedEntries {
            decoded.device = .init(
                address: device["Address"]?.stringValue, adapter: device["Adapter"]?.stringValue,
                connected: device["Connected"]?.boolValue,
                name: device["Name"]?.stringValue ?? device["Alias"]?.stringValue,
                rssi: device["RSSI"]?.integerValue.flatMap { Int(exactly: $0) },
                uuids: device["UUIDs"]?.arrayValue?.compactMap(\.stringValue),
                servicesResolved: device["ServicesResolved"]?.boolValue,
                bonded: device["Bonded"]?.boolValue ?? device["Paired"]?.boolValue,
                addressType: device["AddressType"]?.stringValue,
                classOfDevice: device["Class"]?.integerValue.flatMap { UInt32(exactly: $0) })
        }
        if let service = interfaces[BlueZInterfaceName.gattService.rawValue]?.stringKeyedEntries,
            let uuid = service["UUID"]?.stringValue, let device = service["Device"]?.stringValue
        {
            decoded.gattService = (uuid, device)
        }
        if let characteristic = interfaces[BlueZInterfaceName.gattCharacteristic.rawValue]?.stringKeyedEntries,
            let uuid = characteristic["UUID"]?.stringValue, let service = characteristic["Service"]?.stringValue
        {
            decoded.gattCharacteristic = .init(
                uuid: uuid, service: service,
                mtu: characteristic["MTU"]?.integerValue.flatMap { Int(exactly: $0) })
        }
        return decoded
    }
}

extension BlueZObjects {
    /// Reads a `GetManagedObjects` answer (a{oa{sa{sv}}}); anything malformed is skipped.
    init(managedObjects: DBusValue?) {
        self.init(objects: BlueZBus.managedObjects(managedObjects).sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
    }
}

extension Logger {
    /// A line a state machine asked for, at its level.
    func log(_ level: MachineLogLevel, _ message: String) {
        switch level {
        case .debug: debug(message)
        case .info: info(message)
        case .notice: notice(message)
        case .warning: warning(message)
        }
    }
}
