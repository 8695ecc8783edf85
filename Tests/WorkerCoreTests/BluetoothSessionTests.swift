import Testing
@testable import WorkerCore

@Suite struct BluetoothSessionTests {
    @Test(arguments: [(0, 0, true), (7, 0, true), (6, 1, true), (7, 1, false), (8, 0, false), (0, 8, false)])
    func theQueueCountsWaitingAndRunningRequests(waiting: Int, running: Int, admitted: Bool) {
        #expect(RequestQueuePolicy(maxQueued: 8).admits(waiting: waiting, running: running) == admitted)
    }

    @Test func theLocalNameTakesTheFirst16CharactersOfTheAgentID() {
        #expect(BluetoothUUID.localName(agentID: "laptop-0123456789abcdef") == "EdgeCoder-laptop-012345678")
        #expect(BluetoothUUID.localName(agentID: "pi") == "EdgeCoder-pi")
    }

    @Test func statusJSONHasTheDocumentedKeys() {
        var status = BluetoothStatus()
        status.state = .advertising
        status.adapter = "hci0"
        status.clients = [.init(address: "00:AA:01:01:00:01", mtu: 517), .init(address: "00:AA:01:02:00:02", mtu: nil)]
        status.requestsServed = 3
        let json = status.json
        #expect(json["state"]?.stringValue == "advertising")
        #expect(json["clients"]?.arrayValue?.count == 2)
        #expect(json["clients"]?.arrayValue?[0]["mtu"]?.intValue == 517)
        #expect(json["clients"]?.arrayValue?[1]["mtu"] == .null)
        for key in [
            "adapter", "address", "localName", "applicationRegistered", "advertising", "problem", "requestsServed",
            "requestsFailed", "requestsRejected", "clientsRefused", "queued", "registrations",
        ] {
            #expect(json[key] != nil, "missing \(key)")
        }
        #expect(status.summary == "bluetooth advertising on hci0, 2 client(s)")
        status.state = .waiting
        status.problem = "bluetoothd is not running"
        #expect(status.summary == "bluetooth waiting: bluetoothd is not running")
    }

    @Test(arguments: [(23, 18), (24, 19), (48, 43), (185, 180), (247, 242), (515, 510), (517, 512), (1_000, 512), (5, 18)])
    func notificationChunksFitTheMTU(mtu: Int, size: Int) {
        #expect(BluetoothMessage.chunkSize(mtu: mtu) == size)
        let message = BluetoothMessage.response(id: "r", output: String(repeating: "é", count: 20_000), ok: true, durationMs: 1)
        let chunks = BluetoothMessage.chunks(message, mtu: mtu)
        #expect(chunks.allSatisfy { $0.count <= size })
        #expect(chunks.dropLast().allSatisfy { $0.count == size })
        #expect(Array(chunks.joined()) == message)
    }
}
