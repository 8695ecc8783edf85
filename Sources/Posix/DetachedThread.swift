#if canImport(Glibc)
import Glibc
#endif
import CWorkerShims

/// The one way the worker starts a thread of its own: for a loop that blocks in a system
/// call (the reactor's poll, the state writer's fsync, libcurl's transfers), which must not
/// hold a thread of Swift's concurrency pool. Detached: it runs until `body` returns. Named
/// (at most 15 bytes, the kernel's limit) so that `top -H` and `ps -L` say which it is.
public func startDetachedThread(named name: String, _ body: @escaping @Sendable () -> Void) throws(SystemError) {
    final class Start: Sendable {
        let name: String
        let body: @Sendable () -> Void
        init(name: String, body: @escaping @Sendable () -> Void) {
            self.name = name
            self.body = body
        }
    }
    let context = Unmanaged.passRetained(Start(name: name, body: body)).toOpaque()
    var thread = pthread_t()
    let rc = pthread_create(
        &thread, nil,
        { raw in
            let start = Unmanaged<Start>.fromOpaque(raw!).takeRetainedValue()
            ecw_set_thread_name(start.name)
            start.body()
            return nil
        }, context)
    if rc != 0 {
        Unmanaged<Start>.fromOpaque(context).release()
        throw SystemError("pthread_create", errno: rc, detail: name)
    }
    pthread_detach(thread)
}
