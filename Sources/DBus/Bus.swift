#if canImport(Glibc)
import Glibc
#endif
import CSystemd

/// The one thin wrapper over sd-bus (libsystemd). A `Bus` is not thread-safe, like the
/// sd_bus it wraps: one actor owns it and makes every call, including `process()`, and
/// handlers run synchronously inside `process()` on that actor. The owner drives the
/// connection from its own event loop with `fileDescriptor`, `events`, `timeoutUsec`
/// and `process()` (the daemon's reactor, never a thread of sd-bus's own).
///
/// Only the non-variadic sd-bus calls are used (Swift cannot call C variadics).
public final class Bus {
    private let raw: OpaquePointer

    private init(raw: OpaquePointer) { self.raw = raw }

    deinit { _ = sd_bus_close_unref(raw) }

    /// Connects to the system bus ($DBUS_SYSTEM_BUS_ADDRESS, else /run/dbus/system_bus_socket).
    public static func system() throws(BusFailure) -> Bus {
        var bus: OpaquePointer?
        let rc = sd_bus_open_system(&bus)
        guard rc >= 0, let bus else { throw BusFailure("connect to the system bus", rc) }
        return Bus(raw: bus)
    }

    /// Connects to the bus at a D-Bus address (`unix:path=…`): a private bus in tests.
    public static func connect(address: String) throws(BusFailure) -> Bus {
        var bus: OpaquePointer?
        var rc = sd_bus_new(&bus)
        guard rc >= 0, let bus else { throw BusFailure("create a bus connection", rc) }
        rc = sd_bus_set_address(bus, address)
        if rc >= 0 { rc = sd_bus_set_bus_client(bus, 1) }
        if rc >= 0 { rc = sd_bus_start(bus) }
        if rc < 0 {
            sd_bus_unref(bus)
            throw BusFailure("connect to the bus at \(address)", rc)
        }
        return Bus(raw: bus)
    }

    // MARK: Driving

    public var fileDescriptor: Int32 { sd_bus_get_fd(raw) }

    /// poll(2) events the connection waits for now (POLLIN, and POLLOUT while output is queued).
    public var events: Int16 {
        let rc = sd_bus_get_events(raw)
        return rc < 0 ? Int16(POLLIN) : Int16(truncatingIfNeeded: rc)
    }

    /// The CLOCK_MONOTONIC time (µs) by which `process()` must run again, if any.
    public var timeoutUsec: UInt64? {
        var usec: UInt64 = 0
        guard sd_bus_get_timeout(raw, &usec) >= 0, usec != UInt64.max else { return nil }
        return usec
    }

    /// Processes one pending item (a message, a timeout); true when there may be more.
    /// Handlers run inside this call. Throws when the connection is gone.
    public func process() throws(BusFailure) -> Bool {
        let rc = sd_bus_process(raw, nil)
        if rc < 0 { throw BusFailure("process the bus connection", rc) }
        return rc > 0
    }

    public var isOpen: Bool { sd_bus_is_open(raw) > 0 }

    public var uniqueName: String? {
        var name: UnsafePointer<CChar>?
        guard sd_bus_get_unique_name(raw, &name) >= 0, let name else { return nil }
        return String(cString: name)
    }

    // MARK: Calls and signals

