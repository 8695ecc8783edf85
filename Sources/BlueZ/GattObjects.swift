import DBus
import WorkerCore

/// The D-Bus objects of the worker's GATT application and advertisement, as BlueZ 5.66
/// reads them (doc/gatt-api.txt, doc/advertising-api.txt): values only, no bus.
enum GattObjects {
    static let root = "/org/edgecoder/worker"
    static let service = root + "/service0"
    static let request = service + "/request"
    static let response = service + "/response"
    static let status = service + "/status"
    static let advertisement = root + "/advertisement0"

    static let serviceInterface = "org.bluez.GattService1"
    static let characteristicInterface = "org.bluez.GattCharacteristic1"
    static let advertisementInterface = "org.bluez.LEAdvertisement1"
    static let objectManager = "org.freedesktop.DBus.ObjectManager"
    static let properties = "org.freedesktop.DBus.Properties"

    static let characteristics = [request, response, status]

    /// The properties of one object's interface; nil when the object has no such interface.
    /// `values` holds the characteristics' current values, `notifying` those subscribed.
    static func properties(path: String, interface: String, localName: String,
                           values: [String: [UInt8]], notifying: Set<String>) -> [(String, DBusValue)]? {
        switch (path, interface) {
        case (service, serviceInterface):
            return [("UUID", .string(BluetoothUUID.service)), ("Primary", .bool(true)),
                    ("Includes", .array(elementSignature: "o", []))]
        case (request, characteristicInterface):
            // write-without-response too: EdgeCoder's clients use both, and BlueZ then
            // passes every write as a no-reply call (errors travel in the protocol).
            return [("UUID", .string(BluetoothUUID.request)), ("Service", .objectPath(service)),
                    ("Flags", .strings(["write", "write-without-response"]))]
        case (response, characteristicInterface), (status, characteristicInterface):
            // No CCCD object: BlueZ adds the descriptor itself for notify characteristics.
            return [("UUID", .string(path == response ? BluetoothUUID.response : BluetoothUUID.status)),
                    ("Service", .objectPath(service)), ("Flags", .strings(["notify", "read"])),
                    ("Notifying", .bool(notifying.contains(path))), ("Value", .bytes(values[path] ?? []))]
        case (advertisement, advertisementInterface):
            // BlueZ 5.66 puts LocalName in the scan response (legacy advertising), which
            // leaves the 31-byte advertising data to the flags and the 128-bit service UUID.
            return [("Type", .string("peripheral")), ("ServiceUUIDs", .strings([BluetoothUUID.service])),
                    ("LocalName", .string(localName)), ("Discoverable", .bool(true))]
        default:
            return nil
        }
    }

    static func interfaces(of path: String) -> [String] {
        switch path {
        case service: [serviceInterface]
        case request, response, status: [characteristicInterface]
        case advertisement: [advertisementInterface]
        default: []
        }
    }

    /// `GetManagedObjects` of the application root: the service and its characteristics
    /// (the advertisement is registered separately).
    static func managedObjects(localName: String, values: [String: [UInt8]], notifying: Set<String>) -> DBusValue {
        let entries = ([service] + characteristics).map { path -> DBusDictEntry in
            let interfaces = self.interfaces(of: path).map { interface in
                DBusDictEntry(key: .string(interface),
                              value: .properties(properties(path: path, interface: interface, localName: localName, values: values, notifying: notifying) ?? []))
            }
            return DBusDictEntry(key: .objectPath(path), value: .dictionary(keySignature: "s", valueSignature: "a{sv}", interfaces))
        }
        return .dictionary(keySignature: "o", valueSignature: "a{sa{sv}}", entries)
    }
}

/// What bluetoothd's object tree says about adapters and devices.
struct BlueZObjects {
    struct Adapter: Equatable {
        var name: String
        var address: String?
        var powered: Bool
        var canAdvertise: Bool
    }

    struct Device: Equatable {
        var address: String
        var adapter: String
        var connected: Bool
        var name: String?
        var rssi: Int?
        var uuids: [String] = []
        var servicesResolved = false
    }

    /// GATT objects bluetoothd exports for a remote device (the central's side).
    struct RemoteCharacteristic: Equatable {
        var uuid: String
        var service: String
        var mtu: Int?
    }

    var adapters: [String: Adapter] = [:]
    var devices: [String: Device] = [:]
    var remoteServices: [String: (uuid: String, device: String)] = [:]
    var remoteCharacteristics: [String: RemoteCharacteristic] = [:]

    /// Reads a `GetManagedObjects` answer (a{oa{sa{sv}}}); anything malformed is skipped.
    init(managedObjects: DBusValue?) {
        guard case .dictionary(_, _, let entries)? = managedObjects else { return }
        for entry in entries {
            guard let path = entry.key.stringValue, let interfaces = entry.value.stringKeyedEntries else { continue }
            add(path: path, interfaces: interfaces)
        }
    }

    init() {}

