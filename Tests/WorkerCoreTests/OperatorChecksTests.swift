import Testing
@testable import WorkerCore

@Suite struct StatusVerdictRules {
    static func status(
        mode: String, runtime: String = "running", registered: Bool = true, rejection: String? = nil,
        allowed: Bool = true, gate: String = "open", advertising: Bool = false, modelState: String = "ready"
    ) -> JSONValue {
        var coordinator = JSONObject([("registered", .bool(registered))])
        if let rejection { coordinator["rejection"] = .string(rejection) }
        return [
            "mode": ["mode": .string(mode), "runtime": ["state": .string(runtime), "reason": "why"]],
            "power": ["chargeGate": .string(gate), "decision": ["allowed": .bool(allowed), "reason": "battery-low"]],
            "coordinator": .object(coordinator),
            "bluetooth": ["advertising": .bool(advertising)],
            "backend": ["modelState": .string(modelState), "detail": "d"],
        ]
    }

    @Test func modeOffProceedsWhateverElseIsTrue() {
        #expect(StatusVerdict.of(Self.status(mode: "off", runtime: "idle", registered: false, allowed: false)) == .proceeds)
    }

    @Test func modeOnProceedsOnlyWhenRegisteredAndAllowed() {
        #expect(StatusVerdict.of(Self.status(mode: "on")) == .proceeds)
        #expect(StatusVerdict.of(Self.status(mode: "on", registered: false)) == .held("not registered with the coordinator"))
        #expect(StatusVerdict.of(Self.status(mode: "on", registered: false, rejection: "banned")) == .held("rejected by the coordinator: banned"))
        #expect(StatusVerdict.of(Self.status(mode: "on", allowed: false)) == .held("new work held: battery-low"))
        #expect(StatusVerdict.of(Self.status(mode: "on", runtime: "blocked")) == .held("mode on is not running: why"))
        #expect(
            StatusVerdict.of(Self.status(mode: "on", gate: "blocked: connect power to start")) == .held("charge gate blocked: connect power to start")
        )
    }

    @Test func aModelBackendThatIsDownHoldsTheWork() {
        #expect(StatusVerdict.of(Self.status(mode: "on", modelState: "unreachable")) == .held("model backend unreachable: d"))
        #expect(StatusVerdict.of(Self.status(mode: "on", modelState: "loading")) == .proceeds)
    }

    @Test func modeBluetoothProceedsOnlyWhileAdvertising() {
        #expect(StatusVerdict.of(Self.status(mode: "bluetooth", registered: false, advertising: true)) == .proceeds)
        #expect(StatusVerdict.of(Self.status(mode: "bluetooth", registered: false, advertising: false)) == .held("not advertising over Bluetooth"))
    }
}

@Suite struct CommandSuggestions {
    @Test(arguments: [("stauts", "status"), ("doctr", "doctor"), ("enrol", "enroll"), ("MODE", "mode"), ("polcy", "policy")])
    func suggestsTheNearestCommandForATypo(typed: String, meant: String) {
        #expect(Suggestion.closest(to: typed, among: ["run", "mode", "status", "doctor", "enroll", "policy"]) == meant)
    }

    @Test func suggestsNothingForAWordFarFromEveryCommand() {
        #expect(Suggestion.closest(to: "nonexistent", among: ["run", "mode", "status", "doctor"]) == nil)
        #expect(Suggestion.closest(to: "xy", among: ["run", "mode"]) == nil)
    }

    @Test func measuresEditDistance() {
        #expect(Suggestion.editDistance("kitten", "sitting") == 3)
        #expect(Suggestion.editDistance("", "abc") == 3)
        #expect(Suggestion.editDistance("same", "same") == 0)
    }
}

@Suite struct CoordinatorPlaceholderDetection {
    @Test(arguments: ["https://coordinator.example", "https://coordinator.example/", "https://x.EXAMPLE:8443/path", "http://example"])
    func recognisesTheReservedExampleName(url: String) {
        #expect(CoordinatorPlaceholder.problem(url)?.contains("edgecoder-worker enroll --coordinator URL") == true)
    }

    @Test(arguments: ["https://coordinator.example.com", "http://127.0.0.1:4301", "https://swarm.edgecoder.io"])
    func acceptsARealAddress(url: String) {
        #expect(CoordinatorPlaceholder.problem(url) == nil)
    }

