import FerryCore
import FerryPostgres
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A temporary directory removed when the test ends (call ``remove()`` in a `defer`).
public struct TemporaryDirectory: Sendable {
    public let url: URL

    public init(_ label: String = "ferry-test") throws {
        url = FileManager.default.temporaryDirectory.appendingPathComponent(
            "\(label)-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    public func appending(_ path: String) -> URL { url.appendingPathComponent(path) }
    // Test clean-up: a temp dir that cannot be removed is left for the OS, and must not fail the test.
    public func remove() { try? FileManager.default.removeItem(at: url) }
}

/// A fresh PostgreSQL database on the cluster named by `FERRY_TEST_DATABASE_URL` (set by `scripts/test`),
/// created per test so tests can run in parallel. Drop it with ``drop()``.
public struct TestDatabase: Sendable {
    /// URL of the fresh database.
    public let url: String
    public let name: String
    let adminURL: String

    /// The cluster's URL, or a clear failure telling how to run the tests.
    public static func clusterURL() throws -> String {
        guard let url = ProcessInfo.processInfo.environment["FERRY_TEST_DATABASE_URL"], !url.isEmpty else {
            throw FerryError(
                .badInput,
                "FERRY_TEST_DATABASE_URL is not set: run the tests with scripts/test, which starts a private PostgreSQL"
            )
        }
        return url
    }

    public static func create(_ label: String = "t") throws -> TestDatabase {
        let admin = try clusterURL()
        let name =
            "ferry_\(label.lowercased().filter { $0.isLetter || $0.isNumber })_\(UUID().uuidString.prefix(8).lowercased())"
        let pg = try PostgresConnection(url: admin)
        try pg.execute("CREATE DATABASE \(name)")
        return TestDatabase(url: replacingDatabase(in: admin, with: name), name: name, adminURL: admin)
    }

    /// A fresh database with templates/trips.pg.sql loaded and `rows` trips `row-0001` … (`Trip number N`, N % 7
    /// passengers, N % 3 bags, all last written on 2026-01-01): the world of the delta and catch-up tests.
    public static func trips(_ label: String, rows: Int) throws -> TestDatabase {
        let database = try create(label)
        try database.connect().execute(
            try String(
                contentsOf: TestPaths.packageRoot.appendingPathComponent("templates/trips.pg.sql"), encoding: .utf8))
        try database.connect().execute(
            """
            INSERT INTO trips (id, name, passengers, bags, "createdAt", "updatedAt")
            SELECT 'row-' || lpad(i::text, 4, '0'), 'Trip number ' || i, i % 7, i % 3, '2026-01-01', '2026-01-01'
            FROM generate_series(1, \(rows)) AS i
            """)
        return database
    }

    /// Opens a connection to this database.
    public func connect() throws -> PostgresConnection { try PostgresConnection(url: url) }

    public func drop() {
        // Test clean-up: the cluster is thrown away after the run, so a database left behind costs nothing.
        guard let pg = try? PostgresConnection(url: adminURL) else { return }
        try? pg.execute("DROP DATABASE IF EXISTS \(name) WITH (FORCE)")  // as above
    }

    static func replacingDatabase(in url: String, with name: String) -> String {
        guard var components = URLComponents(string: url) else { return url }
        components.path = "/" + name
        return components.string ?? url
    }
}

/// Paths of the repository and of the built `ferry` binary, for CLI end-to-end tests.
public enum TestPaths {
    /// The package root (found from this source file's location).
    public static let packageRoot: URL = {
        var url = URL(fileURLWithPath: #filePath)
        for _ in 0..<3 { url.deleteLastPathComponent() }
        return url
    }()

    /// The `ferry` executable built next to the test bundle.
    public static var ferryBinary: URL {
        let bundle = Bundle.main.bundleURL
        let candidates = [
            bundle.deletingLastPathComponent().appendingPathComponent("ferry"),
            bundle.appendingPathComponent("ferry"),
        ]
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0.path) } ?? candidates[0]
    }
}

/// The result of running a process.
public struct ProcessResult: Sendable {
    public let status: Int32
    public let stdout: String
    public let stderr: String
}

/// Runs `ferry` (or any executable) with arguments and waits for it. With a `timeout`, a process still running
/// then is killed by its PID (SIGKILL) and a `FerryError` says so; its output pipes, which a child of it may keep
/// open, are waited for at most 10 s more.
/// Waits off the cooperative pool (see ``offCooperativePool(_:)``), so a test waiting for a child process holds
/// none of the threads the other tests and any in-process server run on; ``runProcessBlocking(_:_:environment:timeout:)``
/// is the same for code already on a thread of its own.
@discardableResult
public func runProcess(
    _ executable: URL, _ arguments: [String], environment: [String: String] = [:], timeout: TimeInterval? = nil
) async throws -> ProcessResult {
    try await offCooperativePool {
        try runProcessBlocking(executable, arguments, environment: environment, timeout: timeout)
    }
}

/// ``runProcess(_:_:environment:timeout:)`` on the calling thread: only for code already off the cooperative pool.
@discardableResult
public func runProcessBlocking(
    _ executable: URL, _ arguments: [String], environment: [String: String] = [:], timeout: TimeInterval? = nil
) throws -> ProcessResult {
    let process = Process()
    process.executableURL = executable
    process.arguments = arguments
    var env = ProcessInfo.processInfo.environment
    for (k, v) in environment { env[k] = v }
    process.environment = env
    let out = Pipe()
    let err = Pipe()
    process.standardOutput = out
    process.standardError = err
    process.standardInput = FileHandle.nullDevice
    try process.run()
    let name = "\(executable.lastPathComponent) \(arguments.first ?? "")"
    // Read both pipes concurrently with the process so a full pipe never blocks it. The readers and the waiter block
    // for as long as the child runs, so each has a thread of its own: on Dispatch's global queue they waited for the
    // pool Swift's tasks run on under Linux, and while tests kept it busy a child writing more than a pipe holds
    // (Chromium's 281 KB DOM) could block until its timeout killed it.
    nonisolated(unsafe) var outData = Data()
    nonisolated(unsafe) var errData = Data()
    let group = DispatchGroup()
    onOwnThread(group) { outData = out.fileHandleForReading.readDataToEndOfFile() }
    onOwnThread(group) { errData = err.fileHandleForReading.readDataToEndOfFile() }
    if let timeout {
        let exited = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            process.waitUntilExit()
            exited.signal()
        }
        if exited.wait(timeout: .now() + timeout) == .timedOut {
            let pid = process.processIdentifier
            kill(pid, SIGKILL)
            exited.wait()
            _ = group.wait(timeout: .now() + 5)
            throw FerryError(.network, "\(name) did not finish within \(Int(timeout)) s (killed pid \(pid))")
        }
        // Helper processes may hold the pipes a moment longer; never wait for them unbounded.
        guard group.wait(timeout: .now() + 10) == .success else {
            throw FerryError(.network, "\(name): a child process kept its output open 10 s after it exited")
        }
    } else {
        process.waitUntilExit()
        group.wait()
    }
    return ProcessResult(
        status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
        stderr: String(decoding: errData, as: UTF8.self))
}

