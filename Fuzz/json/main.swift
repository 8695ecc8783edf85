// libFuzzer target: the JSON parser (WorkerCore JSON), over any bytes.
// Beyond "no crash": a value that parses serialises to text that parses back to the
// same value (the wire and the state files rely on that round trip). Numbers compare by
// value: the serialiser writes an integral double as an integer on purpose.
import WorkerCore

func same(_ a: JSONValue, _ b: JSONValue) -> Bool {
    switch (a, b) {
    case (.int(let x), .int(let y)): return x == y
    case (.int, .double), (.double, .int), (.double, .double): return a.doubleValue == b.doubleValue
    case (.array(let x), .array(let y)): return x.count == y.count && zip(x, y).allSatisfy { same($0, $1) }
    case (.object(let x), .object(let y)):
        return x.keys == y.keys && zip(x.members, y.members).allSatisfy { same($0.value, $1.value) }
    default: return a == b
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    guard let value = try? JSON.parse(bytes) else { return 0 }
    let text = value.serialized
    guard let again = try? JSON.parse(text) else { fatalError("serialised JSON does not parse: \(text)") }
    if !same(again, value) { fatalError("JSON round trip changed the value: \(text)") }
    return 0
}