    /// Calls a method asynchronously; `reply` runs inside a later `process()` with the
    /// answer's arguments or its error (a timeout is an error too). The call is never
    /// blocking: a peer may call us back before it answers (BlueZ calls GetManagedObjects
    /// before it answers RegisterApplication).
    ///
    /// `reply` runs at most once. When the connection drops, a later `process()` hands it
    /// sd-bus's NoReply error; when the `Bus` itself is released with the call pending, it
    /// is not called at all, and is released with whatever it captured.
    public func call(
        destination: String, path: String, interface: String, member: String,
        arguments: [DBusValue] = [], timeoutUsec: UInt64 = 25_000_000,
        reply: @escaping (Result<[DBusValue], DBusError>) -> Void
    ) throws(BusFailure) {
        var message: OpaquePointer?
        var rc = sd_bus_message_new_method_call(raw, &message, destination, path, interface, member)
        guard rc >= 0, let message else { throw BusFailure("create a call to \(interface).\(member)", rc) }
        defer { sd_bus_message_unref(message) }
        try BusMessage.append(arguments, to: message)
        let box = Unmanaged.passRetained(ReplyBox(reply)).toOpaque()
        var slot: OpaquePointer?
        rc = sd_bus_call_async(
            raw, &slot, message,
            { message, userdata, _ in
                // Borrowed: the slot's destroy callback owns the box's reference.
                let box = Unmanaged<ReplyBox>.fromOpaque(userdata!).takeUnretainedValue()
                let answer = BusMessage(retaining: message!)
                if let error = answer.error {
                    box.reply(.failure(error))
                } else {
                    do { box.reply(.success(try answer.arguments())) } catch {
                        box.reply(.failure(DBusError(name: "org.freedesktop.DBus.Error.InvalidArgs", message: "unreadable reply: \(error)")))
                    }
                }
                return 1
            }, box, timeoutUsec)
        guard rc >= 0, let slot else {
            Unmanaged<ReplyBox>.fromOpaque(box).release()
            throw BusFailure("call \(interface).\(member) on \(destination)", rc)
        }
        // sd-bus frees the slot after the reply or the timeout, and frees every pending one
        // when the bus is freed; its destroy callback is the one place the box is released,
        // whichever way the call ends. Set before the slot is handed to the bus (floating).
        sd_bus_slot_set_destroy_callback(slot) { userdata in
            Unmanaged<ReplyBox>.fromOpaque(userdata!).release()
        }
        rc = sd_bus_slot_set_floating(slot, 1)
        // Our reference goes either way: floating, the bus holds its own; not, this frees
        // the slot, which cancels the call and releases the box.
        sd_bus_slot_unref(slot)
        if rc < 0 { throw BusFailure("hand the call \(interface).\(member) to the bus", rc) }
    }

    /// Sends a signal.
    public func emitSignal(path: String, interface: String, member: String, arguments: [DBusValue]) throws(BusFailure) {
        var message: OpaquePointer?
        var rc = sd_bus_message_new_signal(raw, &message, path, interface, member)
        guard rc >= 0, let message else { throw BusFailure("create the signal \(interface).\(member)", rc) }
        defer { sd_bus_message_unref(message) }
        try BusMessage.append(arguments, to: message)
        rc = sd_bus_send(raw, message, nil)
        if rc < 0 { throw BusFailure("send the signal \(interface).\(member)", rc) }
    }

    /// Exports every object at and below `prefix` through one handler (sd_bus_add_fallback
    /// with a plain message callback, so no vtable privilege check applies). The handler's
    /// answer is sent when the caller expects one. Live until the slot is released.
    public func exportObjects(under prefix: String, handler: @escaping (BusMessage) -> ObjectAnswer) throws(BusFailure) -> BusSlot {
        let box = HandlerBox(handler)
        var slot: OpaquePointer?
        let rc = sd_bus_add_fallback(
            raw, &slot, prefix,
            { message, userdata, replyError in
                let box = Unmanaged<HandlerBox>.fromOpaque(userdata!).takeUnretainedValue()
                let call = BusMessage(retaining: message!)
                switch box.handler(call) {
                case .notHandled:
                    return 0
                case .handledWithoutReply, .deferred:
                    return 1
                case .error(let failure):
                    return sd_bus_error_set(replyError, failure.name, failure.message)
                case .reply(let arguments):
                    guard call.expectsReply else { return 1 }
                    var reply: OpaquePointer?
                    guard sd_bus_message_new_method_return(message, &reply) >= 0, let reply else { return -ENOMEM }
                    defer { sd_bus_message_unref(reply) }
                    do { try BusMessage.append(arguments, to: reply) } catch {
                        return sd_bus_error_set(replyError, "org.freedesktop.DBus.Error.Failed", "cannot build the reply: \(error)")
                    }
                    let bus = sd_bus_message_get_bus(message)
                    return min(sd_bus_send(bus, reply, nil), 1)
                }
            }, Unmanaged.passUnretained(box).toOpaque())
        guard rc >= 0, let slot else { throw BusFailure("export objects under \(prefix)", rc) }
        return BusSlot(raw: slot, retaining: box)
    }

    /// Answers a method call later than its handler returned (`ObjectAnswer.deferred`): a
    /// call that waits for a person (an Agent1 passkey confirmation) must not hold the
    /// loop. Each call is answered once, by `reply` or `replyError`.
    public func reply(to call: BusMessage, _ arguments: [DBusValue] = []) throws(BusFailure) {
        guard call.expectsReply else { return }
        var reply: OpaquePointer?
        var rc = sd_bus_message_new_method_return(call.raw, &reply)
        guard rc >= 0, let reply else { throw BusFailure("create a reply to \(call.member ?? "a call")", rc) }
        defer { sd_bus_message_unref(reply) }
        try BusMessage.append(arguments, to: reply)
        rc = sd_bus_send(raw, reply, nil)
        if rc < 0 { throw BusFailure("send a reply to \(call.member ?? "a call")", rc) }
    }

