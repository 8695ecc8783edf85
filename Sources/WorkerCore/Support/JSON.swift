/// A JSON value, parsed by hand so the daemon needs no Foundation (about 11 MiB of
/// resident memory saved) and so every parser limit (size, depth, UTF-8, duplicate
/// keys) is ours to choose and to test with hostile input.
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    /// An integer that fits in Int64 and was written without fraction or exponent.
    case int(Int64)
    case double(Double)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)

    /// The JSON type name used in error messages ("a string", "an object", …).
    public var typeDescription: String {
        switch self {
        case .null: return "null"
        case .bool: return "a boolean"
        case .int: return "an integer"
        case .double: return "a number"
        case .string: return "a string"
        case .array: return "an array"
        case .object: return "an object"
        }
    }

    public subscript(key: String) -> JSONValue? {
        if case .object(let object) = self { return object[key] }
        return nil
    }

    public var stringValue: String? { if case .string(let s) = self { return s }; return nil }
    public var boolValue: Bool? { if case .bool(let b) = self { return b }; return nil }
    public var objectValue: JSONObject? { if case .object(let o) = self { return o }; return nil }
    public var arrayValue: [JSONValue]? { if case .array(let a) = self { return a }; return nil }
    /// An integer value, accepting a double only when it is integral (`5.0`).
    public var intValue: Int64? {
        switch self {
        case .int(let i): return i
        case .double(let d) where d.rounded() == d && abs(d) < 9.0e15: return Int64(d)
        default: return nil
        }
    }
    public var doubleValue: Double? {
        switch self {
        case .int(let i): return Double(i)
        case .double(let d): return d
        default: return nil
        }
    }
}

/// A JSON object that keeps its members in written order; keys are unique.
///
/// Small objects find a key by a scan of their members; from `indexThreshold` members on,
/// an index from key to position keeps every lookup and insertion constant time, so a
/// hostile object of many keys costs linear time to parse (hardening #26 row 13).
public struct JSONObject: Sendable, Equatable {
    public struct Member: Sendable, Equatable {
        public var key: String
        public var value: JSONValue
    }
    public private(set) var members: [Member] = []
    /// Key to position in `members`; nil below `indexThreshold` members.
    private var index: [String: Int]? = nil
    /// Member count from which the object keeps an index of its keys.
    static let indexThreshold = 16

    public init() {}
    public init(_ pairs: [(String, JSONValue)]) {
        for (key, value) in pairs { self[key] = value }
    }

    public var keys: [String] { members.map(\.key) }
    public var isEmpty: Bool { members.isEmpty }

    /// Equal when the members are, in order; the index is a cache, not part of the value.
    public static func == (lhs: JSONObject, rhs: JSONObject) -> Bool { lhs.members == rhs.members }

    /// The position of `key` in `members`, through the index when there is one.
    func position(of key: String) -> Int? {
        if let index { return index[key] }
        return members.firstIndex(where: { $0.key == key })
    }

    /// Appends a member unless its key is already there (then false, nothing changed):
    /// the parser's one look-up per member, before its value is read; the value is
    /// `null` until `setLastValue`.
    mutating func appendIfAbsent(_ key: String) -> Bool {
        if index != nil {
            // Growing fourfold: a resize hashes every key again, the bulk of a large
            // object's cost when the table only doubled.
            if index!.count >= index!.capacity { index!.reserveCapacity(index!.count * 4) }
            // One hash: the insertion says whether the key was there.
            if let previous = index!.updateValue(members.count, forKey: key) {
                index![key] = previous
                return false
            }
            members.append(Member(key: key, value: .null))
            return true
        }
        if members.contains(where: { $0.key == key }) { return false }
        members.append(Member(key: key, value: .null))
        if members.count >= Self.indexThreshold { rebuildIndex() }
        return true
    }

    /// Sets the value of the last member (the one `appendIfAbsent` added).
    mutating func setLastValue(_ value: JSONValue) {
        members[members.count - 1].value = value
    }

    /// Appends a member whose key the caller knows is absent.
    mutating func appendNew(_ key: String, _ value: JSONValue) {
        members.append(Member(key: key, value: value))
        if index != nil {
            index![key] = members.count - 1
        } else if members.count >= Self.indexThreshold {
            rebuildIndex()
        }
    }

    private mutating func rebuildIndex() {
        guard members.count >= Self.indexThreshold else { index = nil; return }
        var built = [String: Int](minimumCapacity: members.count * 4)
        for (i, member) in members.enumerated() { built[member.key] = i }
        index = built
    }

