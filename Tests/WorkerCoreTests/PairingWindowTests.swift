import Testing
@testable import WorkerCore

/// `edgecoder-worker bluetooth pair`'s decisions (protocol-bluetooth §3, security "authenticated"): what
/// its agent answers bluetoothd, and how the operator's typing is read. The BlueZ VM
/// suite's phase `security` drives the same window through bluetoothd.
@Suite struct PairingWindowTests {
    static let dev = "/org/bluez/hci0/dev_00_AA_01_01_00_01"
    static let address = "00:AA:01:01:00:01"

    static func open(now: Int64 = 1_000, duration: Int64 = 120_000) -> PairingWindow {
        PairingWindow(adapter: "hci0", nowMs: now, durationMs: duration)
    }

    @Test func numericComparisonAsksWithTheSixDigitsAndAYesAccepts() {
        var w = Self.open()
        let d = w.decide(.confirmation(device: Self.dev, passkey: 4_321), nowMs: 2_000)
        guard case .ask(let q, let prompt) = d else { Issue.record("not asked: \(d)"); return }
        #expect(q == .confirm(address: Self.address, passkey: 4_321))
        #expect(prompt.contains("004321"))
        #expect(prompt.contains(Self.address))
        #expect(prompt.contains("[y/N]"))
        let r1 = w.answer("y")
        #expect(r1 == .accept)
        #expect(w.pending == nil)
        #expect(w.isOpen, "a confirmation alone does not close the window: the pairing may still fail")
    }

    @Test(arguments: ["n", "", "no", "yy", "ye", "y e s", "oui", "1", "\u{0}y", "y\u{0}", "Ｙ", "\u{1b}[Ay"])
    func anythingButYesDeclines(line: String) {
        var w = Self.open()
        _ = w.decide(.confirmation(device: Self.dev, passkey: 1), nowMs: 2_000)
        let r2 = w.answer(line)
        #expect(r2 == .reject("the operator declined"))
    }

    @Test(arguments: ["y", "Y", "yes", "YES", "  y  ", "y\r", "\tYes\n"])
    func yesInAnyCaseWithBlanksAccepts(line: String) {
        #expect(PairingWindow.isYes(line))
    }

    @Test func anOverlongLineIsNeverAYes() {
        #expect(!PairingWindow.isYes("y" + String(repeating: " ", count: 100)))
        #expect(PairingWindow.passkey("1" + String(repeating: " ", count: 100)) == nil)
    }

    @Test func justWorksIsAskedWithoutAPasskeyAndSaysWhatItGives() {
        var w = Self.open()
        guard case .ask(let q, let prompt) = w.decide(.authorization(device: Self.dev), nowMs: 2_000) else { Issue.record("not asked"); return }
        #expect(q == .justWorks(address: Self.address))
        #expect(prompt.contains("Just Works"))
        #expect(prompt.contains("authenticated"))
        let r3 = w.answer("yes")
        #expect(r3 == .accept)
    }

    @Test(arguments: [("123456", UInt32(123_456)), ("000000", 0), (" 42 ", 42), ("999999", 999_999), ("1", 1)])
    func passkeyEntryTakesOneToSixDigits(line: String, value: UInt32) {
        var w = Self.open()
        _ = w.decide(.passkey(device: Self.dev), nowMs: 2_000)
        let r4 = w.answer(line)
        #expect(r4 == .passkey(value))
    }

    @Test(arguments: ["", "1234567", "12a456", "-12345", "+12345", "12 34", "١٢٣٤٥٦", "１２３４５６", "0x1234", "4294967296", "\u{FFFD}"])
    func aBadPasskeyIsRefusedNotGuessed(line: String) {
        var w = Self.open()
        _ = w.decide(.passkey(device: Self.dev), nowMs: 2_000)
        let r5 = w.answer(line)
        #expect(r5 == .reject("not a passkey (six digits)"))
    }

    @Test func aLineWithNoQuestionPendingIsIgnoredAndNotKeptForTheNext() {
        var w = Self.open()
        let r6 = w.answer("y")
        #expect(r6 == nil)
        _ = w.decide(.confirmation(device: Self.dev, passkey: 7), nowMs: 2_000)
        #expect(w.pending != nil, "the earlier y did not answer the new question")
    }

