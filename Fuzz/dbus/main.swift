// libFuzzer target: the D-Bus value reader (BusMessage.arguments()) and BlueZ's decoders
// of what bluetoothd sends (BlueZBus.objectsChanged, propertiesChanged, newOwner,
// managedObjects, BlueZObjects(managedObjects:)).
//
// What it covers, exactly: libsystemd keeps its "message from bytes" parser internal, and
// on the system bus every message reaching the worker has passed dbus-daemon's validation,
// so hostile input here is any well-formed message, not any bytes. The fuzz bytes are
// decoded into a type signature and values of that type (every D-Bus type but `h`, the
// file descriptor: nested arrays, dictionaries with any basic key, variants of anything,
// structures; strings without NUL), appended by the wrapper's own writer to a signal sent
// through a private dbus-daemon back to the same connection, and read there by
// `arguments()` from the marshalled bytes the daemon delivered. Invariants: the reader
// gives back exactly what was sent, and the BlueZ decoders take whatever arrives.
#if canImport(Glibc)
import Glibc
#endif
import DBus
@testable import BlueZ
import WorkerCore

// MARK: - Types and values from the fuzz bytes

indirect enum Shape {
    case basic(Character)
    case bytes
    case array(Shape)
    case dictionary(Character, Shape)
    case variant
    case structure([Shape])

    var signature: String {
        switch self {
        case .basic(let c): String(c)
        case .bytes: "ay"
        case .array(let e): "a" + e.signature
        case .dictionary(let k, let v): "a{" + String(k) + v.signature + "}"
        case .variant: "v"
        case .structure(let fields): "(" + fields.map(\.signature).joined() + ")"
        }
    }
}

let basics: [Character] = ["y", "b", "n", "q", "i", "u", "x", "t", "d", "s", "o", "g"]

func shape(_ input: inout FuzzInput, depth: Int) -> Shape {
    let pick = Int(input.byte())
    // Past depth 6 only leaves, but a deep enough input can still nest (variants nest anew).
    if depth > 6 || pick < 140 { return pick % 16 == 15 ? .bytes : .basic(basics[pick % basics.count]) }
    switch pick % 4 {
    case 0: return .array(shape(&input, depth: depth + 1))
    case 1: return .dictionary(basics[Int(input.byte()) % basics.count], shape(&input, depth: depth + 1))
    case 2: return .variant
    default:
        let count = 1 + Int(input.byte() % 4)
        return .structure((0..<count).map { _ in shape(&input, depth: depth + 1) })
    }
}

func integer<T: FixedWidthInteger>(_ input: inout FuzzInput, _: T.Type) -> T {
    var value: T = 0
    for _ in 0..<(T.bitWidth / 8) { value = value << 8 | T(truncatingIfNeeded: input.byte()) }
    return value
}

func text(_ input: inout FuzzInput) -> String {
    let count = Int(input.byte() % 48)
    return String(decoding: input.take(count).map { $0 == 0 ? UInt8(ascii: "x") : $0 }, as: UTF8.self)
}

func objectPath(_ input: inout FuzzInput) -> String {
    let pick = input.byte()
    // Mostly valid paths (bluetoothd's shapes), sometimes any text (the writer must refuse it).
    if pick < 16 { return text(&input) }
    let names = ["org", "bluez", "hci0", "dev_00_AA_01_01_00_01", "service0001", "char0002", "_", "a1"]
    let count = Int(pick % 5)
    if count == 0 { return "/" }
    return (0..<count).map { _ in "/" + names[Int(input.byte()) % names.count] }.joined()
}

func signatureText(_ input: inout FuzzInput) -> String {
    let pick = input.byte()
    if pick < 16 { return text(&input) }
    return shape(&input, depth: 4).signature
}

