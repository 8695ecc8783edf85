/// Drives a state machine of the pure core (values in, commands out) the way the
/// interpreter's loop does: one event at a time at the driver's `now`, every command kept
/// in `all`, and time let pass with a tick at every deadline on the way.
///
/// A test's harness conforms with the machine it holds and says how to feed it; `on` and
/// `advance` are the one driving loop.
public protocol MachineDriver {
    associatedtype Machine
    associatedtype Event
    associatedtype Command

    var machine: Machine { get set }
    /// The time, in milliseconds, the next event happens at.
    var now: Int64 { get set }
    /// Every command the machine gave, in order.
    var all: [Command] { get set }

    /// The machine's commands for `event` at `now`.
    static func feed(_ event: Event, to machine: inout Machine, now: Int64) -> [Command]
    /// When the machine next needs a tick.
    static func nextDeadlineMs(of machine: Machine) -> Int64
    /// The event that tells the machine the time has come.
    static var tick: Event { get }
}

extension MachineDriver {
    /// Feeds one event at `now`; returns its commands (also appended to `all`).
    @discardableResult
    public mutating func on(_ event: Event) -> [Command] {
        let commands = Self.feed(event, to: &machine, now: now)
        all += commands
        return commands
    }

    /// Lets time pass to `ms` later, feeding a tick at every deadline on the way (as the
    /// interpreter's loop does) and one at the end; returns every command of that time.
    @discardableResult
    public mutating func advance(_ ms: Int64) -> [Command] {
        let end = now + ms
        var out: [Command] = []
        while true {
            let next = Self.nextDeadlineMs(of: machine)
            if next > end { break }
            now = max(now, next)
            out += on(Self.tick)
        }
        now = end
        out += on(Self.tick)
        return out
    }
}
