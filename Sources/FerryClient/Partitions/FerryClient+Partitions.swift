import FerryCore
import Foundation
import Logging

/// Partitions: the device carries the shared tables and the partitions it subscribes to, in one `database.db`
/// (docs/partitions.md). Each stream is fetched on its own into `.ferry/streams/` (verified, patched, resumed like any
/// version), then `database.db` is composed from them and installed as any update.
extension FerryClient {
    /// The keys of the partitions this device subscribes to, sorted; empty for an unpartitioned directory.
    ///
    /// ```swift
    /// let projects = await client.subscriptions   // ["1", "7"]
    /// ```
    public var subscriptions: [String] { subscribed?.keys ?? [] }

    /// Adds partitions to the device's set, checked with the server at once (`GET …/partitions`): an unknown key
    /// (`FerryError.Code.notFound`), one the token may not read (`FerryError.Code.unauthorized`, the 403) or a
    /// retired one (`FerryError.Code.partitionRetired`) is an error naming it, and nothing changes. Downloads
    /// nothing: the next ``checkForUpdates(progress:)`` brings the new partitions' rows into `database.db`. Needs
    /// `serverURL` and `dataset`; the first subscription makes the directory a partitioned one.
    ///
    /// ```swift
    /// try await client.subscribe(["7"])
    /// _ = try await client.checkForUpdates()
    /// ```
    public func subscribe(_ keys: [String]) async throws {
        for key in keys { try PartitionStream.validate(key: key) }
        let server = try await partitionServer()
        let listing = try await server.listing()
        let listed = Set(listing.partitions.compactMap(\.key))
        for key in keys where !listed.contains(key) {
            if let refusal = try await server.refusal(of: key) { throw refusal }
        }
        try await exclusively {
            let dataset = server.dataset
            let current = subscribed
            let updated = try await onFiles { files, state in
                if current == nil, let live = try files.directory.info(of: files.directory.database, state: &state) {
                    throw FerryError(
                        .badInput,
                        "this directory holds dataset '\(live.dataset ?? "?")' unpartitioned; subscribe in a new directory",
                        path: files.directory.url.path)
                }
                var subscriptions = current ?? Subscriptions(dataset: dataset, layout: listing.layout)
                guard subscriptions.dataset == dataset else {
                    throw FerryError(
                        .badInput,
                        "this directory holds dataset '\(subscriptions.dataset)', not '\(dataset)'; use another directory per dataset",
                        path: files.directory.url.path)
                }
                subscriptions.layout = listing.layout
                subscriptions.subscribe(keys)
                try subscriptions.save(to: files.directory.subscriptionsFile)
                return subscriptions
            }
            subscribed = updated
        }
        logger.info("subscribed", metadata: ["keys": "\(keys)", "dataset": "\(server.dataset)"])
    }

    /// Removes partitions from the device's set (a key not subscribed is an error naming it, and nothing changes).
    /// Downloads nothing and needs no server: the next ``checkForUpdates(progress:)`` removes their rows from
    /// `database.db`, except the rows a queued edit still names, which stay until the edit is answered.
    ///
    /// ```swift
    /// try await client.unsubscribe(["3"])
    /// ```
    public func unsubscribe(_ keys: [String]) async throws {
        try await exclusively {
            guard var subscriptions = subscribed else {
                throw FerryError(
                    .notFound, "this directory subscribes to no partitions: there is nothing to unsubscribe from",
                    path: directory.url.path)
            }
            try subscriptions.unsubscribe(keys)
            let saved = subscriptions
            try await onFiles { files, _ in try saved.save(to: files.directory.subscriptionsFile) }
            subscribed = saved
        }
        logger.info("unsubscribed", metadata: ["keys": "\(keys)"])
    }

    /// The server's partition questions, with this client's transport, token and device id.
    private func partitionServer() async throws -> PartitionServer {
        let downloader = try await makeDownloader()
        return PartitionServer(
            transport: transport, datasetsURL: downloader.datasetsURL, dataset: downloader.dataset,
            headers: try await downloader.requestHeaders([:]))
    }

    // MARK: Fetch

