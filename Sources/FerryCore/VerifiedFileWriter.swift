import Foundation

/// A lane for blocking work: runs `work` off Swift's cooperative threads and returns when it did (the client's
/// Dispatch queue, the server's `NIOThreadPool`; docs/ARCHITECTURE.md, "Concurrency").
///
/// ```swift
/// let lane: BlockingLane = { work in try await NIOThreadPool.singleton.runIfActive(work) }
/// ```
public typealias BlockingLane = @Sendable (_ work: @escaping @Sendable () throws -> Void) async throws -> Void

/// The one way a byte stream becomes a file whose SHA-256 and size are known, for async code: a ``VerifiedFile`` whose
/// every write, hash and fsync runs on a ``BlockingLane`` in hops of up to ``hopSize`` bytes (memory stays bounded,
/// one hop per MiB, not per network chunk), renamed into place only once ``finish(expecting:)`` found the bytes it was
/// promised. Used by S3 downloads, attachment downloads and stores on the device, and the server's attachment uploads
/// (PUT and tus); the snapshot download drives its ``VerifiedFile``s from threads of its own instead (it inflates,
/// hashes and writes at once).
///
/// A fresh file is hashed as it is written. One opened on a kept prefix (``Start/keptPrefix``: a resumed upload)
/// appends after it; ``finish(expecting:)`` then hashes the whole file once, from disk.
///
/// `@unchecked Sendable`: one transfer uses a writer, one awaited call after another, never two at once; its state is
/// touched only by the hop in flight.
///
/// ```swift
/// let writer = try await VerifiedFileWriter.open(temp, .new, lane: lane)
/// for try await chunk in body { try await writer.append(chunk) }
/// try await writer.finish(expecting: .init(sha256: sha256))
/// try await writer.commit(to: target)
/// ```
public final class VerifiedFileWriter: @unchecked Sendable {
    public typealias Start = VerifiedFile.Start
    public typealias Expected = VerifiedFile.Expected
    public typealias Written = VerifiedFile.Written

    /// Bytes gathered before one hop to the lane.
    public static let hopSize = 1 << 20

    /// The file written.
    public var url: URL { file.url }
    /// Its open descriptor (until ``finish(expecting:)`` or ``discard()``), for a caller's `flock`.
    package var descriptor: Int32 { file.descriptor }
    private let file: VerifiedFile
    private let lane: BlockingLane
    private var pending = Data()
    /// Bytes in the file and in `pending`.
    public private(set) var size: Int64

    private init(file: VerifiedFile, lane: @escaping BlockingLane) {
        self.file = file
        self.lane = lane
        size = file.size
    }

    /// Opens `url` on `lane` as `start` says.
    public static func open(_ url: URL, _ start: Start, lane: @escaping BlockingLane) async throws
        -> VerifiedFileWriter
    {
        VerifiedFileWriter(file: try await run(on: lane) { try VerifiedFile(url, start) }, lane: lane)
    }

    /// Gathers `bytes` for the next hop; true when a hop is due (``flush()``). For bytes the caller owns only during
    /// the call (a `ByteBuffer`'s).
    public func buffer(_ bytes: UnsafeRawBufferPointer) -> Bool {
        pending.append(bytes.assumingMemoryBound(to: UInt8.self))
        size += Int64(bytes.count)
        return pending.count >= Self.hopSize
    }

    /// Gathers `data`, writing a hop when ``hopSize`` bytes are waiting.
    public func append(_ data: Data) async throws {
        pending.append(data)
        size += Int64(data.count)
        if pending.count >= Self.hopSize { try await flush() }
    }

    /// Hashes and writes the gathered bytes on the lane.
    public func flush() async throws {
        guard !pending.isEmpty else { return }
        let (chunk, file) = (pending, file)
        pending = Data()
        try await lane { try chunk.withUnsafeBytes { try file.append($0) } }
    }

    /// Writes what is gathered and fsyncs: what arrived survives a crash (a broken upload kept for its resume).
    public func sync() async throws {
        try await flush()
        try await lane { [file] in try file.sync() }
    }

    /// Cuts the file back to `size` bytes, dropping what is gathered, and fsyncs it.
    public func truncate(to size: Int64) async throws {
        pending = Data()
        self.size = size
        try await lane { [file] in try file.truncate(to: size) }
    }

    /// Writes what is gathered, fsyncs and closes the file, and checks it against `expected`: a mismatch throws
    /// `FerryError.Code.verification` naming the file (the caller deletes or keeps it).
    @discardableResult
    public func finish(expecting expected: Expected = Expected()) async throws -> Written {
        try await flush()
        return try await Self.run(on: lane) { [file] in try file.finish(expecting: expected) }
    }

    /// Renames the finished file over `target` and fsyncs the directory, on the lane.
    public func commit(to target: URL) async throws {
        try await lane { [file] in try file.commit(to: target) }
    }

    /// Closes and deletes the file (an abandoned or refused transfer), on the lane; errors are ignored: a leftover
    /// temp file is swept later.
    public func discard() async {
        // Removing scratch after a failure: the original error is the one reported.
        try? await lane { [file] in file.discard() }  // failing leaves a temp file, swept later
    }

    /// Runs `work` on `lane` and returns its result.
    private static func run<Result: Sendable>(
        on lane: BlockingLane, _ work: @escaping @Sendable () throws -> Result
    ) async throws -> Result {
        let result = Locked<Result?>(nil)
        try await lane {
            let value = try work()
            result.withLock { $0 = value }
        }
        // The lane returned without throwing, so `work` ran to its end and stored its value.
        return result.current!
    }
}
