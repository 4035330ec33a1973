import FerryCore
import FerryMerge
import FerryPostgres
import Logging
import Foundation

extension ServerConfiguration.OutboxSettings {
    /// Loads each template and starts its dataset's change merger (one per dataset; a dataset given twice is an
    /// error naming both files). Add the mergers to the ServiceGroup so their connections close on shutdown, and
    /// `ChangesRoute(mergers:)` to `buildApplication(extraRoutes:)`.
    ///
    /// ```swift
    /// let mergers = try await settings.startMergers(logger: logger)
    /// let app = try await buildApplication(config, logger: logger, extraRoutes: [ChangesRoute(mergers: mergers)])
    /// ```
    public func startMergers(logger: Logger) async throws -> [String: ChangeMerger] {
        var mergers: [String: ChangeMerger] = [:]
        var sources: [String: String] = [:]
        do {
            for url in templatePaths {
                let template = try Template.load(path: url.path)
                if let other = sources[template.dataset] {
                    throw FerryError(.badInput, "dataset '\(template.dataset)' is also defined by \(other); give each dataset one --config", path: url.path)
                }
                sources[template.dataset] = url.path
                mergers[template.dataset] = try await ChangeMerger.start(template: template, databaseURL: databaseURL, logger: logger)
            }
        } catch {
            for merger in mergers.values { merger.shutdown() }
            throw error
        }
        return mergers
    }

    /// Starts the token check of every template with `scope:` (by dataset). Add them to the ServiceGroup so their
    /// connections close on shutdown, and pass them to `buildApplication(scopeAuthorities:)`.
    ///
    /// ```swift
    /// let authorities = try await settings.startScopeAuthorities(logger: logger)
    /// ```
    public func startScopeAuthorities(logger: Logger) async throws -> [String: PostgresScopeAuthority] {
        var authorities: [String: PostgresScopeAuthority] = [:]
        do {
            for url in templatePaths {
                let template = try Template.load(path: url.path)
                guard template.scope != nil else { continue }
                authorities[template.dataset] = try await PostgresScopeAuthority.start(template: template, databaseURL: databaseURL, logger: logger)
            }
        } catch {
            for authority in authorities.values { authority.shutdown() }
            throw error
        }
        return authorities
    }
}