func value(_ shape: Shape, _ input: inout FuzzInput, depth: Int) -> DBusValue {
    switch shape {
    case .basic(let c):
        switch c {
        case "y": return .byte(input.byte())
        case "b": return .bool(input.byte() & 1 == 1)
        case "n": return .int16(integer(&input, Int16.self))
        case "q": return .uint16(integer(&input, UInt16.self))
        case "i": return .int32(integer(&input, Int32.self))
        case "u": return .uint32(integer(&input, UInt32.self))
        case "x": return .int64(integer(&input, Int64.self))
        case "t": return .uint64(integer(&input, UInt64.self))
        case "d":
            let d = Double(bitPattern: integer(&input, UInt64.self))
            return .double(d.isNaN ? 0 : d)  // NaN is never equal to itself: the check below compares values
        case "s": return .string(text(&input))
        case "o": return .objectPath(objectPath(&input))
        default: return .signature(signatureText(&input))
        }
    case .bytes: return .bytes(Array(input.take(Int(input.byte()))))
    case .array(let element):
        // The wrapper's type for `ay` is `.bytes`, whichever way it was built.
        if case .basic("y") = element { return value(.bytes, &input, depth: depth) }
        let count = Int(input.byte() % 6)
        return .array(elementSignature: element.signature, (0..<count).map { _ in value(element, &input, depth: depth + 1) })
    case .dictionary(let key, let valueShape):
        let count = Int(input.byte() % 6)
        return .dictionary(
            keySignature: String(key), valueSignature: valueShape.signature,
            (0..<count).map { _ in
                DBusDictEntry(key: value(.basic(key), &input, depth: depth + 1), value: value(valueShape, &input, depth: depth + 1))
            })
    case .variant:
        // A variant's content: any shape, with a bias to BlueZ's property values.
        let inner = depth > 40 ? Shape.basic("s") : BlueZShapes.pick(&input, depth: depth + 1)
        return .variant(value(inner, &input, depth: depth + 1))
    case .structure(let fields):
        return .structure(fields.map { value($0, &input, depth: depth + 1) })
    }
}

enum BlueZShapes {
    static func pick(_ input: inout FuzzInput, depth: Int) -> Shape {
        switch input.byte() % 8 {
        case 0: return .basic("s")
        case 1: return .basic("b")
        case 2: return .basic("o")
        case 3: return .bytes
        case 4: return .array(.basic("s"))
        case 5: return .dictionary("s", .variant)
        default: return shape(&input, depth: depth)
        }
    }
}

/// The names BlueZ's decoders look for, so the fuzzer reaches past the first key check.
let interfaceNames = BlueZInterfaceName.allCases.map(\.rawValue) + ["org.freedesktop.DBus.Properties"]
let propertyNames = [
    "Address", "Powered", "Discovering", "Adapter", "Connected", "Name", "Alias", "RSSI", "UUIDs",
    "ServicesResolved", "UUID", "Device", "Service", "MTU", "Value",
]

/// bluetoothd's own argument shapes, filled from the fuzz bytes.
func bluezArguments(_ input: inout FuzzInput, member: String) -> [DBusValue] {
    func name(_ list: [String]) -> String {
        let pick = Int(input.byte())
        return pick < 240 ? list[pick % list.count] : text(&input)
    }
    func props() -> DBusValue {
        let count = Int(input.byte() % 6)
        return .dictionary(
            keySignature: "s", valueSignature: "v",
            (0..<count).map { _ in
                DBusDictEntry(key: .string(name(propertyNames)), value: value(.variant, &input, depth: 1))
            })
    }
    func interfaces() -> DBusValue {
        let count = Int(input.byte() % 4)
        return .dictionary(
            keySignature: "s", valueSignature: "a{sv}",
            (0..<count).map { _ in
                DBusDictEntry(key: .string(name(interfaceNames)), value: props())
            })
    }
    switch member {
    case "InterfacesAdded": return [.objectPath(objectPath(&input)), interfaces()]
    case "InterfacesRemoved": return [.objectPath(objectPath(&input)), .strings((0..<Int(input.byte() % 4)).map { _ in name(interfaceNames) })]
    case "PropertiesChanged": return [.string(name(interfaceNames)), props(), .strings([])]
    default:
        // GetManagedObjects' answer: a{oa{sa{sv}}}.
        let count = Int(input.byte() % 4)
        return [
            .dictionary(
                keySignature: "o", valueSignature: "a{sa{sv}}",
                (0..<count).map { _ in
                    DBusDictEntry(key: .objectPath(objectPath(&input)), value: interfaces())
                })
        ]
    }
}

// MARK: - The bus

/// A private dbus-daemon, ended with this process (setpriv --pdeathsig), and one
/// connection to it that sends and receives.
final class Harness {
    let address: String
    var bus: Bus!
    var received: [BusMessage] = []
    var slot: BusSlot?

