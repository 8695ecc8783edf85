#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// A failed system call: which call, on what, and errno. Matched by `errno`, never by text.
public struct SystemError: Error, Sendable, Equatable, CustomStringConvertible {
    public var call: String
    public var errno: Int32
    public var detail: String?

    public init(_ call: String, errno: Int32, detail: String? = nil) {
        self.call = call
        self.errno = errno
        self.detail = detail
    }

    public var errnoDescription: String { String(cString: strerror(errno)) }

    public var description: String {
        if let detail { return "\(call) \(detail): \(errnoDescription)" }
        return "\(call): \(errnoDescription)"
    }
}

/// Stops the process when a call failed with an errno that means a bug in this program,
/// not a condition of the world: EBADF (a descriptor used after it was closed, or never
/// opened) and EFAULT (a bad pointer). Carrying on would act on whatever descriptor the
/// number means by now; NIOPosix draws the same line.
@inline(__always)
public func preconditionErrnoIsNotABug(_ code: Int32, call: @autoclosure () -> String) {
    precondition(
        code != EBADF && code != EFAULT,
        "\(call()) failed with errno \(code) (\(String(cString: strerror(code)))): a bug in edgecoder-worker")
}

/// Runs a system call that returns -1 and sets errno on failure, retrying on EINTR;
/// EBADF and EFAULT stop the process (`preconditionErrnoIsNotABug`).
@discardableResult
@inline(__always)
public func systemCall<T: FixedWidthInteger>(_ name: String, _ detail: @autoclosure () -> String? = nil, _ body: () -> T) throws(SystemError) -> T {
    while true {
        let result = body()
        if result != -1 { return result }
        let code = errno
        if code == EINTR { continue }
        preconditionErrnoIsNotABug(code, call: name)
        throw SystemError(name, errno: code, detail: detail())
    }
}

/// Milliseconds since the epoch, from CLOCK_REALTIME: times shown to people and stored.
public func wallClockMilliseconds() -> Int64 {
    var ts = timespec()
    clock_gettime(CLOCK_REALTIME, &ts)
    return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
}

/// Nanoseconds from CLOCK_MONOTONIC: durations, deadlines, dwell timers.
public func monotonicNanoseconds() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

/// Reads a whole file, refusing files larger than `limit` bytes. Reads stop at the
/// limit, so a hostile or endless file (a FIFO, /dev/zero) never costs memory.
public func readFile(_ path: String, limit: Int) throws(SystemError) -> [UInt8] {
    let fd = try systemCall("open", path) { open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK) }
    defer { close(fd) }
    return try readAll(fd: fd, limit: limit, name: path)
}

/// Reads from `fd` to its end, at most `limit` bytes; more is an EFBIG error.
public func readAll(fd: Int32, limit: Int, name: String) throws(SystemError) -> [UInt8] {
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 4096)
    while true {
        let n = try systemCall("read", name) { chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) } }
        if n == 0 { return bytes }
        if bytes.count + n > limit { throw SystemError("read", errno: EFBIG, detail: "\(name) (larger than \(limit) bytes)") }
        bytes.append(contentsOf: chunk[0..<n])
    }
}

/// Writes every byte, retrying short writes and EINTR. For blocking descriptors.
public func writeAll(fd: Int32, _ bytes: [UInt8], name: String) throws(SystemError) {
    var offset = 0
    while offset < bytes.count {
        let n = try systemCall("write", name) { bytes.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) } }
        offset += n
    }
}

public func fileExists(_ path: String) -> Bool {
    var st = stat()
    return stat(path, &st) == 0
}

/// The numeric id of a group by name, or nil when the group does not exist.
public func groupID(named name: String) -> UInt32? {
    var group = group()
    var result: UnsafeMutablePointer<group>?
    var buffer = [CChar](repeating: 0, count: 16_384)
    let rc = getgrnam_r(name, &group, &buffer, buffer.count, &result)
    guard rc == 0, let found = result else { return nil }
    return found.pointee.gr_gid
}

/// The name of a user id, for messages; the number when unknown.
public func userName(uid: UInt32) -> String {
    var passwd = passwd()
    var result: UnsafeMutablePointer<passwd>?
    var buffer = [CChar](repeating: 0, count: 16_384)
    if getpwuid_r(uid, &passwd, &buffer, buffer.count, &result) == 0, let found = result {
        return String(cString: found.pointee.pw_name)
    }
    return "uid \(uid)"
}

public func currentUserID() -> UInt32 { getuid() }

public func hostName() -> String {
    var buffer = [CChar](repeating: 0, count: 256)
    guard gethostname(&buffer, buffer.count - 1) == 0 else { return "localhost" }
    return String(cString: buffer)
}

/// The value of an environment variable, nil when unset or empty.
public func environment(_ name: String) -> String? {
    guard let value = getenv(name) else { return nil }
    let s = String(cString: value)
    return s.isEmpty ? nil : s
}

/// Creates a directory and its parents with `mode`; an existing directory is fine.
public func makeDirectories(_ path: String, mode: mode_t = 0o755) throws(SystemError) {
    var prefix = path.hasPrefix("/") ? "" : "."
    for component in path.split(separator: "/") {
        prefix += "/" + component
        if mkdir(prefix, mode) != 0 && errno != EEXIST {
            throw SystemError("mkdir", errno: errno, detail: prefix)
        }
    }
}

/// The entries of a directory (not `.` or `..`), at most `maxEntries`, unsorted; nil when
/// it cannot be opened.
public func listDirectory(_ path: String, maxEntries: Int = 4_096) -> [String]? {
    guard let dir = opendir(path) else { return nil }
    defer { closedir(dir) }
    var names: [String] = []
    while names.count < maxEntries, let entry = readdir(dir) {
        let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
            String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
        }
        if name != "." && name != ".." { names.append(name) }
    }
    return names
}