    @Test func oneQuestionAtATime() {
        var w = Self.open()
        _ = w.decide(.confirmation(device: Self.dev, passkey: 7), nowMs: 2_000)
        let second = w.decide(.authorization(device: "/org/bluez/hci0/dev_00_AA_01_02_00_02"), nowMs: 2_100)
        guard case .reject(let why) = second else { Issue.record("second request not refused: \(second)"); return }
        #expect(why.contains("another pairing"))
        #expect(w.pending == .confirm(address: Self.address, passkey: 7))
    }

    @Test(arguments: [
        "/org/bluez/hci1/dev_00_AA_01_00_00_00", "/org/bluez/hci00/dev_00_AA_01_00_00_00", "/org/bluez/hci0",
        "/org/bluez/hci0/dev_00_AA_01_00_00", "/org/bluez/hci0/dev_00_AA_01_00_00_00/service0001",
        "/org/bluez/hci0/dev_00_AA_01_00_00_0G", "/org/bluez/hci0/dev_０0_AA_01_00_00_00", "", "/",
        "/org/bluez/hci0/dev_00_AA_01_00_00_00_11",
    ])
    func devicesOfAnotherAdapterOrMalformedPathsAreRefused(device: String) {
        var w = Self.open()
        let d = w.decide(.confirmation(device: device, passkey: 1), nowMs: 2_000)
        guard case .reject(let why) = d else { Issue.record("not refused: \(d)"); return }
        #expect(why.contains("/org/bluez/hci0"))
        #expect(w.pending == nil)
    }

    @Test func aHostileDevicePathIsShownEscapedAndCut() {
        var w = Self.open()
        let d = w.decide(.authorization(device: "/evil\u{1b}[2J\n" + String(repeating: "x", count: 500)), nowMs: 2_000)
        guard case .reject(let why) = d else { Issue.record("not refused"); return }
        #expect(!why.contains("\u{1b}"))
        #expect(!why.contains("\n"))
        #expect(why.count < 300)
    }

    @Test func classicPinPairingAndServiceAuthorizationAreRefused() {
        var w = Self.open()
        for request in [
            PairingWindow.Request.pinCode(device: Self.dev), .displayPinCode(device: Self.dev, pinCode: "0000"),
            .authorizeService(device: Self.dev, uuid: "0000110b-0000-1000-8000-00805f9b34fb"),
        ] {
            guard case .reject = w.decide(request, nowMs: 2_000) else { Issue.record("not refused: \(request)"); continue }
        }
        #expect(w.pending == nil)
    }

    @Test func aDisplayedPasskeyIsShownOnceThenProgress() {
        var w = Self.open()
        let r7 = w.decide(.displayPasskey(device: Self.dev, passkey: 12, entered: 0), nowMs: 2_000)
        #expect(r7 == .show("Type the passkey 000012 on \(Self.address)."))
        let r8 = w.decide(.displayPasskey(device: Self.dev, passkey: 12, entered: 3), nowMs: 2_100)
        #expect(r8 == .show("\(Self.address): 3 digit(s) typed"))
        #expect(w.pending == nil)
    }

    @Test func theWindowClosesAtItsDeadlineAndRefusesTheHeldCall() {
        var w = Self.open(now: 0, duration: 10_000)
        _ = w.decide(.confirmation(device: Self.dev, passkey: 1), nowMs: 9_000)
        let r9 = w.tick(nowMs: 9_999)
        #expect(r9 == nil)
        let r10 = w.tick(nowMs: 10_000)
        #expect(r10 == .reject("the pairing window timed out"))
        #expect(!w.isOpen)
        guard case .reject(let why) = w.decide(.confirmation(device: Self.dev, passkey: 1), nowMs: 10_001) else {
            Issue.record("open after the deadline"); return
        }
        #expect(why.contains("closed"))
    }

    @Test func aRequestAfterTheDeadlineIsRefusedEvenBeforeATick() {
        var w = Self.open(now: 0, duration: 10_000)
        guard case .reject = w.decide(.authorization(device: Self.dev), nowMs: 10_000) else { Issue.record("asked after the deadline"); return }
        #expect(!w.isOpen)
    }

