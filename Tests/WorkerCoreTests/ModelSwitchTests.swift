import Testing
@testable import WorkerCore

@Suite struct ModelSwitchRequestTests {
    static func answer(_ text: String) throws -> JSONValue { try JSON.parse(text) }

    @Test func readsAPendingRequestAsEdgeCoderSendsIt() throws {
        let request = ModelSwitchRequest.parse(
            heartbeatAnswer: try Self.answer(
                #"{"ok":true,"orchestration":{"rolloutId":"r-1","provider":"ollama-local","model":"qwen2.5-coder:7b","autoInstall":true,"pending":true,"requestedAtMs":5}}"#
            ))
        #expect(request == ModelSwitchRequest(rolloutID: "r-1", provider: "ollama-local", model: "qwen2.5-coder:7b", autoInstall: true, key: "r-1"))
    }

    @Test(arguments: [
        #"{"ok":true}"#,
        #"{"ok":true,"orchestration":null}"#,
        #"{"ok":true,"orchestration":"switch"}"#,
        #"{"ok":true,"orchestration":[1]}"#,
        #"{"ok":true,"orchestration":{"provider":"ollama-local","model":"m","pending":false}}"#,
        #"{"ok":true,"orchestration":{"provider":"ollama-local","model":"m","pending":"true"}}"#,
        #"{"ok":true,"orchestration":{"provider":"ollama-local","model":"m"}}"#,
    ])
    func noPendingRequestMeansNothingToDo(text: String) throws {
        #expect(ModelSwitchRequest.parse(heartbeatAnswer: try Self.answer(text)) == nil)
    }

