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
    /// What runs with the HTTP server and stops after it has drained: the mergers and token checks.
    var services: [any Service] = []

    /// Loads each template and starts its merger and token check. A dataset given twice is an error naming both
    /// files; on any error, whatever was started is closed again.
    static func start(_ settings: ServerConfiguration.DatabaseSettings?, logger: Logger) async throws -> ServerWiring {
        var wiring = ServerWiring()
        guard let settings else { return wiring }
        var sources: [String: String] = [:]
        var authorities: [String: PostgresScopeAuthority] = [:]
        do {
            for url in settings.templatePaths {
                let template = try Template.load(path: url.path)
                if let other = sources[template.dataset] {
                    throw FerryError(
                        .badInput,
                        "dataset '\(template.dataset)' is also defined by \(other); give each dataset one template",
                        path: url.path)
                }
                sources[template.dataset] = url.path
                wiring.mergers[template.dataset] = try await ChangeMerger.start(
                    template: template, databaseURL: settings.databaseURL, connections: settings.mergerConnections,
                    logger: logger)
                if template.scope != nil {
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
        wiring.services =
            wiring.mergers.keys.sorted().map { wiring.mergers[$0]! as any Service }
            + authorities.keys.sorted().map { authorities[$0]! as any Service }
        return wiring
    }

    /// Closes every connection now (for a server that never started).
    func shutdown() {
        for merger in mergers.values { merger.shutdown() }
        for case let authority as PostgresScopeAuthority in scopeAuthorities.values { authority.shutdown() }
    }
}
