import FerryCore
import FerryMerge
import FerryPostgres
import Foundation
import Logging
import ServiceLifecycle

/// The PostgreSQL side of a server, started from ``ServerConfiguration/database``: one ``ChangeMerger`` per
/// template and one ``PostgresScopeAuthority`` per template with `scope:`. Each is a `Service` that closes its
/// connections at shutdown; ``buildApplication(_:logger:onServerRunning:)`` runs them with the HTTP server.
struct ServerWiring: Sendable {
    var mergers: [String: ChangeMerger] = [:]
    var scopeAuthorities: [String: any ScopeAuthority] = [:]
    /// The templates, by the dataset (or schema line) they publish: for ``RowExplainer``.
    var templates: [String: Template] = [:]
    /// The datasets whose scope is a JWT claim (`scope: {claim: …}`), over one shared ``JWKSKeys``.
    var jwtScopes: [String: JWTScopes] = [:]
    /// What runs with the HTTP server and stops after it has drained: the mergers and token checks.
    var services: [any Service] = []

    /// Loads each template and starts its merger and token check. A dataset given twice is an error naming both
    /// files; on any error, whatever was started is closed again.
    static func start(_ settings: ServerConfiguration.DatabaseSettings?, logger: Logger) async throws -> ServerWiring {
        var wiring = ServerWiring()
        guard let settings else { return wiring }
        var sources: [String: String] = [:]
        var authorities: [String: PostgresScopeAuthority] = [:]
        var keys: JWKSKeys?
        do {
            let templates = try settings.templatePaths.map { try Template.load(path: $0.path) }
            // Several templates of one dataset are its schema lines (docs/schema-lines.md): each line's edits
            // merge through its own template, at `/v1/datasets/DATASET.vN/changes`.
            let byDataset = Dictionary(grouping: templates, by: \.dataset)
            for lines in byDataset.values where lines.count > 1 {
                try Template.validateLines(lines.map { ($0, $0.path) })
            }
            let counts = byDataset.mapValues(\.count)
            for template in templates.sorted(by: { $0.schemaVersion < $1.schemaVersion }) {
                let lined = counts[template.dataset, default: 1] > 1
                let key =
                    lined
                    ? DatasetName.line(base: template.dataset, schemaVersion: template.schemaVersion) : template.dataset
                // (Two lines of one schema version were refused by validateLines.)
                if let other = sources[key] {
                    throw FerryError(
                        .badInput,
                        "dataset '\(template.dataset)' is also defined by \(other); give each dataset one template",
                        path: template.path)
                }
                sources[key] = template.path
                wiring.templates[key] = template
                let merger = try await ChangeMerger.start(
                    template: template, databaseURL: settings.databaseURL, connections: settings.mergerConnections,
                    logger: logger)
                wiring.mergers[key] = merger
                // A device from before the lines posts to the dataset itself: its edits go to the oldest line.
                if lined, wiring.mergers[template.dataset] == nil { wiring.mergers[template.dataset] = merger }
                if let claim = template.scope?.claim {
                    if wiring.jwtScopes[template.dataset] == nil {
                        wiring.jwtScopes[template.dataset] = try await JWTWiring.scopes(
                            template, claim: claim, settings: settings, keys: &keys, logger: logger)
                    }
                } else if template.scope != nil || template.partition?.access != nil,
                    authorities[template.dataset] == nil
                {
                    authorities[template.dataset] = try await PostgresScopeAuthority.start(
                        template: template, databaseURL: settings.databaseURL, logger: logger)
                }
            }
        } catch {
            wiring.scopeAuthorities = authorities
            wiring.shutdown()
            throw error
        }
        wiring.scopeAuthorities = authorities
        // A merger serving a line and its dataset's base name runs (and stops) once.
        var seen: Set<ObjectIdentifier> = []
        wiring.services =
            wiring.mergers.keys.sorted().compactMap { key -> (any Service)? in
                let merger = wiring.mergers[key]!
                return seen.insert(ObjectIdentifier(merger)).inserted ? merger : nil
            }
            + authorities.keys.sorted().map { authorities[$0]! as any Service }
            + (keys.map { [$0 as any Service] } ?? [])
        return wiring
    }

    /// Closes every connection now (for a server that never started).
    func shutdown() {
        var seen: Set<ObjectIdentifier> = []
        for merger in mergers.values where seen.insert(ObjectIdentifier(merger)).inserted { merger.shutdown() }
        for case let authority as PostgresScopeAuthority in scopeAuthorities.values { authority.shutdown() }
    }
}
