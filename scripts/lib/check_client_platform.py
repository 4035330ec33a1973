#!/usr/bin/env python3
"""Fails when the app-facing client (FerryClient, and FerryGRDB when it exists) could not build for iOS.

CI cannot build for iOS, so this checks the claim the way it can: every target an app links, and every target of
this package those depend on (FerryCore, …), may depend on and import only the modules in ALLOWED below: the
toolchain's and the OS's (Foundation, FoundationNetworking on Linux, Dispatch, Darwin/Glibc, Security), the C shims
over libraries iOS ships (SQLite, zlib), swift-log, swift-crypto and GRDB. SwiftNIO, AsyncHTTPClient and NIOSSL
belong in FerryClientNIO, which an app does not need. The server-side targets of this package (SERVER_SIDE below:
FerryStore, with the store's writer, the parallel gzip and ThreadJob, and the publisher, merge and server targets)
are refused by name, because FerryStore depends on allowed modules only and would otherwise pass. Run by scripts/test
before the build.

Usage:
  python3 scripts/lib/check_client_platform.py [PACKAGE_DIR]
  python3 scripts/lib/check_client_platform.py --self-test [PACKAGE_DIR]
      checks the checker: the manifest in scripts/lib/fixtures/Package.swift.before-issue-27 (the package before
      FerryClient moved off NIO) must fail and name NIOCore, NIOPosix, NIOSSL and AsyncHTTPClient; today's manifest
      with FerryClient, or FerryCore, depending on FerryStore must fail naming FerryStore; and the real one must pass.
"""
import glob
import os
import re
import sys

# The targets an app links: each is checked with every target of this package it depends on.
CLIENT_TARGETS = ["FerryClient", "FerryGRDB"]

# What an app-facing target (or a target of this package it depends on) may depend on or import. Modules of this
# package are allowed only as long as they pass the same check themselves.
ALLOWED = {
    # toolchain and OS
    "Foundation", "FoundationEssentials", "FoundationNetworking", "Dispatch", "Darwin", "Glibc", "Musl", "Security",
    "Synchronization", "_Concurrency", "os",
    # C shims over libraries iOS ships (libsqlite3, libz)
    "CSQLite", "CZlib",
    # packages: swift-log, swift-crypto, GRDB
    "Logging", "Crypto", "GRDB",
}
# Targets of this package that only the publisher and the server link. Their own dependencies may all be allowed
# (FerryStore needs FerryCore and zlib only), so they are refused by name: an app must not carry the store's writer,
# the parallel gzip or the publish threads (issue 27).
SERVER_SIDE = {
    "FerryStore", "FerryPostgres", "FerryPublisher", "FerryMerge", "FerryServer", "FerryS3", "FerryBucket",
    "FerryService", "FerryTestSupport", "FerryJWT",
}
# Library targets an app does not link that are not server-side either: the CLI's NIO transport. The self-test
# requires every library target to be reached by the client, or named in SERVER_SIDE or here, so that a new
# module is classified when it is added.
NEITHER = {"FerryClientNIO"}
SERVER_HINT = ("FerryCore keeps only what both sides need; code an app needs from a server-side target moves to "
               "FerryCore or FerryClient (docs/ARCHITECTURE.md)")
# Modules an app-facing target must never reach, named in the message with where they belong.
HINT = ("move the code to FerryClientNIO (SwiftNIO, AsyncHTTPClient and NIOSSL stay there), or add the module to "
        "ALLOWED in scripts/lib/check_client_platform.py if it builds for iOS")

IMPORT = re.compile(r"^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:public\s+|internal\s+|package\s+|private\s+|fileprivate\s+)?"
                    r"import\s+(?:struct\s+|class\s+|enum\s+|protocol\s+|func\s+|var\s+|let\s+|typealias\s+)?(\w+)")
TARGET = re.compile(r'\.(target|testTarget|executableTarget|systemLibrary)\(\s*name:\s*"([^"]+)"')
FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "Package.swift.before-issue-27")


def balanced(text: str, start: int) -> str:
    """The text from start to the parenthesis that closes the one opened just before start."""
    depth = 1
    for index in range(start, len(text)):
        if text[index] == "(":
            depth += 1
        elif text[index] == ")":
            depth -= 1
            if depth == 0:
                return text[start:index]
    return text[start:]


def parse_targets(manifest: str) -> dict:
    """name → (kind, declared dependencies, source folder) for every target in the manifest text. A dependency on a
    target of this package under `condition: .when(platforms: [.linux])` is left out of the declared ones: an iOS
    app never links it (see linux_only)."""
    targets = {}
    for match in TARGET.finditer(manifest):
        kind, name = match.groups()
        body = balanced(manifest, match.end())
        if re.match(r"\s*,\s*condition:", body):
            continue  # `.target(name: X, condition: …)` in a dependency list, not a declaration
        declared = set(re.findall(r'\.product\(\s*name:\s*"([^"]+)"', body))
        dependencies = re.search(r"dependencies:\s*\[", body)
        if dependencies:
            listed = balanced(body.replace("[", "(").replace("]", ")"), dependencies.end())
            declared |= set(re.findall(r'(?<!name: )(?<!package: )"([A-Za-z_]\w*)"', listed))
        path = re.search(r'path:\s*"([^"]+)"', body)
        folder = path.group(1) if path else os.path.join("Tests" if kind == "testTarget" else "Sources", name)
        targets[name] = (kind, declared, folder)
    return targets


