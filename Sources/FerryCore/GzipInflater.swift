import CZlib
import Foundation

/// Streaming gzip decompression: compressed bytes go in as they arrive, inflated bytes come out in pieces of at most
/// `outputChunkSize`, so memory stays flat whatever the size of the stream (or of a gzip bomb: the caller sees every
/// piece and can stop). zlib checks the gzip trailer (CRC-32 and length) at the end; bytes after the end of the
/// stream are an error. One inflater serves one stream, used by one caller at a time.
///
/// ```swift
/// let inflater = try GzipInflater()
/// for chunk in compressedChunks {
///     try inflater.inflate(chunk) { piece in hasher.update(bufferPointer: piece) }
/// }
/// try inflater.finish()   // throws when the stream stopped before its trailer
/// ```
public final class GzipInflater {
    /// True once the whole gzip stream, trailer included, has been read and checked.
    public private(set) var isFinished = false
    /// Compressed bytes consumed so far.
    public private(set) var bytesIn: Int64 = 0
    /// Inflated bytes produced so far.
    public private(set) var bytesOut: Int64 = 0

    // zlib keeps a pointer back to its z_stream and refuses a moved one, so it lives at a fixed address.
    private let stream: UnsafeMutablePointer<z_stream>
    private let output: UnsafeMutableRawBufferPointer

    /// Starts an inflater for one gzip stream (the gzip wrapper only, not raw deflate or zlib).
    public init(outputChunkSize: Int = 256 << 10) throws {
        stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
        stream.initialize(to: z_stream())
        output = UnsafeMutableRawBufferPointer.allocate(byteCount: max(outputChunkSize, 4096), alignment: 1)
        // windowBits 15 + 16: expect the gzip wrapper and check its trailer.
        guard inflateInit2_(stream, 15 + 16, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size)) == Z_OK else {
            stream.deinitialize(count: 1)
            stream.deallocate()
            output.deallocate()
            throw FerryError(.io, "zlib inflateInit failed (out of memory?)")
        }
    }

    deinit {
        inflateEnd(stream)
        stream.deinitialize(count: 1)
        stream.deallocate()
        output.deallocate()
    }

    /// Inflates `input`, handing each piece of inflated bytes to `consume` (the buffer is valid only during that
    /// call). Throws ``FerryError/Code/verification`` for corrupt data, a failed trailer check or bytes after the
    /// end of the stream; what `consume` throws is passed on.
    public func inflate(_ input: UnsafeRawBufferPointer, _ consume: (UnsafeRawBufferPointer) throws -> Void) throws {
        guard let base = input.baseAddress, input.count > 0 else { return }
        guard !isFinished else {
            throw FerryError(.verification, "\(input.count) bytes follow the end of the gzip stream")
        }
        stream.pointee.next_in = UnsafeMutablePointer(mutating: base.assumingMemoryBound(to: Bytef.self))
        stream.pointee.avail_in = uInt(input.count)
        defer {
            stream.pointee.next_in = nil
            stream.pointee.avail_in = 0
        }
        while true {
            let before = Int(stream.pointee.avail_in)
            stream.pointee.next_out = output.baseAddress!.assumingMemoryBound(to: Bytef.self)
            stream.pointee.avail_out = uInt(output.count)
            let rc = zlibInflate(stream, Z_NO_FLUSH)
            let produced = output.count - Int(stream.pointee.avail_out)
            bytesIn += Int64(before - Int(stream.pointee.avail_in))
            bytesOut += Int64(produced)
            switch rc {
            case Z_OK, Z_BUF_ERROR, Z_STREAM_END:
                break
            default:
                let reason = stream.pointee.msg.map { String(cString: $0) } ?? "zlib error \(rc)"
                throw FerryError(
                    .verification, "the gzip stream is corrupt after \(bytesIn) compressed bytes: \(reason)")
            }
            if produced > 0 { try consume(UnsafeRawBufferPointer(start: output.baseAddress, count: produced)) }
            if rc == Z_STREAM_END {
                isFinished = true
                let rest = Int(stream.pointee.avail_in)
                guard rest == 0 else {
                    throw FerryError(.verification, "\(rest) bytes follow the end of the gzip stream")
                }
                return
            }
            // Done when all input is consumed and the output buffer was not filled (nothing more is pending), or
            // when zlib can make no progress at all (Z_BUF_ERROR: it needs more input).
            if rc == Z_BUF_ERROR || (stream.pointee.avail_in == 0 && stream.pointee.avail_out > 0) { return }
        }
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

/// zlib's `inflate`, under a name the inflater's own `inflate` methods do not hide.
private func zlibInflate(_ stream: UnsafeMutablePointer<z_stream>, _ flush: Int32) -> Int32 {
    inflate(stream, flush)
}
