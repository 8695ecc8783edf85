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
    let asArray = measure("array", iterations: 1, batches: 5) { _ = try? JSON.parse(arrayBytes) }
    let asObject = measure("object", iterations: 1, batches: 5) { _ = try? JSON.parse(objectBytes) }
    let format = { (value: Double) in String((value * 100).rounded() / 100) }
    print("== JSON parse of \(keys) keys (\(objectBytes.count / 1024) KiB; medians of 5)")
    print("   object of \(keys) keys:              \(format(asObject / 1000)) ms")
    print("   baseline, the same bytes as an array: \(format(asArray / 1000)) ms   (object = \(format(asObject / asArray))x array; want < 2x)")
}