    /// Answers a method call later with a D-Bus error (see `reply(to:_:)`).
    public func replyError(to call: BusMessage, _ error: DBusError) throws(BusFailure) {
        guard call.expectsReply else { return }
        var reply: OpaquePointer?
        var failure = sd_bus_error(name: nil, message: nil, _need_free: 0)
        defer { sd_bus_error_free(&failure) }
        var rc = sd_bus_error_set(&failure, error.name, error.message)
        guard rc < 0 else { throw BusFailure("make the error \(error.name)", -EINVAL) }
        rc = sd_bus_message_new_method_error(call.raw, &reply, &failure)
        guard rc >= 0, let reply else { throw BusFailure("create an error reply to \(call.member ?? "a call")", rc) }
        defer { sd_bus_message_unref(reply) }
        rc = sd_bus_send(raw, reply, nil)
        if rc < 0 { throw BusFailure("send an error reply to \(call.member ?? "a call")", rc) }
    }

    /// Subscribes to signals matching a D-Bus match rule (sd_bus_add_match): the bus
    /// daemon filters by the rule, `handler` runs inside `process()`.
    public func addMatch(_ rule: String, handler: @escaping (BusMessage) -> Void) throws(BusFailure) -> BusSlot {
        let box = SignalBox(handler)
        var slot: OpaquePointer?
        let rc = sd_bus_add_match(
            raw, &slot, rule,
            { message, userdata, _ in
                let box = Unmanaged<SignalBox>.fromOpaque(userdata!).takeUnretainedValue()
                box.handler(BusMessage(retaining: message!))
                return 0
            }, Unmanaged.passUnretained(box).toOpaque())
        guard rc >= 0, let slot else { throw BusFailure("add the match \(rule)", rc) }
        return BusSlot(raw: slot, retaining: box)
    }
}

/// How an exported object answers a method call.
public enum ObjectAnswer: Sendable {
    case reply([DBusValue])
    case error(DBusError)
    /// Consumed; the caller expected no answer (BlueZ's no-reply WriteValue).
    case handledWithoutReply
    /// Consumed; the handler kept the message and answers it later with
    /// `Bus.reply(to:)` or `Bus.replyError(to:)`.
    case deferred
    /// Not ours: sd-bus answers UnknownMethod/UnknownObject.
    case notHandled
}

/// A registration (exported objects, a match): released, it ends.
public final class BusSlot {
    private var raw: OpaquePointer?
    private let box: AnyObject

    init(raw: OpaquePointer, retaining box: AnyObject) {
        self.raw = raw
        self.box = box
    }

    /// Ends the registration now (also done on release).
    public func cancel() {
        if let raw { sd_bus_slot_unref(raw) }
        raw = nil
    }

    deinit { cancel() }
}

private final class ReplyBox {
    let reply: (Result<[DBusValue], DBusError>) -> Void
    init(_ reply: @escaping (Result<[DBusValue], DBusError>) -> Void) { self.reply = reply }
}

private final class HandlerBox {
    let handler: (BusMessage) -> ObjectAnswer
    init(_ handler: @escaping (BusMessage) -> ObjectAnswer) { self.handler = handler }
}

private final class SignalBox {
    let handler: (BusMessage) -> Void
    init(_ handler: @escaping (BusMessage) -> Void) { self.handler = handler }
}

/// A failed sd-bus call: what was attempted and the negative errno it returned.
public struct BusFailure: Error, Sendable, CustomStringConvertible {
    public var operation: String
    public var code: Int32
    public init(_ operation: String, _ code: Int32) {
        self.operation = operation
        self.code = code
    }
    public var description: String { "cannot \(operation): \(String(cString: strerror(-code)))" }
}

/// A received message (call, reply, signal). Read its arguments with `arguments()`.
public final class BusMessage {
    fileprivate let raw: OpaquePointer

    fileprivate init(retaining raw: OpaquePointer) {
        self.raw = raw
        sd_bus_message_ref(raw)
    }

    deinit { sd_bus_message_unref(raw) }

    public var path: String? { sd_bus_message_get_path(raw).map { String(cString: $0) } }
    public var interface: String? { sd_bus_message_get_interface(raw).map { String(cString: $0) } }
    public var member: String? { sd_bus_message_get_member(raw).map { String(cString: $0) } }
    public var sender: String? { sd_bus_message_get_sender(raw).map { String(cString: $0) } }
    public var expectsReply: Bool { sd_bus_message_get_expect_reply(raw) > 0 }

