import CSQLite

/// Whether the SQLite linked into this process has the session extension, which patches (``Changeset``) need: an app
/// that bundles its own SQLite (SQLCipher, a GRDB custom build) must compile it with `SQLITE_ENABLE_SESSION` and
/// `SQLITE_ENABLE_PREUPDATE_HOOK` (docs/client.md). Debian's libsqlite3 and Apple's system SQLite have both.
///
/// ```swift
/// try SessionExtension.require()   // FerryClient.open does this once
/// ```
public enum SessionExtension {
    /// The compile options missing from the linked SQLite, empty when it has both; asked once per process.
    public static let missingOptions: [String] = ["ENABLE_SESSION", "ENABLE_PREUPDATE_HOOK"].filter { sqlite3_compileoption_used($0) == 0 }

    /// Throws a ``FerryError`` (code `sqlite`) naming the missing compile options and the fix, when there are any.
    public static func require() throws {
        guard missingOptions.isEmpty else {
            throw FerryError(
                .sqlite,
                "the SQLite linked into this app (\(String(cString: sqlite3_libversion()))) was compiled without \(missingOptions.map { "SQLITE_\($0)" }.joined(separator: " and ")); Ferry's patches need the session extension: build the bundled SQLite with -DSQLITE_ENABLE_SESSION -DSQLITE_ENABLE_PREUPDATE_HOOK, or use the system's",
                key: "SQLITE_ENABLE_SESSION")
        }
    }
}