    @Test func closingRefusesTheHeldCallWithTheReason() {
        var w = Self.open()
        _ = w.decide(.passkey(device: Self.dev), nowMs: 2_000)
        let r11 = w.close("interrupted (SIGINT)")
        #expect(r11 == .reject("interrupted (SIGINT)"))
        #expect(w.state == .closed("interrupted (SIGINT)"))
        let r12 = w.answer("123456")
        #expect(r12 == nil, "an answer after the window closed answers nothing")
    }

    @Test func aCancelDropsTheQuestion() {
        var w = Self.open()
        _ = w.decide(.confirmation(device: Self.dev, passkey: 5), nowMs: 2_000)
        let r13 = w.cancelPending()
        #expect(r13 == .confirm(address: Self.address, passkey: 5))
        let r14 = w.cancelPending()
        #expect(r14 == nil)
        let r15 = w.answer("y")
        #expect(r15 == nil)
    }

    @Test func thePairedDeviceOfThisAdapterClosesTheWindow() {
        var w = Self.open()
        let r16 = w.devicePaired("/org/bluez/hci1/dev_00_AA_01_00_00_00")
        #expect(!r16)
        #expect(w.isOpen)
        let r17 = w.devicePaired(Self.dev)
        #expect(r17)
        #expect(w.paired == Self.address)
        #expect(!w.isOpen)
        let r18 = w.devicePaired("/org/bluez/hci0/dev_00_AA_01_02_00_02")
        #expect(!r18, "one device per window")
        #expect(w.paired == Self.address)
    }

    @Test func aNegativeDurationIsAnAlreadyClosedWindow() {
        var w = PairingWindow(adapter: "hci0", nowMs: 5_000, durationMs: -1)
        let r19 = w.tick(nowMs: 5_000)
        #expect(r19 == nil)
        #expect(!w.isOpen)
    }
}

@Suite struct TerminalLinesTests {
    @Test func cutsLinesAndKeepsAPartialOne() {
        var t = TerminalLines()
        let r20 = t.feed(Array("y\nn".utf8))
        #expect(r20 == ["y"])
        let r21 = t.feed(Array("o\n".utf8))
        #expect(r21 == ["no"])
        let r22 = t.finish()
        #expect(r22 == nil)
    }

    @Test func emptyInputAndEmptyLines() {
        var t = TerminalLines()
        let r23 = t.feed([])
        #expect(r23 == [])
        let r24 = t.feed(Array("\n\n".utf8))
        #expect(r24 == ["", ""])
        let r25 = t.finish()
        #expect(r25 == nil)
    }

    @Test func aLastLineWithoutNewlineCountsAtTheEnd() {
        var t = TerminalLines()
        let r26 = t.feed(Array("yes".utf8))
        #expect(r26 == [])
        let r27 = t.finish()
        #expect(r27 == "yes")
        let r28 = t.finish()
        #expect(r28 == nil)
    }

    @Test func anOverlongLineIsCutAndNeverAnswers() {
        var t = TerminalLines()
        let flood = [UInt8](repeating: UInt8(ascii: "y"), count: 100_000) + [0x0A] + Array("y\n".utf8)
        let lines = t.feed(flood)
        #expect(lines.count == 2)
        #expect(!PairingWindow.isYes(lines[0]))
        #expect(PairingWindow.passkey(lines[0]) == nil)
        #expect(lines[1] == "y", "the next line is read normally")
    }

    @Test func anOverlongLastLineWithoutNewlineNeverAnswers() {
        var t = TerminalLines()
        _ = t.feed([UInt8](repeating: UInt8(ascii: "1"), count: 1_000))
        let last = t.finish()
        #expect(last != nil)
        #expect(PairingWindow.passkey(last!) == nil)
    }

    @Test func invalidUTF8AndNULsNeverAnswer() {
        var t = TerminalLines()
        let lines = t.feed([0xFF, 0x79, 0x0A, 0x79, 0x00, 0x0A, 0xC3, 0x0A])
        #expect(lines.count == 3)
        #expect(lines.allSatisfy { !PairingWindow.isYes($0) })
    }
}
