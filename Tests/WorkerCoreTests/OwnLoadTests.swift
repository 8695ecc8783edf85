import Testing
@testable import WorkerCore

@Suite struct OwnLoadTests {
    static let tcp = """
          sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
           0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 4242 1 0000000000000000 100 0 0 10 0
           1: 0100007F:1F90 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1000        0 4343 1 0000000000000000 20 4 30 10 -1
           2: 00000000:2CAA 00000000:0000 0A 00000000:00000000 00:00000000 00000000   999        0 5151 1 0000000000000000 100 0 0 10 0
        """

    @Test func findsTheListeningSocketOnThePortAndNotItsConnections() {
        #expect(ProcNetTCP.listeners(Array(Self.tcp.utf8), port: 8080) == [.init(inode: 4242, uid: 1000)])
        #expect(ProcNetTCP.listeners(Array(Self.tcp.utf8), port: 11434) == [.init(inode: 5151, uid: 999)])
        #expect(ProcNetTCP.listeners(Array(Self.tcp.utf8), port: 1).isEmpty)
    }

    @Test func readsTCP6Addresses() {
        let table =
            "header\n   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000 0 777 1\n"
        #expect(ProcNetTCP.listeners(Array(table.utf8), port: 8080).map(\.inode) == [777])
    }

    @Test(arguments: [
        "", "\n\n\n", "header\n0: x:1F90 y 0A a b c 1000 0 42",
        "header\n0: 0100007F:1F90 0 0A a b c 1000 0 -42",
        "header\n0: 0100007F:1F90 0 0A a b c 1000 0 0",
        "header\n0: 0100007F:GG90 0 0A a b c 1000 0 42",
        "header\n0: 0100007F:1F90 0 0A a b c 99999999999 0 42",
        "header\n0: 0100007F:1F90 0 0A a b c 1000 0 999999999999999999999999",
        "header\n0: 0100007F:1F90 0 0A",
    ])
    func hostileTablesYieldNothing(table: String) {
        #expect(ProcNetTCP.listeners(Array(table.utf8), port: 8080).isEmpty)
    }

    @Test func socketLinksGiveTheirInodeAndNothingElseDoes() {
        #expect(ProcNetTCP.socketInode(link: "socket:[4242]") == 4242)
        for other in ["pipe:[4242]", "socket:[]", "socket:[42x]", "/dev/null", "socket:[4242", "anon_inode:[eventfd]"] {
            #expect(ProcNetTCP.socketInode(link: other) == nil, "\(other)")
        }
    }

    @Test func readsAStatLineWhoseNameHoldsSpacesAndParentheses() {
        let line = "1234 (evil ) 0 (name) S 77 1234 1234 0 -1 4194560 100 0 0 0 250 50 3 4 20 0 8 0 98765 1000 200\n"
        #expect(ProcessSample.parse(stat: Array(line.utf8)) == ProcessSample(pid: 1234, parent: 77, ticks: 300, startTime: 98765))
    }

    @Test(arguments: [
        "", "1234", "1234 (x) S", "(x) S 1 1 1 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 5",
        "-3 (x) S 1 1 1 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 5",
        "1234 (x) S 1 1 1 0 -1 0 0 0 0 0 -1 1 0 0 20 0 1 0 5",
        "1234 (x) S 1 1 1 0 -1 0 0 0 0 0 18446744073709551615 1 0 0 20 0 1 0 5",
        "99999999999 (x) S 1 1 1 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 5",
        "1234 )x( S 1 1 1 0 -1 0 0 0 0 0 1 1 0 0 20 0 1 0 5",
    ])
    func hostileStatLinesAreRefused(line: String) {
        #expect(ProcessSample.parse(stat: Array(line.utf8)) == nil)
    }

    @Test func readsTheRealUidFromStatus() {
        #expect(ProcessSample.uid(status: Array("Name:\tollama\nUid:\t999\t999\t999\t999\n".utf8)) == 999)
        #expect(ProcessSample.uid(status: Array("Name:\tx\nUid:\tabc\n".utf8)) == nil)
        #expect(ProcessSample.uid(status: Array("Name:\tx\n".utf8)) == nil)
    }

    @Test func theTreeTakesEveryDescendantAndSurvivesCycles() {
        let parents: [Int32: Int32] = [1: 0, 10: 1, 11: 10, 12: 11, 20: 1, 30: 31, 31: 30, 40: 40]
        #expect(ProcessTree.descendants(of: [10], parents: parents) == [10, 11, 12])
        #expect(ProcessTree.descendants(of: [30], parents: parents) == [30, 31])
        #expect(ProcessTree.descendants(of: [40], parents: parents) == [40])
        #expect(ProcessTree.descendants(of: [99], parents: parents) == [99])
        #expect(ProcessTree.descendants(of: [0], parents: parents).isEmpty, "pid 0 is every process's ancestor")
        #expect(ProcessTree.descendants(of: [1, 10], parents: parents) == [10, 11, 12], "init is never the worker's")
    }

