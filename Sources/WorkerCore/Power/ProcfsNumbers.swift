// The numbers of procfs files, read strictly: digits only and bounded, since every such
// file is hostile input (a process can name itself anything).

/// Digits only, bounded; nil for anything else (signs, spaces, overflow).
func decimal(_ bytes: some Collection<UInt8>) -> UInt64? {
    guard !bytes.isEmpty, bytes.count <= 20 else { return nil }
    var value: UInt64 = 0
    for byte in bytes {
        guard byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") else { return nil }
        let (times, o1) = value.multipliedReportingOverflow(by: 10)
        let (sum, o2) = times.addingReportingOverflow(UInt64(byte - UInt8(ascii: "0")))
        if o1 || o2 { return nil }
        value = sum
    }
    return value
}

/// A pid written in decimal (1 to Int32.max, as /proc names them); nil for anything else.
public func decimalPID(_ bytes: some Collection<UInt8>) -> Int32? {
    guard let value = decimal(bytes), value >= 1, value <= UInt64(Int32.max) else { return nil }
    return Int32(value)
}

/// Hex digits only, at most `maxDigits`.
func hex(_ bytes: some Collection<UInt8>, maxDigits: Int) -> UInt64? {
    guard !bytes.isEmpty, bytes.count <= maxDigits else { return nil }
    var value: UInt64 = 0
    for byte in bytes {
        let digit: UInt8
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
        default: return nil
        }
        value = value << 4 | UInt64(digit)
    }
    return value
}
