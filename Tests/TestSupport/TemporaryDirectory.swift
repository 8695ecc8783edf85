import Foundation

/// A fresh directory under the system's temporary directory, removed when released (or
/// by `remove()`).
public final class TemporaryDirectory: @unchecked Sendable {
    public let path: String

    /// `prefix` names the directory (`<tmp>/<prefix><UUID>`), so a leftover says whose it is.
    public init(prefix: String = "ecw-") {
        path = NSTemporaryDirectory() + prefix + UUID().uuidString
        try! FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    deinit { remove() }

    /// Removes the directory and everything in it now.
    public func remove() { try? FileManager.default.removeItem(atPath: path) }

    /// Writes `text` to the file `name` in the directory.
    public func write(_ name: String, _ text: String) { _ = FileManager.default.createFile(atPath: path + "/" + name, contents: Data(text.utf8)) }

    /// The file `name`'s text, or nil when it cannot be read.
    public func read(_ name: String) -> String? {
        (try? Data(contentsOf: URL(fileURLWithPath: path + "/" + name))).map { String(decoding: $0, as: UTF8.self) }
    }

    /// The names in the directory, sorted.
    public var names: [String] { ((try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []).sorted() }
}
