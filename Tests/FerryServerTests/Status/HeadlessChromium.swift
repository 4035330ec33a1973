import FerryCore
import Foundation

/// Debian's `chromium` run headless, one page per process, each run bounded by a timeout and killed by its PID when
/// it overruns. Every run gets a throwaway profile directory; `--no-sandbox` because the tests run as root in a
/// container (Chromium refuses to start its sandbox as root).
///
/// Console messages are read from Chromium's own log (`--enable-logging=stderr --v=0`), where each one is a line
/// with `:CONSOLE` (`[pid:tid:time:INFO:CONSOLE:1] "message", source: …`): JavaScript errors, failed loads and
/// Content-Security-Policy violations all land there. No DevTools protocol client is needed.
struct HeadlessChromium {
    let executable: URL

    /// The browser, or an error telling how to install it (the tests fail with it rather than skip).
    static func find() throws -> HeadlessChromium {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        for directory in path.split(separator: ":").map(String.init) + ["/usr/bin"] {
            for name in ["chromium", "chromium-browser"] {
                let url = URL(fileURLWithPath: directory).appendingPathComponent(name)
                if FileManager.default.isExecutableFile(atPath: url.path) { return HeadlessChromium(executable: url) }
            }
        }
        throw FerryError(
            .notFound,
            "chromium is not installed, so the status page cannot be checked in a real browser: install Debian's package with `apt-get install -y chromium` (scripts/test installs it)"
        )
    }

    struct Run: Sendable {
        let stdout: String
        /// Chromium's log lines that report a console message.
        let consoleLines: [String]
        let log: String
    }

    /// Loads `url` and returns the DOM after load (`--dump-dom`) with the console lines logged meanwhile.
    func dumpDOM(_ url: String, timeout: TimeInterval = 90) async throws -> Run {
        try await run(["--dump-dom", url], timeout: timeout)
    }

    /// Loads `url` in a window of `width`×`height` and writes a PNG of it to `output`.
    func screenshot(_ url: String, width: Int, height: Int, to output: URL, timeout: TimeInterval = 60) async throws
        -> Run
    {
        // a stale screenshot must not pass for a new one; absence is fine
        try? FileManager.default.removeItem(at: output)
        return try await run(
            ["--screenshot=\(output.path)", "--window-size=\(width),\(height)", "--hide-scrollbars", url],
            timeout: timeout)
    }

    /// One viewport's layout as Chromium computed it: the viewport width (`clientWidth`), the document's
    /// `scrollWidth`, and up to five elements reaching past the right edge outside a `.scroll` box.
    struct Layout: Decodable, Sendable, CustomStringConvertible {
        let width: Int
        let height: Int
        let clientWidth: Int
        let scrollWidth: Int
        let overflowing: [String]
        /// Milliseconds from the navigation's start to the end of `DOMContentLoaded` (Navigation Timing).
        let domContentLoadedMs: Int?

        var description: String {
            "\(width)×\(height): clientWidth \(clientWidth), scrollWidth \(scrollWidth), overflowing \(overflowing)"
        }
    }

    /// Loads `url` at each size (emulated as a phone below 600 px wide) and measures its layout, through the DevTools
    /// protocol over `--remote-debugging-pipe` (scripts/lib/page_layout.py): nothing is added to the page.
    func layout(_ url: String, sizes: [(Int, Int)], timeout: TimeInterval = 90) async throws -> [Layout] {
        let script = TestPaths.packageRoot.appendingPathComponent("scripts/lib/page_layout.py").path
        await Self.gate.acquire()  // one browser at a time (run(_:timeout:))
        defer { Task { await Self.gate.release() } }
        // On a timeout the script is killed; its browser then sees the DevTools pipe close and exits.
        let result = try await runProcess(
            URL(fileURLWithPath: "/usr/bin/env"),
            ["python3", script, executable.path, url] + sizes.map { "\($0.0)x\($0.1)" },
            timeout: timeout)
        guard result.status == 0 else {
            throw FerryError(.network, "page_layout.py exited with \(result.status): \(result.stderr.suffix(2000))")
        }
        return try result.stdout.split(separator: "\n").map {
            try JSONDecoder().decode(Layout.self, from: Data($0.utf8))
        }
    }

    private func run(_ arguments: [String], timeout: TimeInterval) async throws -> Run {
        // One browser at a time in the test process: two Chromiums beside the other suites' servers starved each
        // other past their timeouts on a 2-core CI machine. The timeout counts from this run's start.
        await Self.gate.acquire()
        defer { Task { await Self.gate.release() } }
        let profile = try TemporaryDirectory("ferry-chromium-profile")
        defer { profile.remove() }
        let result = try await runProcess(
            executable,
            [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
                "--user-data-dir=\(profile.url.path)", "--enable-logging=stderr", "--v=0",
            ] + arguments,
            timeout: timeout)
        guard result.status == 0 else {
            throw FerryError(.network, "chromium exited with \(result.status): \(result.stderr.suffix(2000))")
        }
        return Run(
            stdout: result.stdout,
            consoleLines: result.stderr.split(separator: "\n").filter { $0.contains(":CONSOLE") }.map(String.init),
            log: result.stderr)
    }
}

extension HeadlessChromium {
    /// The gate every run passes, one at a time, in the order they asked.
    static let gate = Gate()

    actor Gate {
        private var busy = false
        private var waiting: [CheckedContinuation<Void, Never>] = []

        func acquire() async {
            guard busy else {
                busy = true
                return
            }
            await withCheckedContinuation { waiting.append($0) }
        }

        func release() {
            if waiting.isEmpty { busy = false } else { waiting.removeFirst().resume() }
        }
    }
}
