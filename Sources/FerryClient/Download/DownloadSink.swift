import FerryCore
import Foundation

/// Where one download's body goes, with SHA-256 over the SQLite file's bytes on the way (the checksum that identifies
/// and verifies a snapshot, whatever the encoding on the wire).
///
/// - identity: the body is the SQLite file; it is appended to `.ferry/partial.sqlite` and hashed.
/// - gzip: the body is the server's gzip copy. Its bytes are appended to `.ferry/partial.gz` (the prefix a resume
///   continues with `Range`), and inflated as they arrive into `.ferry/partial.sqlite`; the inflated bytes are hashed.
///   The inflater's state is never saved: a resume re-inflates the kept compressed prefix from disk, rewriting
///   `partial.sqlite` from byte 0 and hashing it, then goes on with the new bytes. That costs one local pass over the
///   prefix, and keeps `partial.sqlite` exactly the inflation of `partial.gz`, whatever a crash left behind.
///
/// Both files are ``VerifiedFile``s, driven from stages on threads of their own so that receiving, inflating, hashing
/// and writing overlap (see ``start()``): the network task only queues each chunk (``take(_:)``), waiting when the stages fall behind, which
/// keeps memory bounded however much a chunk inflates to. The first stage to fail stops them all; its error comes
/// out of the next ``take(_:)`` or of ``finish()``. `@unchecked Sendable`: the network task's counters are touched by
/// one awaited call after another, each stage's state by its own thread only, and the stages' results are read
/// after ``finish()`` or ``stop()`` waited for the threads to end.
final class DownloadSink: @unchecked Sendable {
    /// A kept prefix that cannot be continued (a corrupt or unreadable compressed prefix): start again from byte 0.
    struct UnusablePrefix: Error {
        var reason: String
    }

    /// What the writing stage writes, in the order it was queued.
    private enum Write: Sendable {
        /// Received bytes of the gzip copy, for `partial.gz`.
        case compressed(Data)
        /// Bytes of the SQLite file, for `partial.sqlite`: received (identity) or inflated.
        case file(FileBytes)
    }

    /// Inflated bytes go to the hashing and writing stages in blocks of this size, at most this many at once.
    private static let blockSize = 1 << 20
    private static let blocks = 16

    let encoding: TransferEncoding
    /// The byte of the representation this transfer started at (0, or the kept prefix).
    let resumedFrom: Int64
    /// Bytes of the representation so far, the kept prefix included.
    private(set) var wireBytes: Int64
    /// Bytes of the SQLite file so far (final once ``finish()`` returned).
    private(set) var fileBytes: Int64
    /// `partial.sqlite`: the hashing stage feeds its hash, the writing stage its file.
    private let file: VerifiedFile
    /// `partial.gz`, written and never hashed: its bytes are checked by inflating them.
    private let compressed: VerifiedFile?
    private let inflater: GzipInflater?
    /// The SQLite file's promised size: inflating to more is an error (and stops a gzip bomb early).
    private let fileLimit: Int64?

    private let inflateQueue = StageQueue<Data>(capacity: 64)
    private let hashQueue = StageQueue<FileBytes>(capacity: 32)
    private let writeQueue = StageQueue<Write>(capacity: 32)
    /// The inflating stage's free blocks: it waits for one when the hashing or writing stage is behind.
    private let freeBlocks = StageQueue<FileBlock>(capacity: DownloadSink.blocks)
    private let failure = Locked<(any Error)?>(nil)
    private var stages: StageLatch?

    /// Opens the partial files to continue at byte `from` of the representation (0 for a fresh download), rehashing
    /// (identity) or re-inflating (gzip) the kept prefix. Blocking: call it on the thread pool. Then ``start()``.
    init(directory: ClientDirectory, encoding: TransferEncoding, from: Int64, fileLimit: Int64?, bufferSize: Int) throws
    {
        self.encoding = encoding
        self.resumedFrom = from
        self.fileLimit = fileLimit
        wireBytes = from
        let bufferSize = max(bufferSize, 4096)
        switch encoding {
        case .identity:
            file = try VerifiedFile(directory.partial, .keeping(from), bufferSize: bufferSize)
            compressed = nil
            inflater = nil
            fileBytes = from
            // The kept prefix is hashed now, so a resumed download is verified end to end as it arrives.
            try file.hashKept()
        case .gzip:
            let compressed = try VerifiedFile(directory.partialGzip, .keeping(from), bufferSize: bufferSize)
            self.compressed = compressed
            file = try VerifiedFile(directory.partial, .keeping(0), bufferSize: bufferSize)
            let inflater = try GzipInflater(outputChunkSize: Self.blockSize)
            self.inflater = inflater
            fileBytes = 0
            try reinflatePrefix(of: compressed, with: inflater)
        }
    }

