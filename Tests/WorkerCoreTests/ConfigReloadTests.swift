import Testing
@testable import WorkerCore

/// What a reload takes live and what waits for a restart (service §2): pure, over two configs.
@Suite struct ConfigReloadPlanTests {
    func config(_ text: String) throws -> WorkerConfig { try WorkerConfig.parse(Array(text.utf8)) }

    @Test func theSameFileChangesNothing() throws {
        let running = try config(#"{"coordinator": {"url": "https://c.example"}, "policy": {"minBatteryPct": 40, "resumeBatteryPct": 50}}"#)
        let plan = ConfigReloadPlan.plan(running: running, file: running)
        #expect(plan.appliedKeys.isEmpty)
        #expect(plan.restartKeys.isEmpty)
        #expect(plan.applied == running)
    }

    @Test func policyIntervalsLogLevelAndMeteredApplyLive() throws {
        let running = try config("{}")
        let file = try config(
            """
            {"policy": {"minBatteryPct": 25, "maxThermalState": "serious"},
             "coordinator": {"heartbeatIntervalMs": 2000, "pullIntervalMs": 1000},
             "backend": {"allowRemoteModelSwitch": true},
             "network": {"onMetered": "allow"}, "log": {"level": "debug"}}
            """)
        let plan = ConfigReloadPlan.plan(running: running, file: file)
        #expect(
            plan.appliedKeys == [
                "coordinator.heartbeatIntervalMs", "coordinator.pullIntervalMs", "backend.allowRemoteModelSwitch",
                "policy.minBatteryPct", "policy.maxThermalState", "network.onMetered", "log.level",
            ])
        #expect(plan.restartKeys.isEmpty)
        #expect(plan.applied == file, "everything in this file applies live")
        #expect(plan.applied.policyKeysInFile == ["minBatteryPct", "maxThermalState", "allowRemoteModelSwitch"])
    }

    @Test func whatARunningPartHoldsWaitsForARestartAndKeepsItsRunningValue() throws {
        let running = try config(#"{"coordinator": {"url": "https://a.example"}, "bluetooth": {"maxClients": 1}}"#)
        let file = try config(
            """
            {"coordinator": {"url": "https://b.example", "stopGraceMs": 60000, "heartbeatIntervalMs": 5000},
             "bluetooth": {"maxClients": 4, "adapter": "hci1"}, "backend": {"model": "other:7b", "apiKey": "k"},
             "control": {"readGroup": "ops"}, "network": {"pathLossGraceMs": 3000}}
            """)
        let plan = ConfigReloadPlan.plan(running: running, file: file)
        #expect(plan.appliedKeys == ["coordinator.heartbeatIntervalMs"])
        #expect(
            plan.restartKeys == [
                "coordinator.url", "coordinator.stopGraceMs", "backend.model", "backend.apiKey",
                "network.pathLossGraceMs", "bluetooth.adapter", "bluetooth.maxClients", "control.readGroup",
            ])
        #expect(plan.applied.coordinator.url == "https://a.example")
        #expect(plan.applied.bluetooth.maxClients == 1)
        #expect(plan.applied.coordinator.heartbeatIntervalMs == 5_000)
    }

    @Test func aKeyPutBackBeforeTheRestartNoLongerWaits() throws {
        let running = try config(#"{"bluetooth": {"maxClients": 1}}"#)
        let first = ConfigReloadPlan.plan(running: running, file: try config(#"{"bluetooth": {"maxClients": 3}}"#))
        #expect(first.restartKeys == ["bluetooth.maxClients"])
        let second = ConfigReloadPlan.plan(running: first.applied, file: try config(#"{"bluetooth": {"maxClients": 1}}"#))
        #expect(second.restartKeys.isEmpty)
    }

    @Test func everyKeyIsEitherLiveOrNeedsARestartAndSecretsAreNeverInTheLines() throws {
        let keys = WorkerConfig().flattened.map(\.key)
        #expect(Set(keys).count == keys.count, "each key once")
        for key in ConfigReloadPlan.liveKeys { #expect(keys.contains(key), "\(key) is a real key") }
        let status = ConfigReloadStatus(atMs: 0, outcome: .applied, appliedKeys: [], restartKeys: ["backend.apiKey"])
        let file = try config(#"{"backend": {"apiKey": "sk-secret-1"}}"#)
        _ = file
        #expect(!status.line.contains("sk-secret"))
        #expect(status.json["needsRestart"] == ["backend.apiKey"])
    }

    @Test func aRefusalSaysWhyAndThatTheRunningConfigIsKept() {
        let status = ConfigReloadStatus(atMs: 0, outcome: .refused, problems: ["/etc/x.json: policy.minBatteryPct: must be in 0…100, got 400"])
        #expect(status.line == "config reload refused, the running config is kept: /etc/x.json: policy.minBatteryPct: must be in 0…100, got 400")
        #expect(status.json["outcome"] == "refused")
    }
}

@Suite struct MeteredConfig {
    @Test func onMeteredDefaultsToHoldAndTakesAllow() throws {
        #expect(try WorkerConfig.parse(Array("{}".utf8)).network.onMetered == .hold)
        #expect(try WorkerConfig.parse(Array(#"{"network": {"onMetered": "allow"}}"#.utf8)).network.onMetered == .allow)
    }

    @Test func anUnknownOnMeteredValueIsRefusedWithTheKeyNamed() {
        #expect(throws: ConfigError([ConfigProblem(path: "network.onMetered", message: #"must be one of "hold", "allow", got "never""#)])) {
            try WorkerConfig.parse(Array(#"{"network": {"onMetered": "never"}}"#.utf8))
        }
    }
}

/// bluetooth.security and bluetooth.pairingAgent apply at a reload by starting the Bluetooth
/// session again (its flags and its pairing agent follow the level).
@Suite struct ConfigReloadBluetoothSecurityTests {
    func config(_ text: String) throws -> WorkerConfig { try WorkerConfig.parse(Array(text.utf8)) }

    @Test func securityAndPairingAgentApplyLiveAndRestartTheBluetoothSession() throws {
        let running = try config(#"{"bluetooth": {"security": "encrypted"}}"#)
        let file = try config(#"{"bluetooth": {"security": "authenticated", "pairingAgent": "host", "maxClients": 2}}"#)
        let plan = ConfigReloadPlan.plan(running: running, file: file)
        #expect(plan.appliedKeys == ["bluetooth.security", "bluetooth.pairingAgent"])
        #expect(plan.restartKeys == ["bluetooth.maxClients"])
        #expect(plan.applied.bluetooth.security == .authenticated)
        #expect(plan.applied.bluetooth.pairingAgent == .host)
        let status = ConfigReloadStatus(atMs: 0, outcome: .applied, appliedKeys: plan.appliedKeys, restartKeys: plan.restartKeys)
        #expect(status.line == "config reloaded: applied bluetooth.security, bluetooth.pairingAgent; needs a restart to apply: bluetooth.maxClients")
    }

    @Test func otherLiveKeysLeaveTheBluetoothSessionAlone() throws {
        let running = try config("{}")
        let plan = ConfigReloadPlan.plan(running: running, file: try config(#"{"log": {"level": "debug"}, "bluetooth": {"maxClients": 2}}"#))
        #expect(!plan.restartsBluetooth)
        #expect(ConfigReloadPlan.plan(running: running, file: try config(#"{"bluetooth": {"pairingAgent": "worker"}}"#)).restartsBluetooth)
        #expect(!ConfigReloadPlan.plan(running: running, file: running).restartsBluetooth)
    }
}
