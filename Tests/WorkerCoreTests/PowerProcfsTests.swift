import Testing
@testable import WorkerCore

@Suite struct PowerProcfsTests {
    @Test(arguments: [
        ("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3 4\n", CPUTimes?.some(CPUTimes(idle: 800, total: 1000))),
        ("cpu  100 5 100 700 100 10 20 30 40 50\n", CPUTimes(idle: 800, total: 1065)),
        ("cpu 1 2 3 4\n", CPUTimes(idle: 4, total: 10)),
        ("cpu 1 2 3\n", nil),
        ("cpu0 1 2 3 4 5\n", nil),
        ("", nil),
        ("abc", nil),
        ("cpu  1 2 x 4 5\n", nil),
        ("cpu  1 2 -3 4 5\n", nil),
        ("cpu  18446744073709551615 1 0 0 0\n", nil),
        ("cpu  99999999999999999999999 1 0 0 0\n", nil),
        ("cpu  1 2 3\u{0} 4 5\n", nil),
    ])
    func procStatFirstLineParsesOrIsUnknown(text: String, expected: CPUTimes?) {
        #expect(CPUTimes.parse(procStat: Array(text.utf8)) == expected)
    }

    @Test(arguments: [
        (CPUTimes(idle: 800, total: 1000), CPUTimes(idle: 1500, total: 2000), Double?.some(30)),
        (CPUTimes(idle: 800, total: 1000), CPUTimes(idle: 1800, total: 2000), 0),
        (CPUTimes(idle: 800, total: 1000), CPUTimes(idle: 800, total: 2000), 100),
        (CPUTimes(idle: 800, total: 1000), CPUTimes(idle: 790, total: 1100), 100),
        (CPUTimes(idle: 800, total: 1000), CPUTimes(idle: 800, total: 1000), nil),
        (CPUTimes(idle: 800, total: 1000), CPUTimes(idle: 100, total: 500), nil),
    ])
    func cpuUsageIsTheNonIdleShareBetweenSamples(earlier: CPUTimes, later: CPUTimes, expected: Double?) {
        #expect(CPUTimes.usagePct(from: earlier, to: later) == expected)
    }

    @Test(arguments: [
        ("MemTotal:       16000000 kB\nMemFree:  1 kB\nMemAvailable:    4000000 kB\n", Double?.some(75)),
        ("MemAvailable: 8 kB\nMemTotal: 8 kB\n", 0),
        ("MemTotal: 16000000 kB\nMemFree: 1000 kB\n", nil),
        ("MemTotal: 0 kB\nMemAvailable: 0 kB\n", nil),
        ("MemTotal: 100 kB\nMemAvailable: 200 kB\n", nil),
        ("MemTotal: abc kB\nMemAvailable: 1 kB\n", nil),
        ("MemTotal: -100 kB\nMemAvailable: 1 kB\n", nil),
        ("", nil),
        ("\u{0}\u{0}\u{0}", nil),
    ])
    func memoryUsageIsOneMinusAvailableOverTotal(text: String, expected: Double?) {
        #expect(MemoryInfo.usagePct(meminfo: Array(text.utf8)) == expected)
    }
}
