import Testing
@testable import WorkerCore

// The proxy's link to a worker as values: the ask as written to the worker, the link's
// status, which worker is used.

@Suite struct WorkerAskWire {
    @Test func statusHasTheMacProxysKeysAndTheSelection() {
        var status = ProxyStatus()
        status.connected = true
        status.deviceName = "EdgeCoder-x"
        status.deviceAddress = "00:AA:01:00:00:00"
        status.rssi = -40
        status.batteryPct = 80
        status.selection = "remembered"
        status.pinnedDevice = "00:AA:01:00:00:00"
        for key in ["connected", "scanning", "modelState", "lastSeenMs", "deviceName", "deviceId", "batteryPct", "rssi", "requestsInFlight"] {
            #expect(status.json[key] != nil, "missing \(key)")
        }
        #expect(status.json["selection"] == "remembered" && status.json["pinnedDevice"] == "00:AA:01:00:00:00")
    }

    @Test func aPlainAskIsTheMacProxysRequestByteForByte() {
        let ask = WorkerAsk(prompt: "write \"main\"", maxTokens: 64)
        #expect(String(decoding: ask.wire(id: "r1"), as: UTF8.self) == #"{"id":"r1","prompt":"write \"main\"","maxTokens":64}"#)
    }

    @Test func aChatAskCarriesItsMessagesAndOptionsInsteadOfAPrompt() throws {
        var ask = WorkerAsk(prompt: "", maxTokens: 100)
        ask.messages = [ChatTurn(role: "user", content: "hi")]
        ask.system = "be brief"
        ask.format = "json"
        ask.stream = true
        ask.options.temperature = 0.5
        ask.options.stop = ["\n\n"]
        ask.options.seed = 7
        let value = try JSON.parse(ask.wire(id: "r2"))
        #expect(value["prompt"] == nil)
        #expect(value["messages"]?.arrayValue?.first?["content"]?.stringValue == "hi")
        #expect(value["system"]?.stringValue == "be brief")
        #expect(value["format"]?.stringValue == "json")
        #expect(value["stream"]?.boolValue == true)
        #expect(value["options"]?["temperature"] == .double(0.5))
        #expect(value["options"]?["stop"]?.arrayValue?.first?.stringValue == "\n\n")
        #expect(value["options"]?["seed"]?.intValue == 7)
        #expect(value["options"]?["top_k"] == nil)
    }
}

/// proxy-api §6's "which worker": the first one connected to is the only one afterwards.
@Suite struct WorkerSelection {
    typealias H = CentralHarness

    func harness(pinFirst: Bool, selection: String) -> H {
        var h = H()
        var settings = CentralMachine.Settings(adapter: nil, device: nil)
        settings.pinFirstWorker = pinFirst
        settings.selection = selection
        h.machine = CentralMachine(settings: settings, seed: 42)
        return h
    }

    @Test func theFirstWorkerConnectedIsPinnedAndALouderOneIsNotUsedAfterIt() {
        var h = harness(pinFirst: true, selection: "remembered")
        #expect(h.machine.status.json["selection"] == "remembered" && h.machine.status.json["pinnedDevice"] == .null)
        h.connect()
        #expect(h.all.contains(.pinned(address: "00:AA:01:00:00:01")))
        #expect(h.machine.status.pinnedDevice == "00:AA:01:00:00:01")
        h.on(.bluez(.propertiesChanged(path: H.worker(1), BlueZInterfaces(device: .init(connected: false)))))
        h.on(.bluez(.interfacesAdded(path: H.worker(2), H.advertising(2, rssi: -20))))
        h.on(.bluez(.propertiesChanged(path: H.worker(1), H.advertising(1, rssi: -85))))
        let later = h.advance(10_000)
        #expect(later.contains(.connect(device: H.worker(1), timeoutMs: 30_000)))
        #expect(!h.all.contains(.connect(device: H.worker(2), timeoutMs: 30_000)), "the louder worker 2 must not be used")
        #expect(h.all.filter { if case .pinned = $0 { true } else { false } }.count == 1)
    }

    @Test func withAnyTheStrongestIsUsedAndNothingIsPinned() {
        var h = harness(pinFirst: false, selection: "any")
        h.connect()
        #expect(!h.all.contains { if case .pinned = $0 { true } else { false } })
        #expect(h.machine.status.pinnedDevice == nil && h.machine.status.json["selection"] == "any")
        h.on(.bluez(.propertiesChanged(path: H.worker(1), BlueZInterfaces(device: .init(connected: false)))))
        h.on(.bluez(.interfacesAdded(path: H.worker(2), H.advertising(2, rssi: -20))))
        h.on(.bluez(.propertiesChanged(path: H.worker(1), H.advertising(1, rssi: -85))))
        #expect(h.advance(10_000).contains(.connect(device: H.worker(2), timeoutMs: 30_000)))
    }
}
