/// What bluetoothd's object tree says about adapters, devices and remote GATT objects, as
/// values. The BlueZ adapter decodes D-Bus into `BlueZInterfaces`; everything here is pure,
/// and shared by the peripheral's and the central's state machines (`BlueZFollower`).

/// The interfaces of one bluetoothd object that the worker reads, already decoded.
/// A nil member: the object has no such interface (or the update does not touch it).
public struct BlueZInterfaces: Sendable, Equatable {
    public struct Adapter: Sendable, Equatable {
        public var address: String?
        public var powered: Bool?
        public var discovering: Bool?
        /// `Discoverable`: inquiry scan on, so Bluetooth Classic devices can find and page it.
        public var discoverable: Bool?
        public init(address: String? = nil, powered: Bool? = nil, discovering: Bool? = nil, discoverable: Bool? = nil) {
            self.address = address
            self.powered = powered
            self.discovering = discovering
            self.discoverable = discoverable
        }
    }

    public struct Device: Sendable, Equatable {
        public var address: String?
        public var adapter: String?
        public var connected: Bool?
        public var name: String?
        public var rssi: Int?
        public var uuids: [String]?
        public var servicesResolved: Bool?
        /// BlueZ's `Bonded` (5.66 and later), else `Paired`.
        public var bonded: Bool?
        /// `AddressType`: "public" or "random" (only LE uses random addresses).
        public var addressType: String?
        /// `Class`: the Class of Device, which only Bluetooth Classic (BR/EDR) carries.
        public var classOfDevice: UInt32?
        public init(
            address: String? = nil, adapter: String? = nil, connected: Bool? = nil, name: String? = nil, rssi: Int? = nil,
            uuids: [String]? = nil, servicesResolved: Bool? = nil, bonded: Bool? = nil,
            addressType: String? = nil, classOfDevice: UInt32? = nil
        ) {
            self.bonded = bonded
            self.addressType = addressType
            self.classOfDevice = classOfDevice
            self.address = address
            self.adapter = adapter
            self.connected = connected
            self.name = name
            self.rssi = rssi
            self.uuids = uuids
            self.servicesResolved = servicesResolved
        }
    }

    public struct Characteristic: Sendable, Equatable {
        public var uuid: String
        public var service: String
        public var mtu: Int?
        public init(uuid: String, service: String, mtu: Int? = nil) {
            self.uuid = uuid
            self.service = service
            self.mtu = mtu
        }
    }

    public var adapter: Adapter?
    public var advertisingManager = false
    public var device: Device?
    public var gattService: (uuid: String, device: String)?
    public var gattCharacteristic: Characteristic?

    public init(
        adapter: Adapter? = nil, advertisingManager: Bool = false, device: Device? = nil,
        gattService: (uuid: String, device: String)? = nil, gattCharacteristic: Characteristic? = nil
    ) {
        self.adapter = adapter
        self.advertisingManager = advertisingManager
        self.device = device
        self.gattService = gattService
        self.gattCharacteristic = gattCharacteristic
    }

    public static func == (lhs: BlueZInterfaces, rhs: BlueZInterfaces) -> Bool {
        lhs.adapter == rhs.adapter && lhs.advertisingManager == rhs.advertisingManager && lhs.device == rhs.device
            && lhs.gattService?.uuid == rhs.gattService?.uuid && lhs.gattService?.device == rhs.gattService?.device
            && lhs.gattCharacteristic == rhs.gattCharacteristic
    }
}

/// An interface name of bluetoothd's that the worker follows (for InterfacesRemoved).
public enum BlueZInterfaceName: String, Sendable, CaseIterable {
    case adapter = "org.bluez.Adapter1"
    case advertisingManager = "org.bluez.LEAdvertisingManager1"
    case device = "org.bluez.Device1"
    case gattService = "org.bluez.GattService1"
    case gattCharacteristic = "org.bluez.GattCharacteristic1"
}

/// bluetoothd's adapters, devices and remote GATT objects, by object path.
public struct BlueZObjects: Sendable, Equatable {
    public struct Adapter: Sendable, Equatable {
        public var name: String
        public var address: String?
        public var powered: Bool
        public var canAdvertise: Bool
        /// Classic devices can page it and pair (bluetoothd 5.66 shows `Discoverable`, not
        /// the bare `Connectable`): docs/operating/bluetooth-pairing.md, "Bluetooth Classic".
        public var discoverable: Bool
        public init(name: String, address: String?, powered: Bool, canAdvertise: Bool, discoverable: Bool = false) {
            self.name = name
            self.address = address
            self.powered = powered
            self.canAdvertise = canAdvertise
            self.discoverable = discoverable
        }
    }

    public struct Device: Sendable, Equatable {
        public var address: String
        public var adapter: String
        public var connected: Bool
        public var name: String?
        public var rssi: Int?
        public var uuids: [String] = []
        public var servicesResolved = false
        public var bonded = false
        /// What decides whether the worker's Just Works agent may pair it (`DeviceTransport`).
        public var addressType: String?
        public var classOfDevice: UInt32?
        public init(address: String, adapter: String, connected: Bool, name: String? = nil, rssi: Int? = nil) {
            self.address = address
            self.adapter = adapter
            self.connected = connected
            self.name = name
            self.rssi = rssi
        }
    }

