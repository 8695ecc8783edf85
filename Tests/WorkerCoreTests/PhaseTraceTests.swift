import Testing
@testable import WorkerCore

/// The debug trace of the Bluetooth machines: a phase line is logged when it changes, once.
struct PhaseTraceTests {
    @Test func aLineIsGivenOnlyWhenItChanges() {
        var trace = PhaseTrace()
        #expect(trace.changed(to: "a") == "a")
        #expect(trace.changed(to: "a") == nil)
        #expect(trace.changed(to: "b") == "b")
        #expect(trace.changed(to: "a") == "a", "a return to an earlier phase is a change too")
    }

    @Test func theRegistrarsLineFollowsItsLink() {
        var registrar = PeripheralRegistrar()
        #expect(registrar.phaseLine == "unbound")
        registrar.bind("/org/bluez/hci0")
        registrar.set(.application, .pending)
        #expect(registrar.phaseLine == "/org/bluez/hci0 (application pending, advertisement none)")
        registrar.set(.application, .done)
        registrar.set(.advertisement, .done)
        #expect(registrar.phaseLine == "/org/bluez/hci0 (application done, advertisement done)")
    }

    @Test func aFreshMachineSaysNothingIsUnderWay() {
        let central = CentralMachine(settings: CentralMachine.Settings(adapter: nil, device: nil), seed: 1)
        #expect(central.phaseLine == "link idle, 0 pending")
    }
}
