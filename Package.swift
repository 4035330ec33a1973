// swift-tools-version:6.1
import PackageDescription

// Ferry: PostgreSQL → versioned SQLite snapshots → HTTP → offline devices, and their edits back.
// Data flows one way: FerryCore ← FerryPostgres ← {FerryPublisher, FerryMerge}; FerryMerge ← FerryServer;
// FerryCore ← FerryStore ← {FerryPublisher, FerryServer}; FerryCore ← FerryS3 ← FerryBucket (a store in a bucket, over
// FerryStore and FerryPublisher); {FerryServer, FerryBucket, FerryPublisher} ← FerryService (a whole server from one
// configuration value); FerryCore ← FerryClient ← {FerryClientNIO, FerryGRDB (the app's pool)}; `ferry` is a thin CLI
// over all of them.

/// Every target: an existential must say `any`, and a file must import each module whose members it uses, so an
/// undeclared dependency fails the build instead of leaking in through another module.
let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"), .enableUpcomingFeature("MemberImportVisibility"),
]

let package = Package(
    name: "ferry",
    platforms: [.macOS(.v14), .iOS(.v17)],
    products: [
        .executable(name: "ferry", targets: ["ferry"]),
        .library(name: "FerryCore", targets: ["FerryCore"]),
        .library(name: "FerryStore", targets: ["FerryStore"]),
        .library(name: "FerryPostgres", targets: ["FerryPostgres"]),
        .library(name: "FerryPublisher", targets: ["FerryPublisher"]),
        .library(name: "FerryMerge", targets: ["FerryMerge"]),
        .library(name: "FerryServer", targets: ["FerryServer"]),
        .library(name: "FerryClient", targets: ["FerryClient"]),
        .library(name: "FerryClientNIO", targets: ["FerryClientNIO"]),
        .library(name: "FerryGRDB", targets: ["FerryGRDB"]),
        .library(name: "FerryS3", targets: ["FerryS3"]),
        .library(name: "FerryBucket", targets: ["FerryBucket"]),
        .library(name: "FerryService", targets: ["FerryService"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
        .package(url: "https://github.com/jpsim/Yams", from: "6.2.2"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        // JWT bearer tokens checked against an identity provider's JWKS (issue 51): server side only.
        .package(url: "https://github.com/vapor/jwt-kit", from: "5.7.1"),
        // `swift package generate-documentation`: the DocC catalogs of FerryGRDB and FerryClient (scripts/test builds
        // them).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
    ],
    targets: [
        // C libraries from Debian's -dev packages.
        .systemLibrary(name: "CSQLite", path: "Sources/CSQLite", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CLibPQ", path: "Sources/CLibPQ", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CZlib", path: "Sources/CZlib", providers: [.apt(["zlib1g-dev"])]),
        // ISA-L's igzip: the publisher's gzip copy, ~3.5× zlib's fastest level (docs/ARCHITECTURE.md), and the
        // client's inflate on Linux (FerryCore links it there only: an iOS app never does).
        .systemLibrary(name: "CISAL", path: "Sources/CISAL", providers: [.apt(["libisal-dev"])]),

        // What both sides need: wire types (manifest, change batches), checksums, the content digest, changesets,
        // SQLite/zlib helpers, durable writes, errors. Platform-neutral: the client depends on it.
        .target(
            name: "FerryCore",
            dependencies: [
                "CSQLite", "CZlib",
                // GzipInflater's fast engine on Linux; elsewhere zlib (docs/performance.md).
                .target(name: "CISAL", condition: .when(platforms: [.linux])),
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strict
        ),
        // The snapshot store (layout, its manifest, reading and committing), the parallel gzip copy and `ThreadJob`:
        // what the publisher writes and the server reads. Server side only: the client never links it.
        .target(
            name: "FerryStore",
            dependencies: ["FerryCore", "CZlib"],
            swiftSettings: strict
        ),
        // libpq connections, templates (parser, catalog checks, `:scope` SQL): what the publisher and the merge engine
        // share.
        .target(
            name: "FerryPostgres",
            dependencies: [
                "FerryCore", "CLibPQ",
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Yams", package: "Yams"),
            ],
            swiftSettings: strict
        ),
        // PostgreSQL → SQLite snapshots (binary COPY, load, commit into the store), the publish scheduler.
        .target(
            name: "FerryPublisher",
            dependencies: [
                "FerryCore", "FerryStore", "FerryPostgres", "CISAL",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strict
        ),
        // Uploaded edits → merge rules → PostgreSQL, exactly once per change id; tombstones and answer retention.
        .target(
            name: "FerryMerge",
            dependencies: [
                "FerryCore", "FerryPostgres",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strict
        ),
        // JWT signatures checked against an identity provider's JWKS (issue 51), on vapor/jwt-kit. FerryServer takes
        // its reader as a value (JWTSettings.readKeys) and never imports it: jwt-kit's modules change which module
        // owns <sys/stat.h> there (MemberImportVisibility). FerryService and the CLI pass it. Server side only.
        .target(
            name: "FerryJWT",
            dependencies: ["FerryCore", "FerryPostgres", .product(name: "JWTKit", package: "jwt-kit")],
            swiftSettings: strict
        ),
        // Hummingbird HTTP server over a snapshot store, the changes endpoint, token checks, metrics.
        .target(
            name: "FerryServer",
            dependencies: [
                "FerryCore", "FerryStore", "FerryPostgres", "FerryMerge",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
            ],
            swiftSettings: strict
        ),
        // Platform-neutral client library: fetch, verify, swap, outbox; HTTP through URLSession. What an iOS app links,
        // so it depends on Foundation, swift-log and swift-crypto only (scripts/lib/check_client_platform.py checks
        // it).
        .target(
            name: "FerryClient",
            dependencies: [
                "FerryCore",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        // The client's transport and change uploader on AsyncHTTPClient (SwiftNIO, NIOSSL): faster than
        // FoundationNetworking on Linux and able to trust a private CA there. The CLI uses it; an app does not need it.
        .target(
            name: "FerryClientNIO",
            dependencies: [
                "FerryClient", "FerryCore",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: strict
        ),
        // The app's database: a GRDB pool on the client directory, updated in place, observed (docs/app.md).
        .target(
            name: "FerryGRDB",
            dependencies: [
                "FerryCore", "FerryClient",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        // An S3-compatible bucket as a store (issue 24): the SigV4 signer on swift-crypto, an S3 client on
        // AsyncHTTPClient. Server side only: the client never links it.
        .target(
            name: "FerryS3",
            dependencies: [
                "FerryCore",
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: strict
        ),
        // The store in a bucket (issue 24): publishing into it and serving from it, on FerryS3 and FerryStore's
        // layout.
        .target(
            name: "FerryBucket",
            dependencies: [
                "FerryCore", "FerryS3", "FerryStore", "FerryPublisher", "FerryPostgres",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strict
        ),
        // A whole server from one configuration value (`ServeConfiguration` → `ServerAssembly`): the store (a directory or
        // a bucket's replica), the HTTP application, in-process publish schedules; and the publish settings that
        // `ferry publish`, `schedule` and `serve` share. The CLI only parses flags into these values.
        .target(
            name: "FerryService",
            dependencies: [
                "FerryCore", "FerryBucket", "FerryJWT", "FerryMerge", "FerryPostgres", "FerryPublisher", "FerryServer",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strict
        ),
        // `scripts/lib/sigv4_check.py`: signs JSON-described requests with FerryS3's signer, to compare with
        // botocore's. A test tool, in no product.
        .executableTarget(
            name: "ferry-sigv4",
            dependencies: ["FerryS3"],
            swiftSettings: strict
        ),
        // The CLI: parses arguments and calls the libraries.
        .executableTarget(
            name: "ferry",
            dependencies: [
                "FerryCore", "FerryPostgres", "FerryPublisher", "FerryMerge", "FerryServer", "FerryClient",
                "FerryClientNIO", "FerryBucket", "FerryService", "FerryJWT",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strict
        ),

        // Examples/FieldNotes, the example app on FerryGRDB (also a package of its own there), built with the rest.
        .executableTarget(
            name: "field-notes",
            dependencies: [
                "FerryCore", "FerryClient", "FerryGRDB",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Examples/FieldNotes/Sources/FieldNotes",
            swiftSettings: strict
        ),

        // `scripts/bench app`: an update applied in place under an app's GRDB pool against the swap by rename.
        .executableTarget(
            name: "ferry-app-bench",
            dependencies: [
                "FerryCore", "FerryClient", "FerryGRDB",
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/AppBench",
            swiftSettings: strict
        ),

        // `scripts/bench delta`: the sizes of a changeset and a patchset between two snapshot files.
        .executableTarget(
            name: "ferry-delta-bench",
            dependencies: ["FerryCore"],
            path: "Benchmarks/DeltaBench",
            swiftSettings: strict
        ),

        // `scripts/bench history`: what a long history costs a publish, on a simulated clock.
        .executableTarget(
            name: "ferry-history-bench",
            dependencies: [
                "FerryCore", "FerryPostgres", "FerryPublisher", "FerryStore",
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/HistoryBench",
            swiftSettings: strict
        ),

        // `scripts/bench outbox`: times the merge engine; a benchmark program, in no product.
        .executableTarget(
            name: "ferry-outbox-bench",
            dependencies: [
                "FerryCore", "FerryPostgres", "FerryMerge", .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/OutboxBench",
            swiftSettings: strict
        ),

        // Test helpers: temp dirs, a fresh PostgreSQL database per test, the built `ferry` binary.
        .target(
            name: "FerryTestSupport",
            dependencies: [
                "FerryCore", "FerryStore", "FerryPostgres", "FerryMerge", "FerryS3",
                // TestIssuer: JWTs signed by real keys (issue 51).
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Sources/FerryTestSupport",
            swiftSettings: strict
        ),
        .testTarget(
            name: "FerryS3Tests",
            dependencies: [
                "FerryCore", "FerryS3", "FerryTestSupport", .product(name: "Crypto", package: "swift-crypto"),
            ],
            swiftSettings: strict),
        .testTarget(
            name: "FerryBucketTests",
            dependencies: [
                "FerryBucket", "FerryCore", "FerryS3", "FerryStore", "FerryPublisher", "FerryPostgres",
                "FerryTestSupport", .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict),
        .testTarget(
            name: "FerryServiceTests",
            dependencies: [
                "FerryCore", "FerryService", "FerryServer", "FerryBucket", "FerryPostgres", "FerryPublisher",
                "FerryTestSupport",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict),
        .testTarget(name: "FerryCoreTests", dependencies: ["FerryCore", "FerryTestSupport"], swiftSettings: strict),
        .testTarget(
            name: "FerryStoreTests", dependencies: ["FerryCore", "FerryStore", "FerryTestSupport"],
            swiftSettings: strict),
        .testTarget(
            name: "FerryPostgresTests", dependencies: ["FerryCore", "FerryPostgres", "FerryTestSupport"],
            swiftSettings: strict),
        .testTarget(
            name: "FerryPublisherTests",
            dependencies: [
                "FerryCore", "FerryStore", "FerryPublisher", "FerryPostgres", "FerryTestSupport",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "FerryMergeTests",
            dependencies: [
                "FerryCore", "FerryMerge", "FerryPostgres", "FerryTestSupport",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "FerryServerTests",
            dependencies: [
                "FerryCore", "FerryStore", "FerryServer", "FerryMerge", "FerryPostgres", "FerryPublisher",
                "FerryTestSupport", "FerryJWT",
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: strict
        ),
        .testTarget(
            name: "FerryClientTests",
            dependencies: [
                "FerryCore", "FerryClient", "FerryClientNIO", "FerryGRDB", "FerryStore", "FerryServer", "FerryMerge",
                "FerryPostgres", "FerryJWT",
                "FerryPublisher", "FerryTestSupport",
                // FerryGRDB's tests live here, beside the real-server harness they share with the client's.
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOFoundationEssentialsCompat", package: "swift-nio"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
            ],
            swiftSettings: strict
        ),
    ]
)
