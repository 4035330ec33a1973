import Foundation

/// Streaming gzip decompression: compressed bytes go in as they arrive, inflated bytes come out in pieces of at most
/// `outputChunkSize`, so memory stays flat whatever the size of the stream (or of a gzip bomb: the caller sees every
/// piece and can stop). The trailer (CRC-32 and length) is checked at the end; bytes after the end of the stream are
/// an error, and so is a second gzip member. One inflater serves one stream, used by one caller at a time.
///
/// The work is done by the fastest inflate the platform has (ISA-L's igzip on Linux, zlib elsewhere), behind one
/// small internal interface, ``InflateEngine``; every engine gives the same bytes and refuses the same streams.
///
/// ```swift
/// let inflater = try GzipInflater()
/// for chunk in compressedChunks {
///     try inflater.inflate(chunk) { piece in hasher.update(bufferPointer: piece) }
/// }
/// try inflater.finish()   // throws when the stream stopped before its trailer
/// ```
public final class GzipInflater {
    /// Which inflate does the work: the platform's fastest, or zlib (the fallback, and the reference in tests).
    package enum Engine: Sendable, CaseIterable {
        case platform
        case zlib
    }

    /// True once the whole gzip stream, trailer included, has been read and checked.
    public private(set) var isFinished = false
    /// Compressed bytes consumed so far.
    public private(set) var bytesIn: Int64 = 0
    /// Inflated bytes produced so far.
    public private(set) var bytesOut: Int64 = 0

    private let engine: any InflateEngine
    private let output: UnsafeMutableRawBufferPointer

    /// Starts an inflater for one gzip stream (the gzip wrapper only, not raw deflate or zlib).
    public convenience init(outputChunkSize: Int = 256 << 10) throws {
        try self.init(outputChunkSize: outputChunkSize, engine: .platform)
    }

    /// An inflater on a chosen engine: tests compare the platform's with zlib's.
    package init(outputChunkSize: Int = 256 << 10, engine: Engine) throws {
        switch engine {
        case .platform: self.engine = try makePlatformInflateEngine()
        case .zlib: self.engine = try ZlibInflateEngine()
        }
        output = UnsafeMutableRawBufferPointer.allocate(byteCount: max(outputChunkSize, 4096), alignment: 64)
    }

    deinit { output.deallocate() }

    /// The name of the engine `GzipInflater()` uses on this platform ("igzip", "zlib"), for logs and benchmarks.
    package static var platformEngineName: String { platformInflateEngineName }

    /// Inflates `input`, handing each piece of inflated bytes to `consume` (the buffer is valid only during that
    /// call). Throws ``FerryError/Code/verification`` for corrupt data, a failed trailer check or bytes after the
    /// end of the stream; what `consume` throws is passed on.
    public func inflate(_ input: UnsafeRawBufferPointer, _ consume: (UnsafeRawBufferPointer) throws -> Void) throws {
        guard let base = input.baseAddress, input.count > 0 else { return }
        guard !isFinished else {
            throw FerryError(.verification, "\(input.count) bytes follow the end of the gzip stream")
        }
        var offset = 0
        while true {
            let step = try engineStep(UnsafeRawBufferPointer(start: base + offset, count: input.count - offset), output)
            offset += step.consumed
            if step.produced > 0 {
                try consume(UnsafeRawBufferPointer(start: output.baseAddress, count: step.produced))
            }
            if step.ended {
                let rest = input.count - offset
                guard rest == 0 else {
                    throw FerryError(.verification, "\(rest) bytes follow the end of the gzip stream")
                }
                return
            }
            // Done when all input is consumed and the output was not filled (nothing more is pending), or when the
            // engine made no progress at all (it needs more input).
            if (offset == input.count && step.produced < output.count) || (step.consumed == 0 && step.produced == 0) {
                return
            }
        }
    }

    /// Inflates from `input` straight into `output` (no copy through the inflater's own buffer) until the input is
    /// consumed, the output is full or the stream ends; returns how many bytes of each it used. The caller calls again
    /// with the rest of the input while `consumed < input.count`. The same errors as
    /// ``inflate(_:_:)-(UnsafeRawBufferPointer,_)``, bytes after the end of the stream included.
    package func inflate(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) throws -> (
        consumed: Int, produced: Int
    ) {
        guard !input.isEmpty else { return (0, 0) }
        guard !isFinished else {
            throw FerryError(.verification, "\(input.count) bytes follow the end of the gzip stream")
        }
        guard !output.isEmpty else { return (0, 0) }
        let step = try engineStep(input, output)
        if step.ended, step.consumed < input.count {
            throw FerryError(.verification, "\(input.count - step.consumed) bytes follow the end of the gzip stream")
        }
        return (step.consumed, step.produced)
    }

    private func engineStep(_ input: UnsafeRawBufferPointer, _ output: UnsafeMutableRawBufferPointer) throws
        -> InflateStep
    {
        let step: InflateStep
        do {
            step = try engine.step(input, output)
        } catch let failure as InflateFailure {
            throw FerryError(
                .verification, "the gzip stream is corrupt after \(bytesIn) compressed bytes: \(failure.reason)")
        }
        bytesIn += Int64(step.consumed)
        bytesOut += Int64(step.produced)
        if step.ended { isFinished = true }
        return step
    }

    /// ``inflate(_:_:)-(UnsafeRawBufferPointer,_)`` for `Data`.
    public func inflate(_ input: Data, _ consume: (UnsafeRawBufferPointer) throws -> Void) throws {
        try input.withUnsafeBytes { try inflate($0, consume) }
    }

    /// Checks that the stream ended properly: throws ``FerryError/Code/verification`` when its end (the trailer)
    /// has not been read, i.e. the compressed data stopped early.
    public func finish() throws {
        guard isFinished else {
            throw FerryError(
                .verification, "the gzip stream ends early, after \(bytesIn) compressed bytes, before its trailer")
        }
    }
}
