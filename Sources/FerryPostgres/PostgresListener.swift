import CLibPQ
import FerryCore
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// `LISTEN`s on one PostgreSQL channel, on a connection of its own, from a thread of its own (libpq blocks; the
/// thread waits in `poll(2)` on the connection's socket, a quarter second at a time, so it stops promptly).
///
/// The stream yields ``Event/listening(reconnected:)`` once the `LISTEN` is in place, each notification's payload,
/// and ``Event/lost(_:)`` when the connection drops; it then reconnects with a jittered backoff (0.1 s doubling to
/// 5 s) and yields `listening(reconnected: true)`. Notifications sent while it was away are lost, so a consumer
/// treats a reconnect as "something may have changed". Ending the iteration stops the thread and closes the
/// connection.
///
/// ```swift
/// for await event in PostgresListener.events(url: url, channel: "ferry_trips") {
///     if case .notification(let table) = event { print("\(table) changed") }
/// }
/// ```
public enum PostgresListener {
    public enum Event: Sendable, Equatable {
        /// The `LISTEN` is in place (again, when `reconnected`).
        case listening(reconnected: Bool)
        /// A notification on the channel, with its payload.
        case notification(String)
        /// The connection failed or dropped (the message names why, never the password); a reconnect follows.
        case lost(String)
    }

    /// The application name the listening connection sets, so an operator can find it in `pg_stat_activity`.
    public static let applicationName = "ferry-listen"

    public static func events(url: String, channel: String) -> AsyncStream<Event> {
        let (stream, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .unbounded)
        let stopped = Locked(false)
        continuation.onTermination = { _ in stopped.withLock { $0 = true } }
        let thread = Thread {
            listen(url: url, channel: channel, stopped: stopped) { continuation.yield($0) }
            continuation.finish()
        }
        thread.name = "ferry-listen"
        thread.start()
        return stream
    }

    private static func listen(url: String, channel: String, stopped: Locked<Bool>, emit: (Event) -> Void) {
        var reconnected = false
        var backoff = 0.1
        while !stopped.current {
            do {
                let connection = try PostgresConnection(url: url)
                try connection.execute(
                    "SET application_name = '\(applicationName)'; LISTEN \(SQLIdentifier.quote(channel))")
                emit(.listening(reconnected: reconnected))
                reconnected = true
                backoff = 0.1
                try receive(on: connection, stopped: stopped, emit: emit)
                return
            } catch {
                if stopped.current { return }
                emit(.lost((error as? FerryError)?.message ?? "\(error)"))
                reconnected = true
                // Jittered, so listeners that lost one server do not all come back at the same instant.
                let pause = backoff * Double.random(in: 0.5...1.0)
                backoff = min(backoff * 2, 5)
                let until = Date().addingTimeInterval(pause)
                while !stopped.current, Date() < until { Thread.sleep(forTimeInterval: min(0.05, pause)) }
            }
        }
    }

    /// Waits for notifications until stopped; throws when the connection drops.
    private static func receive(on connection: PostgresConnection, stopped: Locked<Bool>, emit: (Event) -> Void) throws
    {
        let handle = connection.handle
        while !stopped.current {
            let socket = PQsocket(handle)
            guard socket >= 0 else { throw FerryError(.database, "the LISTEN connection has no socket") }
            var descriptor = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, 250)
            if ready < 0 {
                if errno == EINTR { continue }
                throw FerryError(.database, "waiting for notifications failed: \(String(cString: strerror(errno)))")
            }
            if ready > 0 {
                guard PQconsumeInput(handle) == 1 else {
                    throw FerryError(.database, "the LISTEN connection dropped: \(connection.errorMessage)")
                }
                while let notify = PQnotifies(handle) {
                    let payload = notify.pointee.extra.map { String(cString: $0) } ?? ""
                    PQfreemem(notify)
                    emit(.notification(payload))
                }
            }
            guard PQstatus(handle) == CONNECTION_OK else {
                throw FerryError(.database, "the LISTEN connection dropped: \(connection.errorMessage)")
            }
        }
    }
}
