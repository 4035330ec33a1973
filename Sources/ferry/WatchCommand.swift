import ArgumentParser
import FerryClient
import FerryCore
import Foundation
import ServiceLifecycle
import UnixSignals

/// `ferry watch`: keeps a client directory current until stopped, learning of each version through the manifest
/// long-poll.
struct WatchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "watch",
        abstract: "Keep a client directory current: fetch each new version as soon as the server serves it.",
        discussion: """
            Runs until SIGINT or SIGTERM (then exits 0). Each check asks the server to hold its answer until a new \
            version exists (Prefer: wait, up to --wait seconds), so a version is fetched moments after the server \
            serves it, by patch when the server offers one, as `ferry fetch` does. A server that does not wait is \
            asked once per --wait seconds (or as its Retry-After says); a failed check is retried after a growing, \
            jittered pause. --apply-mode automatic (the default) applies each version at once; on-launch and \
            on-request leave it pending as updated.db, as `ferry fetch` does. Prints one line per version (--json: \
            one JSON line, with the keys of `ferry fetch --json`). A refused token ends it with code unauthorized, \
            a server that retired every schema line --accept-schema names with code schema-retired. \
            Exit status: 0 stopped by a signal, 1 failure (reason on stderr), 2 usage.
            """)

    /// When a version that arrived is applied.
    enum ApplyMode: String, ExpressibleByArgument, CaseIterable {
        case onLaunch = "on-launch"
        case onRequest = "on-request"
        case automatic
    }

    @OptionGroup var server: ServerOptions

    @OptionGroup var access: AccessOptions

    @OptionGroup var options: ClientDirectoryOptions

    @OptionGroup var cache: AttachmentCacheOptions

    @Option(
        name: .customLong("apply-mode"),
        help: "When a new version is applied: automatic (at once), on-launch or on-request (left pending).")
    var applyMode: ApplyMode = .automatic

    @Option(
        name: .long,
        help: ArgumentHelp(
            "How long the server may hold each check until a new version exists, e.g. 30s (the default; 1s to 60s).",
            valueName: "duration"),
        transform: Duration.argument(in: .seconds(1) ... .seconds(60), expected: "1 to 60 seconds"))
    var wait: Duration = .seconds(30)

    @Flag(name: .long, help: "Print one line of JSON per version.")
    var json = false

    @Option(
        name: .customLong("accept-schema"), help: "A schema version this client accepts (repeatable; default: any).")
    var acceptSchema: [Int] = []

    func run() async throws {
        // The server sends nothing while it waits: the read timeout must outlast the wait.
        try await access.withHTTPClient(readTimeoutAtLeast: wait + .seconds(30)) { http in
            var configuration = try server.clientConfiguration(
                directory: options.directoryURL, access: access, http: http)
            configuration.download.waitForChanges = wait
            configuration.attachments.cacheBytes = cache.attachmentCacheBytes
            configuration.acceptedSchemaVersions = acceptSchema.isEmpty ? nil : Set(acceptSchema)
            let client = try await FerryClient.open(
                configuration: configuration, logger: options.logger())
            let watch = Watch(client: client, apply: applyMode == .automatic, json: json, dir: options.dir)
            let group = ServiceGroup(
                services: [watch], gracefulShutdownSignals: [.sigterm, .sigint], logger: options.logger())
            do {
                try await group.run()
            } catch {
                await client.close()
                throw error
            }
            await client.close()
        }
    }

    /// The watch loop as a service, so SIGINT and SIGTERM end it through graceful shutdown: a long-poll in flight
    /// is cancelled, a download stops where it is (the next fetch resumes it).
    struct Watch: Service {
        let client: FerryClient
        let apply: Bool
        let json: Bool
        let dir: String

        func run() async throws {
            try await cancelWhenGracefulShutdown {
                try await client.watch { result in
                    var applied: ApplyResult?
                    if apply && result.status.state == .updatePending {
                        applied = try await client.applyPendingUpdate()
                    }
                    var attachments: AttachmentSync?
                    if applied != nil || result.outcome == .initialSync {
                        attachments = try await client.syncAttachments()
                    }
                    try Self.printLine(
                        json
                            ? try JSONLine.render(
                                FetchJSON(
                                    status: applied?.status ?? result.status, result: result,
                                    applied: applied?.applied ?? false, attachments: attachments))
                            : FetchCommand.summary(result, applied: applied, dir: dir))
                }
            }
        }

        /// Writes one line to stdout at once (stdout to a pipe is block-buffered; a reader wants each version as it
        /// comes).
        static func printLine(_ line: String) throws {
            try FileHandle.standardOutput.write(contentsOf: Data((line + "\n").utf8))
        }
    }
}