    init() {
        var template = Array("/tmp/edgecoder-fuzz-dbus-XXXXXX".utf8CString)
        guard let dir = mkdtemp(&template) else { fatalError("mkdtemp failed") }
        address = "unix:path=" + String(cString: dir) + "/bus"
        let argv = [
            "/usr/bin/setpriv", "--pdeathsig", "KILL", "/usr/bin/dbus-daemon", "--session", "--nofork",
            "--nopidfile", "--address=\(address)",
        ]
        var pid: pid_t = 0
        var cArgs = argv.map { strdup($0) } + [nil]
        let rc = posix_spawn(&pid, argv[0], nil, nil, &cArgs, environ)
        for arg in cArgs { free(arg) }
        if rc != 0 { fatalError("cannot start dbus-daemon: \(rc)") }
        connect()
    }

    func connect() {
        bus = nil
        slot = nil
        for _ in 0..<500 {
            if let bus = try? Bus.connect(address: address) { self.bus = bus; break }
            usleep(10_000)
        }
        guard bus != nil else { fatalError("cannot connect to the private dbus-daemon at \(address)") }
        slot = try! bus.addMatch("type='signal',path_namespace='/'") { [unowned self] message in
            self.received.append(message)
        }
        // Let the Hello and AddMatch round trips finish.
        for _ in 0..<100 { while (try? bus.process()) == true {}; usleep(1_000) }
    }

    var round: UInt64 = 0

    /// Sends a signal and waits until it comes back; nil when the writer refused it or the
    /// daemon did not pass it on. A sentinel signal carrying the round's number follows it:
    /// the daemon keeps a connection's messages in order, so once this round's sentinel is
    /// back, everything of this round (and of earlier ones) has arrived.
    func roundTrip(path: String, interface: String, member: String, arguments: [DBusValue]) -> BusMessage? {
        round += 1
        received.removeAll()
        var sent = true
        do {
            try bus.emitSignal(path: path, interface: interface, member: member, arguments: arguments)
        } catch {
            sent = false
        }
        do {
            try bus.emitSignal(path: "/fuzz", interface: "org.example.Fuzz", member: "Sentinel", arguments: [.uint64(round)])
        } catch {
            // The daemon already closed the connection over the message before (see below).
            connect()
            return nil
        }
        for _ in 0..<2_000 {
            do {
                while try bus.process() {}
            } catch {
                // dbus-daemon closes a connection that sent a message it finds invalid
                // (beyond its nesting limits, which sd-bus's writer does not check): a
                // message the worker would never receive.
                connect()
                return nil
            }
            if let end = received.firstIndex(where: { $0.member == "Sentinel" && (try? $0.arguments()) == [.uint64(round)] }) {
                guard sent else { return nil }
                return received[..<end].last(where: { $0.member == member && $0.interface == interface })
            }
            var pfd = pollfd(fd: bus.fileDescriptor, events: bus.events == 0 ? Int16(POLLIN) : bus.events, revents: 0)
            _ = poll(&pfd, 1, 5)
        }
        fatalError("the sentinel did not come back within 10 s")
    }
}

nonisolated(unsafe) var harness: Harness?

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    if harness == nil { harness = Harness() }
    var input = FuzzInput(data, size)
    let mode = input.byte()
    let members = ["InterfacesAdded", "InterfacesRemoved", "PropertiesChanged", "ManagedObjects"]
    let member = members[Int(mode % 4)]
    let interface = member == "PropertiesChanged" ? "org.freedesktop.DBus.Properties" : "org.freedesktop.DBus.ObjectManager"
    let arguments: [DBusValue]
    if mode & 4 == 0 {
        arguments = bluezArguments(&input, member: member)
    } else {
        // Any types at all.
        let count = Int(input.byte() % 4)
        arguments = (0..<count).map { _ in value(shape(&input, depth: 0), &input, depth: 0) }
    }
    let path = mode & 8 == 0 ? "/org/bluez/hci0" : "/"
    guard let message = harness!.roundTrip(path: path, interface: interface, member: member, arguments: arguments) else { return 0 }
    let read: [DBusValue]
    do {
        read = try message.arguments()
    } catch {
        // The writer refuses what sd-bus cannot read back (signatures over
        // BusMessage.maxReadableSignature bytes: crash-4c4e…), so whatever it built and
        // dbus-daemon delivered must read.
        fatalError("a message sd-bus delivered could not be read: \(error); sent \(arguments)")
    }
    check(read == arguments, "read back \(read), sent \(arguments)")
    _ = try? message.arguments()  // reading twice gives the same (rewind)
    _ = BlueZBus.objectsChanged(message)
    _ = BlueZBus.propertiesChanged(message)
    _ = BlueZBus.newOwner(message)
    _ = BlueZBus.managedObjects(read.first)
    _ = BlueZObjects(managedObjects: read.first)
    return 0
}
