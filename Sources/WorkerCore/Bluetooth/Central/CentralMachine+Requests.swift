extension CentralMachine {
    /// The requests waiting for an answer and the writes carrying them to the worker: one
    /// request at a time, chunk after chunk, each a write with response (flow control by
    /// the worker's side), never interleaved with another request's chunks.
    struct Requests: Sendable {
        struct Pending: Sendable {
            var deadlineMs: Int64
            var timeoutMs: Int64
            /// A streamed answer's text so far: the result's `output` (the final message has none).
            var streamed = ""
        }

        struct Writing: Sendable {
            var id: String
            var bytes: [UInt8]
            var offset = 0
            var inFlight = 0
            /// Written to the end even though no one waits for an answer: a cancel, and the
            /// rest of a request abandoned mid-write (cut short, it would leave the worker a
            /// partial request that garbles the next one for 5 s).
            var detached = false
        }

        /// The requests waiting for an answer, by id.
        var pending: [String: Pending] = [:]
        /// Writes waiting for the one under way to end, in order.
        private(set) var queue: [Writing] = []
        private(set) var writing: Writing?

        mutating func add(id: String, bytes: [UInt8], timeoutMs: Int64, now: Int64) {
            pending[id] = Pending(deadlineMs: now + max(1, timeoutMs), timeoutMs: timeoutMs)
            queue.append(Writing(id: id, bytes: bytes))
        }

        /// Forgets every waiting request and the writes queued for them; returns their ids,
        /// sorted. The write under way goes on only when kept (the proxy stopping keeps it:
        /// a cancel half written is finished if the link lasts).
        mutating func removeAll(keepingWriteUnderWay: Bool) -> [String] {
            let ids = pending.keys.sorted()
            pending.removeAll()
            queue.removeAll()
            if !keepingWriteUnderWay { writing = nil }
            return ids
        }

        /// Removes the requests whose deadline is `now` or earlier; returns them, by id.
        mutating func removeExpired(now: Int64) -> [(id: String, timeoutMs: Int64)] {
            var expired: [(id: String, timeoutMs: Int64)] = []
            for (id, request) in pending.sorted(by: { $0.key < $1.key }) where now >= request.deadlineMs {
                pending.removeValue(forKey: id)
                expired.append((id, request.timeoutMs))
            }
            return expired
        }

        /// The next chunk (`chunkSize` bytes at most) to write to `path`, the request
        /// characteristic of a connected link; nil while a chunk is in flight. Without a path
        /// every queued write is dropped (their requests failed with the link), and so is a
        /// write whose request no one waits for any more, unless it is detached.
        mutating func nextWrite(chunkSize: Int, path: String?) -> Command? {
            while true {
                if writing == nil {
                    guard !queue.isEmpty else { return nil }
                    writing = queue.removeFirst()
                }
                guard var current = writing else { return nil }
                guard current.inFlight == 0 else { return nil }
                guard current.detached || pending[current.id] != nil, let path, current.offset < current.bytes.count else {
                    writing = nil
                    continue
                }
                let end = min(current.offset + chunkSize, current.bytes.count)
                let chunk = Array(current.bytes[current.offset..<end])
                current.inFlight = chunk.count
                writing = current
                return .write(id: current.id, path: path, chunk: chunk)
            }
        }

        /// The worker's side answered the chunk in flight of `id`'s write: the write goes on,
        /// or ends when the chunk `failed`. False when no chunk of `id` was in flight (a late answer).
        mutating func writeAnswered(id: String, failed: Bool) -> Bool {
            guard var current = writing, current.id == id, current.inFlight > 0 else { return false }
            current.offset += current.inFlight
            current.inFlight = 0
            writing = !failed && current.offset < current.bytes.count ? current : nil
            return true
        }

        /// Removes `id`'s write if it is still queued; true when it was (nothing of it reached the worker).
        mutating func removeQueuedWrite(id: String) -> Bool {
            guard let index = queue.firstIndex(where: { $0.id == id }) else { return false }
            queue.remove(at: index)
            return true
        }

        /// Tells the worker to stop `id` (protocol-bluetooth §2's cancel), written before any
        /// other queued write; `id`'s own write under way is finished all the same.
        mutating func queueCancel(id: String) {
            if writing?.id == id { writing?.detached = true }
            queue.insert(Writing(id: id, bytes: BluetoothMessage.cancel(id: id), detached: true), at: 0)
        }
    }
}