    mutating func add(path: String, interfaces: [String: DBusValue]) {
        if let adapter = interfaces["org.bluez.Adapter1"]?.stringKeyedEntries {
            var entry = adapters[path] ?? Adapter(name: String(path.split(separator: "/").last ?? ""), address: nil, powered: false, canAdvertise: false)
            entry.address = adapter["Address"]?.stringValue ?? entry.address
            entry.powered = adapter["Powered"]?.boolValue ?? entry.powered
            adapters[path] = entry
        }
        if interfaces["org.bluez.LEAdvertisingManager1"] != nil { adapters[path]?.canAdvertise = true }
        if let device = interfaces["org.bluez.Device1"]?.stringKeyedEntries {
            let adapter = device["Adapter"]?.stringValue ?? String(path.split(separator: "/").dropLast().joined(separator: "/")).prefixedSlash
            var entry = devices[path] ?? Device(address: BlueZObjects.address(fromDevicePath: path), adapter: adapter, connected: false)
            entry.address = device["Address"]?.stringValue ?? entry.address
            entry.adapter = adapter
            update(&entry, with: device)
            devices[path] = entry
        }
        if let service = interfaces["org.bluez.GattService1"]?.stringKeyedEntries, let uuid = service["UUID"]?.stringValue,
           let device = service["Device"]?.stringValue {
            remoteServices[path] = (uuid.lowercased(), device)
        }
        if let characteristic = interfaces["org.bluez.GattCharacteristic1"]?.stringKeyedEntries, let uuid = characteristic["UUID"]?.stringValue,
           let service = characteristic["Service"]?.stringValue {
            remoteCharacteristics[path] = RemoteCharacteristic(uuid: uuid.lowercased(), service: service,
                                                               mtu: characteristic["MTU"]?.integerValue.map { Int($0) })
        }
    }

    /// Applies changed Device1 properties (from GetManagedObjects or PropertiesChanged).
    func update(_ device: inout Device, with properties: [String: DBusValue]) {
        if let connected = properties["Connected"]?.boolValue { device.connected = connected }
        // The advertised name (EdgeCoder-…) is what identifies a worker; once connected,
        // bluetoothd replaces Name with the GAP name the peer's host uses ("BlueZ 5.66").
        if let name = properties["Name"]?.stringValue ?? properties["Alias"]?.stringValue,
           device.name == nil || !(device.name!.hasPrefix("EdgeCoder-")) || name.hasPrefix("EdgeCoder-") {
            device.name = name
        }
        if let rssi = properties["RSSI"]?.integerValue, (-128...127).contains(rssi) { device.rssi = Int(rssi) }
        if let uuids = properties["UUIDs"]?.arrayValue?.compactMap(\.stringValue) { device.uuids = uuids.map { $0.lowercased() } }
        if let resolved = properties["ServicesResolved"]?.boolValue { device.servicesResolved = resolved }
    }

    /// The request, response and status characteristics of the worker service on `device`.
    func workerCharacteristics(of device: String) -> (request: String, response: String, status: String, mtu: Int?)? {
        guard let service = remoteServices.first(where: { $0.value.device == device && $0.value.uuid == BluetoothUUID.service })?.key else { return nil }
        let chars = remoteCharacteristics.filter { $0.value.service == service }
        func find(_ uuid: String) -> String? { chars.first { $0.value.uuid == uuid }?.key }
        guard let request = find(BluetoothUUID.request), let response = find(BluetoothUUID.response), let status = find(BluetoothUUID.status) else { return nil }
        return (request, response, status, chars[request]?.mtu)
    }

    mutating func remove(path: String, interfaces: [String]) {
        if interfaces.contains("org.bluez.Adapter1") { adapters.removeValue(forKey: path) }
        if interfaces.contains("org.bluez.LEAdvertisingManager1") { adapters[path]?.canAdvertise = false }
        if interfaces.contains("org.bluez.Device1") { devices.removeValue(forKey: path) }
        if interfaces.contains("org.bluez.GattService1") { remoteServices.removeValue(forKey: path) }
        if interfaces.contains("org.bluez.GattCharacteristic1") { remoteCharacteristics.removeValue(forKey: path) }
    }

    /// `/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF` → `AA:BB:CC:DD:EE:FF`.
    static func address(fromDevicePath path: String) -> String {
        guard let last = path.split(separator: "/").last, last.hasPrefix("dev_") else { return path }
        return last.dropFirst(4).replacingUnderscores
    }

    /// The adapter to use: the configured one, else the first powered (by name).
    func choose(configured: String?) -> (path: String, adapter: Adapter)? {
        if let configured {
            let path = "/org/bluez/" + configured
            return adapters[path].map { (path, $0) }
        }
        return adapters.sorted { $0.value.name < $1.value.name }.first { $0.value.powered }.map { ($0.key, $0.value) }
    }
}

private extension Substring {
    var replacingUnderscores: String { String(map { $0 == "_" ? ":" : $0 }) }
}

private extension String {
    var prefixedSlash: String { hasPrefix("/") ? self : "/" + self }
}