    /// A check of a partitioned directory: every stream (shared, then each subscribed partition) is checked and
    /// brought up to date on its own, a failing one leaving the others to go on; then, when a stream changed or the
    /// set did, `database.db` is composed again and installed. The first stream error is thrown after that.
    func performPartitionedCheck(
        _ subscriptions: Subscriptions, progress: (@Sendable (FetchProgress) -> Void)?
    ) async throws -> FetchResult {
        let (_, dataset) = try configuration.datasetURL()
        guard subscriptions.dataset == dataset else {
            throw FerryError(
                .badInput,
                "this directory holds dataset '\(subscriptions.dataset)', not '\(dataset)'; use another directory per dataset",
                path: directory.url.path)
        }
        let device = try await deviceID()
        var received: Int64 = 0
        var failure: FerryError?
        for stream in subscriptions.activeStreams {
            do {
                received += try await fetch(stream, device: device, progress: progress)
            } catch let error as FerryError {
                let streamFailure = Self.streamFailure(error, stream, dataset: dataset)
                logger.warning(
                    "a stream did not update; the others go on",
                    metadata: ["stream": "\(stream.directoryName)", "error": "\(streamFailure.message)"])
                failure = failure ?? streamFailure
            }
        }
        let result = try await composeAndInstall(received: received)
        if let failure { throw failure }
        return result
    }

    /// Brings one stream's directory up to date (a client directory of its own, without outbox or swap); returns
    /// the bytes received.
    private func fetch(_ stream: PartitionStream, device: String, progress: (@Sendable (FetchProgress) -> Void)?)
        async throws -> Int64
    {
        var streamConfiguration = configuration
        streamConfiguration.directory = directory.directory(of: stream).url
        streamConfiguration.streamPath = stream.pathSegments
        streamConfiguration.update = .init(applyOnOpen: true, prepare: nil)
        streamConfiguration.push.onOpen = false
        // Streams are checked one after another: a long-poll on one would hold up the rest.
        streamConfiguration.download.waitForChanges = nil
        let streamDirectory = directory.directory(of: stream)
        try await BlockingWork.run {
            // One device id for all its streams: the server counts one device.
            try streamDirectory.create()
            // An unreadable id is one to write again.
            if (try? streamDirectory.deviceID()) != device {
                try DurableFile.write(Data(device.utf8), to: streamDirectory.deviceIDFile)
            }
        }
        let client = try await FerryClient.open(configuration: streamConfiguration, logger: logger, host: nil)
        do {
            let result = try await client.checkForUpdates(progress: progress)
            await client.close()
            return result.check.bytesReceived
        } catch {
            await client.close()
            throw error
        }
    }

    /// A stream's error, saying which stream and that the others went on.
    static func streamFailure(_ error: FerryError, _ stream: PartitionStream, dataset: String) -> FerryError {
        if error.code == .schemaRetired, let key = stream.key { return PartitionServer.retired(key, dataset: dataset) }
        var failure = error
        let name = stream.key.map { "partition '\($0)'" } ?? "the shared stream"
        failure.message = "\(name) of dataset '\(dataset)' did not update: \(error.message)"
        return failure
    }

    /// Composes `database.db` from the streams when they or the set changed since the last composition, and installs
    /// it (see ``install(_:)``); partitions being left whose rows no queued edit names any more are dropped after.
    func composeAndInstall(received: Int64) async throws -> FetchResult {
        try await exclusively { try await composeAndInstallAlone(received: received) }
    }

    private func composeAndInstallAlone(received: Int64) async throws -> FetchResult {
        guard let subscriptions = subscribed else { return .notModified(.init(status: try await currentStatus())) }
        let composition = try await onFiles { files, state in
            let composition = try files.compose(subscriptions, &state)
            // Streams a crash left behind after their partition was dropped.
            if composition == nil { try files.removeStreams(except: subscriptions) }
            return composition
        }
        guard let composition else {
            return .notModified(.init(status: try await currentStatus(), bytesReceived: received))
        }
        var verified = composition.verified
        verified.stats.bytesReceived = received
        var result = try await install(.downloaded(verified))
        var done = subscriptions
        done.composed = composition.inputs
        done.leaving = subscriptions.leaving.filter { (composition.held[$0] ?? 0) > 0 }
        let saved = done
        try await onFiles { files, _ in
            try saved.save(to: files.directory.subscriptionsFile)
            try files.removeStreams(except: saved)
        }
        subscribed = saved
        if case .notModified(var check) = result {
            check.bytesReceived = received
            result = .notModified(check)
        }
        return result
    }
}