    static func sample(_ pid: Int32, ticks: UInt64, start: UInt64 = 1) -> ProcessSample {
        ProcessSample(pid: pid, parent: 1, ticks: ticks, startTime: start)
    }

    @Test func theModelServersTimeIsNotOtherLoad() throws {
        // Two CPUs over one second: 200 ticks; 180 busy, of which the server used 150.
        let earlier = CPUTimes(idle: 1_000, total: 10_000), later = CPUTimes(idle: 1_020, total: 10_200)
        let share = try #require(CPUShare.between(host: earlier, later, own: [Self.sample(5, ticks: 100)], [Self.sample(5, ticks: 250)]))
        #expect(share.hostPct == 90 && share.ownPct == 75 && share.otherPct == 15)
    }

    @Test func aNewProcessCountsWholeAReusedPidIsNewAndOwnNeverExceedsTheHost() throws {
        let earlier = CPUTimes(idle: 0, total: 0), later = CPUTimes(idle: 100, total: 200)
        let reused = try #require(
            CPUShare.between(
                host: earlier, later, own: [Self.sample(5, ticks: 1_000, start: 1)],
                [Self.sample(5, ticks: 20, start: 2), Self.sample(6, ticks: 10)]))
        #expect(reused.ownPct == 15 && reused.otherPct == 35)
        let wild = try #require(CPUShare.between(host: earlier, later, own: [], [Self.sample(7, ticks: 1_000_000)]))
        #expect(wild.ownPct == 50 && wild.otherPct == 0)
        let backwards = try #require(CPUShare.between(host: earlier, later, own: [Self.sample(5, ticks: 90)], [Self.sample(5, ticks: 10)]))
        #expect(backwards.ownPct == 0)
        #expect(CPUShare.between(host: later, earlier, own: [], []) == nil)
    }

    @Test func thePolicyComparesOtherLoadAndFallsBackToTheHostFigure() {
        var policy = PowerPolicy()
        policy.maxCpuUsagePct = 80
        var telemetry = PowerTelemetry(cpuUsagePct: 100, updatedAtMs: 0)
        #expect(PowerDecision.activeReasons(telemetry, policy: policy, batteryLatched: false) == [.cpuBusy])
        telemetry.otherCpuUsagePct = 10
        #expect(PowerDecision.activeReasons(telemetry, policy: policy, batteryLatched: false).isEmpty)
        #expect(telemetry.heartbeatJSON["cpuUsagePct"] == .double(10), "the heartbeat sends the other load, as the coordinator defers pulls on it")
        let check = PowerDecision.checks(telemetry, policy: policy, batteryLatched: false).first { $0.reason == .cpuBusy }
        #expect(check?.detail.contains("other load 10.0 %") == true && check?.detail.contains("host 100.0 %") == true)
    }

    @Test(arguments: [
        ("http://127.0.0.1:11434", UInt16(11434) as UInt16?), ("http://localhost:8080/v1", 8080), ("http://[::1]:9000", 9000),
        ("http://127.0.0.1", 80), ("https://localhost", 443), ("http://10.0.0.5:11434", nil), ("http://example.com:80", nil),
        ("http://127.0.0.1:0", nil), ("http://127.0.0.1:99999", nil), ("http://[::1", nil), ("ftp://127.0.0.1:1", nil),
    ])
    func onlyALoopbackServersPortIsWatched(url: String, port: UInt16?) {
        #expect(LoopbackServer.port(of: url) == port)
    }
}

/// sock_diag's listeners (issue 28: the listening hash only, not /proc/net/tcp's walk of
/// every established bucket). Replies as the kernel frames them, then hostile ones.
@Suite struct SockDiagTests {
    /// One inet_diag_msg answer: `state` (10 LISTEN), local port, uid, inode.
    static func answer(state: UInt8 = 10, port: UInt16, uid: UInt32, inode: UInt32, family: UInt8 = 2) -> [UInt8] {
        var bytes = message(type: 20, payload: [UInt8](repeating: 0, count: 72))
        bytes[16] = family
        bytes[17] = state
        bytes[20] = UInt8(port >> 8)
        bytes[21] = UInt8(port & 0xFF)
        put32(uid, into: &bytes, at: 16 + 64)
        put32(inode, into: &bytes, at: 16 + 68)
        return bytes
    }

