import FerryCore
import Yams

/// The `partition:` section and the checks that place every table of a partitioned template.
extension TemplateParser {
    static let partitionKeys = ["table", "key", "values", "access"]

    func parsePartition(_ node: Node) throws -> Template.Partition {
        let map = try mapping(node, key: "partition", allowed: Self.partitionKeys)
        guard let tableNode = map["table"] else {
            throw fail(
                "partition.table", "missing required key `table`: the table whose rows are the partitions", at: node)
        }
        guard let keyNode = map["key"] else {
            throw fail("partition.key", "missing required key `key`: the partition table's key column", at: node)
        }
        var partition = Template.Partition(
            table: try string(tableNode, key: "partition.table"), key: try column(keyNode, key: "partition.key"))
        if let node = map["values"] { partition.values = try trimmedSQL(node, key: "partition.values") }
        if let node = map["access"] {
            partition.access = try tokenQuery(
                node, key: "partition.access", what: "access",
                example: "SELECT project_id FROM project_members WHERE token_sha256 = $1")
        }
        return partition
    }

    /// Every table of a partitioned template has one place: a partition through a column, a partition through its
    /// parent, or shared; `partition:` on a table needs the section, and the section is never combined with `scope:`.
    func checkPartitions(
        _ tables: [Template.Table], partition: Template.Partition?, scope: Template.Scope?, node: Node?,
        sequence: Node.Sequence
    ) throws {
        guard let partition else {
            if let i = tables.firstIndex(where: { $0.partition != nil }) {
                throw fail(
                    "tables[\(i)].partition",
                    "table '\(tables[i].name)' names a partition column but the template has no `partition:` section; add one (see docs/partitions.md) or remove the key",
                    at: sequence[i])
            }
            return
        }
        if scope != nil {
            throw fail(
                "partition",
                "a template has `scope:` or `partition:`, not both (this version does not combine them); give partitions an `access:` query instead of a scope",
                at: node)
        }
        guard let owner = tables.firstIndex(where: { $0.name == partition.table }) else {
            throw fail(
                "partition.table",
                "'\(partition.table)' is not a table of this template; tables: \(tables.map(\.name).joined(separator: ", "))",
                at: node)
        }
        if let column = tables[owner].partition, column != partition.key {
            throw fail(
                "tables[\(owner)].partition",
                "table '\(partition.table)' holds the partitions: each one is in its own partition, through its key `\(partition.key)`; write `partition: \(partition.key)`, or remove the line to share the list",
                at: sequence[owner])
        }
        for (i, table) in tables.enumerated() {
            for (key, sql) in [("filter", table.filter), ("query", table.query)] {
                if let sql, ScopeSQL.usesScope(sql) {
                    throw fail(
                        "tables[\(i)].\(key)",
                        "table '\(table.name)': :scope has no meaning in a partitioned template; place rows with `partition: COLUMN` or `parent:`",
                        at: sequence[i])
                }
            }
            if table.partition != nil, table.parent != nil {
                throw fail(
                    "tables[\(i)].partition",
                    "table '\(table.name)' has both `partition:` and `parent:`, so a row could belong to two partitions; keep one",
                    at: sequence[i])
            }
            if let parent = table.parent, let index = tables.firstIndex(where: { $0.name == parent.table }),
                Self.isShared(index, in: tables)
            {
                throw fail(
                    "tables[\(i)].parent.table",
                    "table '\(table.name)': its parent '\(parent.table)' is shared, so its rows belong to no partition; give '\(table.name)' `partition: COLUMN`, or remove `parent:` to share it",
                    at: sequence[i])
            }
        }
    }

    /// Whether table `index` ends up shared: neither a partition column nor a parent chain ending in one.
    static func isShared(_ index: Int, in tables: [Template.Table]) -> Bool {
        var current = index
        var seen: Set<Int> = []
        while seen.insert(current).inserted {
            if tables[current].partition != nil { return false }
            guard let parent = tables[current].parent,
                let next = tables.firstIndex(where: { $0.name == parent.table })
            else { return true }
            current = next
        }
        return true
    }
}
