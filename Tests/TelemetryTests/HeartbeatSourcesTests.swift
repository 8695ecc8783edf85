import Foundation
import TestSupport
import Testing
import Posix
import Telemetry
import WorkerCore

/// The model server measured by its cgroup, virtualization and throttling, read from
/// fake procfs/sysfs trees.
@Suite struct ModelServerCgroupTests {
    static let port: UInt16 = 11434

    /// A tree where uid 999 listens on 11434 (inode 5151), and the unit cgroup of Ollama.
    func tree(unified: String = "sys/fs/cgroup", usage: Int = 1_000_000, procs: String = "4242\n") -> FakeTree {
        let tree = FakeTree()
        tree.write(
            "proc/net/tcp",
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
                + "   0: 0100007F:2CAA 00000000:0000 0A 00000000:00000000 00:00000000 00000000   999        0 5151 1 0000000000000000 100 0 0 10 0\n")
        tree.write("\(unified)/system.slice/ollama.service/cgroup.procs", procs)
        tree.write("\(unified)/system.slice/ollama.service/cpu.stat", "usage_usec \(usage)\nuser_usec 1\nsystem_usec 1\n")
        return tree
    }

    func visibleServer(_ tree: FakeTree, cgroup: String) {
        tree.write("proc/4242/stat", "4242 (ollama) S 1 4242 4242 0 -1 4194560 0 0 0 0 300 100 0 0 20 0 12 0 500 0 0\n")
        tree.write("proc/4242/status", "Name:\tollama\nUid:\t999\t999\t999\t999\n")
        tree.write("proc/4242/cgroup", "0::\(cgroup)\n")
        tree.directory("proc/4242/fd")
        try! FileManager.default.createSymbolicLink(atPath: "\(tree.root)/proc/4242/fd/3", withDestinationPath: "socket:[5151]")
    }

    @Test func aHiddenServerIsMeasuredByTheUnitOfItsSocketsOwner() {
        for unified in ["sys/fs/cgroup", "sys/fs/cgroup/unified"] {
            let tree = tree(unified: unified)
            var own = OwnProcesses(root: tree.root, serverPort: Self.port, workerPID: 0, nameOfUser: { $0 == 999 ? "ollama" : nil })
            let (processes, server, usage) = own.sample()
            #expect(processes.isEmpty)
            #expect(usage == CgroupUsage(path: "/system.slice/ollama.service", usageMicroseconds: 1_000_000))
            guard case .cgroup(let path, let via, _) = server else { Issue.record("\(server)"); continue }
            #expect(path == "/system.slice/ollama.service")
            #expect(via.contains("ollama.service") && via.contains("uid 999"))
        }
    }

    @Test func aHiddenServerIsMeasuredByTheBackendsUsualUnit() {
        let tree = tree()
        var own = OwnProcesses(
            root: tree.root, serverPort: Self.port, workerPID: 0, derivedUnits: OwnProcesses.derivedUnits(backendKind: "ollama"),
            nameOfUser: { _ in "llm" })
        let (_, server, usage) = own.sample()
        #expect(usage?.path == "/system.slice/ollama.service")
        #expect(server.description.contains("cgroup /system.slice/ollama.service"))
    }

    @Test func aHiddenServerWithoutARunningUnitCountsAsOtherLoadAndDoctorSaysSo() {
        let tree = tree(procs: "")
        var own = OwnProcesses(
            root: tree.root, serverPort: Self.port, workerPID: 0, derivedUnits: ["ollama.service", "../../etc/passwd"],
            nameOfUser: { _ in "ollama" })
        let (_, server, usage) = own.sample()
        #expect(usage == nil)
        #expect(server == .hidden(uid: 999, port: Self.port, tried: ["ollama.service", "ollama.service"]))
        #expect(server.description.contains("ProtectProc=invisible") && server.description.contains("counts as other load"))
    }

