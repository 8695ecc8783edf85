#if canImport(Glibc)
import Glibc
#endif
import Posix
import WorkerCore

/// Finds the worker's own load below a root (the worker and its model server with the
/// server's children are not "other load"): the worker's process tree, and on loopback
/// the model server owning the backend's listening socket (`proc/net/tcp{,6}` inode →
/// `proc/*/fd`). The server is measured by its systemd unit's cgroup (`cpu.stat`
/// `usage_usec`, its children included) when it runs in one, else by its process tree.
/// When it runs as another user its fds cannot be read: then its processes' unit cgroup
/// counts, or all the socket owner's processes (never root's). Under the unit's
/// `ProtectProc=invisible` those processes are hidden too: then the unit is derived
/// (`<socket owner's user name>.service`, `derivedUnits` such as `ollama.service`) and
/// counts when its cgroup holds processes.
///
/// A sample reads the own processes only: the trees come from the kernel's children lists
/// (`proc/PID/task/TID/children`), the server's pid and its unit are remembered from the
/// last sample and checked first. Every process on the host is looked at only to find the
/// server anew (its pid gone or not holding the socket any more), for a server known only
/// by its user's processes, and on a kernel without children lists.
public struct OwnProcesses: Sendable {
    /// Processes looked at per scan: a host with more is not scanned past this.
    public static let maxProcesses = 8_192
    /// Descriptors looked at per process while searching for the socket.
    public static let maxDescriptors = 4_096

    private let prefix: String
    /// The model server's TCP port on this host; nil when it is elsewhere.
    public let serverPort: UInt16?
    public let workerPID: Int32
    /// Units tried for a server whose processes are hidden, after the socket owner's
    /// `<user>.service` (`ollama.service` for an Ollama backend).
    public let derivedUnits: [String]
    /// The server's pid found last time, checked first (a full scan is the slow path).
    private var cachedServer: Int32?
    /// The unit cgroup found last time for a server whose descriptors are not readable,
    /// with its owner's uid and how it was found: kept while it holds processes.
    private var cachedOwnerUnit: (uid: UInt32, path: String, via: String)?
    private let nameOfUser: @Sendable (UInt32) -> String?
    /// The sock_diag socket, opened on first use and kept (one per power reading cost a
    /// socket, a bind and a close every 5 s).
    private var sockDiagSocket: NetlinkSocket?

    public init(
        root: String = "/", serverPort: UInt16?, workerPID: Int32, derivedUnits: [String] = [],
        nameOfUser: @escaping @Sendable (UInt32) -> String? = OwnProcesses.systemUserName
    ) {
        var prefix = root
        while prefix.hasSuffix("/") { prefix.removeLast() }
        self.prefix = prefix
        self.serverPort = serverPort
        self.workerPID = workerPID
        self.derivedUnits = derivedUnits.compactMap(Cgroup.serviceName)
        self.nameOfUser = nameOfUser
    }

    /// The units worth trying for a backend kind: Ollama's installer makes `ollama.service`.
    public static func derivedUnits(backendKind: String) -> [String] {
        backendKind == "ollama" ? ["ollama.service"] : []
    }

    /// The user database's name for a uid; nil when it has none.
    @Sendable public static func systemUserName(_ uid: UInt32) -> String? {
        let name = userName(uid: uid)
        return name.hasPrefix("uid ") ? nil : name
    }

    /// How the model server was found, for `doctor`.
    public enum Server: Sendable, Equatable {
        case remote
        case notListening(port: UInt16)
        case process(pid: Int32, port: UInt16)
        case user(uid: UInt32, port: UInt16)
        /// Measured by the unit's cgroup, found `via` (a pid's cgroup, a derived name).
        case cgroup(path: String, via: String, port: UInt16)
        /// Its processes are not visible and no unit cgroup was found: counted as other.
        case hidden(uid: UInt32, port: UInt16, tried: [String])
        case unreadable(port: UInt16)

        public var description: String {
            switch self {
            case .remote: return "the model server is not on this host: its CPU is not counted here"
            case .notListening(let port): return "nothing listens on port \(port)"
            case .process(let pid, let port): return "pid \(pid) listens on port \(port)"
            case .user(let uid, let port):
                return "the socket on port \(port) belongs to uid \(uid), whose processes count (their descriptors are not readable)"
            case .cgroup(let path, let via, let port):
                return "the model server on port \(port) is measured by its cgroup \(path) (cpu.stat usage_usec, its children included), found \(via)"
            case .hidden(let uid, let port, let tried):
                let units = tried.isEmpty ? "no unit to try" : "no running unit among \(tried.joined(separator: ", "))"
                return
                    "the socket on port \(port) belongs to uid \(uid), whose processes are not visible (ProtectProc=invisible) and \(units): the model server's load counts as other load"
            case .unreadable(let port): return "the socket on port \(port) belongs to root or cannot be traced to a process"
            }
        }
    }