    public subscript(key: String) -> JSONValue? {
        get { position(of: key).map { members[$0].value } }
        set {
            if let position = position(of: key) {
                if let newValue {
                    members[position].value = newValue
                } else {
                    members.remove(at: position)
                    if index != nil { rebuildIndex() }
                }
            } else if let newValue {
                appendNew(key, newValue)
            }
        }
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral,
    ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral, ExpressibleByFloatLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int64) { self = .int(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) { self = .object(JSONObject(elements)) }
    public init(nilLiteral: ()) { self = .null }
    public init(floatLiteral value: Double) { self = .double(value) }
}

extension JSONValue {
    /// `.null` for nil, so optional fields read naturally when building answers.
    public static func optional(_ value: String?) -> JSONValue { value.map { .string($0) } ?? .null }
    public static func optional(_ value: Int64?) -> JSONValue { value.map { .int($0) } ?? .null }
    public static func int(_ value: Int) -> JSONValue { .int(Int64(value)) }
}

// MARK: - Parsing

/// Why some bytes are not acceptable JSON, with the byte offset where it was noticed.
public struct JSONParseError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Reason: Sendable, Equatable {
        case empty
        case unexpectedEnd
        case unexpectedByte(UInt8)
        case invalidUTF8
        case invalidEscape
        case invalidNumber
        case controlCharacterInString
        case duplicateKey(String)
        case tooDeep(limit: Int)
        case trailingBytes
    }
    public var reason: Reason
    public var offset: Int
    /// 1-based line and column of `offset`, for people reading a config file.
    public var line: Int
    public var column: Int

    public var description: String {
        let what: String
        switch reason {
        case .empty: what = "no JSON value (the input is empty)"
        case .unexpectedEnd: what = "the JSON ends too early"
        case .unexpectedByte(let byte):
            if byte >= 0x20 && byte < 0x7F {
                what = "unexpected character '\(Character(Unicode.Scalar(byte)))'"
            } else {
                what = "unexpected byte 0x\(String(byte, radix: 16, uppercase: true))"
            }
        case .invalidUTF8: what = "invalid UTF-8"
        case .invalidEscape: what = "invalid escape sequence in a string"
        case .invalidNumber: what = "invalid number"
        case .controlCharacterInString: what = "unescaped control character in a string"
        case .duplicateKey(let key): what = "duplicate key \"\(key)\""
        case .tooDeep(let limit): what = "nested deeper than \(limit) levels"
        case .trailingBytes: what = "more data after the JSON value"
        }
        return "\(what) at line \(line), column \(column)"
    }
}

public enum JSON {
    /// Deepest nesting accepted; deeper input is hostile or a mistake, never a config.
    public static let defaultMaxDepth = 64

    public static func parse(_ text: String, maxDepth: Int = defaultMaxDepth) throws(JSONParseError) -> JSONValue {
        try parse(Array(text.utf8), maxDepth: maxDepth)
    }

    public static func parse(_ bytes: [UInt8], maxDepth: Int = defaultMaxDepth) throws(JSONParseError) -> JSONValue {
        try bytes.withUnsafeBufferPointer { (buffer) throws(JSONParseError) -> JSONValue in
            var parser = JSONParser(bytes: buffer, maxDepth: maxDepth)
            return try parser.parseDocument()
        }
    }

    public static func parse(_ bytes: ArraySlice<UInt8>, maxDepth: Int = defaultMaxDepth) throws(JSONParseError) -> JSONValue {
        try bytes.withUnsafeBufferPointer { (buffer) throws(JSONParseError) -> JSONValue in
            var parser = JSONParser(bytes: buffer, maxDepth: maxDepth)
            return try parser.parseDocument()
        }
    }
}

struct JSONParser {
    let bytes: UnsafeBufferPointer<UInt8>
    let maxDepth: Int
    var index = 0
    var depth = 0

    init(bytes: UnsafeBufferPointer<UInt8>, maxDepth: Int) {
        self.bytes = bytes
        self.maxDepth = maxDepth
    }