    public var error: DBusError? {
        guard let error = sd_bus_message_get_error(raw), let name = error.pointee.name else { return nil }
        return DBusError(name: String(cString: name), message: error.pointee.message.map { String(cString: $0) } ?? "")
    }

    /// Every argument, typed. Input from the bus: a message sd-bus accepted is well-formed,
    /// but its types are whatever the peer sent, so callers check them.
    public func arguments() throws(BusFailure) -> [DBusValue] {
        var rc = sd_bus_message_rewind(raw, 1)
        if rc < 0 { throw BusFailure("rewind a message", rc) }
        var values: [DBusValue] = []
        while true {
            var type: CChar = 0
            var contents: UnsafePointer<CChar>?
            rc = sd_bus_message_peek_type(raw, &type, &contents)
            if rc < 0 { throw BusFailure("read a message", rc) }
            if rc == 0 { return values }
            values.append(try readOne(type: type, contents: contents.map { String(cString: $0) }))
        }
    }

    private func readOne(type: CChar, contents: String?) throws(BusFailure) -> DBusValue {
        func basic<T>(_ initial: T) throws(BusFailure) -> T {
            var value = initial
            let rc = sd_bus_message_read_basic(raw, type, &value)
            if rc < 0 { throw BusFailure("read a value of type \(Character(UnicodeScalar(UInt8(type))))", rc) }
            return value
        }
        func text() throws(BusFailure) -> String {
            let pointer: UnsafePointer<CChar>? = try basic(nil)
            return pointer.map { String(cString: $0) } ?? ""
        }
        switch UInt8(type) {
        case UInt8(ascii: "y"): return .byte(try basic(0))
        case UInt8(ascii: "b"): return .bool(try basic(Int32(0)) != 0)
        case UInt8(ascii: "n"): return .int16(try basic(0))
        case UInt8(ascii: "q"): return .uint16(try basic(0))
        case UInt8(ascii: "i"): return .int32(try basic(0))
        case UInt8(ascii: "h"): return .unixFD(try basic(0))
        case UInt8(ascii: "u"): return .uint32(try basic(0))
        case UInt8(ascii: "x"): return .int64(try basic(0))
        case UInt8(ascii: "t"): return .uint64(try basic(0))
        case UInt8(ascii: "d"): return .double(try basic(0))
        case UInt8(ascii: "s"): return .string(try text())
        case UInt8(ascii: "o"): return .objectPath(try text())
        case UInt8(ascii: "g"): return .signature(try text())
        case UInt8(ascii: "a"):
            let element = contents ?? ""
            if element == "y" {
                var pointer: UnsafeRawPointer?
                var size = 0
                let rc = sd_bus_message_read_array(raw, CChar(bitPattern: UInt8(ascii: "y")), &pointer, &size)
                if rc < 0 { throw BusFailure("read a byte array", rc) }
                guard let pointer, size > 0 else { return .bytes([]) }
                return .bytes(Array(UnsafeRawBufferPointer(start: pointer, count: size)))
            }
            let items = try container(type: type, contents: element)
            if element.hasPrefix("{"), element.count >= 4 {
                let inner = element.dropFirst().dropLast()
                let keySignature = String(inner.prefix(1))
                let valueSignature = String(inner.dropFirst())
                let entries = items.compactMap { item -> DBusDictEntry? in
                    guard case .structure(let pair) = item, pair.count == 2 else { return nil }
                    return DBusDictEntry(key: pair[0], value: pair[1])
                }
                return .dictionary(keySignature: keySignature, valueSignature: valueSignature, entries)
            }
            return .array(elementSignature: element, items)
        case UInt8(ascii: "v"):
            let items = try container(type: type, contents: contents ?? "")
            guard let first = items.first else { throw BusFailure("read an empty variant", -EBADMSG) }
            return .variant(first)
        case UInt8(ascii: "r"), UInt8(ascii: "e"):
            // Dictionary entries come back as two-field structures; the array above pairs them.
            return .structure(try container(type: type, contents: contents ?? ""))
        default:
            throw BusFailure("read a value of unknown type \(type)", -EBADMSG)
        }
    }

    private func container(type: CChar, contents: String) throws(BusFailure) -> [DBusValue] {
        var rc = sd_bus_message_enter_container(raw, type, contents)
        if rc < 0 { throw BusFailure("enter a container", rc) }
        var values: [DBusValue] = []
        while true {
            var inner: CChar = 0
            var innerContents: UnsafePointer<CChar>?
            rc = sd_bus_message_peek_type(raw, &inner, &innerContents)
            if rc < 0 { throw BusFailure("read a container", rc) }
            if rc == 0 { break }
            values.append(try readOne(type: inner, contents: innerContents.map { String(cString: $0) }))
        }
        rc = sd_bus_message_exit_container(raw)
        if rc < 0 { throw BusFailure("leave a container", rc) }
        return values
    }

