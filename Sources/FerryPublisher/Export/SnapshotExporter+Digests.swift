import FerryCore
import FerryPostgres
import Foundation

extension SnapshotExporter {
    /// Everything besides the rows that shapes a snapshot file: the dataset, schema version, each plan (columns,
    /// types, key, indexes), the CREATE and INSERT statements, the schema file, and the version of Ferry's row
    /// encoding. A row index is reused only under an equal digest.
    static func planDigest(dataset: String, schemaVersion: Int, plans: [TablePlan], schemaDDL: String?) -> String {
        var hash = StreamingSHA256()
        hash.update("ferry-rows-v1\ndataset=\(dataset)\nschemaVersion=\(schemaVersion)\n")
        for plan in plans { hash.update(plan.definition + plan.createSQL + "\n" + plan.insertSQL + "\n") }
        hash.update(attachmentDefinition(plans))
        hash.update("schema=\(schemaDDL ?? "")\nmetadata=\(SnapshotMetadata.ddl)\n")
        return hash.finalizeHex()
    }

    /// The attachment columns, as both digests take them: nothing when there is none, so a dataset without
    /// attachments keeps the digests it had.
    static func attachmentDefinition(_ plans: [TablePlan]) -> String {
        let columns = plans.flatMap(\.table.attachmentColumns)
        guard !columns.isEmpty else { return "" }
        return "attachments="
            + columns.map { "\($0.table).\($0.column):\($0.download.rawValue)" }.joined(separator: ",")
            + "\n"
    }

    /// The data digest as it starts for `plans` (also ``PartitionProbe``'s start).
    func startDigest(plans: [TablePlan], schemaDDL: String?) -> StreamingSHA256 {
        var digest = StreamingSHA256()
        digest.update("ferry-data-v1\ndataset=\(template.dataset)\nschemaVersion=\(template.schemaVersion)\n")
        for plan in plans { digest.update(plan.definition) }
        digest.update(Self.attachmentDefinition(plans))
        if let ddl = schemaDDL { digest.update("schema=\(ddl)\n") }
        return digest
    }
}