    /// Starts the stages, a thread each: inflating (gzip only), hashing, writing (`partial.gz`'s bytes as received,
    /// `partial.sqlite`'s as inflated). Every call of `start` must be followed by ``finish()`` or ``stop()``, which
    /// end them.
    func start() {
        let names = encoding == .gzip ? ["inflate", "hash", "write"] : ["hash", "write"]
        let stages = StageLatch(count: names.count)
        self.stages = stages
        for name in names {
            let thread = Thread { [self] in
                do {
                    switch name {
                    case "inflate": try inflateStage()
                    case "hash": hashStage()
                    default:
                        do { try writeStage() } catch { throw Self.writeFailure(error) }
                    }
                } catch {
                    fail(error)
                }
                stages.arrive()
            }
            thread.name = "ferry.download.\(name)"
            thread.start()
        }
    }

    /// Queues a chunk of the body for the stages, waiting while they are behind. Throws the error of a stage that
    /// failed: `FerryError.Code.corruptTransfer` for a corrupt gzip stream or one inflating past the promised size,
    /// a write's error (`diskFull`, `io`).
    func take(_ chunk: Data) async throws {
        if let error = failure.current { throw error }
        wireBytes += Int64(chunk.count)
        switch encoding {
        case .identity:
            fileBytes += Int64(chunk.count)
            await hashQueue.put(.received(chunk))
            await writeQueue.put(.file(.received(chunk)))
        case .gzip:
            await writeQueue.put(.compressed(chunk))
            await inflateQueue.put(chunk)
        }
    }

    /// The body has ended: waits for the stages, checks that the gzip stream ended with its trailer and returns the
    /// SQLite file's SHA-256. The file is not durable yet: ``makeDurable()``.
    func finish() async throws -> String {
        await endStages()
        if let error = failure.current { throw error }
        if let inflater {
            do {
                try inflater.finish()
            } catch let error as FerryError {
                throw FerryError(
                    .corruptTransfer,
                    "the gzip stream is incomplete: \(error.message); the download was discarded, fetch again")
            }
        }
        return try file.digest().sha256
    }

    /// Fsyncs and closes the SQLite file, after ``finish()``: the file may be verified (read) meanwhile, and is
    /// renamed only once this returned.
    func makeDurable() async throws {
        do {
            try await BlockingWork.run { [file] in try file.close() }
        } catch {
            throw Self.writeFailure(error)
        }
    }

    /// The body ended early: lets the stages write out what arrived, so the next fetch resumes after it. Failing
    /// only means resuming earlier (the partial file's size says where); the error is returned for the log.
    func stop() async -> (any Error)? {
        await endStages()
        return failure.current
    }

    // MARK: Stages

    private func endStages() async {
        guard let stages else { return }
        if encoding == .gzip {
            inflateQueue.close()
        } else {
            hashQueue.close()
            writeQueue.close()
        }
        await stages.wait()
        // The free blocks and their pool refer to each other: emptying it frees them.
        freeBlocks.cancel()
    }

    /// The first error stops every stage.
    private func fail(_ error: any Error) {
        let first = failure.withLock { recorded in
            guard recorded == nil else { return false }
            recorded = error
            return true
        }
        guard first else { return }
        inflateQueue.cancel()
        hashQueue.cancel()
        writeQueue.cancel()
        freeBlocks.cancel()
    }

    private func inflateStage() throws {
        guard let inflater else { return }
        // The writing stage also takes the received bytes from the network task, which queues its last one before
        // it closes this stage's queue: only after that may the writing and hashing queues be closed.
        defer {
            hashQueue.close()
            writeQueue.close()
        }
        for _ in 0..<Self.blocks { freeBlocks.put(FileBlock(capacity: Self.blockSize, pool: freeBlocks)) }
        guard var block = freeBlocks.take() else { return }
        func send() -> FileBlock? {
            block.users = 2
            hashQueue.put(.inflated(block))
            writeQueue.put(.file(.inflated(block)))
            return freeBlocks.take()
        }
        while let chunk = inflateQueue.take() {
            try chunk.withUnsafeBytes { input in
                var offset = 0
                while offset < input.count {
                    let (consumed, produced) = try inflate(
                        UnsafeRawBufferPointer(rebasing: input[offset...]), into: block, with: inflater)
                    offset += consumed
                    if block.count == block.storage.count {
                        guard let next = send() else { return }
                        block = next
                    } else if consumed == 0 && produced == 0 {
                        break
                    }
                }
            }
        }
        if block.count > 0 { _ = send() }
    }

    private func hashStage() {
        while let bytes = hashQueue.take() {
            bytes.withUnsafeBytes { file.hash($0) }
            bytes.release()
        }
    }

