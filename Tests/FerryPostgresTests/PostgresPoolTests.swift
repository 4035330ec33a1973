import FerryCore
import FerryTestSupport
import Foundation
import Testing

@testable import FerryPostgres

#if canImport(Glibc)
    import Glibc
#endif

/// The pool against a PostgreSQL that goes away and comes back: a cluster of the test's own (scripts/lib/common.sh's
/// `ferry_start_postgres` and `ferry_pg_ctl`), so restarting it disturbs no other test.
@Suite("PostgreSQL pool")
struct PostgresPoolTests {
    /// A private cluster: its directory and port, driven through scripts/lib/common.sh.
    struct Cluster {
        let directory: String
        let port: Int
        var url: String { "postgres://postgres@127.0.0.1:\(port)/postgres" }

        static func start() async throws -> Cluster {
            let started = try await Self.shell(#"ferry_start_postgres && echo "$FERRY_PG_DIR $FERRY_PG_PORT""#)
            let words = started.split(separator: " ")
            guard words.count == 2, let port = Int(words[1]) else {
                throw FerryError(.database, "ferry_start_postgres printed \(started)")
            }
            return Cluster(directory: String(words[0]), port: port)
        }

        func pgCtl(_ command: String) async throws {
            _ = try await Self.shell(
                "ferry_pg_ctl \(command)", ["FERRY_PG_DIR": directory, "FERRY_PG_PORT": "\(port)"])
        }

        func remove() async {
            _ = try? await Self.shell("ferry_stop_postgres", ["FERRY_PG_DIR": directory])
        }

        /// Runs `script` in bash with scripts/lib/common.sh loaded; its stdout, trimmed. Spawned and reaped directly
        /// (posix_spawn, waitpid) with the output in a file: `ferry_start_postgres` leaves a daemon behind, and
        /// Foundation's Process was seen never to report this bash's exit.
        static func shell(_ script: String, _ environment: [String: String] = [:]) async throws -> String {
            let common = TestPaths.packageRoot.appendingPathComponent("scripts/lib/common.sh").path
            let output = FileManager.default.temporaryDirectory.appendingPathComponent(
                "ferry-pool-\(UUID().uuidString)")
            defer { try? FileManager.default.removeItem(at: output) }
            let command = ". '\(common)' && { \(script); } >'\(output.path)' 2>&1 </dev/null"
            var env = ProcessInfo.processInfo.environment
            for (key, value) in environment { env[key] = value }
            let finalEnvironment = env
            let status = try await offCooperativePool { () throws -> Int32 in
                var pid: pid_t = 0
                let argv = ["/bin/bash", "-c", command].map { $0.withCString { strdup($0) } } + [nil]
                let envp = finalEnvironment.map { "\($0.key)=\($0.value)".withCString { strdup($0) } } + [nil]
                defer { for pointer in argv + envp { free(pointer) } }
                let spawned = posix_spawn(&pid, "/bin/bash", nil, nil, argv, envp)
                guard spawned == 0 else { throw FerryError(.io, "posix_spawn bash: \(spawned)") }
                var status: Int32 = 0
                while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
                return status
            }
            let text = (try? String(contentsOf: output, encoding: .utf8)) ?? ""
            guard status == 0 else { throw FerryError(.database, "\(script) (wait status \(status)): \(text)") }
            return text.trimmingCharacters(in: .whitespacesAndNewlines)
        }
    }

    @Test(
        "after PostgreSQL restarts, the pool drops its dead connections and the next job connects again; health follows"
    )
    func reconnectsAfterARestart() async throws {
        let cluster = try await Cluster.start()
        do {
            try await restart(cluster)
        } catch {
            await cluster.remove()
            throw error
        }
        await cluster.remove()
    }

    func restart(_ cluster: Cluster) async throws {
        let pool = PostgresPool(url: cluster.url, size: 2)
        defer { pool.close() }
        let pid = { @Sendable in
            try await pool.withConnection { try $0.query("SELECT pg_backend_pid()").first?.first ?? nil }
        }
        let before = try await pid()
        #expect(before != nil)
        #expect(pool.health.connected == true)

        // While PostgreSQL is down: a job fails with the database's error, and health says so
        try await cluster.pgCtl("stop")
        let down = await #expect(throws: FerryError.self) { _ = try await pid() }
        #expect(down?.code == .database, "\(String(describing: down))")
        #expect(pool.health.connected == false)
        #expect(pool.health.lastError?.contains(cluster.url) == false)

        // Once it is back: the next job opens a new connection (the dead one was dropped, not reused)
        try await cluster.pgCtl("start")
        let after = try await pid()
        #expect(after != nil && after != before)
        #expect(pool.health.connected == true)

        // A restart between two jobs: the idle connection died unseen; the first job on it fails and drops it, and
        // the pool never hands it out again
        try await cluster.pgCtl("stop")
        try await cluster.pgCtl("start")
        var answers: [String?] = []
        for _ in 0..<3 {
            do { answers.append(try await pid()) } catch { answers.append(nil) }
        }
        #expect(answers.last! != nil, "\(answers)")
        #expect(answers.filter { $0 == nil }.count <= 1, "at most the job on the dead connection fails: \(answers)")
        #expect(pool.health.connected == true)
    }
}