    @Test func anOperatorsModeOnIsRefusedWithThePlaceholder() {
        let off = ModeState(mode: .off, sinceMs: 0, reason: "start", downgraded: false)
        let problem = CoordinatorPlaceholder.problem("https://coordinator.example")
        let context = ModeContext(nowMs: 5, coordinatorProblem: problem)
        let decision = ModeRules.decide(.operatorSet(.on, by: "root"), current: off, context: context)
        #expect(decision.outcome == .refused(message: problem!))
        #expect(decision.state == off)
        #expect(decision.events.first?.kind == .modeRefused)
        #expect(ModeRules.decide(.operatorSet(.bluetooth, by: "root"), current: off, context: context).outcome == .changed)
    }
}

@Suite struct CoordinatorURLEdit {
    func edit(_ text: String, _ url: String = "https://swarm.test") throws -> String {
        String(decoding: try ConfigEdit.settingCoordinatorURL(Array(text.utf8), to: url), as: UTF8.self)
    }

    @Test func replacesTheValueAndKeepsTheRestOfTheFileByteForByte() throws {
        let text = """
            {
              "coordinator": {
                "heartbeatIntervalMs": 15000,
                "url": "https://coordinator.example",
                "gapGuard": true
              },
              "network": { "pathLossGraceMs": 1500, "url": "not this one" }
            }

            """
        #expect(try edit(text) == text.replacing("\"https://coordinator.example\"", with: "\"https://swarm.test\""))
    }

    @Test func addsTheKeyFirstInCoordinatorWhenItIsMissing() throws {
        #expect(
            try edit(#"{"coordinator": {"gapGuard": true}, "log": {}}"#)
                == #"{"coordinator": {"url": "https://swarm.test", "gapGuard": true}, "log": {}}"#)
        #expect(try edit(#"{"coordinator": {}}"#) == #"{"coordinator": {"url": "https://swarm.test"}}"#)
    }

    @Test func addsCoordinatorFirstInTheFileWhenItIsMissing() throws {
        #expect(
            try edit("{\n  \"log\": {\"level\": \"info\"}\n}\n")
                == "{\n  \"coordinator\": {\"url\": \"https://swarm.test\"},\n  \"log\": {\"level\": \"info\"}\n}\n")
        #expect(try edit("{}") == #"{"coordinator": {"url": "https://swarm.test"}}"#)
    }

    @Test func escapesTheURLAsAJSONString() throws {
        #expect(try edit(#"{"coordinator": {"url": "a"}}"#, #"https://h/p?q="x""#) == #"{"coordinator": {"url": "https://h/p?q=\"x\""}}"#)
    }

    @Test func skipsStringsThatLookLikeKeysAndNestedObjects() throws {
        let text = #"{"a": {"coordinator": {"url": "no"}}, "b": "\"coordinator\": {", "coordinator": {"x": {"url": "no"}, "url": "old"}}"#
        #expect(try edit(text) == text.replacing(#""url": "old""#, with: #""url": "https://swarm.test""#))
    }

    @Test func refusesAFileThatIsNotAnObjectOrNotJSON() {
        #expect(throws: ConfigEdit.Failure.self) { try edit("[1]") }
        #expect(throws: ConfigEdit.Failure.self) { try edit("{") }
        #expect(throws: ConfigEdit.Failure.self) { try edit(#"{"coordinator": 5}"#) }
    }
}

