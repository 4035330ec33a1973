import ArgumentParser
import FerryClient
import FerryCore
import Foundation
import Logging

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Options and output shared by the client subcommands (fetch, apply, status, rollback).
struct ClientDirectoryOptions: ParsableArguments {
    @Option(name: .long, help: "The client directory (database.db, updated.db, previous.db, .ferry/).")
    var dir: String

    @Flag(name: .long, help: "Log what the client does (to stderr).")
    var verbose = false

    var directoryURL: URL { URL(fileURLWithPath: dir) }

    /// Fails (exit 1) when the directory does not exist: apply and rollback never create one.
    func requireExisting() throws {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: dir, isDirectory: &isDirectory), isDirectory.boolValue else {
            throw FerryError(.notFound, "no client directory here: run `ferry fetch --dir \(dir) ...` first", path: dir)
        }
    }

    /// Opens the existing directory without applying anything, runs `body`, and closes the client either way.
    func withClient<T: Sendable>(
        _ configuration: FerryClient.Configuration? = nil, _ body: (FerryClient) async throws -> T
    ) async throws -> T {
        try requireExisting()
        var configuration = configuration ?? FerryClient.Configuration(directory: directoryURL)
        configuration.update.applyOnOpen = false
        let client = try await FerryClient.open(configuration: configuration, logger: logger())
        do {
            let result = try await body(client)
            await client.close()
            return result
        } catch {
            await client.close()
            throw error
        }
    }

    /// A logger on stderr (stdout stays clean for --json); warnings only unless --verbose.
    func logger() -> Logger {
        var logger = Logger(label: "ferry.client") { StreamLogHandler.standardError(label: $0) }
        logger.logLevel = verbose ? .debug : .warning
        return logger
    }
}

/// A byte rate such as `500K`, `2M` or `1048576` (bytes per second), for `--limit-rate`.
struct ByteRate: ExpressibleByArgument {
    let bytesPerSecond: Int64

    init?(argument: String) {
        let text = argument.trimmingCharacters(in: .whitespaces).uppercased()
        let multipliers: [Character: Int64] = ["K": 1 << 10, "M": 1 << 20, "G": 1 << 30]
        var digits = Substring(text)
        var multiplier: Int64 = 1
        if let last = text.last, let m = multipliers[last] {
            multiplier = m
            digits = text.dropLast()
        }
        guard let value = Int64(digits), value > 0 else { return nil }
        bytesPerSecond = value * multiplier
    }
}

/// A one-line progress bar on stderr, drawn only when stderr is a terminal, at most ten times a second.
/// Unchecked Sendable: `lastDraw` and `drawn` are read and written only under `lock`.
final class ProgressBar: @unchecked Sendable {
    private let lock = NSLock()
    private var lastDraw = Date.distantPast
    private var drawn = false

    /// A bar when stderr is a terminal, else nil (pipes and CI logs get no control characters).
    static func ifTerminal() -> ProgressBar? { isatty(STDERR_FILENO) == 1 ? ProgressBar() : nil }

    func update(_ progress: FetchProgress) {
        lock.lock()
        defer { lock.unlock() }
        let now = Date()
        let done = progress.totalBytes.map { progress.bytesReceived >= $0 } ?? false
        guard done || now.timeIntervalSince(lastDraw) >= 0.1 else { return }
        lastDraw = now
        drawn = true
        var line: String
        if let total = progress.totalBytes, total > 0 {
            let fraction = min(1, Double(progress.bytesReceived) / Double(total))
            let width = 30
            let filled = Int(fraction * Double(width))
            line = "[" + String(repeating: "#", count: filled) + String(repeating: " ", count: width - filled) + "] "
            line += String(
                format: "%3.0f%% %@ / %@", fraction * 100, Self.bytes(progress.bytesReceived), Self.bytes(total))
        } else {
            line = Self.bytes(progress.bytesReceived)
        }
        if progress.resumedFrom > 0 { line += " (resumed at \(Self.bytes(progress.resumedFrom)))" }
        FileHandle.standardError.write(Data(("\r" + line + "\u{1B}[K").utf8))
    }

    func finish() {
        lock.lock()
        defer { lock.unlock() }
        if drawn { FileHandle.standardError.write(Data("\n".utf8)) }
        drawn = false
    }

    static func bytes(_ n: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB"]
        var value = Double(n)
        var unit = 0
        while value >= 1024 && unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(n) B" : String(format: "%.1f %@", value, units[unit])
    }
}
