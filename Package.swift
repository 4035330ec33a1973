// swift-tools-version:6.1
import PackageDescription

// Ferry: PostgreSQL → versioned SQLite snapshots → HTTP → offline devices, and their edits back.
// Data flows one way: FerryCore ← FerryPublisher ← FerryServer, FerryCore ← FerryClient; `ferry` is a thin CLI.
let package = Package(
    name: "ferry",
    platforms: [.macOS(.v14), .iOS(.v17)],
    products: [
        .executable(name: "ferry", targets: ["ferry"]),
        .library(name: "FerryCore", targets: ["FerryCore"]),
        .library(name: "FerryPublisher", targets: ["FerryPublisher"]),
        .library(name: "FerryServer", targets: ["FerryServer"]),
        .library(name: "FerryClient", targets: ["FerryClient"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/jpsim/Yams", from: "6.2.2"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
    ],
    targets: [
        // C libraries from Debian's -dev packages.
        .systemLibrary(name: "CSQLite", path: "Sources/CSQLite", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CLibPQ", path: "Sources/CLibPQ", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CZlib", path: "Sources/CZlib", providers: [.apt(["zlib1g-dev"])]),

        // Shared wire types (manifest, change batches), store layout, SQLite/zlib/hash helpers, errors.
        // Platform-neutral: the client depends on it.
        .target(
            name: "FerryCore",
            dependencies: [
                "CSQLite", "CZlib",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // PostgreSQL (libpq) → SQLite snapshots, templates, scheduler.
        .target(
            name: "FerryPublisher",
            dependencies: [
                "FerryCore", "CLibPQ", "CSQLite",
                .product(name: "Yams", package: "Yams"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // Hummingbird HTTP server over a snapshot store.
        .target(
            name: "FerryServer",
            dependencies: [
                "FerryCore", "FerryPublisher",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "_NIOFileSystem", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),
        // Platform-neutral client library: fetch, verify, swap, outbox.
        .target(
            name: "FerryClient",
            dependencies: [
                "FerryCore", "CSQLite",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ]
        ),
        // The CLI: parses arguments and calls the libraries.
        .executableTarget(
            name: "ferry",
            dependencies: [
                "FerryCore", "FerryPublisher", "FerryServer", "FerryClient",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),

        // `scripts/bench outbox`: times the merge engine; a benchmark program, in no product.
        .executableTarget(
            name: "ferry-outbox-bench",
            dependencies: ["FerryCore", "FerryPublisher", "FerryServer", .product(name: "Logging", package: "swift-log")],
            path: "Benchmarks/OutboxBench"
        ),

        // Test helpers: temp dirs, a fresh PostgreSQL database per test, the built `ferry` binary.
        .target(
            name: "FerryTestSupport",
            dependencies: ["FerryCore", "FerryPublisher"],
            path: "Sources/FerryTestSupport"
        ),
        .testTarget(name: "FerryCoreTests", dependencies: ["FerryCore", "FerryTestSupport"]),
        .testTarget(name: "FerryPublisherTests", dependencies: ["FerryPublisher", "FerryTestSupport"]),
        .testTarget(
            name: "FerryServerTests",
            dependencies: [
                "FerryServer", "FerryPublisher", "FerryTestSupport",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
            ]
        ),
        .testTarget(
            name: "FerryClientTests",
            dependencies: [
                "FerryClient", "FerryServer", "FerryPublisher", "FerryTestSupport",
                .product(name: "HummingbirdTesting", package: "hummingbird"),
            ]
        ),
    ]
)
