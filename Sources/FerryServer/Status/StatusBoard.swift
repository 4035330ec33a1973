import FerryCore
import FerryMerge
import FerryPostgres
import Foundation

/// What the status page knows beyond the store: the last hour of traffic, the outcome of each dataset's last
/// in-process publish, and which datasets accept uploads and how their last upload went. One per server, held by
/// ``ServerDependencies/statusBoard``; the server counts requests and uploads into it, and a caller that
/// publishes in the same process reports each publish with ``recordPublish(dataset:outcome:at:)``.
///
/// ```swift
/// var configuration = ServerConfiguration(storePath: storeURL)
/// configuration.statusToken = "s3cret-operator-token"
/// let board = configuration.dependencies.statusBoard
/// board.recordPublish(dataset: "trips", outcome: .published(version: 7))
/// ```
public final class StatusBoard: Sendable {
    /// How an in-process publish ended.
    public enum PublishOutcome: Sendable, Equatable {
        /// A new version was made.
        case published(version: Int)
        /// The data had not changed; `version` is still current.
        case unchanged(version: Int)
        /// The publish failed; `message` says why (shown to the status page's token holders, never a secret).
        case failed(message: String)
    }

    /// A dataset's last in-process publish.
    struct PublishRecord: Sendable, Equatable {
        let outcome: PublishOutcome
        let at: Date
    }

    /// The last upload a dataset's merger handled: whether PostgreSQL answered, and when.
    struct UploadRecord: Sendable, Equatable {
        let succeeded: Bool
        let at: Date
    }

    struct State: Sendable {
        var publishes: [String: PublishRecord] = [:]
        var mergers: Set<String> = []
        /// Reads each merger's connection state (what its pool last saw; no query).
        var mergerHealth: [String: @Sendable () -> PostgresPool.Health] = [:]
        var uploads: [String: UploadRecord] = [:]
    }

    /// Requests, bytes and upload decisions of the last hour.
    let traffic = TrafficRecorder()
    /// When this board was created (the server's start, near enough).
    let startedAt: Date
    private let state = Locked(State())

    /// Creates an empty board.
    ///
    /// ```swift
    /// let board = StatusBoard()
    /// ```
    public init() {
        startedAt = Date()
    }

    /// Records the outcome of a publish of `dataset` made by this process (e.g. `ferry serve --publish-every`).
    /// A failure's message is cut to 300 characters.
    ///
    /// ```swift
    /// board.recordPublish(dataset: "trips", outcome: .failed(message: "cannot connect to PostgreSQL"))
    /// ```
    public func recordPublish(dataset: String, outcome: PublishOutcome, at date: Date = Date()) {
        var outcome = outcome
        if case .failed(let message) = outcome, message.count > 300 {
            outcome = .failed(message: String(message.prefix(300)) + "…")
        }
        let record = PublishRecord(outcome: outcome, at: date)
        state.withLock { $0.publishes[dataset] = record }
    }

    /// Notes the datasets whose uploads this server merges, and their mergers' connection state (called when the
    /// changes route is registered).
    func recordMergers(_ mergers: [String: ChangeMerger]) {
        state.withLock {
            $0.mergers.formUnion(mergers.keys)
            for (name, merger) in mergers { $0.mergerHealth[name] = { merger.connectionHealth } }
        }
    }

    /// Notes how an upload to `dataset` went: `results` when the merger answered, nil when PostgreSQL failed.
    func recordUpload(dataset: String, results: ChangeResults?, at date: Date = Date()) {
        if let results { traffic.recordUploads(results, at: date) }
        state.withLock { $0.uploads[dataset] = UploadRecord(succeeded: results != nil, at: date) }
    }

    var current: State { state.current }
}
