import Testing
@testable import WorkerCore

@Suite struct ControlProtocolParsing {
    func parse(_ text: String) -> Result<ControlRequest, ControlError> { ControlRequest.parse(ArraySlice(text.utf8)) }

    @Test func parsesEveryRequest() throws {
        #expect(try parse(#"{"cmd":"status"}"#).get() == .status)
        #expect(try parse(#"{"cmd":"mode"}"#).get() == .getMode)
        #expect(try parse(#"{"cmd":"mode","set":"bluetooth"}"#).get() == .setMode(.bluetooth))
        #expect(try parse(#"{"cmd":"events","follow":true,"limit":5}"#).get() == .events(follow: true, limit: 5))
        #expect(try parse(#"{"cmd":"task","id":"s-1"}"#).get() == .task(id: "s-1"))
        #expect(try parse(#"{"cmd":"mode","set":"off","forMs":60000}"#).get() == .pause(forMs: 60_000))
        #expect(ControlRequest.pause(forMs: 1_000).changes)
        for request in [
            ControlRequest.status, .getMode, .setMode(.on), .events(follow: false, limit: nil), .ping, .policyShow,
            .task(id: "x\n\"y\""), .pause(forMs: PauseDuration.maximumMs), .task(id: String(repeating: "i", count: ControlRequest.maxTaskIDBytes)),
            .policyChange(.set(key: "minBatteryPct", value: 40)), .policyChange(.unset(key: "minBatteryPct")),
        ] {
            #expect(try parse(request.json.serialized).get() == request)
        }
    }

    @Test(arguments: [
        ("garbage", ControlError.Code.badRequest),
        ("", .badRequest),
        ("[1]", .badRequest),
        (#"{"cmd": 5}"#, .badRequest),
        (#"{"cmd": "reboot"}"#, .unknownCommand),
        (#"{"cmd": "mode", "set": "turbo"}"#, .badRequest),
        (#"{"cmd": "status", "extra": 1}"#, .badRequest),
        (#"{"cmd": "events", "limit": 0}"#, .badRequest),
        (#"{"cmd": "task"}"#, .badRequest),
        (#"{"cmd": "mode", "forMs": 60000}"#, .badRequest),
        (#"{"cmd": "mode", "set": "on", "forMs": 60000}"#, .badRequest),
        (#"{"cmd": "mode", "set": "off", "forMs": 999}"#, .badRequest),
        (#"{"cmd": "mode", "set": "off", "forMs": 2592000001}"#, .badRequest),
        (#"{"cmd": "mode", "set": "off", "forMs": "1h"}"#, .badRequest),
        (#"{"cmd": "mode", "set": "off", "forMs": -1}"#, .badRequest),
        (#"{"cmd": "task", "id": ""}"#, .badRequest),
        (#"{"cmd": "task", "id": 7}"#, .badRequest),
        (#"{"cmd": "task", "id": ["a"]}"#, .badRequest),
        (#"{"cmd": "task", "id": "a", "limit": 1}"#, .badRequest),
        ("{\"cmd\": \"task\", \"id\": \"" + String(repeating: "i", count: 1025) + "\"}", .badRequest),
        (#"{"cmd": "events", "follow": "yes"}"#, .badRequest),
        (#"{"cmd": "policy", "set": "minBatteryPct"}"#, .badRequest),
        (#"{"cmd": "policy", "set": 5, "value": 1}"#, .badRequest),
        (#"{"cmd": "policy", "set": "a", "value": 1, "unset": "b"}"#, .badRequest),
    ])
    func answersBadRequestsWithACode(text: String, code: ControlError.Code) {
        switch parse(text) {
        case .success(let request): Issue.record("accepted \(request)")
        case .failure(let error): #expect(error.code == code)
        }
    }

    @Test func onlySettingTheModeOrThePolicyChangesTheDaemon() {
        #expect(ControlRequest.setMode(.on).changes)
        #expect(ControlRequest.policyChange(.unset(key: "x")).changes && !ControlRequest.policyShow.changes)
        #expect(!ControlRequest.getMode.changes && !ControlRequest.status.changes && !ControlRequest.events(follow: true, limit: nil).changes)
    }

    @Test(arguments: [
        (PeerCredentials(pid: 1, uid: 0, gid: 0, groups: []), ControlAccess.change),
        (PeerCredentials(pid: 1, uid: 990, gid: 990, groups: []), .change),
        (PeerCredentials(pid: 1, uid: 1000, gid: 1000, groups: [27, 500]), .read),
        (PeerCredentials(pid: 1, uid: 1000, gid: 500, groups: []), .read),
        (PeerCredentials(pid: 1, uid: 1000, gid: 1000, groups: [27]), .none),
    ])
    func peerCredentialsDecideAccess(peer: PeerCredentials, expected: ControlAccess) {
        #expect(ControlAccess.of(peer, daemonUID: 990, readGroupGID: 500) == expected)
    }

    @Test func withoutAReadGroupOnlyRootAndTheDaemonUserGetIn() {
        #expect(ControlAccess.of(PeerCredentials(pid: 1, uid: 1000, gid: 500, groups: [500]), daemonUID: 990, readGroupGID: nil) == .none)
    }
}
