// swift-tools-version:6.1
import PackageDescription

// FieldNotes, the example app on FerryGRDB, as a package of its own (an app depends on Ferry like this).
// Inside the Ferry repository the same source also builds as the root package's `field-notes` target, so that
// scripts/test and scripts/demo build it with the rest, without a second copy of every dependency.
let package = Package(
    name: "FieldNotes",
    platforms: [.macOS(.v14), .iOS(.v17)],
    dependencies: [
        .package(name: "ferry", path: "../.."),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
    ],
    targets: [
        .executableTarget(
            name: "FieldNotes",
            dependencies: [
                .product(name: "FerryGRDB", package: "ferry"),
                .product(name: "FerryClient", package: "ferry"),
                .product(name: "FerryCore", package: "ferry"),
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Logging", package: "swift-log"),
            ]
        )
    ]
)
