/// The decisions of `edgecoder-worker bluetooth pair` (protocol-bluetooth §3): what the window's BlueZ
/// agent answers each Agent1 call, given the window's state, the device and what the
/// operator typed. Pure: the D-Bus agent (BlueZ/PairingAgent.swift) feeds it bluetoothd's
/// calls, terminal lines and the clock, and does what it decides.
///
/// Why a window at all: Linux (since 5.8) asks user space to confirm every LE Secure
/// Connections pairing, Just Works included, and bluetoothd refuses when no agent answers.
/// A headless worker therefore pairs only while an agent is registered: this one, for as
/// long as the operator keeps the window open, for the worker's adapter only, one device
/// at a time, and only with the operator's "y".
public struct PairingWindow: Sendable {
    /// An Agent1 call from bluetoothd (doc/agent-api.txt), its device as an object path.
    public enum Request: Sendable, Equatable {
        /// RequestConfirmation: numeric comparison (both ends show the same six digits).
        case confirmation(device: String, passkey: UInt32)
        /// RequestAuthorization: a Just Works pairing (no passkey, no MITM protection).
        case authorization(device: String)
        /// RequestPasskey: the client shows a passkey, the operator types it here.
        case passkey(device: String)
        /// DisplayPasskey: the operator types this passkey on the client.
        case displayPasskey(device: String, passkey: UInt32, entered: UInt16)
        /// RequestPinCode / DisplayPinCode: Bluetooth Classic legacy pairing.
        case pinCode(device: String)
        case displayPinCode(device: String, pinCode: String)
        /// AuthorizeService: a Classic profile connection of an untrusted device.
        case authorizeService(device: String, uuid: String)

        /// The device object the call is about.
        public var device: String {
            switch self {
            case .confirmation(let d, _), .authorization(let d), .passkey(let d), .displayPasskey(let d, _, _),
                .pinCode(let d), .displayPinCode(let d, _), .authorizeService(let d, _):
                d
            }
        }
    }

    /// What the operator is asked; its answer goes back to the held call.
    public enum Question: Sendable, Equatable {
        case confirm(address: String, passkey: UInt32)
        case justWorks(address: String)
        case passkey(address: String)
    }

    public enum Decision: Sendable, Equatable {
        /// Hold the call and print `prompt`; `answer(_:)` gives its reply.
        case ask(Question, prompt: String)
        /// Reply at once (an empty return) after printing the text.
        case show(String)
        /// Reply org.bluez.Error.Rejected with this reason (printed too).
        case reject(String)
    }

    /// The reply to a held call.
    public enum Reply: Sendable, Equatable {
        case accept
        case passkey(UInt32)
        case reject(String)
    }

    public enum State: Sendable, Equatable {
        case open
        case closed(String)
    }

    /// `/org/bluez/hci0`: calls about devices of any other adapter are refused.
    public let adapterPath: String
    /// CLOCK_MONOTONIC ms at which the window closes by itself.
    public let deadlineMs: Int64
    public private(set) var state = State.open
    /// The question waiting for the operator; at most one at a time.
    public private(set) var pending: Question?
    /// The device that paired (then the window is closed).
    public private(set) var paired: String?

    public init(adapter: String, nowMs: Int64, durationMs: Int64) {
        adapterPath = "/org/bluez/" + adapter
        deadlineMs = nowMs + max(0, durationMs)
    }

    public var isOpen: Bool { state == .open }

    /// Lines longer than this are not answers (a paste, a flood): they count as "no".
    public static let maxAnswerBytes = 64

    public mutating func decide(_ request: Request, nowMs: Int64) -> Decision {
        if isOpen, nowMs >= deadlineMs { state = .closed("the pairing window timed out") }
        if case .closed(let why) = state { return .reject("the pairing window is closed (\(why))") }
        let device: String
        switch request {
        case .confirmation(let d, _), .authorization(let d), .passkey(let d), .displayPasskey(let d, _, _),
            .pinCode(let d), .displayPinCode(let d, _), .authorizeService(let d, _):
            device = d
        }
        // A host may have several adapters, and in a desktop session other requests reach
        // the default agent too: this window answers for the worker's adapter only.
        guard let address = Self.address(ofDevice: device, under: adapterPath) else {
            return .reject("\(Self.printable(device)) is not a device of \(adapterPath); this window pairs that adapter only")
        }
        switch request {
        case .pinCode, .displayPinCode:
            return .reject("\(address) asks for Bluetooth Classic PIN pairing; the worker is an LE peripheral and offers none")
        case .authorizeService(_, let uuid):
            return .reject("\(address) asks to use service \(Self.printable(uuid)); this window only pairs")
        case .displayPasskey(_, let passkey, let entered):
            return .show(entered == 0 ? "Type the passkey \(Self.sixDigits(passkey)) on \(address)." : "\(address): \(entered) digit(s) typed")
        case .confirmation, .authorization, .passkey:
            break
        }
        guard pending == nil else { return .reject("another pairing is waiting for the operator; try again after it") }
        let question: Question
        let prompt: String
        switch request {
        case .confirmation(_, let passkey):
            question = .confirm(address: address, passkey: passkey)
            prompt = "\(address) wants to pair. Does it show the passkey \(Self.sixDigits(passkey))? [y/N] "
        case .authorization:
            question = .justWorks(address: address)
            prompt =
                "\(address) wants to pair without a passkey (Just Works: encrypted, not protected against a man in the middle; enough for security \"encrypted\", refused by \"authenticated\"). Allow? [y/N] "
        default:
            question = .passkey(address: address)
            prompt = "\(address) wants to pair. Type the 6-digit passkey it shows, then Enter: "
        }
        pending = question
        return .ask(question, prompt: prompt)
    }

