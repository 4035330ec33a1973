import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

#if canImport(Glibc)
    private let systemSend = Glibc.send
#else
    private let systemSend = Darwin.send
#endif

/// A blocking HTTP/1.1 connection over a plain socket, for tests that must read a body slowly (HummingbirdTesting's
/// client always reads whole responses).
final class RawHTTPConnection: @unchecked Sendable {
    fileprivate let fd: Int32
    fileprivate var pending = [UInt8]()

    init(port: Int) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EIO) }
        // A small receive buffer keeps the server from getting far ahead of the reader.
        var small: Int32 = 64 * 1024
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard result == 0 else {
            close(fd)
            throw POSIXError(.ECONNREFUSED)
        }
    }

    deinit { close(fd) }

    func send(_ text: String) throws {
        let bytes = Array(text.utf8)
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { systemSend(fd, $0.baseAddress, $0.count, 0) }
            guard n > 0 else { throw POSIXError(.EPIPE) }
            sent += n
        }
    }

    /// Reads the status line and headers; returns (status code, lower-cased header names → values).
    func readHead() throws -> (status: Int, headers: [String: String]) {
        while true {
            if let end = findHeaderEnd() {
                let text = String(decoding: pending[..<end], as: UTF8.self)
                pending.removeFirst(end + 4)
                var lines = text.components(separatedBy: "\r\n")
                let statusLine = lines.removeFirst().split(separator: " ")
                var headers: [String: String] = [:]
                for line in lines {
                    guard let colon = line.firstIndex(of: ":") else { continue }
                    headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(
                        in: .whitespaces)
                }
                return (Int(statusLine[1]) ?? 0, headers)
            }
            guard try fill() else { throw POSIXError(.ECONNRESET) }
        }
    }

    /// Reads the status line and header lines as sent, in order (without the blank line that ends them).
    func readHeadLines() throws -> [String] {
        while true {
            if let end = findHeaderEnd() {
                let text = String(decoding: pending[..<end], as: UTF8.self)
                pending.removeFirst(end + 4)
                return text.components(separatedBy: "\r\n")
            }
            guard try fill() else { throw POSIXError(.ECONNRESET) }
        }
    }

    /// Reads exactly `count` body bytes.
    func read(_ count: Int) throws -> [UInt8] {
        while pending.count < count {
            guard try fill() else { throw POSIXError(.ECONNRESET) }
        }
        let out = Array(pending[..<count])
        pending.removeFirst(count)
        return out
    }

    /// Reads until the server closes the connection.
    func readToEnd() throws -> [UInt8] {
        while try fill() {}
        defer { pending.removeAll() }
        return pending
    }

    private func fill() throws -> Bool {
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        // The errno names what happened (EAGAIN: SO_RCVTIMEO ran out; ECONNRESET: the server reset the connection)
        if n < 0 { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        if n == 0 { return false }
        pending.append(contentsOf: buffer[..<n])
        return true
    }

    private func findHeaderEnd() -> Int? {
        guard pending.count >= 4 else { return nil }
        for i in 0...(pending.count - 4)
        where pending[i] == 13 && pending[i + 1] == 10 && pending[i + 2] == 13 && pending[i + 3] == 10 {
            return i
        }
        return nil
    }
}

/// Runs blocking socket I/O off Swift's cooperative pool (``offCooperativePool(_:)``): the live server's handlers
/// run there, and a test blocking its few threads while waiting for the server would deadlock.
func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await offCooperativePool(body)
}

extension RawHTTPConnection {
    /// Bounds every blocking send and receive on this socket (SO_SNDTIMEO, SO_RCVTIMEO).
    func setTimeouts(seconds: Int) {
        var value = timeval(tv_sec: seconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &value, socklen_t(MemoryLayout<timeval>.size))
    }

    /// Sends all of `bytes`; false when the peer stopped taking them (closed, reset, or the send timed out).
    func trySend(_ bytes: [UInt8]) -> Bool {
        var sent = 0
        while sent < bytes.count {
            let n = bytes[sent...].withUnsafeBytes { systemSend(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard n > 0 else { return false }
            sent += n
        }
        return true
    }

    /// Whether the server has sent something (or closed) within `milliseconds`.
    func isReadable(milliseconds: Int32 = 0) -> Bool {
        if !pending.isEmpty { return true }
        var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        return poll(&descriptor, 1, milliseconds) > 0
    }
}