    /// Appends typed values with the non-variadic calls.
    static func append(_ values: [DBusValue], to message: OpaquePointer) throws(BusFailure) {
        if values.map(\.signature).joined().utf8.count > maxReadableSignature {
            throw BusFailure("append arguments: their signature is over \(maxReadableSignature) bytes", -EINVAL)
        }
        for value in values { try append(value, to: message) }
    }

    /// The longest signature sd-bus reads back. The D-Bus specification allows 255 bytes,
    /// and sd-bus's writer and dbus-daemon pass a 255-byte one, but sd-bus's reader refuses
    /// it (EBADMSG, in the variant and signature readers: "l == UINT8_MAX"), so a message
    /// carrying one could be sent by us and read by no sd-bus peer, this worker included.
    /// Found by the dbus fuzz target (Fuzz/dbus/regressions/crash-4c4e…).
    public static let maxReadableSignature = 254

    private static func code(_ character: Character) -> CChar { CChar(bitPattern: character.asciiValue!) }

    private static func append(_ value: DBusValue, to message: OpaquePointer) throws(BusFailure) {
        func basic<T>(_ type: Character, _ value: T) throws(BusFailure) {
            var copy = value
            let rc = sd_bus_message_append_basic(message, code(type), &copy)
            if rc < 0 { throw BusFailure("append a value of type \(type)", rc) }
        }
        func text(_ type: Character, _ value: String) throws(BusFailure) {
            // A C string ends at the first NUL: sent as it is, the rest would be cut off
            // silently. D-Bus strings cannot hold NUL, so refuse the value instead.
            if value.utf8.contains(0) {
                throw BusFailure("append a string of type \(type): it holds a NUL byte, which D-Bus strings cannot", -EINVAL)
            }
            // String-like types take the string itself, not a pointer to it.
            let rc = value.withCString { sd_bus_message_append_basic(message, code(type), $0) }
            if rc < 0 { throw BusFailure("append a string of type \(type)", rc) }
        }
        func open(_ type: Character, _ contents: String) throws(BusFailure) {
            let rc = sd_bus_message_open_container(message, code(type), contents)
            if rc < 0 { throw BusFailure("open a container \(type)\(contents)", rc) }
        }
        func close() throws(BusFailure) {
            let rc = sd_bus_message_close_container(message)
            if rc < 0 { throw BusFailure("close a container", rc) }
        }
        switch value {
        case .byte(let v): try basic("y", v)
        case .bool(let v): try basic("b", Int32(v ? 1 : 0))
        case .int16(let v): try basic("n", v)
        case .uint16(let v): try basic("q", v)
        case .int32(let v): try basic("i", v)
        case .unixFD(let v): try basic("h", v)
        case .uint32(let v): try basic("u", v)
        case .int64(let v): try basic("x", v)
        case .uint64(let v): try basic("t", v)
        case .double(let v): try basic("d", v)
        case .string(let v): try text("s", v)
        case .objectPath(let v): try text("o", v)
        case .signature(let v):
            if v.utf8.count > maxReadableSignature { throw BusFailure("append a signature over \(maxReadableSignature) bytes", -EINVAL) }
            try text("g", v)
        case .bytes(let bytes):
            let rc = bytes.withUnsafeBytes {
                sd_bus_message_append_array(message, code("y"), $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1)!, $0.count)
            }
            if rc < 0 { throw BusFailure("append a byte array", rc) }
        case .array(let element, let values):
            try open("a", element)
            for item in values { try append(item, to: message) }
            try close()
        case .dictionary(let key, let valueSignature, let entries):
            try open("a", "{" + key + valueSignature + "}")
            for entry in entries {
                try open("e", key + valueSignature)
                try append(entry.key, to: message)
                try append(entry.value, to: message)
                try close()
            }
            try close()
        case .variant(let inner):
            if inner.signature.utf8.count > maxReadableSignature {
                throw BusFailure("append a variant: its signature is over \(maxReadableSignature) bytes", -EINVAL)
            }
            try open("v", inner.signature)
            try append(inner, to: message)
            try close()
        case .structure(let fields):
            try open("r", fields.map(\.signature).joined())
            for field in fields { try append(field, to: message) }
            try close()
        }
    }
}
