import Testing
@testable import WorkerCore

/// `metrics`: Prometheus' text format rendered from `status --json`, without a daemon.
@Suite struct MetricsTests {
    static let expectedFamilies = [
        "edgecoder_worker_info", "edgecoder_worker_uptime_seconds",
        "edgecoder_worker_subtasks_done_total", "edgecoder_worker_subtasks_failed_total",
        "edgecoder_worker_subtasks_released_total", "edgecoder_worker_pulls_held_total",
        "edgecoder_worker_heartbeats_sent_total", "edgecoder_worker_heartbeats_failed_total",
        "edgecoder_worker_coordinator_backoff_seconds", "edgecoder_worker_coordinator_registered",
        "edgecoder_worker_bluetooth_requests_served_total", "edgecoder_worker_bluetooth_requests_failed_total",
        "edgecoder_worker_bluetooth_requests_refused_total", "edgecoder_worker_bluetooth_requests_cancelled_total",
        "edgecoder_worker_bluetooth_notified_bytes_total", "edgecoder_worker_bluetooth_clients_refused_total",
        "edgecoder_worker_bluetooth_clients_cooled_down_total", "edgecoder_worker_mode", "edgecoder_worker_power_decision",
        "edgecoder_worker_battery_percent", "edgecoder_worker_model_state",
        "edgecoder_worker_process_resident_memory_bytes", "edgecoder_worker_process_cpu_seconds_total",
    ]

    static func family(_ families: [MetricFamily], _ name: String) -> MetricFamily {
        families.first { $0.name == name }!
    }

    static func value(_ families: [MetricFamily], _ name: String, _ label: (String, String)? = nil) -> Double? {
        family(families, name).samples.first { sample in
            guard let label else { return sample.labels.isEmpty }
            return sample.labels.contains { $0.name == label.0 && $0.value == label.1 }
        }?.value
    }

    // MARK: The text format

    @Test(arguments: [
        ("plain", "plain"),
        ("say \"hi\"", "say \\\"hi\\\""),
        ("C:\\path\\", "C:\\\\path\\\\"),
        ("two\nlines", "two\\nlines"),
        ("\\\"\n", "\\\\\\\"\\n"),
        ("", ""),
        ("tab\tand é ✓", "tab\tand é ✓"),
    ])
    func escapesLabelValues(raw: String, escaped: String) {
        #expect(PrometheusText.escapeLabelValue(raw) == escaped)
    }

    @Test func escapesHelpButKeepsQuotes() {
        #expect(PrometheusText.escapeHelp("a \"b\" c\\d\ne") == "a \"b\" c\\\\d\\ne")
    }

