import FerryPublisher
import Foundation

/// Draws one progress line per table on stderr, only when stderr is a terminal.
enum TerminalProgress {
    static func makeIfTerminal() -> (@Sendable (PublishProgress) -> Void)? {
        guard isatty(STDERR_FILENO) == 1 else { return nil }
        return { p in
            if let scope = p.scope {
                // Scopes export in parallel: one finished line per table, no redrawn line.
                guard p.finished else { return }
                let line = String(format: "scope %@ · %@: %d rows in %.2fs\n", scope, p.table, p.rows, p.seconds)
                FileHandle.standardError.write(Data(line.utf8))
                return
            }
            let rate = p.seconds > 0 ? "\(Int(p.rowsPerSecond)) rows/s" : ""
            let line =
                "\r\u{1B}[K\(p.table): \(p.rows) rows \(rate)"
                + (p.finished ? String(format: " in %.2fs\n", p.seconds) : "")
            FileHandle.standardError.write(Data(line.utf8))
        }
    }
}