    public struct RemoteService: Sendable, Equatable {
        public var uuid: String
        public var device: String
    }

    public var adapters: [String: Adapter] = [:]
    public var devices: [String: Device] = [:]
    public var remoteServices: [String: RemoteService] = [:]
    public var remoteCharacteristics: [String: BlueZInterfaces.Characteristic] = [:]

    public init() {}

    public init(objects: [(path: String, interfaces: BlueZInterfaces)]) {
        for (path, interfaces) in objects { add(path: path, interfaces) }
    }

    public mutating func add(path: String, _ interfaces: BlueZInterfaces) {
        if let adapter = interfaces.adapter {
            var entry =
                adapters[path] ?? Adapter(name: String(path.split(separator: "/").last ?? ""), address: nil, powered: false, canAdvertise: false)
            entry.address = adapter.address ?? entry.address
            entry.powered = adapter.powered ?? entry.powered
            entry.discoverable = adapter.discoverable ?? entry.discoverable
            adapters[path] = entry
        }
        if interfaces.advertisingManager { adapters[path]?.canAdvertise = true }
        if let device = interfaces.device {
            let adapter = device.adapter ?? BlueZObjects.parent(of: path)
            var entry = devices[path] ?? Device(address: BlueZObjects.address(fromDevicePath: path), adapter: adapter, connected: false)
            entry.address = device.address ?? entry.address
            entry.adapter = adapter
            BlueZObjects.update(&entry, with: device)
            devices[path] = entry
        }
        if let service = interfaces.gattService {
            remoteServices[path] = RemoteService(uuid: service.uuid.lowercased(), device: service.device)
        }
        if var characteristic = interfaces.gattCharacteristic {
            characteristic.uuid = characteristic.uuid.lowercased()
            remoteCharacteristics[path] = characteristic
        }
    }

    public mutating func remove(path: String, interfaces: Set<BlueZInterfaceName>) {
        if interfaces.contains(.adapter) { adapters.removeValue(forKey: path) }
        if interfaces.contains(.advertisingManager) { adapters[path]?.canAdvertise = false }
        if interfaces.contains(.device) { devices.removeValue(forKey: path) }
        if interfaces.contains(.gattService) { remoteServices.removeValue(forKey: path) }
        if interfaces.contains(.gattCharacteristic) { remoteCharacteristics.removeValue(forKey: path) }
    }

    /// Applies changed Device1 properties (from GetManagedObjects, GetAll or PropertiesChanged).
    public static func update(_ device: inout Device, with properties: BlueZInterfaces.Device) {
        if let connected = properties.connected { device.connected = connected }
        // The advertised name (EdgeCoder-…) is what identifies a worker; once connected,
        // bluetoothd replaces Name with the GAP name the peer's host uses ("BlueZ 5.66").
        if let name = properties.name, device.name == nil || !(device.name!.hasPrefix("EdgeCoder-")) || name.hasPrefix("EdgeCoder-") {
            device.name = name
        }
        if let rssi = properties.rssi, (-128...127).contains(rssi) { device.rssi = rssi }
        if let uuids = properties.uuids { device.uuids = uuids.map { $0.lowercased() } }
        if let resolved = properties.servicesResolved { device.servicesResolved = resolved }
        if let bonded = properties.bonded { device.bonded = bonded }
        if let type = properties.addressType { device.addressType = type }
        if let cod = properties.classOfDevice { device.classOfDevice = cod }
    }

    /// The worker service's characteristics on a remote `device`, by role; nil until every
    /// characteristic of `GattLayout` is there.
    public func workerCharacteristics(of device: String) -> (paths: [GattLayout.Role: String], mtu: Int?)? {
        guard let service = remoteServices.first(where: { $0.value.device == device && $0.value.uuid == GattLayout.serviceUUID })?.key else {
            return nil
        }
        var paths: [GattLayout.Role: String] = [:]
        var mtu: Int?
        for (path, characteristic) in remoteCharacteristics where characteristic.service == service {
            guard let role = GattLayout.characteristic(uuid: characteristic.uuid)?.role else { continue }
            paths[role] = path
            if role == .request { mtu = characteristic.mtu }
        }
        guard paths.count == GattLayout.characteristics.count else { return nil }
        return (paths, mtu)
    }

    /// The adapter to use: the configured one, else the first powered (by name).
    public func choose(configured: String?) -> (path: String, adapter: Adapter)? {
        if let configured {
            let path = "/org/bluez/" + configured
            return adapters[path].map { (path, $0) }
        }
        return adapters.sorted { $0.value.name < $1.value.name }.first { $0.value.powered }.map { ($0.key, $0.value) }
    }

    /// `/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF` → `AA:BB:CC:DD:EE:FF`.
    public static func address(fromDevicePath path: String) -> String {
        guard let last = path.split(separator: "/").last, last.hasPrefix("dev_") else { return path }
        return String(last.dropFirst(4).map { $0 == "_" ? ":" : $0 })
    }

