import Testing
@testable import WorkerCore

@Suite struct PerHostPolicy {
    func config(_ text: String) throws -> WorkerConfig { try WorkerConfig.parse(Array(text.utf8)) }

    @Test func sourcesAreDefaultConfigOrHost() throws {
        let overrides = PolicyOverrides(values: JSONObject([("minBatteryPct", 25)]))
        let (policy, sources) = overrides.apply(to: try config(#"{"policy": {"maxCpuUsagePct": 70}}"#))
        #expect(policy.minBatteryPct == 25 && policy.maxCpuUsagePct == 70 && policy.resumeDwellSec == 30)
        #expect(sources["minBatteryPct"] == .host)
        #expect(sources["maxCpuUsagePct"] == .config)
        #expect(sources["resumeDwellSec"] == .builtIn)
    }

    @Test func changesAreValidatedAgainstTheEffectivePolicy() throws {
        let base = try config("{}")
        let empty = PolicyOverrides()
        #expect((try? empty.applying(.set(key: "minBatteryPct", value: 31), over: base).get()) == nil, "resume 30 < min 31")
        let raised = try empty.applying(.set(key: "resumeBatteryPct", value: 60), over: base).get()
        let lowered = try raised.applying(.set(key: "minBatteryPct", value: 50), over: base).get()
        #expect(lowered.apply(to: base).policy.minBatteryPct == 50)
        #expect((try? lowered.applying(.unset(key: "resumeBatteryPct"), over: base).get()) == nil, "unsetting would break the order")
        #expect((try? empty.applying(.set(key: "nope", value: 1), over: base).get()) == nil)
        #expect((try? empty.applying(.set(key: "maxThermalState", value: "warm"), over: base).get()) == nil)
    }

    @Test func aDamagedOverridesFileIsRejectedWhole() throws {
        #expect(PolicyOverrides.from(json: try JSON.parse(#"{"minBatteryPct": 10}"#)) != nil)
        #expect(PolicyOverrides.from(json: try JSON.parse(#"{"minBatteryPct": 10, "x": 1}"#)) == nil)
        #expect(PolicyOverrides.from(json: try JSON.parse(#"{"minBatteryPct": "ten"}"#)) == nil)
        #expect(PolicyOverrides.from(json: try JSON.parse("[]")) == nil)
    }

    @Test(arguments: [
        ("true", JSONValue.bool(true)), ("30", .int(30)), ("serious", .string("serious")), ("\"fair\"", .string("fair")), ("{", .string("{")),
    ])
    func commandLineValuesAreJSONOrText(text: String, expected: JSONValue) {
        #expect(PolicyOverrides.value(fromArgument: text) == expected)
    }
}
