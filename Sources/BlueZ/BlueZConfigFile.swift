import Posix
import WorkerCore

/// bluetoothd's own configuration file, as far as the worker needs it: the number of ATT
/// bearers, which decides whether notifications can arrive out of order (docs/operating/bluetooth.md, "Pacing").
/// Read by `doctor` and each time bluetoothd appears on the bus (it reads the file only at
/// its own start, so a restarted bluetoothd is the moment a change takes effect).
enum BlueZConfigFile {
    static let path = "/etc/bluetooth/main.conf"

    /// The file's text; nil when it cannot be read (bluetoothd then may still have read it).
    static func text(at path: String = path) -> String? {
        (try? readFile(path, limit: BlueZMainConf.maxBytes)).map { String(decoding: $0, as: UTF8.self) }
    }

    /// `[GATT] Channels` as bluetoothd uses it; nil when the file cannot be read.
    static func attBearers(at path: String = path) -> Int? {
        text(at: path).map(BlueZMainConf.attChannels(in:))
    }
}