@Suite struct CoordinatorKeysOnReload {
    @Test func theCoordinatorsAddressIsTakenWhileModeOnIsStoppedAndWaitsWhileItRuns() throws {
        let running = try WorkerConfig.parse(Array(#"{"coordinator": {"url": "https://coordinator.example"}}"#.utf8))
        let file = try WorkerConfig.parse(Array(#"{"coordinator": {"url": "https://swarm.test"}}"#.utf8))
        let stopped = ConfigReloadPlan.plan(running: running, file: file, coordinatorRunning: false)
        #expect(stopped.applied.coordinator.url == "https://swarm.test")
        #expect(stopped.appliedKeys == ["coordinator.url"])
        #expect(stopped.restartKeys.isEmpty)
        let live = ConfigReloadPlan.plan(running: running, file: file, coordinatorRunning: true)
        #expect(live.applied.coordinator.url == "https://coordinator.example")
        #expect(live.restartKeys == ["coordinator.url"])
    }
}

/// `doctor`'s /etc/machine-id check: the agent id is derived from it.
@Suite struct MachineIDChecks {
    @Test(arguments: ["0123456789abcdef0123456789abcdef\n", "0123456789abcdef0123456789abcdef"])
    func aMachineIdIsFine(text: String) {
        #expect(MachineIDCheck.problem(Array(text.utf8)) == nil)
    }

    @Test func aMissingEmptyOrUninitialisedFileIsAProblemThatSaysWhyAndWhatToDo() throws {
        let missing = try #require(MachineIDCheck.problem(nil))
        #expect(missing.contains("/etc/machine-id is missing") && missing.contains("cloned image") && missing.contains("systemd-machine-id-setup"))
        #expect(MachineIDCheck.problem([])?.contains("is empty") == true)
        #expect(MachineIDCheck.problem(Array(" \n\n".utf8))?.contains("is empty") == true)
        #expect(MachineIDCheck.problem(Array("uninitialized\n".utf8))?.contains("first boot") == true)
        #expect(MachineIDCheck.problem(nil, path: "/fake/etc/machine-id")?.hasPrefix("/fake/etc/machine-id is missing") == true)
    }

    @Test(arguments: [
        "0123456789ABCDEF0123456789ABCDEF", "0123456789abcdef0123456789abcde", "0123456789abcdef0123456789abcdef0",
        "g123456789abcdef0123456789abcdef", "0123456789abcdef 123456789abcdef", "\u{1b}[2J0123456789abcdef0123456789ab",
    ])
    func anythingElseIsNotAMachineId(text: String) throws {
        let problem = try #require(MachineIDCheck.problem(Array(text.utf8)))
        #expect(problem.contains("is not a machine id") && !problem.contains("\u{1b}"))
    }

    @Test func hostileBytesAreQuotedShortAndPrintable() throws {
        let problem = try #require(MachineIDCheck.problem([0xFF, 0x00, 0x07] + Array(String(repeating: "x", count: 4000).utf8)))
        #expect(problem.count < 600 && !problem.contains("\u{0}") && !problem.contains("\u{7}"))
    }
}

/// `identity reset`: refused in mode on unless forced, whatever else the daemon says.
@Suite struct IdentityResetRefusal {
    @Test func onlyModeOnWithoutForceIsRefused() {
        #expect(IdentityReset.refusal(status: nil, force: false) == nil, "no daemon: nothing runs with the id")
        #expect(IdentityReset.refusal(status: ["mode": ["mode": "off"]], force: false) == nil)
        #expect(IdentityReset.refusal(status: ["mode": ["mode": "bluetooth"]], force: false) == nil)
        let on: JSONValue = ["mode": ["mode": "on", "runtime": ["state": "blocked"]]]
        #expect(IdentityReset.refusal(status: on, force: false)?.contains("--force") == true)
        #expect(IdentityReset.refusal(status: on, force: true) == nil)
        // A status object without a mode (an older or broken daemon) does not block the reset.
        #expect(IdentityReset.refusal(status: ["mode": 5], force: false) == nil)
        #expect(IdentityReset.files == ["agent-id", "mesh-token"])
    }
}

@Suite struct CopiedIdentityCheckTests {
    @Test func aDerivedIdFromAnotherMachineIsNamed() throws {
        let problem = try #require(CopiedIdentityCheck.problem(agentID: "pi-0123456789ab", configured: false, machineSuffix: "fedcba987654"))
        #expect(problem.contains("pi-0123456789ab") && problem.contains("identity reset"))
    }

    @Test func thisMachinesIdAConfiguredIdOrAnUnknownMachineSayNothing() {
        #expect(CopiedIdentityCheck.problem(agentID: "pi-0123456789ab", configured: false, machineSuffix: "0123456789ab") == nil)
        #expect(CopiedIdentityCheck.problem(agentID: "pi-0123456789ab", configured: true, machineSuffix: "fedcba987654") == nil)
        #expect(CopiedIdentityCheck.problem(agentID: "pi-0123456789ab", configured: false, machineSuffix: nil) == nil)
        #expect(CopiedIdentityCheck.problem(agentID: "pi-0123456789ab", configured: false, machineSuffix: "short") == nil)
    }

    @Test(arguments: ["worker-7", "no-dash-here-ABCDEF012345", "node", "", "-", "x-0123456789abc", "x-0123456789aG"])
    func anIdNotOfTheDerivedShapeIsNotJudged(id: String) {
        #expect(CopiedIdentityCheck.problem(agentID: id, configured: false, machineSuffix: "fedcba987654") == nil)
    }
}
