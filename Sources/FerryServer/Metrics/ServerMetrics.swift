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
/// - `ferry_retention_pruned_total{dataset,kind}`: tombstones and stored change answers removed by retention
/// - `ferry_manifest_waiting_requests`: manifest long-polls waiting now (appears once the first one waited)
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

    /// Counts rows removed by retention: `kind` is `tombstones` or `changes`.
    func recordPruned(dataset: String, kind: String, count: Int) {
        counter(
            in: pruned, Key(route: dataset, status: kind == "tombstones" ? 0 : 1),
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

    /// Prometheus text exposition of the registry.
    func render() -> [UInt8] { registry.emitToBuffer() }
}