    /// The own processes now (the worker's tree, and the server's when it is not
    /// measured by its cgroup), the server's cgroup usage when it is, and how it was found.
    public mutating func sample() -> (processes: [ProcessSample], server: Server, serverCgroup: CgroupUsage?) {
        var roots: Set<Int32> = workerPID > 1 ? [workerPID] : []
        var server = Server.remote
        var uidProcesses: Set<Int32> = []
        var usage: CgroupUsage?
        if let port = serverPort {
            let listeners =
                (prefix.isEmpty ? sockDiagListeners(port: port) : nil)
                ?? ProcNetTCP.listeners(read("proc/net/tcp"), port: port) + ProcNetTCP.listeners(read("proc/net/tcp6"), port: port)
            let inodes = Set(listeners.map(\.inode))
            if listeners.isEmpty {
                server = .notListening(port: port)
            } else if let pid = owner(of: inodes) {
                if let path = unitCgroup(ofProcesses: [pid]), let measured = cgroupUsage(path) {
                    usage = measured
                    server = .cgroup(path: path, via: "from its /proc/\(pid)/cgroup (pid \(pid) listens on port \(port))", port: port)
                } else {
                    roots.insert(pid)
                    server = .process(pid: pid, port: port)
                }
            } else if let uid = listeners.first?.uid, uid != getuid() {
                if let cached = cachedOwnerUnit, cached.uid == uid,
                    Cgroup.hasProcesses(cgroupProcs: cgroupFile(cached.path, "cgroup.procs")), let measured = cgroupUsage(cached.path)
                {
                    usage = measured
                    server = .cgroup(path: cached.path, via: cached.via, port: port)
                } else {
                    cachedOwnerUnit = nil
                    let owned = uid == 0 ? [] : allPIDs().filter { ProcessSample.uid(status: read("proc/\($0)/status")) == uid }
                    if !owned.isEmpty, let path = unitCgroup(ofProcesses: owned), let measured = cgroupUsage(path) {
                        usage = measured
                        server = .cgroup(path: path, via: "from the cgroup of uid \(uid)'s processes", port: port)
                    } else if !owned.isEmpty {
                        uidProcesses = Set(owned)
                        server = .user(uid: uid, port: port)
                    } else {
                        let candidates =
                            (uid == 0 ? [] : [nameOfUser(uid).map { $0 + ".service" }].compactMap { $0 }.compactMap(Cgroup.serviceName))
                            + derivedUnits
                        var found = false
                        for unit in candidates where !found {
                            let path = "/system.slice/" + unit
                            guard Cgroup.hasProcesses(cgroupProcs: cgroupFile(path, "cgroup.procs")), let measured = cgroupUsage(path) else {
                                continue
                            }
                            usage = measured
                            server = .cgroup(
                                path: path, via: "by its unit name \(unit) (the socket's owner, uid \(uid), has no visible process)", port: port)
                            found = true
                        }
                        if !found { server = uid == 0 ? .unreadable(port: port) : .hidden(uid: uid, port: port, tried: candidates) }
                    }
                    if case .cgroup(let path, let via, _) = server { cachedOwnerUnit = (uid, path, via) }
                }
            } else {
                server = .unreadable(port: port)
            }
        }
        let own = descendants(of: roots).union(uidProcesses)
        return (own.sorted().compactMap(processSample), server, usage)
    }

    /// `roots` and every process below them, from the kernel's children lists; on a kernel
    /// without them (CONFIG_PROC_CHILDREN off), from every process's parent.
    func descendants(of roots: Set<Int32>) -> Set<Int32> {
        var found = roots
        var queue = Array(roots)
        while let pid = queue.popLast() {
            guard let children = children(of: pid) else {
                return ProcessTree.descendants(of: roots, parents: processTable().mapValues(\.parent))
            }
            for child in children where found.count < OwnProcesses.maxProcesses && found.insert(child).inserted {
                queue.append(child)
            }
        }
        return found
    }

