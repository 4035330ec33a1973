import FerryCore
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

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
/// let added = try store.add(fileAt: URL(fileURLWithPath: "/tmp/photo.jpg"))
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

    /// Copies the file at `source` into the store while hashing it (temp file, fsync, rename) and queues it for
    /// upload. The same content twice is stored and queued once. A missing or unreadable file throws
    /// `FerryError.Code.io` naming the path, and nothing is queued.
    ///
    /// ```swift
    /// let sha = try store.add(fileAt: photoURL, contentType: "image/jpeg").sha256
    /// ```
    public func add(fileAt source: URL, contentType: String? = nil, now: Date = Date()) throws -> Added {
        let input = open(source.path, O_RDONLY)
        guard input >= 0 else { throw DurableFile.posixError("cannot read the file to attach", source.path) }
        defer { close(input) }
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: source.path, isDirectory: &isDirectory), isDirectory.boolValue {
            throw FerryError(.io, "cannot attach a directory; name a file", path: source.path)
        }
        let type = contentType ?? Self.contentType(forExtension: source.pathExtension)
        return try store(contentType: type, now: now) { buffer in
            let n = read(input, buffer.baseAddress, buffer.count)
            if n < 0 { throw DurableFile.posixError("cannot read the file to attach", source.path) }
            return n
        }
    }

    /// Stores `data` as an attachment and queues it (see ``add(fileAt:contentType:now:)``).
    ///
    /// ```swift
    /// let sha = try store.add(data: jpeg, contentType: "image/jpeg").sha256
    /// ```
    public func add(data: Data, contentType: String = "application/octet-stream", now: Date = Date()) throws -> Added {
        var offset = 0
        return try store(contentType: contentType, now: now) { buffer in
            let n = min(buffer.count, data.count - offset)
            data.copyBytes(to: buffer.bindMemory(to: UInt8.self), from: offset..<(offset + n))
            offset += n
            return n
        }
    }

    /// Writes what `read` yields to a temp file while hashing it, then queues and renames it (see the type's doc).
    private func store(contentType: String, now: Date, read: (UnsafeMutableRawBufferPointer) throws -> Int) throws
        -> Added
    {
        try makeDirectories()
        let temp = temporaryURL()
        let (sha256, size): (String, Int64)
        do {
            (sha256, size) = try Self.copyHashing(to: temp, read: read)
        } catch {
            unlink(temp.path)
            throw error
        }
        if contains(sha256) {
            unlink(temp.path)
            return Added(sha256: sha256, size: size, queued: false)
        }
        do {
            let entry = QueuedAttachment(
                sha256: sha256, size: size, contentType: contentType, queuedAt: Timestamp.format(now))
            try save(entry)
            try DurableFile.rename(temp, to: url(for: sha256))
        } catch {
            unlink(temp.path)
            throw error
        }
        return Added(sha256: sha256, size: size, queued: true)
    }

    /// Writes the bytes `read` yields (0 = the end) into a new file at `temp`, fsyncs it, returns their SHA-256.
    static func copyHashing(to temp: URL, read: (UnsafeMutableRawBufferPointer) throws -> Int) throws -> (
        String, Int64
    ) {
        let output = open(temp.path, O_WRONLY | O_CREAT | O_EXCL, 0o644)
        guard output >= 0 else { throw DurableFile.posixError("cannot create", temp.path) }
        defer { close(output) }
        var digest = StreamingSHA256()
        var size: Int64 = 0
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
        defer { buffer.deallocate() }
        while true {
            let n = try read(buffer)
            if n == 0 { break }
            let chunk = UnsafeRawBufferPointer(rebasing: buffer[0..<n])
            digest.update(chunk)
            try writeAll(output, chunk, path: temp.path)
            size += Int64(n)
        }
        guard fsync(output) == 0 else { throw DurableFile.posixError("cannot fsync", temp.path) }
        return (digest.finalizeHex(), size)
    }

    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer, path: String) throws {
        var offset = 0
        while offset < bytes.count {
            let n = write(fd, bytes.baseAddress! + offset, bytes.count - offset)
            if n < 0 {
                if errno == EINTR { continue }
                throw DurableFile.posixError("cannot write", path)
            }
            offset += n
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
