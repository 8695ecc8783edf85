// JSON object parsing against its baseline (hardening #26 row 13): an object of 100 000
// keys against the same bytes written as an array (`{` `:` `}` become `[` `,` `]`), parsed
// in the same run. A parser linear in its keys keeps the ratio near 1; a scan per member
// made it grow with the key count (quadratic).
import WorkerCore

func jsonBench(keys: Int = 100_000) {
    var object = "{"
    var array = "["
    for i in 0..<keys {
        let separator = i == 0 ? "" : ","
        object += "\(separator)\"key\(i)\":\(i)"
        array += "\(separator)\"key\(i)\",\(i)"
    }
    object += "}"
    array += "]"
    let objectBytes = Array(object.utf8)
    let arrayBytes = Array(array.utf8)
    precondition(objectBytes.count == arrayBytes.count)
    compareParses(
        title: "JSON parse of \(keys) keys (\(objectBytes.count / 1024) KiB; medians of 5)",
        measured: ("object of \(keys) keys:             ", objectBytes),
        baseline: ("baseline, the same bytes as an array:", arrayBytes), ratio: ("object", "array; want < 2x"))
}

/// Parses `measured` and `baseline` (medians of 5 each) and prints both and their ratio.
func compareParses(
    title: String, measured: (label: String, bytes: [UInt8]), baseline: (label: String, bytes: [UInt8]), ratio: (of: String, to: String)
) {
    let base = measure(baseline.label, iterations: 1, batches: 5) { _ = try? JSON.parse(baseline.bytes) }
    let value = measure(measured.label, iterations: 1, batches: 5) { _ = try? JSON.parse(measured.bytes) }
    let format = { (value: Double) in String((value * 100).rounded() / 100) }
    print("== " + title)
    print("   \(measured.label) \(format(value / 1000)) ms")
    print("   \(baseline.label) \(format(base / 1000)) ms   (\(ratio.of) = \(format(value / base))x \(ratio.to))")
}

// One string of 1 MiB full of escapes (`\n`, `\u00e9`, a surrogate pair) against a string
// of the same length with none, parsed in the same run. Gathering the text in a String's
// scalar view copied it at every escape (quadratic: 320 KiB took 0.77 s under the fuzz
// build); gathered as bytes it stays within a few times the plain string.
func jsonEscapesBench(bytes: Int = 1 << 20) {
    let pieces = ["\\n", "\\u00e9", "\\ud83d\\ude00", "abc"]
    var escaped = "\""
    var i = 0
    while escaped.utf8.count < bytes {
        escaped += pieces[i % pieces.count]
        i += 1
    }
    escaped += "\""
    let escapedBytes = Array(escaped.utf8)
    let plainBytes = Array(("\"" + String(repeating: "p", count: escapedBytes.count - 2) + "\"").utf8)
    precondition(escapedBytes.count == plainBytes.count)
    compareParses(
        title: "JSON parse of one \(escapedBytes.count / 1024) KiB string (medians of 5)",
        measured: ("\(i) escapes and runs:                 ", escapedBytes),
        baseline: ("baseline, as many bytes of plain text:", plainBytes), ratio: ("escaped", "plain"))
}