    private func writeStage() throws {
        while let write = writeQueue.take() {
            switch write {
            case .compressed(let chunk):
                try chunk.withUnsafeBytes { try compressed?.write($0) }
            case .file(let bytes):
                try bytes.withUnsafeBytes { try file.write($0) }
                bytes.release()
            }
        }
        try compressed?.flush()
        try file.flush()
    }

    // MARK: Inflating

    /// Inflates from `input` into the free end of `block`, counting what it produced against the promised size.
    private func inflate(_ input: UnsafeRawBufferPointer, into block: FileBlock, with inflater: GzipInflater) throws
        -> (
            consumed: Int, produced: Int
        )
    {
        let room = UnsafeMutableRawBufferPointer(rebasing: block.storage[block.count...])
        let step: (consumed: Int, produced: Int)
        do {
            step = try inflater.inflate(input, into: room)
        } catch let error as FerryError where error.code == .verification {
            throw Self.corrupt(error)
        }
        try countInflated(step.produced)
        block.count += step.produced
        return step
    }

    private func countInflated(_ count: Int) throws {
        if let fileLimit, fileBytes + Int64(count) > fileLimit {
            throw FerryError(
                .corruptTransfer,
                "the gzip stream inflates to more than the \(fileLimit) bytes the manifest announced; the download was discarded, fetch again"
            )
        }
        fileBytes += Int64(count)
    }

    private static func corrupt(_ error: FerryError) -> FerryError {
        FerryError(
            .corruptTransfer,
            "the server's gzip stream is corrupt (\(error.message)); the download was discarded, fetch again (an HTTP client or proxy that inflates gzip itself also causes this)"
        )
    }

    /// Inflates `chunk`, handing each piece to `deliver` after counting it against the promised size.
    private func inflate(
        _ chunk: UnsafeRawBufferPointer, with inflater: GzipInflater, deliver: (UnsafeRawBufferPointer) throws -> Void
    ) throws {
        do {
            try inflater.inflate(chunk) { piece in
                try countInflated(piece.count)
                try deliver(piece)
            }
        } catch let error as FerryError where error.code == .verification {
            throw Self.corrupt(error)
        }
    }

    /// Inflates the kept compressed prefix into `partial.sqlite` (from byte 0), hashing it, so the inflater stands
    /// exactly where the kept bytes end. Runs before the stages start, on the caller's thread.
    private func reinflatePrefix(of compressed: VerifiedFile, with inflater: GzipInflater) throws {
        do {
            try compressed.readKept { chunk in
                try inflate(chunk, with: inflater) { piece in try file.append(piece) }
            }
        } catch let error as FerryError where error.code == .corruptTransfer {
            throw UnusablePrefix(reason: "the kept compressed prefix cannot be inflated: \(error.message)")
        }
        if inflater.isFinished {
            throw UnusablePrefix(reason: "the kept compressed prefix already holds the whole gzip stream")
        }
    }

    /// A write's error for the caller: out of space becomes `FerryError.Code.diskFull`, saying that the download
    /// resumes.
    private static func writeFailure(_ error: any Error) -> any Error {
        guard FerryError.isOutOfSpace(error) else { return error }
        return FerryError(
            .diskFull,
            "cannot write the download: the disk is full; free space and fetch again (the download resumes, database.db is unchanged)",
            path: (error as? FerryError)?.path)
    }
}

/// A block of inflated bytes of the SQLite file, lent by the inflating stage to the hashing and writing stages and
/// back to its pool once both are done with it. `@unchecked Sendable`: the inflating stage fills it before it queues
/// it; after that it is only read, and `users` is counted under a lock.
final class FileBlock: @unchecked Sendable {
    let storage: UnsafeMutableRawBufferPointer
    /// Bytes filled from the start.
    var count = 0
    /// Stages still to read it.
    var users = 0
    private let lock = NSLock()
    private let pool: StageQueue<FileBlock>

    init(capacity: Int, pool: StageQueue<FileBlock>) {
        storage = .allocate(byteCount: capacity, alignment: 64)
        self.pool = pool
    }

    deinit { storage.deallocate() }

    /// One stage is done with it: the last one gives it back, empty.
    func release() {
        lock.lock()
        users -= 1
        let last = users == 0
        lock.unlock()
        guard last else { return }
        count = 0
        pool.put(self)
    }
}

/// Bytes of the SQLite file for the hashing and writing stages: a chunk as received, or an inflated block.
enum FileBytes: Sendable {
    case received(Data)
    case inflated(FileBlock)

    func withUnsafeBytes<T>(_ body: (UnsafeRawBufferPointer) throws -> T) rethrows -> T {
        switch self {
        case .received(let data): try data.withUnsafeBytes(body)
        case .inflated(let block):
            try body(UnsafeRawBufferPointer(start: block.storage.baseAddress, count: block.count))
        }
    }

    /// A stage is done with these bytes.
    func release() {
        if case .inflated(let block) = self { block.release() }
    }
}
