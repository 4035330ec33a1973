import FerryCore
import FerryPostgres
import Foundation
import Logging
import NIOPosix
import ServiceLifecycle

/// The identity provider's public keys, from its JWKS (URLs or files, `ferry serve --jwks`), for ``JWTScopes``.
///
/// Fetched once when the server starts. A token naming a `kid` the set does not hold makes it fetch again, at most
/// once per ``ServerConfiguration/JWTSettings/refetchInterval`` (30 s) however many such tokens arrive: key
/// rotation works without a restart, and made-up `kid`s do not become requests to the provider. Concurrent
/// lookups share one fetch. As a `Service` it keeps trying while the set cannot be had (the server answers 503 for
/// JWT-scoped datasets meanwhile) and refreshes it now and then so removed keys go.
///
/// Only signing keys for RS256 (`kty: RSA`), ES256 (`kty: EC`, `crv: P-256`) and EdDSA (`kty: OKP`,
/// `crv: Ed25519`) are taken; encryption keys (`use: enc`) and others are skipped.
public final class JWKSKeys: Service, Sendable {
    typealias Key = VerificationKey

    /// What a lookup found.
    enum Lookup: Sendable {
        case found(Key)
        /// The set is loaded and has no such key, even after a fetch (or a fetch was too recent to try).
        case unknown
        /// The set could never be loaded: answer 503.
        case unavailable
    }

    struct State: Sendable {
        var keys: [String: Key]?
        var lastAttempt: ContinuousClock.Instant?
        var fetch: Task<Void, Never>?
    }

    let settings: ServerConfiguration.JWTSettings
    let logger: Logger
    private let state = Locked(State())
    /// How many fetches were made (for tests and the log).
    let fetches = Locked(0)

    init(settings: ServerConfiguration.JWTSettings, logger: Logger) {
        self.settings = settings
        self.logger = logger
    }

    /// Whether the key set is loaded.
    var isLoaded: Bool { state.withLock { $0.keys != nil } }

    /// The key named `kid`; a miss fetches the set again when the last fetch is older than the refetch interval.
    func key(_ kid: String) async -> Lookup {
        let (hit, loaded) = state.withLock { ($0.keys?[kid], $0.keys != nil) }
        if let hit { return .found(hit) }
        await refetch(force: false)
        let (again, loadedNow) = state.withLock { ($0.keys?[kid], $0.keys != nil) }
        if let again { return .found(again) }
        return loaded || loadedNow ? .unknown : .unavailable
    }

    /// Fetches the set unless a fetch ran less than the refetch interval ago (`force`: regardless); waits for a
    /// fetch already under way instead of starting another.
    func refetch(force: Bool) async {
        let task: Task<Void, Never>? = state.withLock { state in
            if let running = state.fetch { return running }
            let now = ContinuousClock.now
            if !force, let last = state.lastAttempt, now - last < settings.refetchInterval { return nil }
            state.lastAttempt = now
            let task = Task { await self.load() }
            state.fetch = task
            return task
        }
        await task?.value
    }

    /// One fetch of every source; on success the set is replaced, on failure the old one kept (and the error logged
    /// with the source's name).
    func load() async {
        fetches.withLock { $0 += 1 }
        var keys: [String: Key] = [:]
        var failed = false
        for source in settings.jwks {
            do {
                let data = try await Self.read(source)
                for (kid, key) in try await self.keys(from: data, source: source) {
                    keys[kid] = key
                }
            } catch {
                failed = true
                logger.error(
                    "cannot load the JWKS; JWT-scoped datasets answer 503 until it loads",
                    metadata: ["jwks": .string(source), "error": .string("\(error)")])
            }
        }
        let loaded = !failed
        state.withLock { state in
            if loaded { state.keys = keys }
            state.fetch = nil
        }
        if loaded {
            logger.info(
                "JWKS loaded", metadata: ["keys": .string(keys.keys.sorted().joined(separator: ", "))])
        }
    }

    /// Retries while the set is missing, then refreshes it every ``ServerConfiguration/JWTSettings/refreshInterval``
    /// until graceful shutdown.
    public func run() async throws {
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            let interval = isLoaded ? settings.refreshInterval : settings.retryInterval
            do {
                try await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
            } catch {
                return
            }
            if Task.isShuttingDownGracefully { return }
            await refetch(force: true)
        }
    }

    /// The bytes of a JWKS: an `http(s)://` URL (10 s timeout, at most 1 MiB, status 200) or a file.
    static func read(_ source: String) async throws -> Data {
        if source.hasPrefix("http://") || source.hasPrefix("https://") { return try await JWKSFetch.get(source) }
        return try await NIOThreadPool.singleton.runIfActive {
            do {
                return try Data(contentsOf: URL(fileURLWithPath: source))
            } catch {
                throw FerryError(.notFound, "cannot read the JWKS file: \(error.localizedDescription)", path: source)
            }
        }
    }

    /// The usable keys of a JWKS document, by `kid`; each key skipped is logged.
    func keys(from data: Data, source: String) async throws -> [String: Key] {
        guard let reader = settings.readKeys else {
            throw FerryError(
                .badInput,
                "this server has no JWKS reader: set ServerConfiguration.JWTSettings.readKeys to FerryJWT's JWKSDocument.keys (ServerAssembly does)"
            )
        }
        let logger = self.logger
        return try await reader(data, source) { reason in
            logger.warning("skipping a JWKS key", metadata: ["jwks": .string(source), "reason": .string(reason)])
        }
    }
}
