/// `bluetooth.pacing`: how the pause between notifications is counted.
public enum BluetoothPacingMode: String, Sendable, CaseIterable {
    /// `bytes` when bluetoothd has a single ATT bearer with its clients (`[GATT] Channels = 1`
    /// in its main.conf), else `chunks`.
    case auto
    /// `chunkPacingMs` per 512 bytes notified, however many chunks that takes: fast at small
    /// MTUs, and safe only on an in-order link (one ATT bearer).
    case bytes
    /// `chunkPacingMs` after every chunk (protocol-bluetooth §1's rule): the only pacing that keeps the odds
    /// of reordering low while bluetoothd may spread notifications over EATT bearers.
    case chunks
}

/// The pause after each notification chunk (protocol-bluetooth §1: chunks are paced). Pure.
///
/// Why two rules: bluetoothd 5.66 with more than one ATT bearer (EATT, its default) hands
/// each notification to whichever bearer can write, and two in flight at once reach the
/// client out of order (docs/operating/bluetooth.md, "Pacing"): there only a pause after every chunk helps, and
/// at MTU 48 it starves the link (43 bytes per 10 ms). With one bearer the order is the
/// order of sending, so the pause only has to keep bluetoothd's queue short (it holds
/// notifications without bound, and one queued there can no longer be cancelled): pacing
/// bytes at the rate of full 512-byte chunks is enough, at any MTU.
public struct NotificationPacer: Sendable, Equatable {
    /// The bytes one pause pays for under `bytes`: a full chunk (min(512, MTU − 5) at MTU 517).
    public static let windowBytes = 512

    public enum Rule: String, Sendable, Equatable { case bytes, chunks }

    public let mode: BluetoothPacingMode
    public let pauseMs: Int64
    /// bluetoothd's ATT bearers as its configuration says (nil: not known, taken as EATT).
    public private(set) var attBearers: Int?
    public private(set) var rule: Rule
    /// Bytes sent under `bytes` not yet paid for by a pause (always < `windowBytes`).
    public private(set) var owedBytes = 0

    public init(mode: BluetoothPacingMode, pauseMs: Int64, attBearers: Int? = nil) {
        self.mode = mode
        self.pauseMs = pauseMs
        self.attBearers = attBearers
        rule = Self.rule(mode: mode, attBearers: attBearers)
    }

    public static func rule(mode: BluetoothPacingMode, attBearers: Int?) -> Rule {
        switch mode {
        case .bytes: .bytes
        case .chunks: .chunks
        case .auto: attBearers == 1 ? .bytes : .chunks
        }
    }

    /// bluetoothd (re)appeared with this many ATT bearers (nil: its configuration unreadable).
    public mutating func learn(attBearers: Int?) {
        self.attBearers = attBearers
        rule = Self.rule(mode: mode, attBearers: attBearers)
        owedBytes = 0
    }

    /// bluetoothd may spread notifications over EATT bearers and the operator did not say
    /// otherwise: no pause keeps the order for sure (docs/operating/bluetooth.md, "Pacing").
    public var reordersAtSmallMTUs: Bool { attBearers != 1 && mode != .bytes }

    /// The journal's line on the rule in force, with the one-line fix when it can reorder.
    public var summary: String {
        let how = rule == .bytes ? "bytes (\(pauseMs) ms per \(Self.windowBytes) bytes)" : "chunks (\(pauseMs) ms after each)"
        let bearers = attBearers.map { "\($0) ATT bearer(s)" } ?? "an unknown number of ATT bearers"
        let choice = mode == .auto ? "" : ", bluetooth.pacing is \(mode.rawValue)"
        let fix =
            reordersAtSmallMTUs
            ? "; with EATT a client can get a long answer's chunks out of order: set \"Channels = 1\" under [GATT] in /etc/bluetooth/main.conf and restart bluetooth"
            : ""
        return "pacing notifications by \(how): bluetoothd has \(bearers)\(choice)\(fix)"
    }

    /// The pause to keep after notifying a chunk of `bytes` bytes.
    public mutating func pause(afterChunkOf bytes: Int) -> Int64 {
        switch rule {
        case .chunks:
            return pauseMs
        case .bytes:
            owedBytes += max(0, bytes)
            let windows = owedBytes / Self.windowBytes
            owedBytes -= windows * Self.windowBytes
            return Int64(windows) * pauseMs
        }
    }
}
