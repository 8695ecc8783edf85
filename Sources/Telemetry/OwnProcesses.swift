#if canImport(Glibc)
import Glibc
#endif
import Posix
import WorkerCore

/// Finds the worker's own processes in procfs below a root (modes-and-power §3.2: the worker and its
/// model server with the server's children are not "other load"): the worker's pid,
/// and on loopback the process owning the backend's listening socket
/// (`proc/net/tcp{,6}` inode → `proc/*/fd`). When the server runs as another user its
/// fds cannot be read; then the processes of the socket's owner uid count (never root's).
public struct OwnProcesses: Sendable {
    /// Processes looked at per scan: a host with more is not scanned past this.
    public static let maxProcesses = 8_192
    /// Descriptors looked at per process while searching for the socket.
    public static let maxDescriptors = 4_096

    private let prefix: String
    /// The model server's TCP port on this host; nil when it is elsewhere.
    public let serverPort: UInt16?
    public let workerPID: Int32
    /// The server's pid found last time, checked first (a full scan is the slow path).
    private var cachedServer: Int32?

    public init(root: String = "/", serverPort: UInt16?, workerPID: Int32) {
        var prefix = root
        while prefix.hasSuffix("/") { prefix.removeLast() }
        self.prefix = prefix
        self.serverPort = serverPort
        self.workerPID = workerPID
    }

    /// How the model server was found, for `doctor`.
    public enum Server: Sendable, Equatable {
        case remote
        case notListening(port: UInt16)
        case process(pid: Int32, port: UInt16)
        case user(uid: UInt32, port: UInt16)
        case unreadable(port: UInt16)

        public var description: String {
            switch self {
            case .remote: return "the model server is not on this host: its CPU is not counted here"
            case .notListening(let port): return "nothing listens on port \(port)"
            case .process(let pid, let port): return "pid \(pid) listens on port \(port)"
            case .user(let uid, let port): return "the socket on port \(port) belongs to uid \(uid), whose processes count (their descriptors are not readable)"
            case .unreadable(let port): return "the socket on port \(port) belongs to root or cannot be traced to a process"
            }
        }
    }

    /// The own processes now: the worker's tree and the server's.
    public mutating func sample() -> (processes: [ProcessSample], server: Server) {
        let table = processTable()
        var roots: Set<Int32> = workerPID > 1 ? [workerPID] : []
        var server = Server.remote
        var uidProcesses: Set<Int32> = []
        if let port = serverPort {
            let listeners = ProcNetTCP.listeners(read("proc/net/tcp"), port: port) + ProcNetTCP.listeners(read("proc/net/tcp6"), port: port)
            let inodes = Set(listeners.map(\.inode))
            if listeners.isEmpty {
                server = .notListening(port: port)
            } else if let pid = owner(of: inodes, candidates: table.keys) {
                roots.insert(pid)
                server = .process(pid: pid, port: port)
            } else if let uid = listeners.first?.uid, uid != 0, uid != getuid() {
                uidProcesses = Set(table.keys.filter { ProcessSample.uid(status: read("proc/\($0)/status")) == uid })
                server = .user(uid: uid, port: port)
            } else {
                server = .unreadable(port: port)
            }
        }
        let own = ProcessTree.descendants(of: roots, parents: table.mapValues(\.parent)).union(uidProcesses)
        return (own.compactMap { table[$0] }, server)
    }

    /// Every process's stat line, by pid.
    func processTable() -> [Int32: ProcessSample] {
        var table: [Int32: ProcessSample] = [:]
        for name in listDirectory(prefix + "/proc", maxEntries: OwnProcesses.maxProcesses * 2) ?? [] {
            guard let first = name.utf8.first, first >= UInt8(ascii: "1"), first <= UInt8(ascii: "9"),
                  let sample = ProcessSample.parse(stat: read("proc/\(name)/stat")), "\(sample.pid)" == name else { continue }
            table[sample.pid] = sample
            if table.count >= OwnProcesses.maxProcesses { break }
        }
        return table
    }

    /// The process holding one of `inodes` open: the cached one first, then every one.
    mutating func owner(of inodes: Set<UInt64>, candidates: Dictionary<Int32, ProcessSample>.Keys) -> Int32? {
        if let cached = cachedServer, candidates.contains(cached), holds(cached, inodes) { return cached }
        cachedServer = nil
        for pid in candidates where pid > 1 && pid != workerPID && holds(pid, inodes) {
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