    func fail(_ reason: JSONParseError.Reason, at offset: Int? = nil) -> JSONParseError {
        let at = min(offset ?? index, bytes.count)
        var line = 1
        var column = 1
        for i in 0..<at {
            if bytes[i] == UInt8(ascii: "\n") { line += 1; column = 1 } else { column += 1 }
        }
        return JSONParseError(reason: reason, offset: at, line: line, column: column)
    }

    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x0A, 0x0D, 0x09: index += 1
            default: return
            }
        }
    }

    mutating func parseDocument() throws(JSONParseError) -> JSONValue {
        skipWhitespace()
        if index == bytes.count { throw fail(.empty) }
        let value = try parseValue()
        skipWhitespace()
        if index != bytes.count { throw fail(.trailingBytes) }
        return value
    }

    mutating func parseValue() throws(JSONParseError) -> JSONValue {
        guard index < bytes.count else { throw fail(.unexpectedEnd) }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try expectLiteral("true"); return .bool(true)
        case UInt8(ascii: "f"): try expectLiteral("false"); return .bool(false)
        case UInt8(ascii: "n"): try expectLiteral("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw fail(.unexpectedByte(bytes[index]))
        }
    }

    mutating func expectLiteral(_ literal: StaticString) throws(JSONParseError) {
        let count = literal.utf8CodeUnitCount
        let start = literal.utf8Start
        for i in 0..<count {
            guard index < bytes.count else { throw fail(.unexpectedEnd) }
            guard bytes[index] == start[i] else { throw fail(.unexpectedByte(bytes[index])) }
            index += 1
        }
    }

    mutating func enter() throws(JSONParseError) {
        depth += 1
        if depth > maxDepth { throw fail(.tooDeep(limit: maxDepth)) }
    }

    mutating func parseObject() throws(JSONParseError) -> JSONValue {
        try enter()
        index += 1
        var object = JSONObject()
        skipWhitespace()
        if index < bytes.count && bytes[index] == UInt8(ascii: "}") {
            index += 1
            depth -= 1
            return .object(object)
        }
        while true {
            skipWhitespace()
            guard index < bytes.count else { throw fail(.unexpectedEnd) }
            guard bytes[index] == UInt8(ascii: "\"") else { throw fail(.unexpectedByte(bytes[index])) }
            let keyOffset = index
            let key = try parseString()
            // The first duplicate is refused where its key starts, before its value is read.
            if !object.appendIfAbsent(key) { throw fail(.duplicateKey(key), at: keyOffset) }
            skipWhitespace()
            guard index < bytes.count else { throw fail(.unexpectedEnd) }
            guard bytes[index] == UInt8(ascii: ":") else { throw fail(.unexpectedByte(bytes[index])) }
            index += 1
            skipWhitespace()
            object.setLastValue(try parseValue())
            skipWhitespace()
            guard index < bytes.count else { throw fail(.unexpectedEnd) }
            switch bytes[index] {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "}"):
                index += 1
                depth -= 1
                return .object(object)
            default: throw fail(.unexpectedByte(bytes[index]))
            }
        }
    }

    mutating func parseArray() throws(JSONParseError) -> JSONValue {
        try enter()
        index += 1
        var array: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count && bytes[index] == UInt8(ascii: "]") {
            index += 1
            depth -= 1
            return .array(array)
        }
        while true {
            skipWhitespace()
            array.append(try parseValue())
            skipWhitespace()
            guard index < bytes.count else { throw fail(.unexpectedEnd) }
            switch bytes[index] {
            case UInt8(ascii: ","): index += 1
            case UInt8(ascii: "]"):
                index += 1
                depth -= 1
                return .array(array)
            default: throw fail(.unexpectedByte(bytes[index]))
            }
        }
    }

    mutating func parseHex4() throws(JSONParseError) -> UInt32 {
        guard index + 4 <= bytes.count else { throw fail(.unexpectedEnd) }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            let digit: UInt32
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = UInt32(byte - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = UInt32(byte - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = UInt32(byte - UInt8(ascii: "A") + 10)
            default: throw fail(.invalidEscape)
            }
            value = value << 4 | digit
            index += 1
        }
        return value
    }

    mutating func parseString() throws(JSONParseError) -> String {
        index += 1  // opening quote
        var runStart = index
        // A string without escapes is one validated run. Once there is an escape, the text
        // is gathered as UTF-8 bytes and made a String once at the end: appending to a
        // String's scalar view copied the whole string each time (quadratic in escapes).
        var decoded: [UInt8]? = nil
        func validatedRun(_ parser: JSONParser, upTo end: Int) throws(JSONParseError) -> UnsafeBufferPointer<UInt8> {
            let run = UnsafeBufferPointer(rebasing: parser.bytes[runStart..<end])
            guard String(validating: run, as: UTF8.self) != nil else {
                throw parser.fail(.invalidUTF8, at: runStart)
            }
            return run
        }
        while true {
            guard index < bytes.count else { throw fail(.unexpectedEnd) }
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                if decoded == nil {
                    let run = UnsafeBufferPointer(rebasing: bytes[runStart..<index])
                    guard let text = String(validating: run, as: UTF8.self) else { throw fail(.invalidUTF8, at: runStart) }
                    index += 1
                    return text
                }
                decoded!.append(contentsOf: try validatedRun(self, upTo: index))
                index += 1
                return String(decoding: decoded!, as: UTF8.self)
            }
            if byte < 0x20 { throw fail(.controlCharacterInString) }
            if byte != UInt8(ascii: "\\") { index += 1; continue }
            if decoded == nil { decoded = [] }
            if index > runStart { decoded!.append(contentsOf: try validatedRun(self, upTo: index)) }
            index += 1
            guard index < bytes.count else { throw fail(.unexpectedEnd) }
            let escape = bytes[index]
            index += 1
            let scalar: Unicode.Scalar
            switch escape {
            case UInt8(ascii: "\""): scalar = "\""
            case UInt8(ascii: "\\"): scalar = "\\"
            case UInt8(ascii: "/"): scalar = "/"
            case UInt8(ascii: "b"): scalar = "\u{08}"
            case UInt8(ascii: "f"): scalar = "\u{0C}"
            case UInt8(ascii: "n"): scalar = "\n"
            case UInt8(ascii: "r"): scalar = "\r"
            case UInt8(ascii: "t"): scalar = "\t"
            case UInt8(ascii: "u"):
                let first = try parseHex4()
                var code = first
                if (0xD800...0xDBFF).contains(first) {
                    // A high surrogate must be followed by an escaped low surrogate.
                    guard index + 2 <= bytes.count, bytes[index] == UInt8(ascii: "\\"),
                        bytes[index + 1] == UInt8(ascii: "u")
                    else { throw fail(.invalidEscape) }
                    index += 2
                    let second = try parseHex4()
                    guard (0xDC00...0xDFFF).contains(second) else { throw fail(.invalidEscape) }
                    code = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
                } else if (0xDC00...0xDFFF).contains(first) {
                    throw fail(.invalidEscape)
                }
                guard let value = Unicode.Scalar(code) else { throw fail(.invalidEscape) }
                scalar = value
            default:
                throw fail(.invalidEscape, at: index - 1)
            }
            UTF8.encode(scalar) { decoded!.append($0) }
            runStart = index
        }
    }

    mutating func parseNumber() throws(JSONParseError) -> JSONValue {
        let start = index
        var isInteger = true
        if bytes[index] == UInt8(ascii: "-") { index += 1 }
        guard index < bytes.count else { throw fail(.unexpectedEnd) }
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
        } else if (UInt8(ascii: "1")...UInt8(ascii: "9")).contains(bytes[index]) {
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
        } else {
            throw fail(.invalidNumber)
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            let digitsStart = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            if index == digitsStart { throw fail(.invalidNumber) }
        }
        if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
            let digitsStart = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            if index == digitsStart { throw fail(.invalidNumber) }
        }
        let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        if isInteger, let value = Int64(text) { return .int(value) }
        guard let value = Double(text), value.isFinite else { throw fail(.invalidNumber, at: start) }
        return .double(value)
    }
}

