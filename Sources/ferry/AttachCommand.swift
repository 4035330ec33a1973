import ArgumentParser
import FerryClient
import FerryCore
import Foundation

/// `ferry attach`: copies a file into the client directory and queues it for upload; prints its SHA-256.
struct AttachCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attach",
        abstract: "Copy a file into the client directory as an attachment, queue it for upload, print its SHA-256.",
        discussion: """
            The file is copied durably into DIR/.ferry/attachments while it is hashed; the same content attached \
            twice is stored and queued once. Write the SHA-256 into the row's attachment column (`ferry exec`); the \
            next `ferry push` (or sync) uploads the file before any edit that names it, resuming an interrupted \
            upload. A missing or unreadable file fails with code io and queues nothing. Needs no server. \
            Exit status: 0 success, 1 failure (reason on stderr), 2 usage.
            """)

    @Option(name: .long, help: "The client directory (created when missing).")
    var dir: String

    @Argument(help: "The file to attach.")
    var file: String

    @Option(
        name: .customLong("content-type"),
        help: "The attachment's content type (default: from the file's extension, else application/octet-stream).")
    var contentType: String?

    @Flag(name: .long, help: "Print {\"sha256\": …, \"size\": …} as one line of JSON.")
    var json = false

    struct Output: Encodable {
        let sha256: String
        let size: Int64
    }

    func run() async throws {
        let store = DeviceAttachments(directory: ClientDirectory(URL(fileURLWithPath: dir)))
        let source = URL(fileURLWithPath: file)
        let added = try await store.add(fileAt: source, contentType: contentType)
        print(json ? try JSONLine.render(Output(sha256: added.sha256, size: added.size)) : added.sha256)
    }
}

/// `ferry attachment`: the device's attachments.
struct AttachmentCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "attachment",
        abstract: "Work with the attachments in a client directory.",
        subcommands: [AttachmentPathCommand.self])
}

/// `ferry attachment path`: the local file of an attachment, downloaded and verified first when missing.
struct AttachmentPathCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "path",
        abstract: "Print the local path of an attachment, downloading and verifying it first when it is missing.",
        discussion: """
            An on-demand attachment is downloaded only when asked for, and kept in an LRU cache of at most \
            --attachment-cache-bytes (eager attachments and those queued for upload are never evicted). Downloading \
            needs --server and --dataset (and --token on a scoped dataset). A missing attachment the server does \
            not hold fails with code not-found. Exit status: 0 success, 1 failure (reason on stderr), 2 usage.
            """)

    @Option(name: .long, help: "The client directory.")
    var dir: String

    @Argument(help: "The attachment's SHA-256 (64 lowercase hex characters).")
    var sha256: String

    @Option(name: .long, help: "Base URL of the Ferry server, e.g. http://127.0.0.1:8080 (to download a missing one).")
    var server: String?

    @Option(name: .long, help: "The dataset (to download a missing one).")
    var dataset: String?

    @OptionGroup var access: AccessOptions

    @OptionGroup var cache: AttachmentCacheOptions

    @Flag(name: .long, help: "Log what the client does (to stderr).")
    var verbose = false

    func validate() throws {
        guard Attachment.isID(sha256) else {
            throw ValidationError("'\(sha256)' is not an attachment's SHA-256: 64 lowercase hex characters")
        }
    }

    func run() async throws {
        let options = try ClientDirectoryOptions.parse(["--dir", dir] + (verbose ? ["--verbose"] : []))
        try options.requireExisting()
        let store = DeviceAttachments(directory: ClientDirectory(options.directoryURL))
        if store.contains(sha256) {
            // Held already: no lock, no network (a running `ferry watch` may hold the directory).
            print(try await FerryClient.attachmentPath(sha256, directory: options.directoryURL))
            return
        }
        guard let server, let dataset else {
            throw FerryError(
                .notFound, "this device does not hold the attachment; give --server and --dataset to download it",
                key: sha256)
        }
        let serverOptions = try ServerOptions.parse(["--server", server, "--dataset", dataset])
        let path = try await access.withHTTPClient { http in
            var configuration = try serverOptions.clientConfiguration(
                directory: options.directoryURL, access: access, http: http)
            configuration.update.applyOnOpen = false
            configuration.push.onOpen = false
            configuration.attachments.cacheBytes = cache.attachmentCacheBytes
            let client = try await FerryClient.open(
                configuration: configuration, logger: options.logger())
            do {
                let url = try await client.attachmentURL(for: sha256)
                await client.close()
                return url.path
            } catch {
                await client.close()
                throw error
            }
        }
        print(path)
    }
}

/// `--attachment-cache-bytes`, shared by fetch, watch, sync and `attachment path`.
struct AttachmentCacheOptions: ParsableArguments {
    @Option(
        name: .customLong("attachment-cache-bytes"),
        help: ArgumentHelp(
            "The most bytes of on-demand attachments kept on the device (LRU; eager ones are never evicted).",
            valueName: "bytes"))
    var attachmentCacheBytes: Int64 = 1 << 30

    func validate() throws {
        guard attachmentCacheBytes >= 0 else { throw ValidationError("--attachment-cache-bytes must be 0 or more") }
    }
}

extension AttachmentSync {
    /// One line for a person, nil when nothing happened.
    var text: String? {
        guard downloaded > 0 || !missing.isEmpty || removed > 0 || evicted > 0 else { return nil }
        var line = "attachments: downloaded \(downloaded) (\(ProgressBar.bytes(bytes)))"
        if !missing.isEmpty { line += ", \(missing.count) missing (tried again at the next fetch)" }
        if removed > 0 { line += ", removed \(removed) no row names" }
        if evicted > 0 { line += ", evicted \(evicted) from the cache" }
        return line
    }
}
