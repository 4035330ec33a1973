import FerryCore
import Foundation

/// The error codes the client adds to `FerryError.Code`. Every client error is a `FerryError` whose message says
/// what to do; none of them ever touches `database.db`.
///
/// ```swift
/// do { _ = try await client.checkForUpdates() }
/// catch let error as FerryError where error.code == .offline { /* normal: keep using database.db */ }
/// ```
extension FerryError.Code {
    /// The server could not be reached. Offline is normal: the app keeps working on `database.db`.
    public static let offline = Self("offline")
    /// The downloaded bytes do not hash to the checksum the server promised (ETag / Repr-Digest).
    public static let checksumMismatch = Self("checksum-mismatch")
    /// The downloaded file is not a SQLite database, fails `PRAGMA quick_check`, or is not a Ferry snapshot.
    public static let notSQLite = Self("not-sqlite")
    /// The transfer was cut short or the server answered a range request inconsistently.
    public static let corruptTransfer = Self("corrupt-transfer")
    /// Another process (or another `FerryClient`) uses this client directory.
    public static let busy = Self("busy")
    /// There is no `database.db` yet: the initial sync has not happened.
    public static let noDatabase = Self("no-database")
    /// `rollback()` was called but there is no `previous.db` to go back to.
    public static let noPreviousVersion = Self("no-previous-version")
}
