import FerryCore
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// `ferry serve` as a child process, with the URL it prints once it listens; stopped by its PID.
final class StatusServeProcess: @unchecked Sendable {
    let process = Process()
    let url: String
    private let buffer = Locked("")

    /// Everything it printed so far (stdout and stderr).
    var output: String { buffer.current }

    init(arguments: [String]) async throws {
        process.executableURL = TestPaths.ferryBinary
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        let buffer = self.buffer
        pipe.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            guard !data.isEmpty else {
                handle.readabilityHandler = nil
                return
            }
            buffer.withLock { $0 += String(decoding: data, as: UTF8.self) }
        }
        try process.run()
        let deadline = Date().addingTimeInterval(60)
        var found: String?
        while Date() < deadline, process.isRunning {
            let current = buffer.current
            if let range = current.range(of: #"listening on http://127\.0\.0\.1:\d+"#, options: .regularExpression) {
                found = String(current[range].dropFirst("listening on ".count))
                break
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        guard let found else {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            throw FerryError(.network, "ferry serve did not start: \(buffer.current)")
        }
        url = found
    }

    /// SIGTERM, then SIGKILL if it has not exited within 10 s.
    func stop() {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGTERM)
        let deadline = Date().addingTimeInterval(10)
        while process.isRunning, Date() < deadline { usleep(50_000) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }
}
