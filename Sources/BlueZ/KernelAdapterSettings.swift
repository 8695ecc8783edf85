#if canImport(Glibc)
import Glibc
#endif
import CWorkerShims
import Logging
import Posix
import WorkerCore

/// The kernel's Bluetooth management socket (HCI_CHANNEL_CONTROL), read-only: the worker
/// asks each controller's settings and hears their changes (`MgmtWire` decodes). Opened
/// without CAP_NET_ADMIN the kernel takes it for untrusted and allows exactly that.
final class ManagementSocket: Sendable {
    let fd: Int32

    init() throws(SystemError) {
        let fd = ecw_bt_mgmt_open()
        if fd < 0 { throw SystemError("socket", errno: -fd, detail: "the Bluetooth management channel (AF_BLUETOOTH, HCI_CHANNEL_CONTROL)") }
        self.fd = fd
    }

    deinit { close(fd) }

    func send(_ bytes: [UInt8]) throws(SystemError) {
        _ = try systemCall("send", "the Bluetooth management channel") { bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, 0) } }
    }
}

/// Follows whether each controller is Bluetooth Classic connectable, which bluetoothd's
/// D-Bus API does not show: the peripheral's pairing agent stands back while its adapter
/// is (docs/operating/bluetooth-pairing.md, "Bluetooth Classic").
enum KernelAdapterSettings {
    /// Until cancelled: the settings of every controller, then each change, reported as
    /// (adapter name, Classic-connectable) when it changes. Returns early when the socket
    /// cannot be used (no Bluetooth in the kernel, a sandbox that forbids it): the worker
    /// then knows only what bluetoothd shows, and says so once.
    static func follow(logger: Logger, report: @Sendable (String, Bool) async -> Void) async {
        let socket: ManagementSocket
        do {
            socket = try ManagementSocket()
            try socket.send(MgmtWire.command(.readIndexList))
        } catch {
            logger.warning(
                "cannot read the kernel's Bluetooth settings (\(error)): an adapter made Bluetooth Classic connectable outside bluetoothd (btmgmt connectable on) goes unseen, and the pairing agent does not stand back for it"
            )
            return
        }
        var known: [UInt16: Bool] = [:]
        var malformed = 0
        while !Task.isCancelled {
            let parsed: Result<MgmtWire.Message, MgmtWire.ParseError>
            do {
                switch try await receiveDatagram(socket.fd, capacity: MgmtWire.maxMessageBytes, detail: "the Bluetooth management channel") {
                case .datagram(let bytes): parsed = MgmtWire.parse(bytes)
                case .truncated(let length): parsed = .failure(.tooLong(length))
                }
            } catch {
                if !Task.isCancelled { logger.warning("stopped reading the kernel's Bluetooth settings: \(error)") }
                return
            }
            switch parsed {
            case .failure(let why):
                // The kernel's own messages: a broken one is a kernel this code does not
                // know. Said a few times, never acted on.
                malformed += 1
                if malformed <= 3 { logger.info("ignored a Bluetooth management message the worker cannot read: \(why)") }
            case .success(.controllers(let indexes)):
                for index in indexes { try? socket.send(MgmtWire.command(.readInfo, controller: index)) }
            case .success(.controllerAdded(let index)):
                try? socket.send(MgmtWire.command(.readInfo, controller: index))
            case .success(.controllerRemoved(let index)):
                if known.removeValue(forKey: index) == true { await report("hci\(index)", false) }
            case .success(.settings(let index, let settings)):
                let connectable = settings.classicConnectable
                guard known[index] != connectable else { continue }
                known[index] = connectable
                logger.debug("hci\(index): kernel settings 0x\(String(settings.rawValue, radix: 16)), Bluetooth Classic connectable \(connectable)")
                await report("hci\(index)", connectable)
            case .success(.failed(let command, let index, let status)):
                logger.debug("the kernel refused Bluetooth management command 0x\(String(command, radix: 16)) for hci\(index): status \(status)")
            case .success(.other):
                continue
            }
        }
    }
}
