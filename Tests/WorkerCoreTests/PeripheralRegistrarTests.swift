import Testing
@testable import WorkerCore

/// The registrar's `Link`: nothing is registered without an adapter, the application
/// comes before the advertisement, a refusal waits for the retry, and losing the link
/// starts a new epoch.
struct PeripheralRegistrarTests {
    static let hci0 = "/org/bluez/hci0"

    @Test func unboundNothingIsDueAndAnswersChangeNothing() {
        var registrar = PeripheralRegistrar()
        #expect(registrar.due(nowMs: 10_000) == nil)
        registrar.set(.application, .done)
        #expect(registrar.link == .unbound)
        #expect(registrar.application == .none && registrar.adapterPath == nil)
    }

    @Test func theApplicationComesFirstAndTheAdvertisementOnlyOnceItIsDone() {
        var registrar = PeripheralRegistrar()
        registrar.bind(Self.hci0)
        #expect(registrar.due(nowMs: 0) == .application)
        registrar.set(.application, .pending)
        #expect(registrar.due(nowMs: 0) == nil, "nothing more while the application is pending")
        registrar.set(.application, .done)
        #expect(registrar.due(nowMs: 0) == .advertisement)
        registrar.set(.advertisement, .pending)
        #expect(registrar.due(nowMs: 0) == nil)
        registrar.set(.advertisement, .done)
        #expect(registrar.link == .bound(adapterPath: Self.hci0, application: .done, advertisement: .done))
        #expect(registrar.nextDeadlineMs(after: 0) == nil, "everything in place: no retry to wake for")
    }

    @Test func aRefusalIsAskedForAgainAtTheRetryAndOnlyThen() {
        var registrar = PeripheralRegistrar()
        registrar.bind(Self.hci0)
        registrar.set(.application, .pending)
        registrar.drop(.application, retryAtMs: 15_000)
        #expect(registrar.due(nowMs: 14_999) == nil)
        #expect(registrar.nextDeadlineMs(after: 10_000) == 15_000)
        #expect(registrar.nextDeadlineMs(after: 15_000) == nil, "a retry that has passed was handled then")
        #expect(registrar.due(nowMs: 15_000) == .application)
        registrar.retryAtOnce()
        #expect(registrar.due(nowMs: 0) == .application, "a new bluetoothd is asked at once")
    }

    @Test func aReleasedAdvertisementKeepsTheApplicationAndTheAdapter() {
        var registrar = PeripheralRegistrar()
        registrar.bind(Self.hci0)
        registrar.set(.application, .done)
        registrar.set(.advertisement, .done)
        registrar.drop(.advertisement, retryAtMs: 5_000)
        #expect(registrar.link == .bound(adapterPath: Self.hci0, application: .done, advertisement: .none))
        #expect(registrar.due(nowMs: 5_000) == .advertisement)
    }

    @Test func losingTheLinkDropsEverythingAndStartsANewEpoch() {
        var registrar = PeripheralRegistrar()
        registrar.bind(Self.hci0)
        registrar.set(.application, .done)
        let epoch = registrar.epoch
        registrar.lose()
        #expect(registrar.link == .unbound)
        #expect(registrar.epoch == epoch + 1, "answers asked for before are stale")
        registrar.bind("/org/bluez/hci1")
        #expect(registrar.link == .bound(adapterPath: "/org/bluez/hci1", application: .none, advertisement: .none))
        #expect(registrar.epoch == epoch + 1, "binding alone does not start an epoch")
    }

    @Test func forgettingAllAtAStopKeepsTheAdapter() {
        var registrar = PeripheralRegistrar()
        registrar.bind(Self.hci0)
        registrar.set(.application, .done)
        registrar.set(.advertisement, .pending)
        registrar.forgetAll()
        #expect(registrar.link == .bound(adapterPath: Self.hci0, application: .none, advertisement: .none))
    }
}
