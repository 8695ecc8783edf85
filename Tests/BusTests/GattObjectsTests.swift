import Testing
@testable import BlueZ
import DBus
import WorkerCore

@Suite struct GattObjectsTests {
    @Test func theApplicationHasTheServiceAndItsThreeCharacteristicsOfSpec6() throws {
        let tree = GattObjects.managedObjects(localName: "EdgeCoder-x", values: [GattObjects.status: [1]], notifying: [GattObjects.status])
        guard case .dictionary("o", "a{sa{sv}}", let objects) = tree else { Issue.record("\(tree)"); return }
        let byPath = Dictionary(uniqueKeysWithValues: objects.map { ($0.key.stringValue!, $0.value.stringKeyedEntries!) })
        #expect(Set(byPath.keys) == [GattObjects.service, GattObjects.request, GattObjects.response, GattObjects.status])
        let service = try #require(byPath[GattObjects.service]?["org.bluez.GattService1"]?.stringKeyedEntries)
        #expect(service["UUID"]?.stringValue == BluetoothUUID.service && service["Primary"]?.boolValue == true)
        func flags(_ path: String) -> [String] {
            byPath[path]?["org.bluez.GattCharacteristic1"]?.stringKeyedEntries?["Flags"]?.arrayValue?.compactMap(\.stringValue) ?? []
        }
        #expect(flags(GattObjects.request) == ["write", "write-without-response"])
        #expect(flags(GattObjects.response) == ["notify", "read"])
        #expect(flags(GattObjects.status) == ["notify", "read"])
        let status = try #require(byPath[GattObjects.status]?["org.bluez.GattCharacteristic1"]?.stringKeyedEntries)
        #expect(status["UUID"]?.stringValue == BluetoothUUID.status)
        #expect(status["Service"]?.stringValue == GattObjects.service)
        #expect(status["Notifying"]?.boolValue == true)
        #expect(status["Value"]?.bytesValue == [1])
        #expect(tree.signature == "a{oa{sa{sv}}}")
    }

    @Test func theAdvertisementIsConnectableWithTheServiceUUIDAndName() throws {
        let props = try #require(
            GattObjects.properties(
                path: GattObjects.advertisement, interface: "org.bluez.LEAdvertisement1",
                localName: "EdgeCoder-abc", values: [:], notifying: []))
        let map = Dictionary(uniqueKeysWithValues: props)
        #expect(map["Type"] == .string("peripheral"))
        #expect(map["ServiceUUIDs"]?.arrayValue == [.string(BluetoothUUID.service)])
        #expect(map["LocalName"] == .string("EdgeCoder-abc"))
        #expect(
            GattObjects.properties(path: GattObjects.advertisement, interface: "org.bluez.GattService1", localName: "", values: [:], notifying: [])
                == nil)
        #expect(GattObjects.properties(path: "/elsewhere", interface: "org.bluez.LEAdvertisement1", localName: "", values: [:], notifying: []) == nil)
    }

    static func adapter(_ name: String, powered: DBusValue) -> DBusDictEntry {
        DBusDictEntry(
            key: .objectPath("/org/bluez/\(name)"),
            value: .dictionary(
                keySignature: "s", valueSignature: "a{sv}",
                [
                    DBusDictEntry(
                        key: .string("org.bluez.Adapter1"),
                        value: .properties([("Address", .string("00:AA:01:00:00:0\(name.last!)")), ("Powered", powered)])),
                    DBusDictEntry(key: .string("org.bluez.LEAdvertisingManager1"), value: .properties([])),
                ]))
    }

    @Test func bluetoothdsObjectsAreReadAndTheFirstPoweredAdapterChosen() throws {
        let device = DBusDictEntry(
            key: .objectPath("/org/bluez/hci1/dev_00_AA_01_01_00_01"),
            value: .dictionary(
                keySignature: "s", valueSignature: "a{sv}",
                [
                    DBusDictEntry(
                        key: .string("org.bluez.Device1"),
                        value: .properties([("Connected", .bool(true)), ("Adapter", .objectPath("/org/bluez/hci1"))]))
                ]))
        let objects = BlueZObjects(
            managedObjects: .dictionary(
                keySignature: "o", valueSignature: "a{sa{sv}}",
                [Self.adapter("hci1", powered: .bool(true)), Self.adapter("hci0", powered: .bool(false)), device]))
        #expect(objects.adapters.count == 2)
        #expect(objects.choose(configured: nil)?.adapter.name == "hci1")
        #expect(objects.choose(configured: "hci0")?.adapter.powered == false)
        #expect(objects.choose(configured: "hci7") == nil)
        let found = try #require(objects.devices["/org/bluez/hci1/dev_00_AA_01_01_00_01"])
        #expect(found.address == "00:AA:01:01:00:01", "the address comes from the path when the property is missing")
        #expect(found.connected && found.adapter == "/org/bluez/hci1")
        #expect(objects.adapters["/org/bluez/hci1"]?.canAdvertise == true)
    }

    @Test(arguments: [
        DBusValue.string("not a dictionary"),
        .dictionary(keySignature: "o", valueSignature: "a{sa{sv}}", [GattObjectsTests.adapter("hci0", powered: .string("yes"))]),
        .dictionary(keySignature: "s", valueSignature: "s", [DBusDictEntry(key: .string("/org/bluez/hci0"), value: .string("x"))]),
        .dictionary(keySignature: "o", valueSignature: "v", [DBusDictEntry(key: .objectPath("/org/bluez/hci0"), value: .variant(.int32(1)))]),
        .array(elementSignature: "s", []),
    ])
    func malformedAnswersFromTheBusAreSkippedNotTrusted(answer: DBusValue) {
        let objects = BlueZObjects(managedObjects: answer)
        #expect(objects.choose(configured: nil) == nil, "no powered adapter can come out of a malformed answer")
        #expect(objects.devices.isEmpty)
    }

    @Test func addressesComeFromDevicePaths() {
        #expect(BlueZObjects.address(fromDevicePath: "/org/bluez/hci0/dev_00_AA_01_01_00_01") == "00:AA:01:01:00:01")
        #expect(BlueZObjects.address(fromDevicePath: "/weird") == "/weird")
    }

    @Test func bluezVersionsBeforeFive69HaveThe508ByteLimit() {
        #expect(BluetoothDoctor.parseVersion("5.66").map { $0 < BluetoothDoctor.longWriteFixedIn } == true)
        #expect(BluetoothDoctor.parseVersion("5.69").map { $0 < BluetoothDoctor.longWriteFixedIn } == false)
        #expect(BluetoothDoctor.parseVersion("6.0").map { $0 < BluetoothDoctor.longWriteFixedIn } == false)
        #expect(BluetoothDoctor.parseVersion("garbage") == nil)
    }
}
