// libFuzzer target: the uevent parser (Uevent.parse over one NETLINK_KOBJECT_UEVENT
// datagram).
import Telemetry

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    let input = FuzzInput(data, size)
    guard let event = Uevent.parse(input.bytes) else { return 0 }
    check(input.bytes.count <= Uevent.maxBytes, "a datagram of \(input.bytes.count) bytes parsed")
    check(!event.action.isEmpty && event.devpath.hasPrefix("/"), "header \(event.action)@\(event.devpath)")
    check(event.properties.count <= Uevent.maxProperties, "\(event.properties.count) properties")
    _ = event.subsystem
    return 0
}