    @Test func aVisibleServerIsMeasuredByItsProcessesUnitCgroup() {
        let tree = tree()
        visibleServer(tree, cgroup: "/system.slice/ollama.service/runner")
        var own = OwnProcesses(root: tree.root, serverPort: Self.port, workerPID: 0, nameOfUser: { _ in nil })
        let (processes, server, usage) = own.sample()
        #expect(usage?.path == "/system.slice/ollama.service")
        #expect(processes.isEmpty, "its processes are in the cgroup's figure, not counted twice")
        guard case .cgroup(_, let via, _) = server else { Issue.record("\(server)"); return }
        #expect(via.contains("pid 4242"))
    }

    @Test func aServerInALoginSessionIsMeasuredByItsProcessTree() {
        let tree = tree()
        visibleServer(tree, cgroup: "/user.slice/user-1000.slice/session-2.scope")
        var own = OwnProcesses(root: tree.root, serverPort: Self.port, workerPID: 0, nameOfUser: { _ in nil })
        let (processes, server, usage) = own.sample()
        #expect(usage == nil)
        #expect(server == .process(pid: 4242, port: Self.port))
        #expect(processes.map(\.pid) == [4242])
    }

    @Test func theHeartbeatSendsTheLoadThatIsNotTheServers() {
        let tree = tree(usage: 0)
        tree.procStat(user: 100, system: 0, idle: 100, iowait: 0)
        var reader = TelemetryReader(
            root: tree.root,
            own: OwnProcesses(
                root: tree.root, serverPort: Self.port, workerPID: 0,
                nameOfUser: { _ in "ollama" }))
        _ = reader.read(nowMs: 1)
        // 200 ticks pass, 150 busy (75 %); the server used one CPU-second (100 ticks, 50 %).
        tree.procStat(user: 250, system: 0, idle: 150, iowait: 0)
        tree.write("sys/fs/cgroup/system.slice/ollama.service/cpu.stat", "usage_usec 1000000\n")
        let reading = reader.read(nowMs: 2)
        #expect(reading.telemetry.cpuUsagePct == 75)
        #expect(reading.telemetry.otherCpuUsagePct == 25)
        #expect(reading.telemetry.heartbeatJSON["cpuUsagePct"] == .double(25))
        #expect(reading.ownProcesses?.contains("cgroup /system.slice/ollama.service") == true)
    }
}

@Suite struct HostKindAndThrottleTests {
    @Test func aVirtualMachineIsAServerAndSaysWhy() {
        let tree = FakeTree()
        tree.chassis("1")
        tree.write("sys/class/dmi/id/sys_vendor", "QEMU\n")
        var reader = TelemetryReader(root: tree.root)
        let reading = reader.read(nowMs: 1)
        #expect(reading.telemetry.deviceType == .server)
        #expect(reading.doctorJSON["deviceTypeFrom"] == "virtual machine (DMI sys_vendor QEMU)")
    }

    @Test func aContainerOnADesktopIsAServerButOnALaptopStaysALaptop() {
        let tree = FakeTree()
        tree.write(".dockerenv", "")
        tree.chassis("3")
        var reader = TelemetryReader(root: tree.root)
        #expect(reader.read(nowMs: 1).telemetry.deviceType == .server)
        let laptop = FakeTree()
        laptop.write(".dockerenv", "")
        laptop.chassis("10")
        var laptopReader = TelemetryReader(root: laptop.root)
        #expect(laptopReader.read(nowMs: 1).telemetry.deviceType == .laptop)
    }

