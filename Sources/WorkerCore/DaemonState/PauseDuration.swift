/// The length of a pause, `mode off --for DURATION`: whole numbers with a unit each,
/// largest unit first, no spaces (`45s`, `30m`, `2h`, `1h30m`, `1d12h`). One second to
/// 30 days: a shorter pause is no pause, and a longer one is better said by `mode off`.
public enum PauseDuration {
    public static let minimumMs: Int64 = 1_000
    public static let maximumMs: Int64 = 30 * 86_400_000
    /// Longer text cannot be a duration in range; it is refused before it is read.
    static let maxTextBytes = 32

    private static let units: [(unit: UInt8, ms: Int64)] = [
        (UInt8(ascii: "d"), 86_400_000), (UInt8(ascii: "h"), 3_600_000), (UInt8(ascii: "m"), 60_000), (UInt8(ascii: "s"), 1_000),
    ]

    /// Milliseconds, or why the text is not a duration (the message names the accepted form).
    public static func parse(_ text: String) -> Result<Int64, DurationError> {
        let form = "write it as whole numbers with units d, h, m, s, largest first, e.g. 30m, 2h, 1h30m"
        let bytes = Array(text.utf8)
        guard !bytes.isEmpty else { return .failure(DurationError("an empty duration: \(form)")) }
        guard bytes.count <= maxTextBytes else { return .failure(DurationError("a duration of \(bytes.count) bytes is not one: \(form)")) }
        var total: Int64 = 0
        var number: Int64?
        var nextUnit = 0
        for byte in bytes {
            if byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") {
                let (times, overflow1) = (number ?? 0).multipliedReportingOverflow(by: 10)
                let (sum, overflow2) = times.addingReportingOverflow(Int64(byte - UInt8(ascii: "0")))
                // Past the maximum in any unit already: no need to read on.
                guard !overflow1 && !overflow2 && sum <= maximumMs / 1_000 else { return .failure(tooLong(text)) }
                number = sum
                continue
            }
            guard let index = units.firstIndex(where: { $0.unit == byte }) else {
                return .failure(DurationError("'\(printable(text))' is not a duration: \(form)"))
            }
            guard let value = number else { return .failure(DurationError("'\(printable(text))' has a unit without a number: \(form)")) }
            guard index >= nextUnit else {
                return .failure(DurationError("'\(printable(text))' repeats a unit or puts a larger one after a smaller: \(form)"))
            }
            let (part, overflow1) = value.multipliedReportingOverflow(by: units[index].ms)
            let (sum, overflow2) = total.addingReportingOverflow(part)
            guard !overflow1 && !overflow2 && sum <= maximumMs else { return .failure(tooLong(text)) }
            total = sum
            number = nil
            nextUnit = index + 1
        }
        if number != nil { return .failure(DurationError("'\(printable(text))' ends in a number without a unit: \(form)")) }
        guard total >= minimumMs else {
            return .failure(DurationError("'\(printable(text))' is shorter than 1s; for no pause, choose the mode itself"))
        }
        return .success(total)
    }

    private static func tooLong(_ text: String) -> DurationError {
        DurationError("'\(printable(text))' is longer than 30 days; for a pause that long, use 'mode off' and set the mode again later")
    }

    /// A duration as `parse` reads it back (`1h30m`, `45s`), largest unit first.
    public static func format(milliseconds: Int64) -> String {
        var rest = max(0, milliseconds) / 1_000 * 1_000
        var out = ""
        for (unit, ms) in units where rest >= ms {
            out += "\(rest / ms)\(Character(UnicodeScalar(unit)))"
            rest %= ms
        }
        return out.isEmpty ? "0s" : out
    }
}

/// Why a text is not a pause duration.
public struct DurationError: Error, Sendable, Equatable {
    public var message: String
    public init(_ message: String) { self.message = message }
}
