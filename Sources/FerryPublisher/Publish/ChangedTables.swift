import FerryCore
import FerryPostgres
import Foundation

/// Which template tables a publish on change must read (``Publisher/publish(changedTables:)``), from what each
/// table's rows query reads according to PostgreSQL's own plan of it.
enum ChangedTables {
    /// The relations (`schema.table`) each plan's rows query reads: every `Relation Name` in
    /// `EXPLAIN (VERBOSE, FORMAT JSON)` of it, so views are seen through and joins, `filter:` subqueries and `parent:`
    /// links count. Empty for a query PostgreSQL cannot explain here (it is then read). Runs inside the export's
    /// transaction, each `EXPLAIN` under a savepoint so that a failure leaves the transaction usable.
    static func relations(of plans: [TablePlan], pg: PostgresConnection) -> [String: Set<String>] {
        var out: [String: Set<String>] = [:]
        for plan in plans {
            do {
                try pg.execute("SAVEPOINT ferry_explain")
                let rows = try pg.query("EXPLAIN (VERBOSE, FORMAT JSON) " + plan.rowsQuery)
                try pg.execute("RELEASE SAVEPOINT ferry_explain")
                guard let text = rows.first?.first ?? nil,
                    let json = try JSONSerialization.jsonObject(with: Data(text.utf8)) as Any?
                else {
                    out[plan.name] = []
                    continue
                }
                var found = Set<String>()
                collect(json, into: &found)
                out[plan.name] = found
            } catch {
                try? pg.execute("ROLLBACK TO SAVEPOINT ferry_explain")  // the table is read; the export goes on
                out[plan.name] = []
            }
        }
        return out
    }

    /// The tables to read: those whose relations include a changed one, or are unknown (empty).
    static func tablesToRead(relations: [String: Set<String>], changed: Set<String>) -> Set<String> {
        let qualified = changed.filter { $0.contains(".") }
        let bare = Set(changed.filter { !$0.contains(".") })
        var read = Set<String>()
        for (table, reads) in relations {
            guard !reads.isEmpty else {
                read.insert(table)
                continue
            }
            if !reads.isDisjoint(with: qualified)
                || reads.contains(where: { bare.contains(String($0.split(separator: ".").last ?? "")) })
            {
                read.insert(table)
            }
        }
        return read
    }

    private static func collect(_ node: Any, into found: inout Set<String>) {
        if let object = node as? [String: Any] {
            if let name = object["Relation Name"] as? String {
                found.insert(((object["Schema"] as? String).map { $0 + "." } ?? "") + name)
            }
            for value in object.values { collect(value, into: &found) }
        } else if let array = node as? [Any] {
            for value in array { collect(value, into: &found) }
        }
    }
}