    @Test func risingThrottleCountersMakeTheHeartbeatSerious() {
        let tree = FakeTree()
        tree.thermalZone(0, type: "x86_pkg_temp", temp: "50000", trips: [("passive", "95000")])
        tree.write("sys/devices/system/cpu/cpu0/thermal_throttle/core_throttle_count", "5\n")
        tree.write("sys/devices/system/cpu/cpu1/thermal_throttle/package_throttle_count", "1\n")
        tree.directory("sys/devices/system/cpu/cpufreq")
        var reader = TelemetryReader(root: tree.root)
        #expect(reader.read(nowMs: 1).telemetry.heartbeatThermalState == .nominal)
        tree.write("sys/devices/system/cpu/cpu0/thermal_throttle/core_throttle_count", "6\n")
        let throttled = reader.read(nowMs: 2)
        #expect(throttled.telemetry.heartbeatThermalState == .serious)
        #expect(throttled.telemetry.thermalState == .nominal, "the policy's own reading is the sensors'")
        #expect(throttled.throttle?.contains("throttled") == true)
        #expect(reader.read(nowMs: 3).telemetry.heartbeatThermalState == .nominal, "counters that stay put: no longer throttled")
    }

    @Test func aHotDriveDoesNotTellTheCoordinatorToRefuseWork() {
        let tree = FakeTree()
        tree.hwmon(0, name: "nvme", temps: ["82000"])
        var reader = TelemetryReader(root: tree.root)
        let reading = reader.read(nowMs: 1)
        #expect(reading.telemetry.thermalState == .serious)
        #expect(reading.telemetry.heartbeatJSON["thermalState"] == "fair")
    }
}

/// The own processes come from the kernel's children lists: a sample reads the worker's
/// tree and the server's, never every process on the host (issue 28: mode on opened every
/// `/proc/N/stat` every 5 s).
@Suite struct OwnProcessTreeTests {
    func stat(_ tree: FakeTree, _ pid: Int32, parent: Int32, ticks: Int = 10) {
        tree.write("proc/\(pid)/stat", "\(pid) (p\(pid)) S \(parent) \(pid) \(pid) 0 -1 4194560 0 0 0 0 \(ticks) 0 0 0 20 0 1 0 500 0 0\n")
    }

    /// Worker 100 (threads 100 and 101) with children 200 (thread list) and 300 (thread
    /// 101's); 200's child 250; 400's stat line claims parent 100 but no list names it.
    func workerTree(childrenLists: Bool = true) -> FakeTree {
        let tree = FakeTree()
        for (pid, parent) in [(100, 1), (200, 100), (250, 200), (300, 100), (400, 100), (500, 1)] as [(Int32, Int32)] {
            stat(tree, pid, parent: parent)
        }
        for (pid, thread) in [(100, 100), (100, 101), (200, 200), (250, 250), (300, 300), (400, 400), (500, 500)] as [(Int32, Int32)] {
            tree.directory("proc/\(pid)/task/\(thread)")
        }
        if childrenLists {
            tree.write("proc/100/task/100/children", "200 ")
            tree.write("proc/100/task/101/children", "300 ")
            tree.write("proc/200/task/200/children", "250 ")
            for pid in [250, 300, 400, 500] { tree.write("proc/\(pid)/task/\(pid)/children", "") }
        }
        return tree
    }

    @Test func theWorkersTreeComesFromTheKernelsChildrenLists() {
        let tree = workerTree()
        var own = OwnProcesses(root: tree.root, serverPort: nil, workerPID: 100)
        let (processes, server, _) = own.sample()
        #expect(processes.map(\.pid) == [100, 200, 250, 300], "400 claims 100 as parent in its stat line only: it is never read")
        #expect(server == .remote)
    }

    @Test func aKernelWithoutChildrenListsFallsBackToEveryProcesssParent() {
        let tree = workerTree(childrenLists: false)
        var own = OwnProcesses(root: tree.root, serverPort: nil, workerPID: 100)
        #expect(own.sample().processes.map(\.pid) == [100, 200, 250, 300, 400])
    }