    /// The children of every thread of `pid`: [] for a process that is gone, nil when the
    /// kernel keeps no children lists.
    func children(of pid: Int32) -> [Int32]? {
        guard let threads = listDirectory("\(prefix)/proc/\(pid)/task", maxEntries: OwnProcesses.maxProcesses) else { return [] }
        var children: [Int32] = []
        var listed = false
        for thread in threads {
            guard let bytes = try? readFile("\(prefix)/proc/\(pid)/task/\(thread)/children", limit: 1 << 20) else { continue }
            listed = true
            children += bytes.split(whereSeparator: { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\n") })
                .compactMap { decimalPID($0) }
        }
        return listed || threads.isEmpty ? children : nil
    }

    /// The sockets listening on `port` (IPv4 and IPv6) as the kernel's sock_diag dumps them;
    /// nil when it cannot be asked (no NETLINK_SOCK_DIAG, a sandbox refusing it, a reply that
    /// does not parse): the caller reads `/proc/net/tcp` then. On `socket` when given (kept
    /// open by the caller between readings), else on one opened for this call.
    public static func sockDiagListeners(port: UInt16, socket: NetlinkSocket? = nil) -> [ProcNetTCP.Listener]? {
        guard let socket = socket ?? openSockDiag() else { return nil }
        var found: [ProcNetTCP.Listener] = []
        do {
            for (sequence, family) in [(UInt32(1), UInt8(AF_INET)), (UInt32(2), UInt8(AF_INET6))] {
                try socket.dump(SockDiag.listenersRequest(family: family, sequence: sequence)) { datagram throws(SystemError) in
                    let reply = SockDiag.parse(datagram, port: port)
                    guard reply.errno == nil, reply.malformed == nil else {
                        throw SystemError("sock_diag", errno: EPROTO, detail: "an unusable reply")
                    }
                    found += reply.listeners
                    return reply.done ? .done : .more
                }
            }
        } catch {
            return nil
        }
        return found
    }

    static func openSockDiag() -> NetlinkSocket? {
        try? NetlinkSocket(protocol: SockDiag.netlinkProtocol, groups: 0, receiveBuffer: 0)
    }

    /// sock_diag's answer on the socket this value keeps; a failed dump closes it (it may
    /// hold the rest of that dump) and the next reading opens another.
    mutating func sockDiagListeners(port: UInt16) -> [ProcNetTCP.Listener]? {
        if sockDiagSocket == nil { sockDiagSocket = OwnProcesses.openSockDiag() }
        guard let socket = sockDiagSocket, let listeners = OwnProcesses.sockDiagListeners(port: port, socket: socket) else {
            sockDiagSocket = nil
            return nil
        }
        return listeners
    }

    /// A process's stat line, when it still runs under that pid.
    func processSample(_ pid: Int32) -> ProcessSample? {
        guard let sample = ProcessSample.parse(stat: read("proc/\(pid)/stat")), sample.pid == pid else { return nil }
        return sample
    }

    /// Every pid on the host (names in `proc` only, no file read).
    func allPIDs() -> [Int32] {
        (listDirectory(prefix + "/proc", maxEntries: OwnProcesses.maxProcesses * 2) ?? []).compactMap { decimalPID($0.utf8) }
    }

    /// The one unit cgroup all of `pids` run in, when it is not the worker's own; nil when
    /// they are in none or in several.
    func unitCgroup(ofProcesses pids: [Int32]) -> String? {
        var units: Set<String> = []
        for pid in pids.prefix(64) {
            guard let path = Cgroup.unifiedPath(procCgroup: read("proc/\(pid)/cgroup")).flatMap(Cgroup.unitPath(of:)) else { return nil }
            units.insert(path)
        }
        guard units.count == 1, let unit = units.first else { return nil }
        let mine = Cgroup.unifiedPath(procCgroup: read("proc/self/cgroup")).flatMap(Cgroup.unitPath(of:))
        return unit == mine ? nil : unit
    }

    /// A cgroup's `usage_usec` on the unified hierarchy (`sys/fs/cgroup`, or
    /// `sys/fs/cgroup/unified` on a v1/v2 hybrid host).
    func cgroupUsage(_ path: String) -> CgroupUsage? {
        Cgroup.usageMicroseconds(cpuStat: cgroupFile(path, "cpu.stat")).map { CgroupUsage(path: path, usageMicroseconds: $0) }
    }

    func cgroupFile(_ path: String, _ file: String) -> [UInt8]? {
        for mount in ["sys/fs/cgroup", "sys/fs/cgroup/unified"] {
            if let bytes = try? readFile("\(prefix)/\(mount)\(path)/\(file)", limit: Cgroup.maxStatBytes * 16) { return bytes }
        }
        return nil
    }

    /// Every process's stat line, by pid (the fallback of `descendants`).
    func processTable() -> [Int32: ProcessSample] {
        var table: [Int32: ProcessSample] = [:]
        for pid in allPIDs() {
            guard let sample = processSample(pid) else { continue }
            table[pid] = sample
            if table.count >= OwnProcesses.maxProcesses { break }
        }
        return table
    }

    /// The process holding one of `inodes` open: the cached one first, then every one.
    mutating func owner(of inodes: Set<UInt64>) -> Int32? {
        if let cached = cachedServer, holds(cached, inodes) { return cached }
        cachedServer = nil
        for pid in allPIDs() where pid > 1 && pid != workerPID && holds(pid, inodes) {
            cachedServer = pid
            return pid
        }
        return nil
    }

    func holds(_ pid: Int32, _ inodes: Set<UInt64>) -> Bool {
        let directory = "\(prefix)/proc/\(pid)/fd"
        for fd in listDirectory(directory, maxEntries: OwnProcesses.maxDescriptors) ?? [] {
            if let target = readLink("\(directory)/\(fd)"), let inode = ProcNetTCP.socketInode(link: target), inodes.contains(inode) {
                return true
            }
        }
        return false
    }

    func read(_ relative: String) -> [UInt8] {
        (try? readFile(prefix + "/" + relative, limit: 4 << 20)) ?? []
    }

    func readLink(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: 256)
        let count = readlink(path, &buffer, buffer.count - 1)
        guard count > 0 else { return nil }
        return String(decoding: buffer[0..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
