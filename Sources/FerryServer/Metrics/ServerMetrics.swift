import FerryCore
import Foundation
import Metrics
import Prometheus

/// The server's metrics, created through swift-metrics with a factory bound to the configuration's Prometheus
/// registry (so the library never touches the global `MetricsSystem`, and every test has its own registry).
///
/// - `ferry_http_requests_total{route,status}`
/// - `ferry_http_response_bytes_total{route}`: body bytes written
/// - `ferry_http_not_modified_total{route}`: 304 answers
/// - `ferry_dataset_version{dataset}` and `ferry_dataset_age_seconds{dataset}`
/// - `ferry_retention_pruned_total{dataset,kind}`: tombstones, stored change answers and attachments removed by
///   retention
/// - `ferry_manifest_waiting_requests`: manifest long-polls waiting now (appears once the first one waited)
/// - `ferry_attachments_total{dataset}` and `ferry_attachment_bytes{dataset}`: attachments held now, and their bytes
///   (gauges, set by each retention sweep and moved by each upload and deletion)
/// - `ferry_attachment_uploads_total{dataset}` and `ferry_attachment_upload_bytes_total{dataset}`: attachments stored
/// - `ferry_attachment_resumes_total{dataset}`: tus PATCHes at an offset above 0 (an upload resumed)
/// - `ferry_attachment_refusals_total{dataset,reason}`: uploads refused, `reason` one of `mismatch`, `too-large`,
///   `auth`
final class ServerMetrics: Sendable {
    struct Key: Hashable {
        let route: String
        let status: Int
    }

    let registry: PrometheusCollectorRegistry
    private let factory: PrometheusMetricsFactory
    private let requests = Locked([Key: Metrics.Counter]())
    private let bytes = Locked([String: Metrics.Counter]())
    private let notModified = Locked([String: Metrics.Counter]())
    private let datasetGauges = Locked([String: (version: Metrics.Gauge, age: Metrics.Gauge)]())
    private let createdAt = Locked([String: Date]())
    private let pruned = Locked([Key: Metrics.Counter]())
    private let waiting = Locked<Metrics.Gauge?>(nil)
    private let attachmentCounters = Locked([String: Metrics.Counter]())
    private let attachmentGauges = Locked([String: Metrics.Gauge]())
    /// Attachments held per dataset (count, bytes), as the gauges show them; the status page reads it too.
    let attachmentsHeld = Locked([String: (count: Int, bytes: Int64)]())
    /// Attachments stored per dataset since the start: a count taken from a listing is set only when none was stored
    /// while it was taken (``setAttachmentsHeld(dataset:count:bytes:ifStoredSince:)``).
    private let attachmentsStored = Locked([String: Int]())

    init(registry: PrometheusCollectorRegistry) {
        self.registry = registry
        self.factory = PrometheusMetricsFactory(registry: registry)
    }

    func recordRequest(route: String, status: Int) {
        requestsCounter(route: route, status: status).increment()
        if status == 304 { notModifiedCounter(route: route).increment() }
    }

    /// `ferry_http_requests_total{route,status}`, made on first use.
    func requestsCounter(route: String, status: Int) -> Metrics.Counter {
        counter(
            in: requests, Key(route: route, status: status), label: "ferry_http_requests_total",
            dimensions: [("route", route), ("status", String(status))])
    }

    /// `ferry_http_not_modified_total{route}`, made on first use.
    func notModifiedCounter(route: String) -> Metrics.Counter {
        counter(in: notModified, route, label: "ferry_http_not_modified_total", dimensions: [("route", route)])
    }

    /// The counter of body bytes for `route`; streaming bodies increment it per chunk.
    func bytesCounter(route: String) -> Metrics.Counter {
        counter(in: bytes, route, label: "ferry_http_response_bytes_total", dimensions: [("route", route)])
    }

    /// The counter `counters` holds under `key`, made with `label` and `dimensions` on first use (the dimensions
    /// are only built then: the requests' hot path finds its counter without allocating).
    private func counter<K: Hashable>(
        in counters: Locked<[K: Metrics.Counter]>, _ key: K, label: String,
        dimensions: @autoclosure () -> [(String, String)]
    ) -> Metrics.Counter {
        counters.withLock { counters in
            if let counter = counters[key] { return counter }
            let counter = Metrics.Counter(label: label, dimensions: dimensions(), factory: factory)
            counters[key] = counter
            return counter
        }
    }

    func setDataset(_ name: String, version: Int, createdAt: String, now: Date) {
        let gauges = datasetGauges.withLock { gauges in
            if let pair = gauges[name] { return pair }
            let pair = (
                version: Metrics.Gauge(
                    label: "ferry_dataset_version", dimensions: [("dataset", name)], factory: factory),
                age: Metrics.Gauge(
                    label: "ferry_dataset_age_seconds", dimensions: [("dataset", name)], factory: factory)
            )
            gauges[name] = pair
            return pair
        }
        gauges.version.record(version)
        if let created = Timestamp.parse(createdAt) {
            gauges.age.record(max(0, now.timeIntervalSince(created)))
        }
    }