    @Test func hostileChildrenListsAreBoundedAndSkipped() {
        let tree = workerTree()
        tree.write("proc/100/task/100/children", "200 -5 0 x12 99999999999 300\u{0} 2147483648 ")
        tree.write("proc/100/task/101/children", String(repeating: "7 ", count: 100_000))
        var own = OwnProcesses(root: tree.root, serverPort: nil, workerPID: 100)
        #expect(own.sample().processes.map(\.pid) == [100, 200, 250], "only well-formed pids whose stat line exists; 7 has none")
    }

    @Test func aChildOfThisProcessIsFoundInTheRealProc() throws {
        let child = Process()
        child.executableURL = URL(fileURLWithPath: "/bin/sleep")
        child.arguments = ["20"]
        try child.run()
        defer {
            kill(child.processIdentifier, SIGKILL)
            child.waitUntilExit()
        }
        var own = OwnProcesses(root: "/", serverPort: nil, workerPID: getpid())
        let pids = own.sample().processes.map(\.pid)
        #expect(pids.contains(getpid()) && pids.contains(child.processIdentifier))
        #expect(!pids.contains(1))
    }

    @Test func theUnitOfAServerKnownByItsUsersProcessesIsRememberedWhileItHoldsProcesses() {
        let tree = ModelServerCgroupTests().tree()
        tree.write("proc/4242/status", "Name:\tollama\nUid:\t999\t999\t999\t999\n")
        tree.write("proc/4242/cgroup", "0::/system.slice/ollama.service\n")
        var own = OwnProcesses(root: tree.root, serverPort: ModelServerCgroupTests.port, workerPID: 0, nameOfUser: { _ in nil })
        guard case .cgroup(let path, let via, _) = own.sample().server else { Issue.record("not measured by its cgroup"); return }
        #expect(path == "/system.slice/ollama.service" && via.contains("uid 999's processes"))
        tree.remove("proc/4242")  // hidden now: the scan of every process would find nothing
        #expect(own.sample().server == .cgroup(path: path, via: via, port: ModelServerCgroupTests.port), "the unit found last time")
        tree.write("sys/fs/cgroup/system.slice/ollama.service/cgroup.procs", "")
        #expect(own.sample().server == .hidden(uid: 999, port: ModelServerCgroupTests.port, tried: []), "an empty unit is forgotten")
    }

    @Test func theKernelsSockDiagNamesThisProcesssListeningSocket() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #expect(fd >= 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        #expect(bound == 0 && listen(fd, 1) == 0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        let port = UInt16(bigEndian: address.sin_port)
        var info = Glibc.stat()
        #expect(fstat(fd, &info) == 0)
        let listeners = try #require(OwnProcesses.sockDiagListeners(port: port))
        #expect(listeners == [ProcNetTCP.Listener(inode: UInt64(info.st_ino), uid: getuid())])
        #expect(OwnProcesses.sockDiagListeners(port: port &+ 1).map { !$0.contains { $0.inode == UInt64(info.st_ino) } } == true)
        // One socket kept across readings (as OwnProcesses keeps it): each dump is read to its
        // end, so the next one on the same socket gets its own answer.
        let kept = try NetlinkSocket(protocol: SockDiag.netlinkProtocol, groups: 0, receiveBuffer: 0)
        for _ in 0..<3 {
            #expect(OwnProcesses.sockDiagListeners(port: port, socket: kept) == listeners)
            #expect(OwnProcesses.sockDiagListeners(port: port &+ 1, socket: kept).map { !$0.contains { $0.inode == UInt64(info.st_ino) } } == true)
        }
        // The same socket as /proc/net/tcp shows it, the fallback.
        let file = open("/proc/net/tcp", O_RDONLY)
        defer { close(file) }
        var table: [UInt8] = [], chunk = [UInt8](repeating: 0, count: 65_536)
        while case let count = chunk.withUnsafeMutableBytes({ read(file, $0.baseAddress, $0.count) }), count > 0 { table += chunk[0..<count] }
        #expect(ProcNetTCP.listeners(table, port: port) == listeners)
    }
}
