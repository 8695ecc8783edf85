#if canImport(Glibc)
import Glibc
#endif
import Posix
import WorkerCore

/// The daemon's state directory. Every write is atomic and durable: a temp file in the
/// same directory, fsync, rename over the old name, fsync of the directory. A crash at
/// any point leaves either the old content or the new, never a mix.
public final class StateDirectory: Sendable {
    public let path: String
    private let directoryFD: Int32

    /// Opens (creating, mode 0750) the directory and removes temp files that a crash
    /// between write and rename left behind.
    public init(path: String) throws(SystemError) {
        self.path = path
        try makeDirectories(path, mode: 0o750)
        directoryFD = try systemCall("open", path) { open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        removeStaleTempFiles()
    }

    deinit { close(directoryFD) }

    static let tempMarker = ".tmp-"

    private func removeStaleTempFiles() {
        guard let dir = opendir(path) else { return }
        defer { closedir(dir) }
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name.hasPrefix(".") && name.contains(StateDirectory.tempMarker) {
                unlinkat(directoryFD, name, 0)
            }
        }
    }

    /// The bytes of `name`, or nil when it does not exist. Files over `limit` bytes are
    /// an error (EFBIG): the caller treats them like unparseable ones.
    public func read(_ name: String, limit: Int) throws(SystemError) -> [UInt8]? {
        let fd = openat(directoryFD, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        if fd < 0 {
            if errno == ENOENT { return nil }
            throw SystemError("open", errno: errno, detail: "\(path)/\(name)")
        }
        defer { close(fd) }
        return try readAll(fd: fd, limit: limit, name: "\(path)/\(name)")
    }

    /// Replaces `name` with `bytes` atomically. `beforeRename` exists for the test that
    /// proves a crash between the temp write and the rename keeps the old content.
    public func write(
        _ name: String, _ bytes: [UInt8], mode: mode_t = 0o640,
        beforeRename: () throws -> Void = {}
    ) throws {
        let temp = ".\(name)\(StateDirectory.tempMarker)\(getpid())"
        let fd = try systemCall("open", "\(path)/\(temp)") { openat(directoryFD, temp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode) }
        do {
            defer { close(fd) }
            try writeAll(fd: fd, bytes, name: "\(path)/\(temp)")
            try systemCall("fsync", "\(path)/\(temp)") { fsync(fd) }
        }
        try beforeRename()
        try systemCall("rename", "\(path)/\(name)") { renameat(directoryFD, temp, directoryFD, name) }
        try systemCall("fsync", path) { fsync(directoryFD) }
    }

    /// Moves an unusable file aside as `<name>.corrupt-<UTC stamp>` so nothing is lost,
    /// and returns the new name.
    public func quarantine(_ name: String, nowMs: Int64) throws(SystemError) -> String {
        var target = "\(name).corrupt-\(fileStampUTC(milliseconds: nowMs))"
        var attempt = 1
        while faccessat(directoryFD, target, F_OK, AT_SYMLINK_NOFOLLOW) == 0 {
            attempt += 1
            target = "\(name).corrupt-\(fileStampUTC(milliseconds: nowMs))-\(attempt)"
        }
        try systemCall("rename", "\(path)/\(name)") { renameat(directoryFD, name, directoryFD, target) }
        try systemCall("fsync", path) { fsync(directoryFD) }
        return target
    }

    /// Removes `name` (absent is fine); the removal is durable once this returns, so a
    /// delivered outbox entry cannot come back after a crash and be posted twice.
    public func remove(_ name: String) throws(SystemError) {
        if unlinkat(directoryFD, name, 0) != 0 {
            if errno == ENOENT { return }
            throw SystemError("unlink", errno: errno, detail: "\(path)/\(name)")
        }
        try systemCall("fsync", path) { fsync(directoryFD) }
    }

    /// Whether `name` exists (a symbolic link counts, and is not followed).
    public func exists(_ name: String) -> Bool {
        faccessat(directoryFD, name, F_OK, AT_SYMLINK_NOFOLLOW) == 0
    }

    public func names() -> [String] {
        (listDirectory(path, maxEntries: .max) ?? []).sorted()
    }
}
