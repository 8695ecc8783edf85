// libFuzzer target: the rtnetlink parser (Rtnetlink.parse over one datagram), as the
// kernel's NETLINK_ROUTE socket would deliver it. Every message kept reads back as text.
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
    return 0
}
