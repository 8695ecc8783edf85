import Testing

@testable import HTTP

/// An environment of exactly `variables`.
private func environment(_ variables: [String: String]) -> (String) -> String? { { variables[$0] } }

@Suite struct HTTPRouteChoosesTheClient {
    @Test(arguments: [
        ("http://127.0.0.1:11434/api/chat", HTTPRoute.plain),
        ("HTTP://Coordinator.lan/pull", .plain),
        ("http://[::1]:8080/", .plain),
        ("https://coordinator.example/register", .libcurl),
        ("ftp://127.0.0.1/x", .libcurl),
        ("file:///etc/passwd", .libcurl),
        ("http:/127.0.0.1/", .libcurl),
        // Malformed http:// is refused by our client, which needs no libcurl to say so.
        ("http://user@host/", .plain),
    ])
    func plainHTTPIsOursTheRestLibcurls(url: String, route: HTTPRoute) {
        #expect(HTTPRoute.choose(url: url, environment: environment([:])) == route)
    }

    @Test(arguments: ["http_proxy", "all_proxy", "ALL_PROXY"])
    func aProxyVariableLibcurlReadsKeepsHTTPOnLibcurl(variable: String) {
        let env = environment([variable: "http://proxy.lan:3128"])
        #expect(HTTPRoute.choose(url: "http://coordinator.lan/", environment: env) == .libcurl)
    }

    @Test func upperCaseHTTP_PROXYIsIgnoredAsLibcurlIgnoresItForHTTP() {
        let env = environment(["HTTP_PROXY": "http://proxy.lan:3128", "https_proxy": "http://proxy.lan:3128"])
        #expect(HTTPRoute.choose(url: "http://coordinator.lan/", environment: env) == .plain)
    }

    @Test func anEmptyProxyVariableIsNoProxy() {
        #expect(HTTPRoute.choose(url: "http://coordinator.lan/", environment: environment(["http_proxy": ""])) == .plain)
    }

    @Test(arguments: [
        ("localhost,127.0.0.1", "http://127.0.0.1:11434/", HTTPRoute.plain),
        ("localhost, 127.0.0.1", "http://localhost:11434/", .plain),
        ("*", "http://anything.lan/", .plain),
        (".example.com", "http://a.b.example.com/", .plain),
        (".example.com", "http://example.com/", .plain),
        ("example.com", "http://WWW.Example.Com./", .plain),
        ("example.com", "http://notexample.com/", .libcurl),
        ("127.0.0.0/8", "http://127.9.9.9:8080/", .plain),
        ("10.0.0.0/8", "http://127.0.0.1/", .libcurl),
        ("::1", "http://[::1]:11434/", .plain),
        ("fd00::/8", "http://[fd12::5]/", .plain),
        ("fd00::/8", "http://[fe80::1]/", .libcurl),
        ("*.example.com", "http://a.example.com/", .libcurl),
        ("", "http://127.0.0.1/", .libcurl),
    ])
    func noProxyExcludesHostsAsLibcurlMatchesThem(noProxy: String, url: String, route: HTTPRoute) {
        let env = environment(["http_proxy": "http://proxy.lan:3128", "no_proxy": noProxy])
        #expect(HTTPRoute.choose(url: url, environment: env) == route, "no_proxy=\(noProxy) \(url)")
    }

    @Test func upperCaseNO_PROXYCountsOnlyWithoutTheLowerCaseOne() {
        let upper = environment(["http_proxy": "http://p:1", "NO_PROXY": "127.0.0.1"])
        #expect(HTTPRoute.choose(url: "http://127.0.0.1/", environment: upper) == .plain)
        let both = environment(["http_proxy": "http://p:1", "no_proxy": "", "NO_PROXY": "127.0.0.1"])
        #expect(HTTPRoute.choose(url: "http://127.0.0.1/", environment: both) == .libcurl)
    }

    @Test func theSharedClientRoutesByTheEnvironmentItIsGiven() {
        let proxied = HTTPClient(environment: { $0 == "http_proxy" ? "http://proxy:3128" : nil })
        #expect(proxied.route(of: HTTPRequest(url: "http://127.0.0.1:9/")) == .libcurl)
        let direct = HTTPClient(environment: { _ in nil })
        #expect(direct.route(of: HTTPRequest(url: "http://127.0.0.1:9/")) == .plain)
        #expect(direct.route(of: HTTPRequest(url: "https://127.0.0.1:9/")) == .libcurl)
    }
}

