import FerryCore
import Foundation
import Testing

/// `--help` of every command is a contract a user reads: each is compared with `Tests/Fixtures/help/<command>.txt`.
/// After an intended change, rewrite the goldens with `FERRY_UPDATE_GOLDEN=1 scripts/test --filter HelpGoldenTests`
/// and review the diff.
@Suite struct HelpGoldenTests {
    static let commands = [
        "ferry", "publish", "schedule", "triggers", "serve", "fetch", "watch", "apply", "status", "rollback", "exec",
        "explain",
        "push", "sync", "attach", "attachment", "subscribe", "unsubscribe",
    ]
    static let goldens = TestPaths.packageRoot.appendingPathComponent("Tests/Fixtures/help", isDirectory: true)

    @Test(arguments: commands)
    func helpMatchesGolden(_ command: String) async throws {
        // ArgumentParser wraps at the terminal's width, else at $COLUMNS: pin it.
        let arguments = command == "ferry" ? ["--help"] : [command, "--help"]
        let result = try await runFerry(arguments, environment: ["COLUMNS": "120"])
        #expect(result.status == 0, "\(result.stderr)")
        let golden = Self.goldens.appendingPathComponent("\(command).txt")
        if ProcessInfo.processInfo.environment["FERRY_UPDATE_GOLDEN"] == "1" {
            try FileManager.default.createDirectory(at: Self.goldens, withIntermediateDirectories: true)
            try Data(result.stdout.utf8).write(to: golden)
            return
        }
        let expected = try String(contentsOf: golden, encoding: .utf8)
        #expect(
            result.stdout == expected,
            "ferry \(command) --help differs from \(golden.path); FERRY_UPDATE_GOLDEN=1 rewrites it")
    }
}
