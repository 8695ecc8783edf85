// libFuzzer target: what parsing costs, not only whether it crashes. The input is a recipe
// for a large document (64–512 KiB): a shape (many keys in one object, keys with a long
// common prefix, many objects of the same keys, nested objects, escapes, long numbers,
// deep nesting) and the text the shape repeats. The document is parsed and its CPU time
// (this thread's, so a busy host does not count) is held against the per-byte cost of a
// plain array of strings measured in this process at start: more than `allowedRatio`
// times that rate means the parser is not linear in its input (hardening #26 row 13: an
// object's keys were found by a scan, 20 000 keys took 10 s). A slow case is timed three
// times and the fastest counts, so one descheduled moment cannot fail it.
import Glibc
import WorkerCore

let allowedRatio = 25.0
/// JSONCOST_PRINT=1: print each document's cost (how the figures in the docs were taken).
let printCosts = getenv("JSONCOST_PRINT") != nil
let slackNanos = 5_000_000.0

func threadCPUNanos() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now)
    return Double(now.tv_sec) * 1e9 + Double(now.tv_nsec)
}

/// The fastest of `times` runs of `work`, in nanoseconds of this thread's CPU.
func fastestNanos(times: Int, _ work: () -> Void) -> Double {
    var best = Double.infinity
    for _ in 0..<times {
        let start = threadCPUNanos()
        work()
        best = min(best, threadCPUNanos() - start)
    }
    return best
}

func parseNanos(_ document: [UInt8], times: Int) -> Double {
    fastestNanos(times: times) { _ = try? JSON.parse(document) }
}

/// Nanoseconds per byte of a 256 KiB array of short strings: the linear reference.
let baselineNanosPerByte: Double = {
    var text: [UInt8] = Array("[".utf8)
    var n = 0
    while text.count < 256 * 1024 {
        if n > 0 { text.append(UInt8(ascii: ",")) }
        text += Array("\"item\(n)\"".utf8)
        n += 1
    }
    text.append(UInt8(ascii: "]"))
    return parseNanos(text, times: 5) / Double(text.count)
}()

/// Key text from the input: letters and digits only, so every document is valid JSON and
/// the shape, not a syntax error, decides how far the parser goes.
func word(_ bytes: ArraySlice<UInt8>, length: Int) -> [UInt8] {
    let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_".utf8)
    guard length > 0 else { return [] }
    if bytes.isEmpty { return Array(repeating: UInt8(ascii: "k"), count: length) }
    let source = Array(bytes)
    return (0..<length).map { alphabet[Int(source[$0 % source.count]) % alphabet.count] }
}

