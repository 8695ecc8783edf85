/// The daemon's Agent1 (capability NoInputNoOutput, so every pairing bluetoothd offers it is
/// Just Works): what it answers each call. Pure.
///
/// bluetoothd 5.66 (src/device.c, device_confirm_passkey) turns the kernel's Just Works
/// confirmation (confirm_hint set) into RequestAuthorization and a numeric comparison into
/// RequestConfirmation; so RequestAuthorization is the only request accepted here.
public enum JustWorksAgent {
    public static let capability = "NoInputNoOutput"

    /// An Agent1 call, decoded by the adapter.
    public enum Call: Sendable, Equatable {
        case request(PairingWindow.Request)
        /// bluetoothd dropped the agent (it unregistered it, or is going away).
        case release
        /// bluetoothd withdrew a request it had made (none is ever held here).
        case cancel
        /// A known member with arguments that do not match doc/agent-api.txt.
        case malformed(member: String)
    }

    public enum Answer: Sendable, Equatable {
        /// Accept the Just Works pairing of this address.
        case accept(address: String)
        /// Reply org.bluez.Error.Rejected with this reason.
        case reject(String)
    }

    /// `adapterPath`: the adapter the worker serves on (nil while it has none);
    /// `transport`: what bluetoothd shows of the device (`DeviceTransport.of`).
    public static func answer(_ request: PairingWindow.Request, adapterPath: String?, transport: DeviceTransport) -> Answer {
        let device = request.device
        // The default agent hears about every adapter of the host: another adapter's
        // devices (a laptop's mouse, a phone pairing with another app) are not the worker's.
        guard let adapterPath, let address = PairingWindow.address(ofDevice: device, under: adapterPath) else {
            return .reject("\(PairingWindow.printable(device)) is not a device of the worker's adapter\(adapterPath.map { " \($0)" } ?? "")")
        }
        switch request {
        case .authorization:
            // bluetoothd 5.66 asks the same RequestAuthorization for a Classic (BR/EDR)
            // Secure Simple Pairing when the kernel leaves it to user space (a device whose
            // link key it already has): accepting it would give a persistent Classic bond,
            // which the worker, an LE peripheral, never needs. A first Classic Just Works
            // pairing the kernel accepts by itself under a NoInputNoOutput default agent,
            // without asking: docs/operating/bluetooth-pairing.md, "Bluetooth Classic".
            if case .notLE(let why) = transport {
                return .reject(
                    "\(address) is not known to be an LE device (\(why)); the worker's agent pairs LE devices only, pair it with edgecoder-worker bluetooth pair if it must be"
                )
            }
            return .accept(address: address)
        case .confirmation:
            return .reject(
                "\(address) asks for numeric comparison; the worker's agent accepts Just Works only (security encrypted), pair it with edgecoder-worker bluetooth pair"
            )
        case .passkey, .displayPasskey:
            return .reject(
                "\(address) asks for passkey entry; the worker's agent accepts Just Works only (security encrypted), pair it with edgecoder-worker bluetooth pair"
            )
        case .pinCode, .displayPinCode:
            return .reject("\(address) asks for Bluetooth Classic PIN pairing; the worker is an LE peripheral and offers none")
        case .authorizeService(_, let uuid):
            return .reject("\(address) asks to use service \(PairingWindow.printable(uuid)); the worker's agent only pairs")
        }
    }
}

/// Whether a device bluetoothd asks the agent about is an LE device, as far as what
/// bluetoothd 5.66 shows of it tells (it has no bearer property before 5.8x): `AddressType`
/// "random" exists only on LE; "public" is LE unless the device has a `Class` (a Class of
/// Device reaches bluetoothd only from Classic inquiry and Classic connections, so the
/// device was seen on BR/EDR: a Classic or dual-mode device, whose pairing may make a
/// Classic bond). Anything else is not known to be LE, and refused. Pure.
public enum DeviceTransport: Sendable, Equatable {
    case le
    /// Why it is not known to be LE, in words for the journal and the refusal.
    case notLE(String)

    public static func of(addressType: String?, classOfDevice: UInt32?) -> DeviceTransport {
        switch addressType {
        case "random":
            return .le
        case "public":
            guard let cod = classOfDevice else { return .le }
            return .notLE("it has a Class of Device, 0x\(String(cod, radix: 16)), so bluetoothd saw it on Bluetooth Classic")
        case nil:
            return .notLE("bluetoothd shows no AddressType for it")
        case let other?:
            return .notLE("its AddressType is \"\(PairingWindow.printable(other))\", neither public nor random")
        }
    }

    /// `device`: bluetoothd's object for it (nil when the worker knows none).
    public static func of(_ device: BlueZObjects.Device?) -> DeviceTransport {
        guard let device else { return .notLE("bluetoothd shows no such device") }
        return of(addressType: device.addressType, classOfDevice: device.classOfDevice)
    }
}
