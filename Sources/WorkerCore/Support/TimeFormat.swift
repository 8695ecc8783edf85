/// Formats milliseconds since the epoch as ISO 8601 UTC (`2026-11-29T13:35:52.120Z`)
/// without Foundation, by Howard Hinnant's days-to-civil algorithm.
public func formatUTC(milliseconds: Int64) -> String {
    let ms = Int(((milliseconds % 1000) + 1000) % 1000)
    var seconds = Int((milliseconds - Int64(ms)) / 1000)
    var days = seconds / 86_400
    seconds -= days * 86_400
    if seconds < 0 { seconds += 86_400; days -= 1 }
    let (year, month, day) = civilFromDays(days)
    func pad(_ n: Int, _ width: Int) -> String {
        let s = String(n)
        return s.count >= width ? s : String(repeating: "0", count: width - s.count) + s
    }
    return
        "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2))T\(pad(seconds / 3600, 2)):\(pad(seconds / 60 % 60, 2)):\(pad(seconds % 60, 2)).\(pad(ms, 3))Z"
}

/// A compact UTC stamp for file names (`20261129T133552Z`).
public func fileStampUTC(milliseconds: Int64) -> String {
    let iso = formatUTC(milliseconds: milliseconds)
    return String(iso.prefix(19).filter { $0 != "-" && $0 != ":" }) + "Z"
}

func civilFromDays(_ z0: Int) -> (Int, Int, Int) {
    let z = z0 + 719_468
    let era = (z >= 0 ? z : z - 146_096) / 146_097
    let doe = z - era * 146_097
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
    let y = yoe + era * 400
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
    let mp = (5 * doy + 2) / 153
    let d = doy - (153 * mp + 2) / 5 + 1
    let m = mp < 10 ? mp + 3 : mp - 9
    return (m <= 2 ? y + 1 : y, m, d)
}

/// A duration for people: `3d 4h`, `12m 5s`, `800ms`.
public func formatDuration(milliseconds: Int64) -> String {
    if milliseconds < 1000 { return "\(max(0, milliseconds))ms" }
    let s = milliseconds / 1000
    if s < 60 { return "\(s)s" }
    if s < 3600 { return "\(s / 60)m \(s % 60)s" }
    if s < 86_400 { return "\(s / 3600)h \(s / 60 % 60)m" }
    return "\(s / 86_400)d \(s / 3600 % 24)h"
}