    @Test func hostileLabelValueStaysOnOneSampleLine() {
        let family = MetricFamily("x_total", .counter, "help\nwith a line feed", [.init([("reason", "a\"} 1\nevil_total 9\\")], 2)])
        let text = PrometheusText.render([family])
        #expect(
            text == """
                # HELP x_total help\\nwith a line feed
                # TYPE x_total counter
                x_total{reason="a\\"} 1\\nevil_total 9\\\\"} 2

                """)
        #expect(text.split(separator: "\n").count == 3)
    }

    @Test(arguments: [
        (0.0, "0"), (42.0, "42"), (-3.0, "-3"), (0.25, "0.25"), (1.5e300, "1.5e+300"),
        (Double.nan, "NaN"), (Double.infinity, "+Inf"), (-Double.infinity, "-Inf"),
    ])
    func formatsValues(value: Double, text: String) {
        #expect(PrometheusText.formatValue(value) == text)
    }

    @Test func rendersLabelsInOrderAndFamiliesWithoutSamples() {
        let text = PrometheusText.render([
            MetricFamily("g", .gauge, "a gauge", [.init([("a", "1"), ("b", "2")], 1), .init([("a", "3"), ("b", "4")], 0)]),
            MetricFamily("empty", .gauge, "unknown now", []),
        ])
        #expect(
            text == "# HELP g a gauge\n# TYPE g gauge\ng{a=\"1\",b=\"2\"} 1\ng{a=\"3\",b=\"4\"} 0\n# HELP empty unknown now\n# TYPE empty gauge\n")
        #expect(PrometheusText.render([]) == "")
    }

    @Test(arguments: [
        ("edgecoder_worker_mode", true), ("a:b_c9", true), ("_x", true), ("9a", false), ("", false),
        ("a-b", false), ("a b", false), ("é", false),
    ])
    func validatesMetricNames(name: String, valid: Bool) {
        #expect(PrometheusText.isValidMetricName(name) == valid)
    }

    @Test(arguments: [("reason", true), ("agent_id", true), ("__name__", false), ("a:b", false), ("", false)])
    func validatesLabelNames(name: String, valid: Bool) {
        #expect(PrometheusText.isValidLabelName(name) == valid)
    }

    // MARK: The families

    @Test(arguments: [JSONValue.null, [:], "not an object", ["counters": "broken", "power": 3, "bluetooth": []]])
    func everyFamilyIsPresentWhateverTheStatus(status: JSONValue) {
        let families = WorkerMetrics.families(status: status, process: nil)
        #expect(families.map(\.name) == MetricsTests.expectedFamilies)
        // Counters read zero rather than disappear; gauges without a value have no sample.
        for family in families where family.kind == .counter && family.name != "edgecoder_worker_process_cpu_seconds_total" {
            #expect(!family.samples.isEmpty, "\(family.name)")
            #expect(family.samples.allSatisfy { $0.value == 0 }, "\(family.name)")
        }
        #expect(MetricsTests.family(families, "edgecoder_worker_battery_percent").samples.isEmpty)
        #expect(MetricsTests.family(families, "edgecoder_worker_process_cpu_seconds_total").samples.isEmpty)
        #expect(MetricsTests.family(families, "edgecoder_worker_mode").samples.allSatisfy { $0.value == 0 })
        #expect(MetricsTests.value(families, "edgecoder_worker_coordinator_backoff_seconds") == 0)
    }

    @Test func namesFollowPrometheusRules() {
        var snapshot = StatusReportTests.registered()
        snapshot.counters.released(.hostFailure)
        let families = WorkerMetrics.families(status: StatusReport(snapshot).json, process: ProcessUsage(residentBytes: 1, cpuSeconds: 1))
        #expect(Set(families.map(\.name)).count == families.count)
        for family in families {
            #expect(PrometheusText.isValidMetricName(family.name), "\(family.name)")
            #expect(family.name.hasPrefix("edgecoder_worker_"), "\(family.name)")
            #expect(family.name.hasSuffix("_total") == (family.kind == .counter), "\(family.name)")
            #expect(!family.help.isEmpty)
            for sample in family.samples {
                #expect(sample.labels.allSatisfy { PrometheusText.isValidLabelName($0.name) }, "\(family.name)")
            }
        }
    }

    @Test func readsTheCountsOfAStatus() {
        var snapshot = StatusReportTests.heldByPolicy()
        snapshot.coordinator?.backoffMs = 2_500
        for _ in 0..<3 { snapshot.counters.subtaskAnswered(ok: true) }
        snapshot.counters.subtaskAnswered(ok: false)
        snapshot.counters.released(.monitorWouldFlag)
        snapshot.counters.released(.monitorWouldFlag)
        snapshot.counters.heartbeat(accepted: true)
        snapshot.counters.heartbeat(accepted: false)
        let families = WorkerMetrics.families(status: StatusReport(snapshot).json, process: ProcessUsage(residentBytes: 12_345_678, cpuSeconds: 1.25))
        #expect(MetricsTests.value(families, "edgecoder_worker_subtasks_done_total") == 3)
        #expect(MetricsTests.value(families, "edgecoder_worker_subtasks_failed_total") == 1)
        #expect(MetricsTests.value(families, "edgecoder_worker_subtasks_released_total", ("reason", "monitor-would-flag")) == 2)
        #expect(MetricsTests.value(families, "edgecoder_worker_subtasks_released_total", ("reason", "claim-expired")) == 0)
        #expect(MetricsTests.value(families, "edgecoder_worker_pulls_held_total", ("reason", "thermal")) == 4)
        #expect(MetricsTests.value(families, "edgecoder_worker_pulls_held_total", ("reason", "state-unwritable")) == 0)
        #expect(MetricsTests.value(families, "edgecoder_worker_heartbeats_sent_total") == 2)
        #expect(MetricsTests.value(families, "edgecoder_worker_heartbeats_failed_total") == 1)
        #expect(MetricsTests.value(families, "edgecoder_worker_coordinator_backoff_seconds") == 2.5)
        #expect(MetricsTests.value(families, "edgecoder_worker_coordinator_registered") == 1)
        #expect(MetricsTests.value(families, "edgecoder_worker_mode", ("mode", "on")) == 1)
        #expect(MetricsTests.value(families, "edgecoder_worker_mode", ("mode", "off")) == 0)
        #expect(MetricsTests.value(families, "edgecoder_worker_power_decision", ("reason", "thermal")) == 1)
        #expect(MetricsTests.family(families, "edgecoder_worker_power_decision").samples.filter { $0.value == 1 }.count == 1)
        #expect(MetricsTests.value(families, "edgecoder_worker_battery_percent") == 80)
        #expect(MetricsTests.value(families, "edgecoder_worker_model_state", ("state", "ready")) == 1)
        #expect(MetricsTests.family(families, "edgecoder_worker_model_state").samples.filter { $0.value == 1 }.count == 1)
        #expect(MetricsTests.value(families, "edgecoder_worker_uptime_seconds") == 90)
        #expect(MetricsTests.value(families, "edgecoder_worker_info", ("agent_id", "laptop-0123456789ab")) == 1)
        #expect(MetricsTests.value(families, "edgecoder_worker_process_resident_memory_bytes") == 12_345_678)
        #expect(MetricsTests.value(families, "edgecoder_worker_process_cpu_seconds_total") == 1.25)
    }

    @Test func readsTheBluetoothCounts() {
        var snapshot = StatusReportTests.bluetoothWithClients()
        snapshot.bluetooth.requestsFailed = 2
        snapshot.bluetooth.requestsRejected = 3
        snapshot.bluetooth.requestsCancelled = 4
        snapshot.bluetooth.bytesNotified = 5_000
        snapshot.bluetooth.clientsRefused = 6
        snapshot.bluetooth.clientsNotAllowed = 7
        snapshot.bluetooth.clientsCooledDown = 8
        let families = WorkerMetrics.families(status: StatusReport(snapshot).json, process: nil)
        #expect(MetricsTests.value(families, "edgecoder_worker_bluetooth_requests_served_total") == 7)
        #expect(MetricsTests.value(families, "edgecoder_worker_bluetooth_requests_failed_total") == 2)
        #expect(MetricsTests.value(families, "edgecoder_worker_bluetooth_requests_refused_total") == 3)
        #expect(MetricsTests.value(families, "edgecoder_worker_bluetooth_requests_cancelled_total") == 4)
        #expect(MetricsTests.value(families, "edgecoder_worker_bluetooth_notified_bytes_total") == 5_000)
        #expect(MetricsTests.value(families, "edgecoder_worker_bluetooth_clients_refused_total", ("reason", "full")) == 6)
        #expect(MetricsTests.value(families, "edgecoder_worker_bluetooth_clients_refused_total", ("reason", "not-allowed")) == 7)
        #expect(MetricsTests.value(families, "edgecoder_worker_bluetooth_clients_cooled_down_total") == 8)
        #expect(MetricsTests.value(families, "edgecoder_worker_mode", ("mode", "bluetooth")) == 1)
    }

    @Test func unknownStatesAndReasonsFromANewerDaemonAreKeptAndEscaped() {
        let status: JSONValue = [
            "mode": ["mode": "warp\"drive"],
            "backend": ["modelState": "melting\n"],
            "power": ["held": ["new-reason\\": 5, "thermal": -2, "cpu-busy": "x"], "decision": ["reason": "solar-flare"]],
            "daemon": ["version": "9\"9", "uptimeMs": -5],
            "agentId": "id\nwith\\all\"three",
        ]
        let families = WorkerMetrics.families(status: status, process: nil)
        #expect(MetricsTests.value(families, "edgecoder_worker_mode", ("mode", "warp\"drive")) == 1)
        #expect(MetricsTests.value(families, "edgecoder_worker_model_state", ("state", "melting\n")) == 1)
        #expect(MetricsTests.value(families, "edgecoder_worker_power_decision", ("reason", "solar-flare")) == 1)
        #expect(MetricsTests.value(families, "edgecoder_worker_pulls_held_total", ("reason", "new-reason\\")) == 5)
        // A negative or non-integer count is no count: a counter never goes below zero.
        #expect(MetricsTests.value(families, "edgecoder_worker_pulls_held_total", ("reason", "thermal")) == 0)
        #expect(MetricsTests.value(families, "edgecoder_worker_pulls_held_total", ("reason", "cpu-busy")) == 0)
        #expect(MetricsTests.value(families, "edgecoder_worker_uptime_seconds") == 0)
        let text = PrometheusText.render(families)
        #expect(text.contains("edgecoder_worker_info{version=\"9\\\"9\",agent_id=\"id\\nwith\\\\all\\\"three\"} 1\n"))
        #expect(text.contains("edgecoder_worker_mode{mode=\"warp\\\"drive\"} 1\n"))
        #expect(text.contains("edgecoder_worker_pulls_held_total{reason=\"new-reason\\\\\"} 5\n"))
        // Every line is a comment or one sample: no value broke out of its quotes.
        for line in text.split(separator: "\n") {
            #expect(line.hasPrefix("# HELP edgecoder_worker_") || line.hasPrefix("# TYPE edgecoder_worker_") || line.hasPrefix("edgecoder_worker_"))
        }
    }

    @Test func anOversizedStatusStillRendersEveryLabel() {
        let reasons = (0..<2_000).map { ("reason-\($0)-" + String(repeating: "x", count: 100), JSONValue.int(Int64($0))) }
        let status: JSONValue = ["power": ["held": .object(JSONObject(reasons))]]
        let family = MetricsTests.family(WorkerMetrics.families(status: status, process: nil), "edgecoder_worker_pulls_held_total")
        #expect(family.samples.count == HoldReason.allCases.count + LocalHoldReason.allCases.count + 2_000)
    }

    // MARK: The daemon's counters

    @Test func workCountersCountAndSaturate() {
        var counters = WorkCounters()
        counters.subtaskAnswered(ok: true)
        counters.heartbeat(accepted: false)
        counters.released(.journalUnwritable)
        #expect(counters.subtasksDone == 1 && counters.subtasksFailed == 0)
        #expect(counters.heartbeatsSent == 1 && counters.heartbeatsFailed == 1)
        #expect(counters.count(.journalUnwritable) == 1 && counters.count(.claimExpired) == 0)
        #expect(counters.json["subtasksReleased"]?.objectValue?.keys == SubtaskReleaseReason.allCases.map(\.rawValue))
        #expect(counters.json["heartbeatsFailed"]?.intValue == 1)
    }

    // MARK: /proc

    static let stat = Array(
        "4242 (edgecoder-worke) S 1 4242 4242 0 -1 4194560 1000 0 0 0 150 50 0 0 20 0 9 0 12345 300000000 2000 18446744073709551615\n".utf8)

    @Test func readsProcessUsage() {
        let usage = ProcessUsage.parse(
            stat: MetricsTests.stat, statm: Array("75000 3000 800 100 0 20000 0\n".utf8), ticksPerSecond: 100, pageBytes: 4_096)
        #expect(usage == ProcessUsage(residentBytes: 3_000 * 4_096, cpuSeconds: 2))
    }

    @Test(arguments: ["", "75000", "75000 -3", "75000 3x", "75000 99999999999999999999", "\n\n", String(repeating: "1 ", count: 3_000)])
    func refusesBrokenStatm(statm: String) {
        #expect(ProcessUsage.parse(stat: MetricsTests.stat, statm: Array(statm.utf8), ticksPerSecond: 100, pageBytes: 4_096) == nil)
    }

    @Test func refusesBrokenStatOrRates() {
        let statm = Array("1 2\n".utf8)
        #expect(ProcessUsage.parse(stat: [], statm: statm, ticksPerSecond: 100, pageBytes: 4_096) == nil)
        #expect(ProcessUsage.parse(stat: Array("garbage".utf8), statm: statm, ticksPerSecond: 100, pageBytes: 4_096) == nil)
        #expect(ProcessUsage.parse(stat: MetricsTests.stat, statm: statm, ticksPerSecond: 0, pageBytes: 4_096) == nil)
        #expect(ProcessUsage.parse(stat: MetricsTests.stat, statm: statm, ticksPerSecond: 100, pageBytes: -1) == nil)
        // Pages times page size past Int64 saturates rather than wraps.
        let huge = Array("1 999999999999999999\n".utf8)
        #expect(ProcessUsage.parse(stat: MetricsTests.stat, statm: huge, ticksPerSecond: 100, pageBytes: 4_096)?.residentBytes == Int64.max)
    }
}
