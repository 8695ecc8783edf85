import DBus
import WorkerCore

/// The D-Bus objects of the worker's GATT application and advertisement, as BlueZ 5.66
/// reads them (doc/gatt-api.txt, doc/advertising-api.txt), rendered from `GattLayout`:
/// values only, no bus.
enum GattObjects {
    static let root = GattLayout.root
    static let service = GattLayout.servicePath
    static let request = GattLayout.characteristic(.request).path
    static let response = GattLayout.characteristic(.response).path
    static let status = GattLayout.characteristic(.status).path
    static let advertisement = GattLayout.advertisementPath
    /// The Just Works pairing agent (org.bluez.Agent1), under the root so one fallback
    /// handler serves it; it is no GATT object, so GetManagedObjects leaves it out.
    static let agent = GattLayout.root + "/pairing_agent"

    static let serviceInterface = "org.bluez.GattService1"
    static let characteristicInterface = "org.bluez.GattCharacteristic1"
    static let advertisementInterface = "org.bluez.LEAdvertisement1"
    static let objectManager = "org.freedesktop.DBus.ObjectManager"
    static let properties = "org.freedesktop.DBus.Properties"

    static let characteristics = GattLayout.characteristics.map(\.path)

    /// The properties of one object's interface; nil when the object has no such interface.
    /// `values` holds the characteristics' current values, `notifying` those subscribed.
    static func properties(
        path: String, interface: String, localName: String,
        values: [String: [UInt8]], notifying: Set<String>, security: BluetoothSecurity = .open
    ) -> [(String, DBusValue)]? {
        if path == service && interface == serviceInterface {
            return [
                ("UUID", .string(GattLayout.serviceUUID)), ("Primary", .bool(true)),
                ("Includes", .array(elementSignature: "o", [])),
            ]
        }
        if interface == characteristicInterface, let characteristic = GattLayout.characteristic(path: path) {
            var properties: [(String, DBusValue)] = [
                ("UUID", .string(characteristic.uuid)), ("Service", .objectPath(service)),
                ("Flags", .strings(security.flags(characteristic.properties))),
            ]
            if characteristic.notifies { properties.append(("Notifying", .bool(notifying.contains(path)))) }
            if characteristic.readable || characteristic.notifies { properties.append(("Value", .bytes(values[path] ?? []))) }
            return properties
        }
        if path == advertisement && interface == advertisementInterface {
            // BlueZ 5.66 puts LocalName in the scan response (legacy advertising), which
            // leaves the 31-byte advertising data to the flags and the 128-bit service UUID.
            return [
                ("Type", .string("peripheral")), ("ServiceUUIDs", .strings([GattLayout.serviceUUID])),
                ("LocalName", .string(localName)), ("Discoverable", .bool(true)),
            ]
        }
        return nil
    }

    static func interfaces(of path: String) -> [String] {
        if path == service { return [serviceInterface] }
        if GattLayout.characteristic(path: path) != nil { return [characteristicInterface] }
        if path == advertisement { return [advertisementInterface] }
        return []
    }

    /// `GetManagedObjects` of the application root: the service and its characteristics
    /// (the advertisement is registered separately).
    static func managedObjects(localName: String, values: [String: [UInt8]], notifying: Set<String>, security: BluetoothSecurity = .open) -> DBusValue
    {
        let entries = ([service] + characteristics).map { path -> DBusDictEntry in
            let interfaces = self.interfaces(of: path).map { interface in
                DBusDictEntry(
                    key: .string(interface),
                    value: .properties(
                        properties(path: path, interface: interface, localName: localName, values: values, notifying: notifying, security: security)
                            ?? []))
            }
            return DBusDictEntry(key: .objectPath(path), value: .dictionary(keySignature: "s", valueSignature: "a{sv}", interfaces))
        }
        return .dictionary(keySignature: "o", valueSignature: "a{sa{sv}}", entries)
    }
}