/// Runs `body` on a new thread, inside `group`.
private func onOwnThread(_ group: DispatchGroup, _ body: @escaping @Sendable () -> Void) {
    group.enter()
    Thread.detachNewThread {
        body()
        group.leave()
    }
}

/// Runs the built `ferry` binary and waits for it off the cooperative pool (see ``offCooperativePool(_:)``): a server
/// running in this process keeps answering it, and a slow command holds no thread other tests need.
@discardableResult
public func runFerry(_ arguments: [String], environment: [String: String] = [:]) async throws -> ProcessResult {
    try await offCooperativePool { try runFerryBlocking(arguments, environment: environment) }
}

/// ``runFerry(_:environment:)`` on the calling thread: only for code already off the cooperative pool.
@discardableResult
public func runFerryBlocking(_ arguments: [String], environment: [String: String] = [:]) throws -> ProcessResult {
    try runProcessBlocking(TestPaths.ferryBinary, arguments, environment: environment)
}

/// Runs blocking work (a child process, a large insert, blocking socket I/O) on a dedicated thread, the rule of
/// docs/ARCHITECTURE.md for long blocking jobs. Swift Testing runs every test on the cooperative pool, which has one
/// thread per core (two on CI): a test blocked there for seconds stalls every other test, and timing tests then
/// fail. Keep `#expect` outside `body`, in the test's own task.
public func offCooperativePool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread { continuation.resume(with: Result { try body() }) }
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then closed), for a child process to listen
/// on. Here rather than in a test target: there `sockaddr_in` may be owned by NIO's C module when another file of the
/// same compiler batch loaded it first, which MemberImportVisibility then refuses.
public func freeLocalPort() throws -> Int {
    #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
    #endif
    guard fd >= 0 else { throw FerryError(.io, "socket() failed") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = 0
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
        }
    }
    guard bound else { throw FerryError(.io, "could not find a free port") }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// Runs `body`, expecting a FerryError, and returns it (nil when nothing or something else was thrown).
public func ferryError(_ body: () throws -> Void) -> FerryError? {
    do {
        try body()
        return nil
    } catch let error as FerryError {
        return error
    } catch {
        return nil
    }
}

extension Process {
    /// `waitUntilExit()` off the cooperative pool (see ``offCooperativePool(_:)``), for async tests.
    public func waitForExit() async {
        nonisolated(unsafe) let process = self
        // Only cancellation throws here, and then the process is left to the test's own clean-up.
        _ = try? await offCooperativePool { process.waitUntilExit() }
    }
}