def linux_only(manifest: str, target: str) -> set:
    """The targets `target` depends on only on Linux (`.target(name: X, condition: .when(platforms: [.linux]))`):
    never linked by an iOS app, so allowed, as long as each file imports them under `#if canImport(X)`."""
    match = re.search(rf'\.(?:target|testTarget|executableTarget)\(\s*name:\s*"{target}"', manifest)
    if not match:
        return set()
    body = balanced(manifest, match.end())
    return set(re.findall(
        r'\.target\(\s*name:\s*"(\w+)"\s*,\s*condition:\s*\.when\(\s*platforms:\s*\[\s*\.linux\s*\]\s*\)\s*\)',
        body))


def guarded(root: str, file: str, number: int, module: str) -> bool:
    """Whether the import at file:number sits right under `#if canImport(module)`."""
    with open(os.path.join(root, file), encoding="utf-8") as handle:
        lines = handle.read().splitlines()[:number - 1]
    previous = [line.strip() for line in lines if line.strip()]
    return bool(previous) and previous[-1] == f"#if canImport({module})"


def imports(root: str, folder: str):
    """(file, line number, module) for every import in the Swift files under folder."""
    for file in sorted(glob.glob(os.path.join(root, folder, "**", "*.swift"), recursive=True)):
        with open(file, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                found = IMPORT.match(line)
                if found:
                    yield os.path.relpath(file, root), number, found.group(1)


def check(manifest: str, root: str) -> tuple:
    """The problems (one line each) and the targets checked."""
    targets = parse_targets(manifest)
    if not targets:
        return ["found no targets in Package.swift (has its layout changed?)"], []
    if "FerryClient" not in targets:
        return ["found no FerryClient target in Package.swift (renamed? update CLIENT_TARGETS)"], []
    problems, checked = [], []
    pending = [name for name in CLIENT_TARGETS if name in targets]
    reached_from = {name: name for name in pending}
    while pending:
        name = pending.pop(0)
        if name in checked:
            continue
        checked.append(name)
        kind, declared, folder = targets[name]
        via = "" if reached_from[name] == name else f" (linked by {reached_from[name]})"
        for module in sorted(declared):
            if module in SERVER_SIDE:
                problems.append(f"Package.swift: target {name}{via} depends on {module}, a server-side target an iOS app "
                                f"must not link; {SERVER_HINT}")
            elif module in targets:
                if module not in reached_from:
                    reached_from[module] = reached_from[name]
                pending.append(module)
            elif module not in ALLOWED:
                problems.append(f"Package.swift: target {name}{via} depends on {module}, which an iOS app must not link; {HINT}")
        if kind == "systemLibrary":
            continue
        linux = linux_only(manifest, name) - SERVER_SIDE
        seen = set()
        for file, number, module in imports(root, folder):
            if module in ALLOWED or module == name or module in seen:
                continue
            if module in linux:
                if not guarded(root, file, number, module):
                    problems.append(f"{file}:{number}: {name}{via} imports {module}, which it links on Linux only, "
                                    f"outside `#if canImport({module})`: an iOS build would fail")
                continue
            if module in targets and module in declared and module not in SERVER_SIDE:
                continue
            seen.add(module)
            if module in SERVER_SIDE:
                problems.append(f"{file}:{number}: {name}{via} imports {module}, a server-side target an iOS app must not "
                                f"link; {SERVER_HINT}")
                continue
            problems.append(f"{file}:{number}: {name}{via} imports {module}, which an iOS app must not link; {HINT}")
    return problems, checked


def add_dependency(manifest: str, target: str, dependency: str) -> str:
    """The manifest with `dependency` added first to the dependency list of `target`."""
    match = re.search(rf'\.target\(\s*name:\s*"{target}"', manifest)
    if not match:
        raise SystemExit(f"check_client_platform --self-test: no target {target} in Package.swift")
    start = manifest.index("dependencies: [", match.end()) + len("dependencies: [")
    return manifest[:start] + f'"{dependency}", ' + manifest[start:]


def self_test(root: str) -> int:
    """The checker fails the manifest from before issue 27 and names the four modules; it passes today's."""
    failures = []
    with open(FIXTURE, encoding="utf-8") as handle:
        before = handle.read()
    # Only the manifest is old: the files are today's, so the failures named must come from the manifest alone.
    problems, _ = check(before, root)
    text = "\n".join(problems)
    for module in ["NIOCore", "NIOPosix", "NIOSSL", "AsyncHTTPClient"]:
        if not re.search(rf"Package\.swift: target FerryClient depends on {module},", text):
            failures.append(f"the old manifest's FerryClient → {module} was not reported")
    with open(os.path.join(root, "Package.swift"), encoding="utf-8") as handle:
        today = handle.read()
    problems, checked = check(today, root)
    if problems:
        failures.append("today's package fails the check:\n  " + "\n  ".join(problems))
    if "FerryStore" not in parse_targets(today) or "FerryStore" in checked:
        failures.append(f"today's package has no FerryStore target, or the client reaches it: {checked}")
    # Every library target is classified: a new server-side module must be refused by name, not by luck.
    unclassified = [name for name, (kind, _, _) in parse_targets(today).items()
                    if kind == "target" and name not in checked and name not in SERVER_SIDE and name not in NEITHER]
    if unclassified:
        failures.append(f"library targets in neither the client, SERVER_SIDE nor NEITHER: {unclassified}; add each "
                        f"to the list it belongs to in scripts/lib/check_client_platform.py")
    # The store's writer left FerryCore for FerryStore: a client, or FerryCore itself, depending on it again fails,
    # though every module FerryStore depends on is allowed.
    for target, via in [("FerryClient", ""), ("FerryCore", " (linked by FerryClient)")]:
        edited = add_dependency(today, target, "FerryStore")
        problems, _ = check(edited, root)
        if not any(f"target {target}{via} depends on FerryStore, a server-side target" in p for p in problems):
            failures.append(f"{target} → FerryStore was not reported: {problems}")
    # A file that imports NIO must be caught too, not only a manifest that declares it.
    manifest = 'targets: [ .target(name: "FerryClient", dependencies: ["FerryCore"], path: "P", swiftSettings: s), ]'
    import tempfile
    with tempfile.TemporaryDirectory() as temp:
        os.makedirs(os.path.join(temp, "P"))
        with open(os.path.join(temp, "P", "A.swift"), "w", encoding="utf-8") as handle:
            handle.write("import Foundation\n@preconcurrency import NIOCore\n")
        problems, _ = check(manifest.replace("FerryCore", "Foundation"), temp)
        if not any("P/A.swift:2: FerryClient imports NIOCore" in problem for problem in problems):
            failures.append(f"an import of NIOCore in a FerryClient file was not reported: {problems}")
        # An import of FerryStore is refused even where the manifest declares it.
        with open(os.path.join(temp, "P", "A.swift"), "w", encoding="utf-8") as handle:
            handle.write("import Foundation\nimport FerryStore\n")
        store = '.target(name: "FerryStore", dependencies: ["CZlib"], path: "S", swiftSettings: s), '
        os.makedirs(os.path.join(temp, "S"))
        problems, _ = check(manifest.replace("FerryCore", "FerryStore").replace("targets: [ ", "targets: [ " + store), temp)
        if not any("P/A.swift:2: FerryClient imports FerryStore, a server-side target" in problem for problem in problems):
            failures.append(f"an import of FerryStore in a FerryClient file was not reported: {problems}")
        # A module linked on Linux only passes under `#if canImport(…)`, and is named outside it.
        linux = ('targets: [ .target(name: "FerryClient", dependencies: ["Foundation", .target(name: "CISAL", '
                 'condition: .when(platforms: [.linux]))], path: "P", swiftSettings: s), ]')
        for text, expected in [("#if canImport(CISAL)\n    import CISAL\n#endif\n", False), ("import CISAL\n", True)]:
            with open(os.path.join(temp, "P", "A.swift"), "w", encoding="utf-8") as handle:
                handle.write("import Foundation\n" + text)
            problems, _ = check(linux, temp)
            named = any("FerryClient imports CISAL, which it links on Linux only" in p for p in problems)
            if named != expected or (not expected and problems):
                failures.append(f"a Linux-only import ({'un' if expected else ''}guarded) was misjudged: {problems}")
    for failure in failures:
        print(f"check_client_platform --self-test: {failure}", file=sys.stderr)
    if failures:
        return 1
    print(f"check_client_platform --self-test: the pre-issue-27 manifest fails naming NIOCore, NIOPosix, NIOSSL and "
          f"AsyncHTTPClient; FerryClient or FerryCore depending on FerryStore fails; a Linux-only import outside `#if canImport` fails; today's passes ({', '.join(checked)})")
    return 0


def main() -> int:
    args = sys.argv[1:]
    if args and args[0] == "--self-test":
        return self_test(args[1] if len(args) > 1 else ".")
    root = args[0] if args else "."
    with open(os.path.join(root, "Package.swift"), encoding="utf-8") as handle:
        problems, checked = check(handle.read(), root)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    print(f"check_client_platform: {', '.join(checked)} depend on and import only {', '.join(sorted(ALLOWED))} "
          f"and each other")
    return 0


if __name__ == "__main__":
    sys.exit(main())
