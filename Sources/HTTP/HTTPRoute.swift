#if canImport(Glibc)
import Glibc
#endif

/// Which client carries a request: the worker's own HTTP/1.1 client for plain `http://`
/// (every model server, a LAN or dev coordinator), libcurl for `https://` and for what
/// libcurl would send through a proxy. libcurl and its TLS libraries cost about 8 MiB
/// resident once loaded; a worker that speaks only plain HTTP never loads them.
public enum HTTPRoute: Sendable, Equatable {
    case plain
    case libcurl

    /// Pure: the URL and the environment in, the route out. `environment` gives a
    /// variable's value, nil when unset. An `http://` URL goes through libcurl only when
    /// libcurl would take it through a proxy named in the environment, so an operator's
    /// proxy keeps working: `http_proxy` (lowercase only: libcurl ignores `HTTP_PROXY`
    /// for http, as a CGI program's `Proxy:` header would set it), `all_proxy`,
    /// `ALL_PROXY`, unless the host is excluded by `no_proxy` (else `NO_PROXY`) as libcurl
    /// 7.86 and later match it. In doubt, libcurl: it then decides as it always did.
    public static func choose(url: String, environment: (String) -> String?) -> HTTPRoute {
        guard url.utf8.count >= 7, url.prefix(7).lowercased() == "http://" else { return .libcurl }
        let proxy = ["http_proxy", "all_proxy", "ALL_PROXY"].contains { environment($0).map { !$0.isEmpty } ?? false }
        guard proxy else { return .plain }
        // A malformed http:// URL is refused by either client; ours does so without loading libcurl.
        guard let host = try? PlainHTTPURL(url).host else { return .plain }
        guard let noProxy = environment("no_proxy") ?? environment("NO_PROXY") else { return .libcurl }
        return noProxyMatches(host: host, list: noProxy) ? .plain : .libcurl
    }

    /// libcurl's no_proxy test (lib/noproxy.c, 7.86+): `*` alone matches every host;
    /// otherwise entries split by commas and spaces; a name matches itself or any name
    /// under it (a leading `.` is ignored, case is not significant); an IP address matches
    /// an address, or a network written `address/bits`.
    static func noProxyMatches(host: String, list: String) -> Bool {
        if list == "*" { return true }
        var name = host
        if name.hasSuffix(".") { name.removeLast() }
        let hostAddress = IPAddress(host)
        for entry in list.split(whereSeparator: { $0 == "," || $0 == " " }) {
            if let hostAddress {
                let parts = entry.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
                let bits = parts.count == 2 ? Int(parts[1]) ?? 0 : 0
                if let network = IPAddress(String(parts[0])), hostAddress.isIn(network, bits: bits) { return true }
                continue
            }
            var token = Substring(entry)
            if token.hasSuffix(".") { token.removeLast() }
            if token.hasPrefix(".") { token.removeFirst() }
            guard !token.isEmpty else { continue }
            let lowerName = name.lowercased(), lowerToken = token.lowercased()
            if lowerName == lowerToken || lowerName.hasSuffix("." + lowerToken) { return true }
        }
        return false
    }

    /// An IPv4 or IPv6 address as inet_pton reads it (pure: no I/O).
    private struct IPAddress {
        var bytes: [UInt8]

        init?(_ text: String) {
            var storage = [UInt8](repeating: 0, count: 16)
            if inet_pton(AF_INET, text, &storage) == 1 {
                bytes = Array(storage.prefix(4))
            } else if inet_pton(AF_INET6, text, &storage) == 1 {
                bytes = storage
            } else {
                return nil
            }
        }

        /// Whether the first `bits` bits equal the network's (0: all of them, as libcurl).
        func isIn(_ network: IPAddress, bits: Int) -> Bool {
            guard bytes.count == network.bytes.count else { return false }
            let width = bytes.count * 8
            let prefix = bits == 0 ? width : bits
            guard prefix > 0, prefix <= width else { return false }
            for bit in 0..<prefix where (bytes[bit / 8] ^ network.bytes[bit / 8]) & (0x80 >> UInt8(bit % 8)) != 0 {
                return false
            }
            return true
        }
    }
}
