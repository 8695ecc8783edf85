// Shared by the harnesses: the fuzz bytes read as a stream of small decisions followed
// by data, so one input drives both how a parser is called and what it is fed.

struct FuzzInput {
    let bytes: [UInt8]
    var index = 0

    init(_ data: UnsafePointer<UInt8>?, _ size: Int) {
        bytes = size > 0 ? Array(UnsafeBufferPointer(start: data, count: size)) : []
    }

    var isEmpty: Bool { index >= bytes.count }

    /// The next byte, 0 once the input is used up.
    mutating func byte() -> UInt8 {
        guard index < bytes.count else { return 0 }
        defer { index += 1 }
        return bytes[index]
    }

    mutating func take(_ count: Int) -> ArraySlice<UInt8> {
        let end = min(bytes.count, index + max(0, count))
        defer { index = end }
        return bytes[index..<end]
    }

    mutating func rest() -> [UInt8] { Array(take(bytes.count)) }

    /// Splits the rest into chunks whose sizes come from `sizes` (cycled; 0 is read as 1).
    mutating func chunks(sizes: [UInt8]) -> [ArraySlice<UInt8>] {
        var out: [ArraySlice<UInt8>] = []
        var k = 0
        while !isEmpty {
            let size = sizes.isEmpty ? bytes.count : max(1, Int(sizes[k % sizes.count]))
            out.append(take(size))
            k += 1
        }
        return out
    }
}

func check(_ condition: @autoclosure () -> Bool, _ message: @autoclosure () -> String) {
    if !condition() { fatalError("fuzz invariant broken: \(message())") }
}
