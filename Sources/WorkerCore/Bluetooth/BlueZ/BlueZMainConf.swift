/// What `doctor` reads from bluetoothd's own configuration (`/etc/bluetooth/main.conf`, a
/// GLib key file): the number of ATT bearers, `[GATT] Channels`. Above 1, BlueZ peers open
/// Enhanced ATT bearers and bluetoothd 5.66 sends notifications over whichever bearer can
/// write, so two in flight at once reach the client out of order (docs/operating/bluetooth.md, "Pacing").
public enum BlueZMainConf {
    /// bluetoothd's default when the key is absent or unreadable (src/main.c).
    public static let defaultATTChannels = 3
    /// bluetoothd clamps an integer to 1–5 (src/main.c: MIN(val, 5), MAX(val, 1)).
    public static let attChannelsRange = 1...5
    /// Larger files are not main.conf: read nothing from them.
    public static let maxBytes = 256 * 1024

    /// `[GATT] Channels` as bluetoothd would use it: an integer clamped to 1–5, the last
    /// one in the file winning (GLib key files merge repeated groups and keys), `#`
    /// comments and blank lines skipped; a value that is not an integer leaves the default.
    public static func attChannels(in text: String) -> Int {
        guard text.utf8.count <= maxBytes else { return defaultATTChannels }
        var group = ""
        var channels = defaultATTChannels
        for raw in text.split(omittingEmptySubsequences: true, whereSeparator: \.isNewline) {
            let line = raw.trimmingSpaces
            if line.isEmpty || line.hasPrefix("#") { continue }
            if line.hasPrefix("[") {
                if line.hasSuffix("]") { group = String(line.dropFirst().dropLast()) }
                continue
            }
            guard group == "GATT", let equals = line.firstIndex(of: "=") else { continue }
            guard line[..<equals].trimmingSpaces == "Channels" else { continue }
            if let value = Int(line[line.index(after: equals)...].trimmingSpaces) {
                channels = min(max(value, attChannelsRange.lowerBound), attChannelsRange.upperBound)
            }
        }
        return channels
    }
}

private extension StringProtocol {
    var trimmingSpaces: String {
        var slice = Substring(self)
        while let first = slice.first, first == " " || first == "\t" { slice = slice.dropFirst() }
        while let last = slice.last, last == " " || last == "\t" { slice = slice.dropLast() }
        return String(slice)
    }
}
