import ArgumentParser
import AsyncHTTPClient
import FerryClient
import FerryClientNIO
import FerryCore
import Foundation

/// `--server` and `--dataset`, shared by `ferry fetch`, `push` and `sync`, validated once here.
struct ServerOptions: ParsableArguments {
    @Option(name: .long, help: "Base URL of the Ferry server, e.g. http://127.0.0.1:8080.")
    var server: String

    @Option(name: .long, help: "The dataset.")
    var dataset: String

    func validate() throws {
        _ = try serverURL()
        if case (let base, let schemaVersion?)? = DatasetName.split(dataset) {
            throw ValidationError(
                "--dataset '\(dataset)' names schema line \(schemaVersion) of '\(base)': give the dataset itself, --dataset \(base), and the line with --accept-schema \(schemaVersion)"
            )
        }
        guard DatasetName.isValidBase(dataset) else {
            throw ValidationError("--dataset '\(dataset)' is invalid: use 1-64 characters from a-z, 0-9, '_' and '-'")
        }
    }

    /// `--server` as a URL; anything but an http:// or https:// URL with a host is a usage error.
    func serverURL() throws -> URL {
        guard let url = URL(string: server), let scheme = url.scheme?.lowercased(), ["http", "https"].contains(scheme),
            url.host != nil
        else { throw ValidationError("--server must be an http:// or https:// URL, e.g. http://127.0.0.1:8080") }
        return url
    }

    /// A client configuration for `directory` that talks to `--server` about `--dataset` over the command's one HTTP
    /// stack (`http`), with the access token of `access`. It neither applies a pending update nor pushes when it opens: each command does what it says.
    func clientConfiguration(directory: URL, access: AccessOptions, http: ClientHTTP) throws
        -> FerryClient.Configuration
    {
        let url = try serverURL()
        var configuration = FerryClient.Configuration(directory: directory, serverURL: url, dataset: dataset)
        configuration.update.applyOnOpen = false
        configuration.push.onOpen = false
        configuration.transport = http.transport
        access.apply(to: &configuration)
        return configuration
    }
}