    @Test func withoutARolloutIdTheRequestIsKeyedByWhatItAsks() throws {
        let a = ModelSwitchRequest.parse(
            heartbeatAnswer: try Self.answer(#"{"orchestration":{"provider":"ollama-local","model":"m","pending":true,"requestedAtMs":1}}"#))
        let b = ModelSwitchRequest.parse(
            heartbeatAnswer: try Self.answer(#"{"orchestration":{"provider":"ollama-local","model":"m","pending":true,"requestedAtMs":2}}"#))
        #expect(a?.autoInstall == true, "EdgeCoder's default")
        #expect(a != nil && b != nil && a?.key != b?.key)
    }

    @Test(arguments: [
        (true, "ollama-local", WorkerConfig.BackendKind.ollama, "m:1b", true, ModelSwitchRequest.Plan.pull(model: "m:1b")),
        (true, "ollama-local", .ollama, "m:1b", false, .switchInstalled(model: "m:1b")),
    ])
    func anAllowedOllamaSwitchPullsOrSwitches(
        allowed: Bool, provider: String, kind: WorkerConfig.BackendKind, model: String, install: Bool, plan: ModelSwitchRequest.Plan
    ) {
        #expect(
            ModelSwitchRequest(rolloutID: nil, provider: provider, model: model, autoInstall: install, key: "k").plan(allowed: allowed, backend: kind)
                == plan)
    }

    @Test(arguments: [
        (false, "ollama-local", WorkerConfig.BackendKind.ollama, "m" as String?, "allowRemoteModelSwitch"),
        (true, "edgecoder-local", .ollama, "m", "provider edgecoder-local is not supported"),
        (true, "ollama-local", .openai, "m", "backend.kind is openai"),
        (true, "ollama-local", .ollama, nil, "names no model"),
        (true, "ollama-local", .ollama, "", "is empty"),
        (true, "ollama-local", .ollama, "two words", "spaces"),
        (true, "ollama-local", .ollama, "a\"b", "quotes"),
        (true, "ollama-local", .ollama, String(repeating: "x", count: 300), "longer than 256"),
    ])
    func aSwitchThatCannotBeDoneIsRefusedWithTheReason(
        allowed: Bool, provider: String, kind: WorkerConfig.BackendKind, model: String?, reason: String
    ) {
        let plan = ModelSwitchRequest(rolloutID: nil, provider: provider, model: model, autoInstall: true, key: "k").plan(
            allowed: allowed, backend: kind)
        guard case .refuse(let why) = plan else { Issue.record("not refused: \(plan)"); return }
        #expect(why.contains(reason), "\(why)")
    }
}

@Suite struct OrchestrationWireTests {
    @Test func statusBodiesStayWithinTheCoordinatorsLimitsInUTF16() {
        let body = OrchestrationWire.status(phase: String(repeating: "p", count: 100), message: String(repeating: "😀", count: 400), progressPct: 250)
        #expect(body["phase"]?.stringValue?.utf16.count ?? 0 <= 64)
        let message = body["message"]?.stringValue ?? ""
        #expect(message.utf16.count <= 512 && message.hasSuffix("…") && message.hasPrefix("😀"))
        #expect(body["progressPct"] == .double(100))
        #expect(OrchestrationWire.status(phase: "p", message: "m", progressPct: nil)["progressPct"] == nil, "absent, never null")
        #expect(OrchestrationWire.status(phase: "p", message: "m", progressPct: .nan)["progressPct"] == nil)
    }

    @Test func anAckCarriesTheErrorOnlyWhenItFailed() {
        #expect(OrchestrationWire.ack(ok: true, error: "ignored") == ["ok": true])
        #expect(OrchestrationWire.ack(ok: false, error: "no") == ["ok": false, "error": "no"])
    }

    @Test(arguments: [
        (200, #"{"ok":false,"pending":false}"#, OrchestrationWire.Answer.accepted),
        (404, #"{"error":"orchestration_not_found"}"#, .gone),
        (401, #"{"error":"mesh_unauthorized"}"#, .unauthorized),
        (404, #"{"message":"Route POST:/x not found"}"#, .failure("HTTP 404")),
        (500, "<html>", .failure("HTTP 500")),
    ])
    func answersAreClassifiedByStatusNotByTheEchoedOk(status: Int, body: String, answer: OrchestrationWire.Answer) {
        #expect(OrchestrationWire.classify(status: status, body: Array(body.utf8)) == answer)
    }
}

@Suite struct ActiveModelTests {
    @Test func aSwitchAppliesWhileTheConfigStillNamesTheModelItReplaced() {
        var backend = WorkerConfig.Backend()
        backend.model = "small"
        let switched = ActiveModel(model: "big", switchedFrom: "small", switchedAtMs: 1, rolloutID: "r")
        #expect(ActiveModel.resolve(config: backend, persisted: switched).model == "big")
        backend.model = "edited"
        #expect(ActiveModel.resolve(config: backend, persisted: switched).model == "edited", "the operator's edit wins")
        backend.model = "small"
        backend.kind = .openai
        #expect(ActiveModel.resolve(config: backend, persisted: switched).model == "small")
        #expect(ActiveModel.resolve(config: backend, persisted: nil).model == "small")
    }

    @Test func itsFileRoundTripsAndABadOneIsRefused() throws {
        let active = ActiveModel(model: "big", switchedFrom: "small", switchedAtMs: 7, rolloutID: nil)
        #expect(ActiveModel.from(json: try JSON.parse(active.json.serialized)) == active)
        #expect(ActiveModel.from(json: ["model": "two words", "switchedFrom": "s", "switchedAtMs": 1]) == nil)
        #expect(ActiveModel.from(json: ["model": "m"]) == nil)
    }

    @Test func theRemoteSwitchIsOffByDefaultAndAPerHostPolicyKey() throws {
        #expect(WorkerConfig().policy.allowRemoteModelSwitch == false)
        let config = try WorkerConfig.parse(Array(#"{"backend": {"allowRemoteModelSwitch": true}}"#.utf8))
        #expect(config.backend.allowRemoteModelSwitch && config.policy.allowRemoteModelSwitch)
        let (policy, sources) = PolicyOverrides().apply(to: config)
        #expect(policy.allowRemoteModelSwitch && sources["allowRemoteModelSwitch"] == .config)
        guard case .success(let overrides) = PolicyOverrides().applying(.set(key: "allowRemoteModelSwitch", value: false), over: config) else {
            Issue.record("policy set refused"); return
        }
        #expect(overrides.apply(to: config).policy.allowRemoteModelSwitch == false)
        #expect(overrides.apply(to: config).sources["allowRemoteModelSwitch"] == .host)
        #expect(throws: ConfigError.self) { try WorkerConfig.parse(Array(#"{"policy": {"allowRemoteModelSwitch": true}}"#.utf8)) }
        #expect(throws: ConfigError.self) { try WorkerConfig.parse(Array(#"{"backend": {"allowRemoteModelSwitch": "yes"}}"#.utf8)) }
    }
}

/// Hardening #26 rows 1 and 10: what holds a switch, and what a session remembers.
@Suite struct ModelSwitchHoldTests {
    @Test(arguments: [
        (
            HoldReason.batteryLow as HoldReason?, LocalHoldReason.metered as LocalHoldReason?, true,
            ModelSwitchHold.power(.batteryLow) as ModelSwitchHold?
        ),
        (nil, .metered, true, .host(.metered)),
        (nil, .hostSleeping, false, .host(.hostSleeping)),
        (nil, nil, true, .chargeGate),
        (nil, nil, false, nil),
    ])
    func aSwitchWaitsOnEveryHoldTheWorkLoopObeysPowerFirst(power: HoldReason?, host: LocalHoldReason?, gate: Bool, expected: ModelSwitchHold?) {
        #expect(ModelSwitchHold.first(power: power, host: host, chargeGateClosed: gate) == expected)
    }

    @Test func theHeldMessageNamesTheHold() {
        #expect(ModelSwitchHold.host(.metered).message.contains("metered"))
        #expect(ModelSwitchHold.host(.hostSleeping).message.contains("host-sleeping"))
        #expect(ModelSwitchHold.power(.thermal).message.contains("power policy"))
        #expect(ModelSwitchHold.chargeGate.message.contains("not-charging"))
    }

    @Test func anInterruptedSwitchIsFinalNotInProgress() {
        let status = ModelSwitchStatus(phase: .interrupted, model: "m", rolloutID: nil, message: "x", sinceMs: 0)
        #expect(!status.inProgress)
        #expect(status.json["phase"] == "interrupted")
    }

    @Test func recentKeysForgetTheOldestBeyondTheLimit() {
        var keys = RecentKeys<Bool>(limit: 3)
        for key in ["a", "b", "c", "d"] { keys.insert(key) }
        #expect(keys.count == 3)
        #expect(!keys.contains("a"))
        keys.insert("b")  // now the newest
        keys.insert("e")
        #expect(keys.contains("b") && !keys.contains("c"))
        keys["d"] = nil
        #expect(keys.count == 2)
        #expect(RecentKeys<Int>().limit == 64)
    }
}

/// Hardening #26 row 3: a coordinator names no registry host unless the operator allows it.
@Suite struct ModelRegistryTests {
    static func plan(_ model: String) -> ModelSwitchRequest.Plan {
        ModelSwitchRequest(rolloutID: nil, provider: "ollama-local", model: model, autoInstall: true, key: "k").plan(allowed: true, backend: .ollama)
    }

    @Test(arguments: [
        "10.66.66.66:5000/internal/model:latest", "registry.example.com/ns/model", "localhost/model",
        "localhost:5000/m:1b", "hf.co/someone/model-GGUF:Q4_K_M", "[::1]:5000/m", "Registry/ns/model",
        "myregistry/ns/model:tag", "https://registry.example.com/m", "http://10.0.0.1/m",
    ])
    func byDefaultAModelNameWithARegistryHostIsRefused(model: String) {
        guard case .refuse(let why) = Self.plan(model) else { Issue.record("not refused: \(model)"); return }
        #expect(why.contains("backend.allowedModelRegistries") || why.contains("scheme"), "\(why)")
    }

    @Test(arguments: ["qwen2.5-coder:7b", "llama3.1:70b", "library/llama3:8b", "someone/model:q4", "m", "a.b:1.5b"])
    func namesOnTheDefaultRegistryAreAccepted(model: String) {
        #expect(Self.plan(model) == .pull(model: model))
    }

    @Test func aRegistryTheOperatorListsIsAllowedAndOnlyThatOne() {
        let request = ModelSwitchRequest(
            rolloutID: nil, provider: "ollama-local", model: "Registry.Example.com:5000/ns/m:1b", autoInstall: true, key: "k")
        #expect(
            request.plan(allowed: true, backend: .ollama, allowedRegistries: ["registry.example.com:5000"])
                == .pull(model: "Registry.Example.com:5000/ns/m:1b"))
        guard case .refuse = request.plan(allowed: true, backend: .ollama, allowedRegistries: ["registry.example.com"]) else {
            Issue.record("another port is another registry"); return
        }
    }
}
