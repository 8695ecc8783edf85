public enum LoopbackServer {
    /// The TCP port of a model server reached on this host (`127.0.0.0/8`, `localhost`,
    /// `[::1]`); nil for a remote server, whose CPU is not this host's.
    public static func port(of url: String) -> UInt16? {
        let lower = url.lowercased()
        let rest: Substring
        let defaultPort: UInt16
        if lower.hasPrefix("http://") {
            rest = lower.dropFirst(7); defaultPort = 80
        } else if lower.hasPrefix("https://") {
            rest = lower.dropFirst(8); defaultPort = 443
        } else {
            return nil
        }
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        let host: Substring
        var portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if after.hasPrefix(":") { portText = after.dropFirst() } else if !after.isEmpty { return nil }
        } else {
            let parts = authority.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            host = parts[0]
            if parts.count == 2 { portText = parts[1] }
        }
        let loopback = host == "localhost" || host == "::1" || host.hasPrefix("127.")
        guard loopback else { return nil }
        guard let portText else { return defaultPort }
        guard let value = decimal(portText.utf8), value >= 1, value <= 65_535 else { return nil }
        return UInt16(value)
    }
}