func document(_ input: inout FuzzInput) -> (shape: String, bytes: [UInt8]) {
    let shapeByte = input.byte()
    let target = (64 + Int(input.byte()) % 449) * 1024
    let prefixLength = Int(input.byte()) % 256
    let valueKind = input.byte()
    let seed = input.rest()
    let prefix = word(seed[...], length: prefixLength)
    let values: [[UInt8]] = [
        Array("1".utf8), Array("\"x\"".utf8), Array("[]".utf8), Array("{}".utf8),
        Array("true".utf8), Array("null".utf8), Array("-1.5e3".utf8),
    ]
    func value(_ n: Int) -> [UInt8] { values[(Int(valueKind) + n) % values.count] }
    func key(_ n: Int) -> [UInt8] { [UInt8(ascii: "\"")] + prefix + Array(String(n, radix: 36).utf8) + [UInt8(ascii: "\"")] }
    var out: [UInt8] = []
    out.reserveCapacity(target + 1024)
    switch shapeByte % 7 {
    case 0, 1:
        // One object of as many keys as fit; shape 1 ends on a duplicate of the first.
        out.append(UInt8(ascii: "{"))
        var n = 0
        while out.count < target {
            if n > 0 { out.append(UInt8(ascii: ",")) }
            out += key(n) + [UInt8(ascii: ":")] + value(n)
            n += 1
        }
        if shapeByte % 7 == 1 { out += [UInt8(ascii: ",")] + key(0) + [UInt8(ascii: ":")] + value(0) }
        out.append(UInt8(ascii: "}"))
        return (shapeByte % 7 == 0 ? "one object, \(n) keys" : "one object, \(n) keys, the last a duplicate", out)
    case 2:
        // Many objects with the same keys (each past the size where an object indexes).
        let perObject = 8 + Int(valueKind) % 57
        out.append(UInt8(ascii: "["))
        var objects = 0
        while out.count < target {
            if objects > 0 { out.append(UInt8(ascii: ",")) }
            out.append(UInt8(ascii: "{"))
            for n in 0..<perObject {
                if n > 0 { out.append(UInt8(ascii: ",")) }
                out += key(n) + [UInt8(ascii: ":")] + value(n)
            }
            out.append(UInt8(ascii: "}"))
            objects += 1
        }
        out.append(UInt8(ascii: "]"))
        return ("\(objects) objects of \(perObject) keys", out)
    case 3:
        // Objects inside objects, each level with many keys, to about the depth limit.
        let width = 16 + Int(valueKind) % 200
        var levels = 0
        out.append(UInt8(ascii: "{"))
        while out.count < target && levels < 1 + prefixLength % 70 {
            for n in 0..<width {
                out += key(n) + [UInt8(ascii: ":")] + value(n) + [UInt8(ascii: ",")]
            }
            out += key(width) + Array(":{".utf8)
            levels += 1
        }
        out += Array("\"end\":1".utf8)
        out += Array(repeating: UInt8(ascii: "}"), count: levels + 1)
        return ("\(levels) nested objects of \(width) keys", out)
    case 4:
        // One string of escapes: \uXXXX, surrogate pairs, the short escapes.
        let escapes = [Array("\\u00e9".utf8), Array("\\ud83d\\ude00".utf8), Array("\\n".utf8), Array("\\\\".utf8), Array("\\\"".utf8)] + [prefix]
        out.append(UInt8(ascii: "\""))
        var n = Int(valueKind)
        while out.count < target {
            out += escapes[n % escapes.count]
            n += 1
        }
        out.append(UInt8(ascii: "\""))
        return ("a string of escapes", out)
    case 5:
        // Numbers of many digits.
        let digits = 1 + (prefixLength + Int(valueKind)) % 300
        let number = [UInt8(ascii: "-"), UInt8(ascii: "1")] + Array(repeating: UInt8(ascii: "7"), count: digits) + Array(".25e-3".utf8)
        out.append(UInt8(ascii: "["))
        while out.count < target {
            if out.count > 1 { out.append(UInt8(ascii: ",")) }
            out += number
        }
        out.append(UInt8(ascii: "]"))
        return ("numbers of \(digits + 2) digits", out)
    default:
        // Nesting to about the limit (64), again and again, side by side.
        let depth = 1 + Int(valueKind) % 70
        out.append(UInt8(ascii: "["))
        var runs = 0
        while out.count < target {
            if runs > 0 { out.append(UInt8(ascii: ",")) }
            out += Array(repeating: UInt8(ascii: "["), count: depth) + Array(repeating: UInt8(ascii: "]"), count: depth)
            runs += 1
        }
        out.append(UInt8(ascii: "]"))
        return ("\(runs) nests \(depth) deep", out)
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    var input = FuzzInput(data, size)
    let (shape, bytes) = document(&input)
    let allowed = allowedRatio * baselineNanosPerByte * Double(bytes.count) + slackNanos
    var spent = parseNanos(bytes, times: 1)
    if spent > allowed { spent = parseNanos(bytes, times: 3) }
    if printCosts {
        print(
            "jsoncost: parsing \(bytes.count) bytes (\(shape)): \(Int(spent / 1e3)) us, \(Double(Int(spent / Double(bytes.count) / baselineNanosPerByte * 10)) / 10)x the plain array's rate"
        )
    }
    if spent > allowed {
        fatalError(
            "parsing \(bytes.count) bytes (\(shape)) took \(Int(spent / 1e6)) ms of CPU, over \(Int(allowed / 1e6)) ms (\(Int(allowedRatio))x the \(Int(baselineNanosPerByte * 1000)) ps per byte of a plain array)"
        )
    }
    // Writing the value back (every post and state file does) is held to the same bound.
    guard let value = try? JSON.parse(bytes) else { return 0 }
    var written = 0
    var spentWriting = fastestNanos(times: 1) { written = value.serialized.utf8.count }
    if spentWriting > allowed { spentWriting = fastestNanos(times: 3) { written = value.serialized.utf8.count } }
    if printCosts {
        print("jsoncost: writing \(written) bytes (\(shape)): \(Int(spentWriting / 1e3)) us")
    }
    if spentWriting > allowed {
        fatalError("writing \(shape) (\(written) bytes) took \(Int(spentWriting / 1e6)) ms of CPU, over \(Int(allowed / 1e6)) ms")
    }
    return 0
}