    /// The operator's line for the pending question, or nil when none is pending (a stale
    /// line is never kept for a later question: the operator must see what they confirm).
    public mutating func answer(_ line: String) -> Reply? {
        guard let question = pending else { return nil }
        pending = nil
        switch question {
        case .confirm, .justWorks:
            return Self.isYes(line) ? .accept : .reject("the operator declined")
        case .passkey:
            guard let passkey = Self.passkey(line) else { return .reject("not a passkey (six digits)") }
            return .passkey(passkey)
        }
    }

    /// bluetoothd cancelled the held call (Agent1.Cancel: the client gave up, or its own
    /// timeout): the question is dropped; returns it so the shell can say so.
    public mutating func cancelPending() -> Question? {
        defer { pending = nil }
        return pending
    }

    /// Closes the window (timeout, SIGINT, bluetoothd released the agent, input ended):
    /// the held call, if any, is refused with the reason.
    public mutating func close(_ why: String) -> Reply? {
        if isOpen { state = .closed(why) }
        guard pending != nil else { return nil }
        pending = nil
        return .reject(why)
    }

    /// The clock: at the deadline the window closes; returns the held call's refusal.
    public mutating func tick(nowMs: Int64) -> Reply? {
        guard isOpen, nowMs >= deadlineMs else { return nil }
        return close("the pairing window timed out")
    }

    /// A device's `Paired` turned true: when it is this adapter's, the window has done its
    /// job and closes (one device per window). True when it closed.
    public mutating func devicePaired(_ device: String) -> Bool {
        guard isOpen, let address = Self.address(ofDevice: device, under: adapterPath) else { return false }
        paired = address
        _ = close("\(address) paired")
        return true
    }

    // MARK: - Parsing (input from a terminal or a pipe: anything at all)

    /// Only "y" or "yes" (any case, surrounding blanks ignored) is a yes; everything else,
    /// the empty line included, is the default no.
    public static func isYes(_ line: String) -> Bool {
        guard line.utf8.count <= maxAnswerBytes else { return false }
        let word = trimmed(line).lowercased()
        return word == "y" || word == "yes"
    }

    /// One to six ASCII digits (a passkey is 000000…999999), surrounding blanks ignored.
    public static func passkey(_ line: String) -> UInt32? {
        guard line.utf8.count <= maxAnswerBytes else { return nil }
        let digits = trimmed(line)
        guard (1...6).contains(digits.utf8.count), digits.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return UInt32(digits)
    }

    /// `/org/bluez/hci0/dev_AA_BB_CC_DD_EE_FF` under `adapterPath` → `AA:BB:CC:DD:EE:FF`;
    /// nil for anything else (another adapter, a deeper object, a malformed path).
    public static func address(ofDevice path: String, under adapterPath: String) -> String? {
        let prefix = adapterPath + "/dev_"
        guard path.hasPrefix(prefix) else { return nil }
        let tail = path.dropFirst(prefix.count)
        let parts = tail.split(separator: "_", omittingEmptySubsequences: false)
        guard parts.count == 6, parts.allSatisfy({ $0.utf8.count == 2 && $0.allSatisfy(\.isHexDigit) && $0.allSatisfy(\.isASCII) }) else {
            return nil
        }
        return parts.joined(separator: ":").uppercased()
    }

    static func sixDigits(_ passkey: UInt32) -> String {
        let text = String(passkey % 1_000_000)
        return String(repeating: "0", count: 6 - text.count) + text
    }

    private static func trimmed(_ line: String) -> Substring {
        let blank: (Character) -> Bool = { $0 == " " || $0 == "\t" || $0 == "\r" || $0 == "\n" }
        var s = Substring(line)
        while let c = s.first, blank(c) { s.removeFirst() }
        while let c = s.last, blank(c) { s.removeLast() }
        return s
    }

    /// Device paths come from the bus: shown escaped and cut, never raw.
    static func printable(_ text: String) -> String {
        let cut = text.unicodeScalars.prefix(80).map { $0.isASCII && $0.value >= 0x20 && $0.value < 0x7F ? String($0) : "?" }.joined()
        return cut + (text.unicodeScalars.count > 80 ? "…" : "")
    }
}

/// Cuts a byte stream (a terminal, a pipe) into lines for `PairingWindow.answer`: at most
/// `maxLineBytes` bytes are kept of a line (the rest is dropped, and the cut line is made
/// unanswerable), invalid UTF-8 is replaced, and a partial line waits for its newline.
public struct TerminalLines: Sendable {
    public static let maxLineBytes = 256
    private var buffer: [UInt8] = []
    private var overlong = false

    public init() {}

    public mutating func feed(_ bytes: some Sequence<UInt8>) -> [String] {
        var lines: [String] = []
        for byte in bytes {
            if byte == 0x0A {
                // A cut line never answers: it becomes one longer than any answer.
                lines.append(overlong ? String(repeating: "?", count: PairingWindow.maxAnswerBytes + 1) : String(decoding: buffer, as: UTF8.self))
                buffer.removeAll(keepingCapacity: true)
                overlong = false
            } else if buffer.count < Self.maxLineBytes {
                buffer.append(byte)
            } else {
                overlong = true
            }
        }
        return lines
    }

    /// The input ended: a last line without a newline still counts.
    public mutating func finish() -> String? {
        defer { buffer.removeAll(); overlong = false }
        guard !buffer.isEmpty || overlong else { return nil }
        return overlong ? String(repeating: "?", count: PairingWindow.maxAnswerBytes + 1) : String(decoding: buffer, as: UTF8.self)
    }
}
