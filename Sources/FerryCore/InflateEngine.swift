import CZlib

#if canImport(CISAL)
    import CISAL
#endif

/// What one ``InflateEngine/step(_:_:)`` did.
struct InflateStep {
    /// Compressed bytes consumed from the input.
    var consumed: Int
    /// Inflated bytes written to the start of the output.
    var produced: Int
    /// The gzip member ended and its trailer (CRC-32, length) checked out; input after `consumed` is not part of it.
    var ended: Bool
}

/// Why an engine refused its input (a corrupt stream, a failed trailer check), in its library's words.
struct InflateFailure: Error {
    var reason: String
}

/// The one interface behind ``GzipInflater``: inflates one gzip member (header, deflate data, checked trailer),
/// from any split of its input. An engine keeps no bytes back: when `step` returns with input left, the output is
/// full; when it returns with room left in the output, it has consumed all the input (or the member ended).
protocol InflateEngine: AnyObject {
    func step(_ input: UnsafeRawBufferPointer, _ output: UnsafeMutableRawBufferPointer) throws -> InflateStep
}

// The platform's choice, in one place: igzip where ISA-L is linked (Linux), zlib elsewhere.
#if canImport(CISAL)
    let platformInflateEngineName = "igzip"
    func makePlatformInflateEngine() throws -> any InflateEngine { IgzipInflateEngine() }
#else
    let platformInflateEngineName = "zlib"
    func makePlatformInflateEngine() throws -> any InflateEngine { try ZlibInflateEngine() }
#endif

/// zlib's inflate (windowBits 15 + 16: the gzip wrapper, its trailer checked): the fallback everywhere.
final class ZlibInflateEngine: InflateEngine {
    // zlib keeps a pointer back to its z_stream and refuses a moved one, so it lives at a fixed address.
    private let stream: UnsafeMutablePointer<z_stream>

    init() throws {
        stream = UnsafeMutablePointer<z_stream>.allocate(capacity: 1)
        stream.initialize(to: z_stream())
        guard inflateInit2_(stream, 15 + 16, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size)) == Z_OK else {
            stream.deinitialize(count: 1)
            stream.deallocate()
            throw FerryError(.io, "zlib inflateInit failed (out of memory?)")
        }
    }

    deinit {
        inflateEnd(stream)
        stream.deinitialize(count: 1)
        stream.deallocate()
    }

    func step(_ input: UnsafeRawBufferPointer, _ output: UnsafeMutableRawBufferPointer) throws -> InflateStep {
        stream.pointee.next_in = UnsafeMutablePointer(mutating: input.baseAddress?.assumingMemoryBound(to: Bytef.self))
        stream.pointee.avail_in = uInt(input.count)
        stream.pointee.next_out = output.baseAddress!.assumingMemoryBound(to: Bytef.self)
        stream.pointee.avail_out = uInt(output.count)
        defer {
            stream.pointee.next_in = nil
            stream.pointee.avail_in = 0
        }
        let rc = inflate(stream, Z_NO_FLUSH)
        switch rc {
        case Z_OK, Z_BUF_ERROR, Z_STREAM_END:
            return InflateStep(
                consumed: input.count - Int(stream.pointee.avail_in),
                produced: output.count - Int(stream.pointee.avail_out), ended: rc == Z_STREAM_END)
        default:
            throw InflateFailure(reason: stream.pointee.msg.map { String(cString: $0) } ?? "zlib error \(rc)")
        }
    }
}

#if canImport(CISAL)
    /// ISA-L's igzip inflate (`ISAL_GZIP`: it parses the header and checks the CRC-32 and length of the trailer):
    /// several times zlib's speed on x86-64 and arm64.
    final class IgzipInflateEngine: InflateEngine {
        /// ~80 KB of tables: zero-filled on the heap, never built as a Swift value (which could put it on a stack).
        private let state: UnsafeMutablePointer<inflate_state>

        init() {
            let raw = UnsafeMutableRawPointer.allocate(
                byteCount: MemoryLayout<inflate_state>.size, alignment: MemoryLayout<inflate_state>.alignment)
            raw.initializeMemory(as: UInt8.self, repeating: 0, count: MemoryLayout<inflate_state>.size)
            state = raw.bindMemory(to: inflate_state.self, capacity: 1)
            isal_inflate_init(state)
            state.pointee.crc_flag = UInt32(ISAL_GZIP)
        }

        deinit { state.deallocate() }

        func step(_ input: UnsafeRawBufferPointer, _ output: UnsafeMutableRawBufferPointer) throws -> InflateStep {
            state.pointee.next_in = UnsafeMutablePointer(
                mutating: input.baseAddress?.assumingMemoryBound(to: UInt8.self))
            state.pointee.avail_in = UInt32(input.count)
            state.pointee.next_out = output.baseAddress!.assumingMemoryBound(to: UInt8.self)
            state.pointee.avail_out = UInt32(output.count)
            defer {
                state.pointee.next_in = nil
                state.pointee.avail_in = 0
            }
            let rc = isal_inflate(state)
            guard rc >= ISAL_DECOMP_OK, rc != ISAL_NEED_DICT else { throw InflateFailure(reason: Self.reason(rc)) }
            return InflateStep(
                consumed: input.count - Int(state.pointee.avail_in),
                produced: output.count - Int(state.pointee.avail_out),
                ended: state.pointee.block_state == ISAL_BLOCK_FINISH)
        }

        private static func reason(_ rc: Int32) -> String {
            switch rc {
            case ISAL_INVALID_BLOCK: "invalid deflate block"
            case ISAL_INVALID_SYMBOL: "invalid deflate symbol"
            case ISAL_INVALID_LOOKBACK: "invalid distance too far back"
            case ISAL_INVALID_WRAPPER: "incorrect header check"
            case ISAL_UNSUPPORTED_METHOD: "unknown compression method"
            case ISAL_INCORRECT_CHECKSUM: "incorrect data check or length"
            case ISAL_NEED_DICT: "a preset dictionary is needed"
            default: "igzip error \(rc)"
            }
        }
    }
#endif
