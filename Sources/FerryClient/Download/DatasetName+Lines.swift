import FerryCore

extension DatasetName {
    /// Whether `name` (a manifest's, a snapshot's or a partial download's dataset) is the configured dataset `base`
    /// itself or one of its schema lines (`trips.v2`); a line must carry the schema version it claims, when that is
    /// known (`schemaVersion`).
    ///
    /// ```swift
    /// DatasetName.names("trips.v2", lineOf: "trips", schemaVersion: 2)   // true
    /// DatasetName.names("trips.v2", lineOf: "trips", schemaVersion: 1)   // false: line 2 says schema 1
    /// DatasetName.names("rides", lineOf: "trips", schemaVersion: nil)    // false
    /// ```
    static func names(_ name: String, lineOf base: String, schemaVersion: Int?) -> Bool {
        if name == base { return true }
        guard let parts = split(name), parts.base == base, let line = parts.schemaVersion else { return false }
        return schemaVersion.map { $0 == line } ?? true
    }
}
