import FerryCore
import Foundation

/// The device's attachments in a client directory, and the queue of those waiting for upload.
///
/// ```
/// DIR/.ferry/attachments/<sha256>             an attachment's bytes, named by their SHA-256 (never written in place)
/// DIR/.ferry/attachments/queue/<sha256>.json  one waiting for upload: {"sha256","size","contentType","queuedAt",
///                                             "uploadURL"} (the tus upload's URL once the server made one)
/// DIR/.ferry/attachments/.tmp-*               a copy or a download in progress; garbage after a crash
/// ```
///
/// Every write is a temp file, fsynced, renamed. Adding writes the queue entry before the file's rename: a crash
/// leaves either nothing, or an entry without its file (dropped by the next push), never a file that is not queued.
/// Safe to use from several processes at once: files are only ever renamed into place, and a name is its content.
///
/// ```swift
/// let store = DeviceAttachments(directory: ClientDirectory(URL(fileURLWithPath: "/data/ferry")))
/// let added = try await store.add(fileAt: URL(fileURLWithPath: "/tmp/photo.jpg"))
/// print(added.sha256, store.url(for: added.sha256).path)
/// ```
public struct DeviceAttachments: Sendable {
    /// `DIR/.ferry/attachments`.
    public let root: URL
    var queueDirectory: URL { root.appendingPathComponent("queue", isDirectory: true) }

    public init(directory: ClientDirectory) {
        root = directory.url.appendingPathComponent(".ferry/attachments", isDirectory: true)
    }

    /// Where the attachment `sha256` lives on this device (it may not be there yet).
    public func url(for sha256: String) -> URL { root.appendingPathComponent(sha256) }

    /// Whether the device holds the attachment's bytes.
    public func contains(_ sha256: String) -> Bool { FileManager.default.fileExists(atPath: url(for: sha256).path) }

    func queueURL(for sha256: String) -> URL { queueDirectory.appendingPathComponent("\(sha256).json") }

    /// What ``add(fileAt:contentType:now:)`` did.
    public struct Added: Sendable, Equatable, Codable {
        /// The SHA-256 of the bytes, 64 lowercase hex characters: the value the row stores.
        public var sha256: String
        /// Bytes.
        public var size: Int64
        /// False when the device already held the same content (then nothing new is stored or queued).
        public var queued: Bool
    }

    /// Copies the file at `source` into the store while hashing it (`VerifiedFileWriter`: temp file, fsync, rename,
    /// all on the client's blocking lane) and queues it for upload. The same content twice is stored and queued once.
    /// A missing or unreadable file throws `FerryError.Code.io` naming the path, and nothing is queued.
    ///
    /// ```swift
    /// let sha = try await store.add(fileAt: photoURL, contentType: "image/jpeg").sha256
    /// ```
    public func add(fileAt source: URL, contentType: String? = nil, now: Date = Date()) async throws -> Added {
        let input = try await BlockingWork.run { () throws -> FileHandle in
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: source.path, isDirectory: &isDirectory), isDirectory.boolValue {
                throw FerryError(.io, "cannot attach a directory; name a file", path: source.path)
            }
            guard let handle = FileHandle(forReadingAtPath: source.path) else {
                throw FerryError(.io, "cannot read the file to attach: it is missing or unreadable", path: source.path)
            }
            return handle
        }
        defer { try? input.close() }  // read-only: closing cannot lose data
        let type = contentType ?? Self.contentType(forExtension: source.pathExtension)
        return try await store(contentType: type, now: now) { writer in
            while true {
                let chunk = try await BlockingWork.run { () throws -> Data? in
                    do { return try input.read(upToCount: VerifiedFileWriter.hopSize) } catch {
                        throw FerryError.writing(error, "cannot read the file to attach", source, fix: "check the file")
                    }
                }
                guard let chunk, !chunk.isEmpty else { return }
                try await writer.append(chunk)
            }
        }
    }

    /// Stores `data` as an attachment and queues it (see ``add(fileAt:contentType:now:)``).
    ///
    /// ```swift
    /// let sha = try await store.add(data: jpeg, contentType: "image/jpeg").sha256
    /// ```
    public func add(data: Data, contentType: String = "application/octet-stream", now: Date = Date()) async throws
        -> Added
    {
        try await store(contentType: contentType, now: now) { try await $0.append(data) }
    }

    /// Writes what `fill` appends to a temp file while hashing it, then queues and renames it (see the type's doc).
    private func store(contentType: String, now: Date, fill: (VerifiedFileWriter) async throws -> Void) async throws
        -> Added
    {
        try await BlockingWork.run { try makeDirectories() }
        let writer = try await VerifiedFileWriter.open(temporaryURL(), .new, lane: BlockingWork.lane)
        do {
            try await fill(writer)
            let got = try await writer.finish()
            return try await BlockingWork.run { [self] in
                if contains(got.sha256) {
                    try DurableFile.remove(writer.url)
                    return Added(sha256: got.sha256, size: got.size, queued: false)
                }
                let entry = QueuedAttachment(
                    sha256: got.sha256, size: got.size, contentType: contentType, queuedAt: Timestamp.format(now))
                try save(entry)
                try DurableFile.rename(writer.url, to: url(for: got.sha256))
                return Added(sha256: got.sha256, size: got.size, queued: true)
            }
        } catch {
            await writer.discard()
            throw error
        }
    }

    /// Throws `FerryError.Code.badInput` unless `sha256` is an attachment's name.
    static func requireID(_ sha256: String) throws {
        guard Attachment.isID(sha256) else {
            throw FerryError(.badInput, "'\(sha256)' is not an attachment's SHA-256 (64 lowercase hex characters)")
        }
    }

    /// A new temp file name in the store (same file system, so it can be renamed into place).
    func temporaryURL() -> URL { root.appendingPathComponent(".tmp-\(UUID().uuidString)") }

    func makeDirectories() throws {
        try DurableFile.makeDirectory(queueDirectory)
    }

    /// The content type an attachment gets from its file name's extension when none is given:
    /// `application/octet-stream` for one it does not know.
    ///
    /// ```swift
    /// DeviceAttachments.contentType(forExtension: "JPG")   // "image/jpeg"
    /// ```
    public static func contentType(forExtension ext: String) -> String {
        let types = [
            "jpg": "image/jpeg", "jpeg": "image/jpeg", "png": "image/png", "heic": "image/heic", "heif": "image/heif",
            "gif": "image/gif", "webp": "image/webp", "pdf": "application/pdf", "txt": "text/plain",
            "csv": "text/csv", "json": "application/json", "mp4": "video/mp4", "mov": "video/quicktime",
            "m4a": "audio/mp4", "mp3": "audio/mpeg", "wav": "audio/wav",
        ]
        return types[ext.lowercased()] ?? "application/octet-stream"
    }
}
