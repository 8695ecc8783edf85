/// A D-Bus value with its type, as the wire carries it: what the sd-bus wrapper appends
/// to and reads from messages. Pure; no libsystemd here.
public indirect enum DBusValue: Sendable, Equatable {
    case byte(UInt8)
    case bool(Bool)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case double(Double)
    case string(String)
    case objectPath(String)
    case signature(String)
    /// `h`: a file descriptor. Read from a message it belongs to the message (dup it to
    /// keep it past the handler); appended, sd-bus sends a duplicate.
    case unixFD(Int32)
    /// `ay`, kept as bytes (the GATT values).
    case bytes([UInt8])
    /// An array of `elementSignature` values (not `y`: that is `bytes`).
    case array(elementSignature: String, [DBusValue])
    /// `a{KV}`: an array of dictionary entries.
    case dictionary(keySignature: String, valueSignature: String, [DBusDictEntry])
    case variant(DBusValue)
    case structure([DBusValue])

    /// The value's type signature.
    public var signature: String {
        switch self {
        case .byte: "y"
        case .bool: "b"
        case .int16: "n"
        case .uint16: "q"
        case .int32: "i"
        case .unixFD: "h"
        case .uint32: "u"
        case .int64: "x"
        case .uint64: "t"
        case .double: "d"
        case .string: "s"
        case .objectPath: "o"
        case .signature: "g"
        case .bytes: "ay"
        case .array(let element, _): "a" + element
        case .dictionary(let key, let value, _): "a{" + key + value + "}"
        case .variant: "v"
        case .structure(let fields): "(" + fields.map(\.signature).joined() + ")"
        }
    }

    /// `a{sv}` from name/value pairs (BlueZ's options and property maps).
    public static func properties(_ pairs: [(String, DBusValue)]) -> DBusValue {
        .dictionary(keySignature: "s", valueSignature: "v", pairs.map { DBusDictEntry(key: .string($0.0), value: .variant($0.1)) })
    }

    /// `as`.
    public static func strings(_ values: [String]) -> DBusValue {
        .array(elementSignature: "s", values.map { .string($0) })
    }

    // Accessors that answer nil for any other type: callers treat input from the bus as
    // untrusted and check every type.
    public var stringValue: String? {
        switch self {
        case .string(let s), .objectPath(let s), .signature(let s): s
        case .variant(let inner): inner.stringValue
        default: nil
        }
    }

    public var boolValue: Bool? {
        switch self {
        case .bool(let b): b
        case .variant(let inner): inner.boolValue
        default: nil
        }
    }

    /// Any integer type, widened.
    public var integerValue: Int64? {
        switch self {
        case .byte(let v): Int64(v)
        case .int16(let v): Int64(v)
        case .uint16(let v): Int64(v)
        case .int32(let v): Int64(v)
        case .uint32(let v): Int64(v)
        case .int64(let v): v
        case .uint64(let v): v <= UInt64(Int64.max) ? Int64(v) : nil
        case .variant(let inner): inner.integerValue
        default: nil
        }
    }

    public var bytesValue: [UInt8]? {
        switch self {
        case .bytes(let b): b
        case .variant(let inner): inner.bytesValue
        default: nil
        }
    }

    public var arrayValue: [DBusValue]? {
        switch self {
        case .array(_, let values): values
        case .bytes(let bytes): bytes.map { .byte($0) }
        case .variant(let inner): inner.arrayValue
        default: nil
        }
    }

    /// The entries of an `a{s…}` dictionary by string key (later duplicates win).
    public var stringKeyedEntries: [String: DBusValue]? {
        switch self {
        case .dictionary(_, _, let entries):
            var out: [String: DBusValue] = [:]
            for entry in entries { if let key = entry.key.stringValue { out[key] = entry.value } }
            return out
        case .variant(let inner): return inner.stringKeyedEntries
        default: return nil
        }
    }

    /// Strips variants: `v` around `v` around a value is the value.
    public var unwrapped: DBusValue {
        if case .variant(let inner) = self { return inner.unwrapped }
        return self
    }
}

public struct DBusDictEntry: Sendable, Equatable {
    public var key: DBusValue
    public var value: DBusValue
    public init(key: DBusValue, value: DBusValue) {
        self.key = key
        self.value = value
    }
}

/// A D-Bus error: its name (`org.bluez.Error.Failed`) and message.
public struct DBusError: Error, Sendable, Equatable, CustomStringConvertible {
    public var name: String
    public var message: String
    public init(name: String, message: String) {
        self.name = name
        self.message = message
    }
    public var description: String { message.isEmpty ? name : "\(name): \(message)" }

    public static func failed(_ message: String) -> DBusError { DBusError(name: "org.bluez.Error.Failed", message: message) }
}