    func removeDataset(_ name: String) {
        if let pair = datasetGauges.withLock({ $0.removeValue(forKey: name) }) {
            pair.version.destroy()
            pair.age.destroy()
        }
    }

    /// Counts what retention removed: `kind` is `tombstones` or `changes` (rows), or `attachments`.
    func recordPruned(dataset: String, kind: String, count: Int) {
        counter(
            in: pruned, Key(route: dataset, status: kind == "tombstones" ? 0 : kind == "changes" ? 1 : 2),
            label: "ferry_retention_pruned_total",
            dimensions: [("dataset", dataset), ("kind", kind)]
        )
        .increment(by: count)
    }

    /// Records how many manifest long-polls wait now; the gauge is made when the first one is seen, so a server
    /// whose clients never wait renders no new line.
    func setWaiting(_ count: Int) {
        let gauge = waiting.withLock { gauge -> Metrics.Gauge? in
            if gauge == nil, count > 0 {
                gauge = Metrics.Gauge(label: "ferry_manifest_waiting_requests", factory: factory)
            }
            return gauge
        }
        gauge?.record(count)
    }

    /// An attachment counter or gauge of `dataset` (`extra`: one more dimension), made on first use.
    private func attachmentCounter(_ label: String, dataset: String, extra: (String, String)? = nil) -> Metrics.Counter
    {
        counter(
            in: attachmentCounters, label + "\u{0}" + dataset + "\u{0}" + (extra?.1 ?? ""), label: label,
            dimensions: [("dataset", dataset)] + (extra.map { [$0] } ?? []))
    }

    private func attachmentGauge(_ label: String, dataset: String) -> Metrics.Gauge {
        attachmentGauges.withLock { gauges in
            let key = label + "\u{0}" + dataset
            if let gauge = gauges[key] { return gauge }
            let gauge = Metrics.Gauge(label: label, dimensions: [("dataset", dataset)], factory: factory)
            gauges[key] = gauge
            return gauge
        }
    }

    /// Counts an attachment stored now (not one already held), `bytes` long.
    func recordAttachmentStored(dataset: String, bytes: Int64) {
        attachmentCounter("ferry_attachment_uploads_total", dataset: dataset).increment()
        attachmentCounter("ferry_attachment_upload_bytes_total", dataset: dataset).increment(by: Int(bytes))
        moveAttachmentsHeld(dataset: dataset, count: 1, bytes: bytes, stored: true)
    }

    /// Counts a tus PATCH at an offset above 0.
    func recordAttachmentResume(dataset: String) {
        attachmentCounter("ferry_attachment_resumes_total", dataset: dataset).increment()
    }

    /// Counts a refused upload: `reason` is `mismatch`, `too-large` or `auth`.
    func recordAttachmentRefusal(dataset: String, reason: String) {
        attachmentCounter("ferry_attachment_refusals_total", dataset: dataset, extra: ("reason", reason)).increment()
    }

    /// How many attachments of `dataset` were stored since the start (a mark for
    /// ``setAttachmentsHeld(dataset:count:bytes:ifStoredSince:)``).
    func attachmentsStoredMark(dataset: String) -> Int { attachmentsStored.withLock { $0[dataset] ?? 0 } }

    /// Sets the attachments `dataset` holds (a retention sweep listed them), unless one was stored since `mark` (then
    /// the listing may have missed it; returns false and the caller lists again).
    @discardableResult
    func setAttachmentsHeld(dataset: String, count: Int, bytes: Int64, ifStoredSince mark: Int? = nil) -> Bool {
        let set = attachmentsHeld.withLock { held -> Bool in
            // Under the held lock: a store counted meanwhile moves the value after this, not before.
            if let mark, attachmentsStoredMark(dataset: dataset) != mark { return false }
            held[dataset] = (count, bytes)
            return true
        }
        guard set else { return false }
        attachmentGauge("ferry_attachments_total", dataset: dataset).record(count)
        attachmentGauge("ferry_attachment_bytes", dataset: dataset).record(bytes)
        return true
    }

    /// Moves the attachments `dataset` holds by `count` and `bytes` (an upload, a deletion).
    /// `stored`: one was stored now (counted for ``attachmentsStoredMark(dataset:)`` under the same lock).
    func moveAttachmentsHeld(dataset: String, count: Int, bytes: Int64, stored: Bool = false) {
        let now = attachmentsHeld.withLock { held -> (count: Int, bytes: Int64) in
            if stored { attachmentsStored.withLock { $0[dataset, default: 0] += 1 } }
            let old = held[dataset] ?? (0, 0)
            let new = (count: max(0, old.count + count), bytes: max(0, old.bytes + bytes))
            held[dataset] = new
            return new
        }
        attachmentGauge("ferry_attachments_total", dataset: dataset).record(now.count)
        attachmentGauge("ferry_attachment_bytes", dataset: dataset).record(now.bytes)
    }

    /// Prometheus text exposition of the registry.
    func render() -> [UInt8] { registry.emitToBuffer() }
}