@Suite struct PlainHTTPURLParsing {
    @Test(arguments: [
        ("http://127.0.0.1:11434/api/chat", "127.0.0.1", 11434, "127.0.0.1:11434", "/api/chat"),
        ("http://Example.COM", "Example.COM", 80, "Example.COM", "/"),
        ("http://[::1]:8080/x?y=1#frag", "::1", 8080, "[::1]:8080", "/x?y=1"),
        ("http://[fe80::1%25eth0]/", "fe80::1%eth0", 80, "[fe80::1%25eth0]", "/"),
        ("http://h?q=1", "h", 80, "h", "/?q=1"),
        ("http://h:/p", "h", 80, "h", "/p"),
        ("http://h:80/p", "h", 80, "h", "/p"),
        ("http://h#only-a-fragment", "h", 80, "h", "/"),
        ("http://h/caf\u{E9}", "h", 80, "h", "/caf%C3%A9"),
    ])
    func takesAnHTTPURLApart(text: String, host: String, port: Int, authority: String, target: String) throws {
        let url = try PlainHTTPURL(text)
        #expect(url.host == host)
        #expect(Int(url.port) == port)
        #expect(url.authority == authority)
        #expect(url.target == target)
    }

    @Test(arguments: [
        ("https://x/", "is not an http:// URL"),
        ("http://", "has no host"),
        ("http:///path", "has no host"),
        ("http://user:pw@h/", "carries credentials"),
        ("http://h:0/", "has a port that is not a number from 1 to 65535"),
        ("http://h:65536/", "has a port that is not a number from 1 to 65535"),
        ("http://h:8o/", "has a port that is not a number from 1 to 65535"),
        ("http://[::1/", "without its closing ]"),
        ("http://[zz]/", "has no valid IPv6 address"),
        ("http://[::1]x/", "other than :port"),
        ("http://h h/", "holds a space or a control character"),
        ("http://h/a\r\nX-Injected: 1", "holds a space or a control character"),
        ("http://ex%41mple/", "characters a host name cannot have"),
        (":", "is not an http:// URL"),
    ])
    func refusesAnythingElseAsABadURL(text: String, says: String) {
        #expect {
            try PlainHTTPURL(text)
        } throws: { error in
            guard let error = error as? HTTPError else { return false }
            return error.kind == .badURL && error.message.contains(says)
        }
    }
}

@Suite struct PlainHTTPRequestBytes {
    @Test func aGETCarriesHostAndAgentAndNoConnectionHeader() throws {
        let url = try PlainHTTPURL("http://127.0.0.1:8080/api/tags?x=1")
        let text = String(decoding: try PlainHTTPRequestHead.bytes(of: HTTPRequest(url: "unused"), to: url), as: UTF8.self)
        #expect(
            text == "GET /api/tags?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUser-Agent: edgecoder-worker\r\nAccept: */*\r\n\r\n")
    }

    @Test func aPOSTCarriesItsHeadersLengthAndBody() throws {
        let url = try PlainHTTPURL("http://h/pull")
        let request = HTTPRequest(
            method: "POST", url: "unused", headers: [("content-type", "application/json"), ("user-agent", "mine")], body: Array("{}".utf8))
        let text = String(decoding: try PlainHTTPRequestHead.bytes(of: request, to: url), as: UTF8.self)
        #expect(
            text
                == "POST /pull HTTP/1.1\r\nHost: h\r\nAccept: */*\r\ncontent-type: application/json\r\nuser-agent: mine\r\nContent-Length: 2\r\n\r\n{}"
        )
    }

    @Test(arguments: [
        HTTPRequest(url: "http://h/", headers: [("x-token", "a\r\nX-Injected: 1")]),
        HTTPRequest(url: "http://h/", headers: [("x-token", "a\nb")]),
        HTTPRequest(url: "http://h/", headers: [("x-token", "a\u{0}b")]),
        HTTPRequest(url: "http://h/", headers: [("x-bad name", "v")]),
        HTTPRequest(url: "http://h/", headers: [("x:y", "v")]),
        HTTPRequest(method: "GET /evil HTTP/1.1\r\n", url: "http://h/"),
        HTTPRequest(method: "", url: "http://h/"),
    ])
    func fieldsThatWouldSplitTheRequestAreRefused(request: HTTPRequest) {
        #expect {
            try PlainHTTPRequestHead.checkFields(of: request)
        } throws: { ($0 as? HTTPError)?.kind == .badURL }
    }

    @Test func theSharedClientRefusesThemForLibcurlToo() async {
        // https:// goes to libcurl, which would send the line break as it is.
        await #expect {
            _ = try await HTTPClient(environment: { _ in nil }).perform(
                HTTPRequest(url: "https://127.0.0.1:9/", headers: [("authorization", "Bearer x\r\nX-Injected: 1")]))
        } throws: { ($0 as? HTTPError)?.kind == .badURL }
    }
}
