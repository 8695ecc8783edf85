#if canImport(Glibc)
import Glibc
#endif
import WorkerCore

/// What systemd boots this host to, read from its unit directories (the files, not
/// `systemctl get-default`: the daemon's sandbox has no business talking to PID 1 for it).
/// The decision about it is `PairingAgentChoice`'s.
public enum SystemdBootTarget {
    /// Where systemd looks for units, the administrator's first (systemd.unit(5)).
    static let unitDirectories = ["/etc/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system"]

    /// `root`: a directory standing for `/` (tests); links inside it are followed within it.
    public static func read(root: String = "") -> HostBootTarget {
        HostBootTarget(
            defaultTarget: unit(named: "default.target", root: root),
            displayManager: unit(named: "display-manager.service", root: root) != nil)
    }

    /// The unit `name` stands for in the first unit directory that has it: the name at the
    /// end of its chain of links (default.target → runlevel5.target → graphical.target), or
    /// `name` itself for a plain file; nil when no directory has it.
    static func unit(named name: String, root: String) -> String? {
        for directory in unitDirectories {
            var path = root + directory + "/" + name
            var status = stat()
            guard lstat(path, &status) == 0 else { continue }
            var unit = name
            // A bound on the chain: a loop of links ends here instead of spinning.
            for _ in 0..<8 {
                guard let target = linkTarget(path) else { break }
                unit = String(target.split(separator: "/").last ?? Substring(target))
                path = target.hasPrefix("/") ? root + target : String(path[..<(path.lastIndex(of: "/") ?? path.endIndex)]) + "/" + target
            }
            return unit
        }
        return nil
    }

    private static func linkTarget(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: 4096)
        let n = readlink(path, &buffer, buffer.count - 1)
        guard n > 0 else { return nil }
        return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
