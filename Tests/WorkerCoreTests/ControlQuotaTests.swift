import Testing
import WorkerCore

/// Places on the control socket (issue 12 §3): one user cannot take them all, and root
/// and the daemon's user always find one.
@Suite struct ControlQuotaTests {
    @Test func oneUserGetsAtMostItsShareAndIsToldWhy() {
        var quota = ControlQuota(perUser: 3, shared: 10, privileged: 2)
        for _ in 0..<3 { #expect(quota.enter(uid: 1000, privileged: false) == nil) }
        let refusal = quota.enter(uid: 1000, privileged: false)
        #expect(refusal == .userFull(uid: 1000, limit: 3))
        #expect(refusal?.message.contains("uid 1000 already holds 3") == true)
        #expect(quota.enter(uid: 1001, privileged: false) == nil, "another user still gets in")
    }

    @Test func rootAndTheDaemonsUserGetInWhenOthersHoldEveryPlace() {
        var quota = ControlQuota(perUser: 2, shared: 4, privileged: 2)
        for uid in UInt32(2000)..<2002 { for _ in 0..<2 { #expect(quota.enter(uid: uid, privileged: false) == nil) } }
        #expect(quota.enter(uid: 2002, privileged: false) == .sharedFull(limit: 4))
        #expect(quota.enter(uid: 0, privileged: true) == nil)
        #expect(quota.enter(uid: 998, privileged: true) == nil)
        #expect(quota.open.privileged == 2)
        #expect(quota.open.shared == 4)
    }

    @Test func thePrivilegedPoolHasABoundToo() {
        var quota = ControlQuota(perUser: 2, shared: 4, privileged: 1)
        #expect(quota.enter(uid: 0, privileged: true) == nil)
        #expect(quota.enter(uid: 0, privileged: true) == .privilegedFull(limit: 1))
        #expect(quota.enter(uid: 5, privileged: false) == nil, "a full privileged pool takes nothing from the others")
    }

    @Test func leavingGivesThePlaceBack() {
        var quota = ControlQuota(perUser: 1, shared: 1, privileged: 1)
        #expect(quota.enter(uid: 7, privileged: false) == nil)
        #expect(quota.enter(uid: 8, privileged: false) == .sharedFull(limit: 1))
        quota.leave(uid: 7, privileged: false)
        #expect(quota.enter(uid: 8, privileged: false) == nil)
        #expect(quota.enter(uid: 0, privileged: true) == nil)
        quota.leave(uid: 0, privileged: true)
        #expect(quota.enter(uid: 0, privileged: true) == nil)
        quota.leave(uid: 8, privileged: false)
        quota.leave(uid: 0, privileged: true)
        #expect(quota == ControlQuota(perUser: 1, shared: 1, privileged: 1), "everything given back leaves no trace")
    }

    @Test func theDaemonsLimitsKeepOneUserWellBelowTheWhole() {
        let quota = ControlQuota()
        #expect(quota.perUser * 4 <= quota.shared)
        #expect(quota.privileged > 0)
    }
}
