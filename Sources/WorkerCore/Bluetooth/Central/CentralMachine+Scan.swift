extension CentralMachine {
    /// The adapter's discovery as the machine runs it (the scan a worker is chosen from, or
    /// listed from with `listOnly`). Apart from the link: bluetoothd may stop discovery
    /// on its own while the window goes on, and a list is given once however the link goes.
    struct Scan: Sendable, Equatable {
        /// When the scan window began; nil while not scanning.
        var sinceMs: Int64?
        /// StartDiscovery was sent and bluetoothd has not said discovery stopped since.
        var discoveryStarted = false
        /// `listOnly`: the list was given; nothing more happens.
        var listed = false
    }
}