// MARK: - Serialising

extension JSONValue {
    /// Compact JSON text, one line, members in order: what goes on the wire and in files.
    public var serialized: String {
        var out = ""
        out.reserveCapacity(64)
        write(to: &out)
        return out
    }

    public var serializedBytes: [UInt8] { Array(serialized.utf8) }

    public func write(to out: inout String) {
        switch self {
        case .null: out += "null"
        case .bool(let b): out += b ? "true" : "false"
        case .int(let i): out += String(i)
        case .double(let d):
            // JSON has no NaN or infinity; null is the honest stand-in.
            if d.isFinite {
                if d.rounded() == d && abs(d) < 1e15 { out += String(Int64(d)) } else { out += "\(d)" }
            } else {
                out += "null"
            }
        case .string(let s): JSONValue.writeString(s, to: &out)
        case .array(let items):
            out += "["
            for (i, item) in items.enumerated() {
                if i > 0 { out += "," }
                item.write(to: &out)
            }
            out += "]"
        case .object(let object):
            out += "{"
            for (i, member) in object.members.enumerated() {
                if i > 0 { out += "," }
                JSONValue.writeString(member.key, to: &out)
                out += ":"
                member.value.write(to: &out)
            }
            out += "}"
        }
    }

    static func writeString(_ s: String, to out: inout String) {
        out += "\""
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "\u{2028}": out += "\\u2028"
            case "\u{2029}": out += "\\u2029"
            default:
                if scalar.value < 0x20 {
                    let hex = String(scalar.value, radix: 16)
                    out += "\\u" + String(repeating: "0", count: 4 - hex.count) + hex
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        out += "\""
    }
}
