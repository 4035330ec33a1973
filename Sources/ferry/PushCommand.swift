import ArgumentParser
import AsyncHTTPClient
import FerryClient
import FerryClientNIO
import FerryCore
import Foundation

/// `ferry push`: uploads the outbox and writes the server's answers locally.
struct PushCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "push",
        abstract: "Upload the local edits waiting in the outbox; print how the server answered them.",
        discussion: """
            Uploads in order, in batches, retrying a failed upload with backoff. Edits the server has not answered \
            stay queued (exit status 1 when it cannot be reached); each is applied on the server at most once. \
            A scoped dataset needs --token (or FERRY_TOKEN); a refused token is not retried: exit status 1, the \
            edits stay queued and the next push sends them again.
            """)

    @OptionGroup var server: ServerOptions
    @OptionGroup var access: AccessOptions
    @OptionGroup var options: ClientDirectoryOptions

    @Option(name: .customLong("batch-size"), help: "Edits per upload (1-10000).")
    var batchSize: Int = 500

    @Flag(name: .long, help: "Print the per-status counts as one line of JSON.")
    var json = false

    func validate() throws {
        guard (1...10_000).contains(batchSize) else {
            throw ValidationError("--batch-size must be between 1 and 10000")
        }
    }

    func run() async throws {
        let batchSize = self.batchSize
        let result = try await access.withHTTPClient { http in
            try await options.withClient(
                try server.clientConfiguration(directory: options.directoryURL, access: access, http: http)
            ) {
                try await $0.push(batchSize: batchSize)
            }
        }
        print(json ? try JSONLine.render(PushJSON(result: result)) : result.text)
    }
}

/// `ferry sync`: push, then fetch, then apply.
struct SyncCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sync",
        abstract: "Push local edits, fetch the latest snapshot, and apply it (edits still queued survive the swap).",
        discussion: """
            A scoped dataset needs --token (or FERRY_TOKEN); a refused token fails with exit status 1 and keeps the \
            data and the queued edits.
            """)

    @OptionGroup var server: ServerOptions
    @OptionGroup var access: AccessOptions
    @OptionGroup var options: ClientDirectoryOptions
    @OptionGroup var cache: AttachmentCacheOptions

    @Flag(name: .long, help: "Print the resulting status as one line of JSON.")
    var json = false

    @Option(
        name: .customLong("accept-schema"), help: "A schema version this client accepts (repeatable; default: any).")
    var acceptSchema: [Int] = []

    func run() async throws {
        let result = try await access.withHTTPClient { http in
            var configuration = try server.clientConfiguration(
                directory: options.directoryURL, access: access, http: http)
            configuration.acceptedSchemaVersions = acceptSchema.isEmpty ? nil : Set(acceptSchema)
            configuration.attachments.cacheBytes = cache.attachmentCacheBytes
            let client = try await FerryClient.open(
                configuration: configuration, logger: options.logger())
            do {
                let result = try await client.sync()
                await client.close()
                return result
            } catch {
                await client.close()
                throw error
            }
        }
        let status = result.apply?.status ?? result.fetch.status
        if json {
            print(try JSONLine.render(SyncJSON(status: status, result: result)))
        } else {
            print(result.push.text)
            print(FetchCommand.summary(result.fetch, applied: result.apply, dir: options.dir))
            if let line = result.attachments?.text { print(line) }
            print(status.text)
        }
    }
}
