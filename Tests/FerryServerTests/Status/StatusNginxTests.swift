import FerryCore
import Foundation
import HummingbirdTesting
import Testing

@testable import FerryServer

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

extension StatusRoutesTests {
    @Test(
        "behind deploy/nginx/ferry.conf (Debian's nginx): ?token= is refused by nginx, and the replica sees X-Forwarded-For"
    )
    func behindNginx() async throws {
        let store = try TestStore()
        defer { store.remove() }
        try store.publish()
        try await withStatusServer(store) { client, _ in
            let port = try #require(client.port)
            let nginx = try await offCooperativePool { try NginxInFront(of: port) }
            defer { nginx.stop() }
            let base = "http://127.0.0.1:\(nginx.port)"

            // The right token in the query, from this very machine: nginx refuses it before any replica sees it
            let query = try await StatusBrowserTests.request(base + "/status.json?token=\(Self.token)")
            #expect(query.status == 401)
            #expect(query.header("WWW-Authenticate") == #"Bearer realm="ferry""#, "\(query.headers)")
            #expect(query.header("Cache-Control") == "no-store")
            #expect(
                !String(decoding: query.body, as: UTF8.self).contains("code"), "a replica answered instead of nginx")

            // An empty ?token= passes nginx; the replica refuses it because nginx said who the client is
            let empty = try await StatusBrowserTests.request(base + "/status.json?token=")
            #expect(empty.status == 401)
            #expect(
                String(decoding: empty.body, as: UTF8.self).contains("through a proxy"),
                "\(String(decoding: empty.body, as: UTF8.self))")

            // The bearer header works through nginx, never cached
            let bearer = try await StatusBrowserTests.request(
                base + "/status.json", headers: ["Authorization": "Bearer \(Self.token)"])
            #expect(bearer.status == 200)
            #expect(bearer.header("Cache-Control") == "no-store")
            let page = try await StatusBrowserTests.request(
                base + "/status", headers: ["Authorization": "Bearer \(Self.token)"])
            #expect(page.status == 200 && String(decoding: page.body, as: UTF8.self).contains("<h1>Ferry status</h1>"))
        }
    }
}

extension StatusBrowserTests.Answer {
    /// A response header by name, in any letter case.
    func header(_ name: String) -> String? {
        headers.first { $0.key.lowercased() == name.lowercased() }?.value
    }
}

/// Debian's nginx running deploy/nginx/ferry.conf as shipped, with only its listen port, upstream servers (both the
/// test's server) and cache path replaced, as scripts/scale does. Each replacement must happen exactly once.
struct NginxInFront {
    let directory: TemporaryDirectory
    let port: Int
    let pid: pid_t

    init(of upstream: Int) throws {
        guard
            let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"].first(where: {
                FileManager.default.isExecutableFile(atPath: $0)
            })
        else {
            throw FerryError(
                .notFound,
                "nginx is not installed: install Debian's package with `apt-get install -y nginx-light` (scripts/test installs it)"
            )
        }
        directory = try TemporaryDirectory("ferry-nginx")
        let root = directory.url.path
        // nginx's workers run as nobody/www-data when the tests run as root: let them into the directory
        chmod(root, 0o777)
        port = try Self.freePort()
        var conf = try String(
            contentsOf: TestPaths.packageRoot.appendingPathComponent("deploy/nginx/ferry.conf"), encoding: .utf8)
        for (old, new) in [
            ("/var/cache/nginx/ferry", "\(root)/cache"), ("listen 8080;", "listen 127.0.0.1:\(port);"),
            ("server 127.0.0.1:8081 ", "server 127.0.0.1:\(upstream) "),
            ("server 127.0.0.1:8082 ", "server 127.0.0.1:\(upstream) "),
        ] {
            guard conf.components(separatedBy: old).count == 2 else {
                throw FerryError(.badInput, "deploy/nginx/ferry.conf: expected '\(old)' exactly once")
            }
            conf = conf.replacingOccurrences(of: old, with: new)
        }
        try conf.write(toFile: "\(root)/ferry.conf", atomically: true, encoding: .utf8)
        let main = """
            worker_processes 1;
            pid \(root)/nginx.pid;
            error_log \(root)/error.log warn;
            events { worker_connections 64; }
            http {
              access_log off;
              client_body_temp_path \(root)/body; proxy_temp_path \(root)/proxy; fastcgi_temp_path \(root)/fcgi;
              uwsgi_temp_path \(root)/uwsgi; scgi_temp_path \(root)/scgi;
              include \(root)/ferry.conf;
            }
            """
        try main.write(toFile: "\(root)/nginx.conf", atomically: true, encoding: .utf8)
        // In the foreground (`daemon off`), a child of this process: stopped by its PID, never left behind.
        let process = Process()
        process.executableURL = URL(fileURLWithPath: nginx)
        process.arguments = ["-p", root, "-c", "\(root)/nginx.conf", "-g", "daemon off;"]
        process.standardError = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        pid = process.processIdentifier
        // Ready once the pid file is written (after the listening socket is open)
        for _ in 0..<100 where !FileManager.default.fileExists(atPath: "\(root)/nginx.pid") && process.isRunning {
            usleep(50_000)
        }
        guard process.isRunning, FileManager.default.fileExists(atPath: "\(root)/nginx.pid") else {
            // absent when it failed before logging
            let log = (try? String(contentsOfFile: "\(root)/error.log", encoding: .utf8)) ?? ""
            kill(pid, SIGKILL)
            throw FerryError(.io, "nginx did not start: \(log.suffix(1500))", path: "\(root)/nginx.conf")
        }
    }

    /// Stops this nginx (its master, by PID, which stops its worker) and removes its directory.
    func stop() {
        kill(pid, SIGTERM)
        for _ in 0..<50 where kill(pid, 0) == 0 { usleep(100_000) }  // Foundation reaps the child
        directory.remove()
    }

    static func freePort() throws -> Int { try freeLocalPort() }
}
