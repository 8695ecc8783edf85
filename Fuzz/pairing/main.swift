// libFuzzer target: what `edgecoder-worker bluetooth pair` reads from outside — the
// operator's terminal (TerminalLines, then isYes/passkey) and bluetoothd's device paths
// (PairingWindow.address(ofDevice:), decide; the daemon's JustWorksAgent.answer and
// DeviceTransport). Any bytes:
// no crash, a yes only for y/yes, a passkey only in 0…999999, never a question about (nor an
// acceptance of) another adapter's device; and the same bytes as one kernel Bluetooth
// management datagram (MgmtWire.parse): a message only from a whole, well-framed one.
import WorkerCore

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    var input = FuzzInput(data, size)
    let sizes = Array(input.take(4))
    let pathLength = Int(input.byte())
    let path = String(decoding: input.take(pathLength), as: UTF8.self)
    var window = PairingWindow(adapter: "hci0", nowMs: 0, durationMs: 60_000)
    let request: PairingWindow.Request
    switch input.byte() % 3 {
    case 0: request = .confirmation(device: path, passkey: UInt32(input.byte()) << 12)
    case 1: request = .authorization(device: path)
    default: request = .passkey(device: path)
    }
    let decision = window.decide(request, nowMs: Int64(input.byte()))
    let address = PairingWindow.address(ofDevice: path, under: "/org/bluez/hci0")
    // The daemon's Just Works agent: accepts only Just Works, only for hci0's devices.
    if case .accept(let accepted) = JustWorksAgent.answer(request, adapterPath: "/org/bluez/hci0", transport: .le) {
        check(accepted == address && request == .authorization(device: path), "the agent accepted \(request)")
    }
    // The LE-only rule (#26 row 8): bluetoothd's AddressType is any string here; LE only
    // for "random", or "public" without a Class of Device; a refusal never echoes control bytes.
    let cod: UInt32? = sizes.first.flatMap { $0 % 2 == 0 ? UInt32($0) : nil }
    switch DeviceTransport.of(addressType: path, classOfDevice: cod) {
    case .le:
        check(path == "random" || (path == "public" && cod == nil), "LE from \(path.debugDescription), class \(String(describing: cod))")
    case .notLE(let why):
        check(!why.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }, "a control byte in \(why.debugDescription)")
        if case .accept = JustWorksAgent.answer(request, adapterPath: "/org/bluez/hci0", transport: .notLE(why)) {
            check(false, "the agent accepted a device not known to be LE")
        }
    }
    if let address {
        check(address.utf8.count == 17 && path.hasPrefix("/org/bluez/hci0/dev_"), "address \(address) from \(path.debugDescription)")
    }
    if case .ask = decision {
        check(address != nil, "asked about \(path.debugDescription)")
    } else {
        check(window.pending == nil, "a question pending without asking")
    }
    var lines = TerminalLines()
    var all: [String] = []
    for chunk in input.chunks(sizes: sizes) { all += lines.feed(chunk) }
    if let last = lines.finish() { all.append(last) }
    for line in all {
        check(line.utf8.count <= TerminalLines.maxLineBytes * 3, "a line of \(line.utf8.count) bytes")
        if PairingWindow.isYes(line) {
            let word = line.filter { $0 != " " && $0 != "\t" && $0 != "\r" && $0 != "\n" }.lowercased()
            check(word == "y" || word == "yes", "yes from \(line.debugDescription)")
        }
        if let passkey = PairingWindow.passkey(line) { check(passkey <= 999_999, "passkey \(passkey)") }
        _ = window.answer(line)
    }
    // The kernel's management messages (the agent stands back while the adapter is Classic
    // connectable): the whole input as one datagram. A message only from a whole one.
    let datagram = input.bytes
    if case .success(let message) = MgmtWire.parse(datagram) {
        check(datagram.count >= MgmtWire.headerBytes && datagram.count <= MgmtWire.maxMessageBytes, "\(datagram.count) bytes read")
        check(Int(datagram[4]) | Int(datagram[5]) << 8 == datagram.count - MgmtWire.headerBytes, "a length that lies read")
        if case .controllers(let list) = message { check(datagram.count == MgmtWire.headerBytes + 5 + 2 * list.count, "a list of \(list.count)") }
    }
    return 0
}
