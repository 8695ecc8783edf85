// libFuzzer target: the netlink parsers over one datagram, as the kernel would deliver it:
// rtnetlink (Rtnetlink.parse, NETLINK_ROUTE) and sock_diag (SockDiag.parse, the listeners
// of a port). Every message kept reads back as text.
import WorkerCore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let input = FuzzInput(data, size)
    let (messages, error) = Rtnetlink.parse(input.bytes)
    for message in messages {
        switch message {
        case .address(let address, _):
            check(address.address.count == (address.family == .ipv4 ? 4 : 16), "address of \(address.address.count) bytes")
            _ = address.text
            _ = address.isGlobal
        case .link(let link, _): check(!link.name.isEmpty, "a link without a name")
        case .route(let route, _): _ = route.isDefault
        default: break
        }
    }
    if let error { _ = error.description }
    let port = input.bytes.count >= 2 ? UInt16(input.bytes[0]) << 8 | UInt16(input.bytes[1]) : 11434
    let reply = SockDiag.parse(input.bytes, port: port)
    check(reply.listeners.allSatisfy { $0.inode > 0 }, "a listener without an inode")
    check(reply.listeners.count <= input.bytes.count / 88, "more listeners than answers fit")
    return 0
}
