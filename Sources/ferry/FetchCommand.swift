import ArgumentParser
import AsyncHTTPClient
import FerryClient
import FerryClientNIO
import FerryCore
import Foundation

/// `ferry fetch`: one check with the server; downloads, verifies and stores a new snapshot.
struct FetchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fetch",
        abstract: "Check the server once and download a new snapshot into the client directory.",
        discussion: """
            The first fetch becomes DIR/database.db; later ones wait as DIR/updated.db until applied (--apply, \
            `ferry apply`, or the app's next launch). An interrupted download resumes on the next fetch. \
            When the server offers a row-level patch from the version this directory holds, the patch is \
            downloaded and applied to a copy instead, and a patch that does not verify falls back to the full \
            download (--no-patch: always the full download). \
            A scoped dataset needs --token (or FERRY_TOKEN); a refused token fails with code unauthorized and keeps \
            every local file, a partial download included. \
            Exit status: 0 success (also when already up to date), 1 failure (reason on stderr), 2 usage.
            """)

    @OptionGroup var server: ServerOptions

    @OptionGroup var access: AccessOptions

    @OptionGroup var options: ClientDirectoryOptions

    @OptionGroup var cache: AttachmentCacheOptions

    @Flag(name: .long, help: "Apply the update right after a successful download.")
    var apply = false

    @Flag(name: .long, help: "Print the result as one line of JSON.")
    var json = false

    @Option(
        name: .customLong("accept-schema"), help: "A schema version this client accepts (repeatable; default: any).")
    var acceptSchema: [Int] = []

    @Option(name: .customLong("limit-rate"), help: "Download at most this many bytes per second (e.g. 500K, 2M).")
    var limitRate: ByteRate?

    @Flag(
        name: .customLong("no-patch"), help: "Download the full version even when the server offers a row-level patch.")
    var noPatch = false

    func run() async throws {
        let (result, applied, attachments) = try await access.withHTTPClient { http in
            // `ferry sync` pushes; fetch only fetches (the configuration neither pushes nor applies on open).
            var configuration = try server.clientConfiguration(
                directory: options.directoryURL, access: access, http: http)
            configuration.acceptedSchemaVersions = acceptSchema.isEmpty ? nil : Set(acceptSchema)
            configuration.download.maxBytesPerSecond = limitRate?.bytesPerSecond
            configuration.download.usePatches = !noPatch
            configuration.attachments.cacheBytes = cache.attachmentCacheBytes
            let client = try await FerryClient.open(
                configuration: configuration, logger: options.logger())
            do {
                let bar = json ? nil : ProgressBar.ifTerminal()
                var onProgress: (@Sendable (FetchProgress) -> Void)?
                if let bar { onProgress = { bar.update($0) } }
                defer { bar?.finish() }
                let result = try await client.checkForUpdates(progress: onProgress)
                var applied: ApplyResult?
                if apply && result.status.state == .updatePending { applied = try await client.applyPendingUpdate() }
                // The attachments of the version now live (after --apply, or the initial sync): eager ones downloaded.
                var attachments: AttachmentSync?
                if apply || result.outcome == .initialSync { attachments = try await client.syncAttachments() }
                await client.close()
                return (result, applied, attachments)
            } catch {
                await client.close()
                throw error
            }
        }
        let status = applied?.status ?? result.status
        if json {
            print(
                try JSONLine.render(
                    FetchJSON(
                        status: status, result: result, applied: applied?.applied ?? false, attachments: attachments)))
        } else {
            print(Self.summary(result, applied: applied, dir: options.dir))
            if let attachments, let line = attachments.text { print(line) }
            print(status.text)
        }
    }

    static func summary(_ result: FetchResult, applied: ApplyResult?, dir: String) -> String {
        let appliedText = applied.flatMap { $0.applied ? $0.text : nil }
        guard let download = result.download else {
            if let appliedText { return appliedText }
            return result.status.state == .updatePending
                ? "no newer version; an update is pending" : "already up to date"
        }
        let version = "version \(download.version)"
        let resumed =
            download.check.resumedFrom > 0 ? ", resumed at \(ProgressBar.bytes(download.check.resumedFrom))" : ""
        let size = sizeText(download)
        if result.outcome == .initialSync { return "initial sync: \(version) (\(size)\(resumed)) is now database.db" }
        if let appliedText { return "downloaded \(version) (\(size)\(resumed)); \(appliedText)" }
        return
            "downloaded \(version) (\(size)\(resumed)); it waits as updated.db: run `ferry apply --dir \(dir)` to use it"
    }

    /// How big a download was: the file and its gzip transfer, or the patch against the published file.
    private static func sizeText(_ download: FetchResult.Download) -> String {
        let transfer = download.check.bytesReceived + download.check.resumedFrom
        var size = ProgressBar.bytes(download.fileBytes)
        if download.encoding == .gzip { size += ", \(ProgressBar.bytes(transfer)) gzip" }
        if case .patch(let from, let to) = download.path {
            // The bytes moved against the published file's size is what a patch is for; the device's own file (outbox,
            // free pages) is another number, named as such.
            let published = download.publishedBytes
            let share =
                published > 0
                ? String(
                    format: ", %.2f %% of the %@ published file", Double(transfer) / Double(published) * 100,
                    ProgressBar.bytes(published)) : ""
            size = "by a \(ProgressBar.bytes(transfer)) patch \(from) → \(to)\(share)"
            if download.fileBytes != published {
                size += "; the device's file is \(ProgressBar.bytes(download.fileBytes))"
            }
            if let own = download.ownRowsSettled, own > 0 { size += "; it settled \(own) rows this device had written" }
        }
        if let failure = download.check.patchFailure { size += "; the patch was not used: \(failure)" }
        return size
    }
}