    /// A device's address, from the tree or else its path.
    public func address(of device: String) -> String {
        devices[device]?.address ?? BlueZObjects.address(fromDevicePath: device)
    }

    static func parent(of path: String) -> String {
        "/" + path.split(separator: "/").dropLast().joined(separator: "/")
    }
}

/// What the bus says about bluetoothd, decoded: the input both state machines share.
public enum BlueZSignal: Sendable, Equatable {
    /// Who owns `org.bluez` now (GetNameOwner's answer, NameOwnerChanged); nil: nobody.
    case owner(String?)
    /// bluetoothd's GetManagedObjects answer.
    case managedObjects([String: BlueZInterfaces])
    case interfacesAdded(path: String, BlueZInterfaces)
    case interfacesRemoved(path: String, Set<BlueZInterfaceName>)
    /// PropertiesChanged on an object's Adapter1, Device1 or GattCharacteristic1.
    case propertiesChanged(path: String, BlueZInterfaces)
    /// A remote characteristic's Value changed: a notification (the central's side).
    case characteristicValue(path: String, [UInt8])
}

/// Follows bluetoothd: its presence on the bus and its object tree. Both the peripheral's
/// and the central's machines feed it the bus's signals and act on the facts it returns.
public struct BlueZFollower: Sendable, Equatable {
    public enum Fact: Sendable, Equatable {
        /// bluetoothd is on the bus: ask for its objects.
        case appeared(owner: String)
        /// bluetoothd left: everything it held for us is gone.
        case gone
        /// The object tree was (re)loaded.
        case loaded
        case adapterRemoved(path: String)
        case adapterPowered(path: String, Bool)
        case adapterDiscovering(path: String, Bool)
        case adapterDiscoverable(path: String, Bool)
        case deviceConnected(path: String)
        case deviceDisconnected(path: String)
        case deviceRemoved(path: String)
        /// Remote GATT objects removed (the central's peer lost its service).
        case remoteObjectsRemoved(path: String)
        case deviceChanged(path: String)
    }

    public private(set) var owner: String?
    public var objects = BlueZObjects()

    public init() {}

    public var present: Bool { owner != nil }

    public mutating func apply(_ signal: BlueZSignal) -> [Fact] {
        switch signal {
        case .owner(let newOwner):
            var facts: [Fact] = []
            let newOwner = newOwner.flatMap { $0.isEmpty ? nil : $0 }
            guard newOwner != owner else { return [] }
            if owner != nil {
                owner = nil
                objects = BlueZObjects()
                facts.append(.gone)
            }
            if let newOwner {
                owner = newOwner
                facts.append(.appeared(owner: newOwner))
            }
            return facts
        case .managedObjects(let tree):
            guard owner != nil else { return [] }
            let before = objects
            objects = BlueZObjects(objects: tree.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
            var facts: [Fact] = [.loaded]
            for (path, device) in objects.devices where device.connected && before.devices[path]?.connected != true {
                facts.append(.deviceConnected(path: path))
            }
            return facts
        case .interfacesAdded(let path, let interfaces):
            guard owner != nil else { return [] }
            let wasConnected = objects.devices[path]?.connected ?? false
            objects.add(path: path, interfaces)
            if let device = objects.devices[path], device.connected, !wasConnected { return [.deviceConnected(path: path)] }
            return interfaces.device != nil ? [.deviceChanged(path: path)] : []
        case .interfacesRemoved(let path, let interfaces):
            guard owner != nil else { return [] }
            var facts: [Fact] = []
            if interfaces.contains(.device), objects.devices[path] != nil {
                if objects.devices[path]?.connected == true { facts.append(.deviceDisconnected(path: path)) }
                facts.append(.deviceRemoved(path: path))
            }
            if interfaces.contains(.adapter), objects.adapters[path] != nil { facts.append(.adapterRemoved(path: path)) }
            if interfaces.contains(.gattService) || interfaces.contains(.gattCharacteristic) { facts.append(.remoteObjectsRemoved(path: path)) }
            objects.remove(path: path, interfaces: interfaces)
            return facts
        case .propertiesChanged(let path, let changed):
            guard owner != nil else { return [] }
            var facts: [Fact] = []
            if let adapter = changed.adapter, objects.adapters[path] != nil {
                if let powered = adapter.powered {
                    objects.adapters[path]?.powered = powered
                    facts.append(.adapterPowered(path: path, powered))
                }
                if let discovering = adapter.discovering { facts.append(.adapterDiscovering(path: path, discovering)) }
                if let discoverable = adapter.discoverable {
                    objects.adapters[path]?.discoverable = discoverable
                    facts.append(.adapterDiscoverable(path: path, discoverable))
                }
            }
            if let properties = changed.device, var device = objects.devices[path] {
                let wasConnected = device.connected
                BlueZObjects.update(&device, with: properties)
                objects.devices[path] = device
                if device.connected && !wasConnected { facts.append(.deviceConnected(path: path)) }
                if properties.connected == false { facts.append(.deviceDisconnected(path: path)) }
                facts.append(.deviceChanged(path: path))
            }
            return facts
        case .characteristicValue:
            return []
        }
    }
}