    static func message(type: UInt16, payload: [UInt8], length: UInt32? = nil) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: 16) + payload
        put32(length ?? UInt32(bytes.count), into: &bytes, at: 0)
        bytes[4] = UInt8(type & 0xFF)
        bytes[5] = UInt8(type >> 8)
        return bytes
    }

    static func put32(_ value: UInt32, into bytes: inout [UInt8], at i: Int) {
        for k in 0..<4 { bytes[i + k] = UInt8(truncatingIfNeeded: value >> (8 * UInt32(k))) }
    }

    static let done = message(type: 3, payload: [0, 0, 0, 0])

    @Test func theRequestAsksForOneFamilysListeningTCPSockets() {
        let request = SockDiag.listenersRequest(family: 10, sequence: 7)
        #expect(request.count == 72)
        #expect(Array(request[0..<8]) == [72, 0, 0, 0, 20, 0, 0x01, 0x03], "length 72, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP")
        #expect(Array(request[8..<12]) == [7, 0, 0, 0])
        #expect(Array(request[16..<24]) == [10, 6, 0, 0, 0, 0x04, 0, 0], "AF_INET6, IPPROTO_TCP, states 1 << TCP_LISTEN")
    }

    @Test func theListenersOfThePortAreKeptAndTheDumpEnds() {
        let datagram =
            Self.answer(port: 11434, uid: 999, inode: 5151) + Self.answer(port: 22, uid: 0, inode: 77)
            + Self.answer(state: 1, port: 11434, uid: 1000, inode: 88) + Self.answer(port: 11434, uid: 999, inode: 5152, family: 10)
        let first = SockDiag.parse(datagram, port: 11434)
        #expect(
            first == SockDiag.Reply(listeners: [.init(inode: 5151, uid: 999), .init(inode: 5152, uid: 999)]),
            "another port and an established socket are not listeners of 11434")
        #expect(SockDiag.parse(Self.done, port: 11434).done)
        #expect(SockDiag.parse([], port: 11434) == SockDiag.Reply(), "an empty datagram says nothing")
    }

    @Test func aRefusalCarriesItsErrno() {
        var payload = [UInt8](repeating: 0, count: 20)
        Self.put32(UInt32(bitPattern: -13), into: &payload, at: 0)
        #expect(SockDiag.parse(Self.message(type: 2, payload: payload), port: 1).errno == 13)
        Self.put32(UInt32(bitPattern: Int32.min), into: &payload, at: 0)
        #expect(SockDiag.parse(Self.message(type: 2, payload: payload), port: 1).errno == Int32.min, "no trap on INT32_MIN")
        #expect(SockDiag.parse(Self.message(type: 2, payload: [1, 2]), port: 1).malformed?.contains("shorter than its errno") == true)
    }

    @Test func brokenFramingStopsWithWhatWasReadBefore() {
        let good = Self.answer(port: 80, uid: 1, inode: 9)
        let truncated = SockDiag.parse(good + Array(good[0..<40]), port: 80)
        #expect(truncated.listeners == [.init(inode: 9, uid: 1)] && truncated.malformed?.contains("does not fit") == true)
        #expect(SockDiag.parse(good + [1, 2, 3], port: 80).malformed?.contains("a header needs 16") == true)
        #expect(SockDiag.parse(Self.message(type: 20, payload: [UInt8](repeating: 0, count: 40)), port: 80).malformed?.contains("needs 72") == true)
        #expect(SockDiag.parse(Self.message(type: 20, payload: [], length: 3), port: 80).malformed != nil, "a length below the header")
        #expect(SockDiag.parse(Self.message(type: 20, payload: [], length: .max), port: 80).malformed != nil, "a length past the datagram")
        #expect(SockDiag.parse(Self.answer(port: 80, uid: 1, inode: 0), port: 80).listeners.isEmpty, "inode 0 is no socket")
        let noop = SockDiag.parse(Self.message(type: 1, payload: []) + Self.message(type: 99, payload: [1, 2, 3, 4]) + Self.done, port: 80)
        #expect(noop.done && noop.listeners.isEmpty, "unknown types are skipped")
    }

    @Test func aLargeDumpIsReadWhole() {
        var datagram: [UInt8] = []
        for i in 0..<400 { datagram += Self.answer(port: UInt16(1000 + i % 3), uid: UInt32(i), inode: UInt32(i + 1)) }
        #expect(SockDiag.parse(datagram + Self.done, port: 1001).listeners.count == 133)
    }
}
