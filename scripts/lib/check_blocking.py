#!/usr/bin/env python3
"""Fails when an `async` function in Sources makes a blocking file call outside the lanes off the cooperative pool.

docs/ARCHITECTURE.md ("Concurrency") says: code on Swift's cooperative pool never calls fsync, never reads or writes a
whole file, never copies or renames one. Blocking work leaves the pool by one lane per kind of resource; this check
finds the calls that stayed behind.

What it does, a simple heuristic on text:
- it blanks out comments and string literals, then finds each `async` function or initializer (the `async` after its
  parameter list) and each `Task { … }` / `Task.detached { … }` body, by brace depth;
- in those bodies it reports each blocking call (BLOCKING below) with its file:line and the call, unless the call
  stands inside the closure passed to a lane's run function (LANES below: `NIOThreadPool.singleton.runIfActive`,
  `ThreadJob.run`, `BlockingWork.run`, a dedicated `Thread`, a Dispatch queue's `async`, …), or the function is in
  ALLOWED with a reason.
- in Sources/FerryGRDB it also reads each public function that is not `async`: the app's API never does file work on
  the caller's thread, so there the calls above, FileManager's and the client's attachment store's are reported too.
What it does not see: a blocking call inside a synchronous helper that an async function calls (name the helper in
BLOCKING when it is Ferry's, as `DurableFile.` and `FileDigest.` are), metadata calls (`fileExists`, `stat`,
`removeItem`, `createDirectory`: short, and left to review), and libpq or SQLite calls (they have their own lanes,
held by types: `PostgresPool`, the client actor).

Run by scripts/test.
Usage: python3 scripts/lib/check_blocking.py [PACKAGE_DIR]
       python3 scripts/lib/check_blocking.py --self-test   proves it catches a bad snippet and passes a lane closure
"""
import glob
import os
import re
import sys
import tempfile

# Blocking calls: (regex, what to call it in the report).
BLOCKING = [
    (r"\.write\(\s*contentsOf:", "FileHandle.write(contentsOf:)"),
    (r"\.write\(\s*(?:to|toFile):", "write(to:) of a whole file"),
    (r"\bFileHandle\b[^\n]*\.write\(", "FileHandle.write"),
    (r"(?<![\w.])(?:fsync|fdatasync)\(", "fsync"),
    (r"\bData\(\s*contentsOf:", "Data(contentsOf:)"),
    (r"\bString\(\s*contentsOf(?:File)?:", "String(contentsOf:)"),
    (r"\.(?:copyItem|moveItem|linkItem|replaceItemAt|replaceItem)\(", "FileManager copy/move"),
    (r"(?<![\w])rename(?:at)?\(", "rename"),
    (r"(?<![\w.])(?:read|pread|write|pwrite)\(\s*\w+\s*,", "read/write(2) of a file descriptor"),
    (r"\.(?:read\(upToCount:|readToEnd\(|readDataToEndOfFile\(|readData\(ofLength:)", "FileHandle read"),
    (r"\bDurableFile\.\w+\(", "DurableFile (fsync, rename)"),
    (r"\bFileDigest\.sha256(?:Hex)?\(\s*of:", "FileDigest of a whole file"),
    (r"\bFileClone\.\w+\(", "FileClone (a file copy)"),
]
BLOCKING = [(re.compile(pattern), name) for pattern, name in BLOCKING]

# Calls whose closure runs off the cooperative pool: a call of one of these, with its parenthesized arguments and its
# trailing closure, is a lane.
LANES = re.compile(
    r"\brunIfActive\b|\bThreadJob\s*(?:<[^>]*>)?\s*(?:\.run\b|\()|\bBlockingWork\.run\b|\boffCooperativePool\b"
    r"|\bThread\.detachNewThread\b|\bThread\s*(?:\(\s*block:|\{)|\.async\s*(?:\(\s*execute:|\{)"
    r"|\bconcurrentPerform\b|\bPostgresPool\b[^\n]*\.run\b|\blane\s*\{")

# FerryGRDB's public API never blocks the app's thread (issue 49): a public function there that is not `async` does no
# file work at all, neither the calls above nor the client's attachment store or FileManager.
APP_DIRECTORY = "FerryGRDB" + os.sep
APP_BLOCKING = BLOCKING + [
    (re.compile(r"\bFileManager\.default\.\w+\("), "FileManager"),
    (re.compile(r"\bdeviceAttachments\.(?!url\(|contains\(|root\b)\w+\("), "DeviceAttachments file work"),
]
PUBLIC_FUNC = re.compile(r"\bpublic\s+(?:(?:static|nonisolated|mutating)\s+)*(func\s+(\w+))\s*(<[^{]*?>)?\s*\(")

# Async functions allowed to block, by (file under Sources, function name): each with the reason. Outside the areas
# being fixed in issue 36 these name who should move the call onto a lane.
ALLOWED = {
    ("ferry/Ferry.swift", "main"):
        "the CLI's last line to stderr when a command fails: one short write to a terminal or pipe as the process "
        "exits, with nothing else left to run",
    ("ferry/ServeCommand.swift", "run"):
        "`serve` prints its ready line and start-up errors: short writes to a terminal or pipe, once each (the store "
        "directory is made by FerryService's ServerAssembly, on a lane)",
}

ASYNC_FUNC = re.compile(r"\b(func\s+(\w+|[^\s(<]+)|init[?!]?)\s*(<[^{]*?>)?\s*\(")
TASK = re.compile(r"\bTask(?:\.detached)?\s*(?:\([^)]*\))?\s*\{")


def blank(source: str) -> str:
    """The source with comments and string literals replaced by spaces (newlines kept, so offsets and lines hold)."""
    out = []
    i, n = 0, len(source)
    while i < n:
        if source.startswith("//", i):
            end = source.find("\n", i)
            end = n if end < 0 else end
            out.append(" " * (end - i))
            i = end
        elif source.startswith("/*", i):
            end = source.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", source[i:end]))
            i = end
        elif source[i] == '"' or (source[i] == "#" and re.match(r'#+"', source[i:])):
            hashes = len(re.match(r"#*", source[i:]).group(0))
            start = i
            i += hashes
            quote = '"""' if source.startswith('"""', i) else '"'
            close = quote + "#" * hashes
            i += len(quote)
            while i < n and not source.startswith(close, i):
                i += 2 if (source[i] == "\\" and hashes == 0) else 1
            i = min(n, i + len(close))
            out.append(source[start] + re.sub(r"[^\n]", " ", source[start + 1:i - 1]) + source[i - 1])
        else:
            out.append(source[i])
            i += 1
    return "".join(out)


def matching(code: str, start: int) -> int:
    """The index just past the bracket that closes the one at `start` (`(`, `[` or `{`)."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = [pairs[code[start]]]
    i = start + 1
    while i < len(code) and stack:
        ch = code[i]
        if ch in pairs:
            stack.append(pairs[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
        i += 1
    return i


def function_bodies(code: str, pattern: re.Pattern, want_async: bool) -> list:
    """(name, body start, body end) of each function `pattern` finds whose signature is `async` (or is not)."""
    bodies = []
    for match in pattern.finditer(code):
        after = matching(code, match.end() - 1)
        brace = code.find("{", after)
        if brace < 0:
            continue
        signature = code[after:brace]
        # A protocol requirement has no body: the next declaration starts before any brace.
        is_async = re.search(r"\basync\b", signature) is not None
        if re.search(r"\b(func|var|let|init|case)\b", signature) or is_async != want_async:
            continue
        bodies.append((match.group(2) or match.group(1), brace, matching(code, brace)))
    return bodies


def async_bodies(code: str) -> list:
    """(name, body start, body end) of each async function, initializer and Task body."""
    bodies = function_bodies(code, ASYNC_FUNC, True)
    for match in TASK.finditer(code):
        brace = match.end() - 1
        bodies.append(("Task", brace, matching(code, brace)))
    return bodies


def lanes(code: str) -> list:
    """(start, end) of each lane call: its name, arguments and trailing closure."""
    spans = []
    for match in LANES.finditer(code):
        i = match.end()
        if code[i - 1] in "({":
            i = matching(code, i - 1)
        while True:
            j = i
            while j < len(code) and code[j] in " \t":
                j += 1
            if j < len(code) and code[j] in "({":
                i = matching(code, j)
            else:
                break
        spans.append((match.start(), i))
    return spans


def check_file(path: str, relative: str) -> list:
    source = open(path, encoding="utf-8").read()
    code = blank(source)
    lane_spans = lanes(code)
    problems = []
    seen = set()
    bodies = [(name, start, end, BLOCKING, "async") for name, start, end in async_bodies(code)]
    if relative.startswith(APP_DIRECTORY):
        bodies += [(name, start, end, APP_BLOCKING, "FerryGRDB's public synchronous") for name, start, end in
                   function_bodies(code, PUBLIC_FUNC, False)]
    for name, start, end, calls, kind in bodies:
        if (relative, name) in ALLOWED or (relative, "*") in ALLOWED:
            continue
        body = code[start:end]
        for pattern, what in calls:
            for found in pattern.finditer(body):
                offset = start + found.start()
                line = code.count("\n", 0, offset) + 1
                if line in seen or any(a <= offset < b for a, b in lane_spans):
                    continue
                seen.add(line)  # one report a line
                text = source.splitlines()[line - 1].strip()
                problems.append(f"{relative}:{line}: {what} in {kind} `{name}` outside a lane: {text}")
    return problems


def check(root: str) -> tuple:
    """The problems (one line each) and the number of files read."""
    files = sorted(glob.glob(os.path.join(root, "Sources", "**", "*.swift"), recursive=True))
    problems = []
    for file in files:
        relative = os.path.relpath(file, os.path.join(root, "Sources"))
        problems += check_file(file, relative)
    return problems, len(files)


def unused_allowances(root: str) -> list:
    """The ALLOWED entries that silence nothing today (the call moved onto a lane, or the file or function is gone)."""
    unused = []
    for key in list(ALLOWED):
        reason = ALLOWED.pop(key)
        path = os.path.join(root, "Sources", key[0])
        if not os.path.exists(path) or not check_file(path, key[0]):
            unused.append(key)
        ALLOWED[key] = reason
    return unused


def self_test() -> int:
    """A blocking call in an async function is reported with its file:line; in a lane closure, a sync function, a
    comment or a string, or an allowed function it is not."""
    cases = [
        # (source, expected substrings of the problems; empty: must pass)
        ("func f(h: FileHandle, d: Data) async throws {\n    try h.write(contentsOf: d)\n}\n",
         ["A.swift:2: FileHandle.write(contentsOf:) in async `f`"]),
        ("func f(u: URL) async throws -> Data {\n    let x = 1\n    return try Data(contentsOf: u)\n}\n",
         ["A.swift:3: Data(contentsOf:) in async `f`"]),
        ("init(fd: Int32) async {\n    fsync(fd)\n}\n", ["A.swift:2: fsync in async `init`"]),
        ("func f() {\n    Task {\n        try DurableFile.sync(u)\n    }\n}\n", ["A.swift:3: DurableFile"]),
        ("func f(u: URL) async throws {\n    try FileManager.default.copyItem(at: u, to: u)\n}\n",
         ["FileManager copy/move in async `f`"]),
        # Lanes.
        ("func f(h: FileHandle, d: Data) async throws {\n"
         "    try await NIOThreadPool.singleton.runIfActive { try h.write(contentsOf: d) }\n}\n", []),
        ("func f(u: URL) async throws -> String {\n"
         "    try await ThreadJob.run(name: \"x\") {\n        try FileDigest.sha256Hex(of: u)\n    }\n}\n", []),
        ("func f(u: URL) async throws {\n    try await BlockingWork.run({ try DurableFile.sync(u) })\n}\n", []),
        ("func f(fd: Int32) async throws {\n    try await lane { fsync(fd) }\n}\n", []),
        # Not async, not code.
        ("func f(fd: Int32) {\n    fsync(fd)\n}\n", []),
        ("func f(_ body: () async -> Void) {\n    fsync(1)\n}\n", []),
        ("func f() async {\n    // fsync(fd) would block here\n    print(\"Data(contentsOf: u)\")\n}\n", []),
        # A lane in one function does not cover another.
        ("func f(u: URL) async throws {\n    try await BlockingWork.run { try DurableFile.sync(u) }\n}\n"
         "func g(u: URL) async throws {\n    try DurableFile.sync(u)\n}\n", ["A.swift:5: DurableFile (fsync, rename) in async `g`"]),
    ]
    # (source in Sources/FerryGRDB, expected substrings): FerryGRDB's public synchronous API does no file work.
    app_cases = [
        ("public struct S {\n    public func add(data: Data) throws -> String {\n"
         "        try store.add(data: data)\n        try deviceAttachments.queued()\n    }\n}\n",
         ["FerryGRDB/A.swift:4: DeviceAttachments file work in FerryGRDB's public synchronous `add`"]),
        ("public func f(u: URL) -> Bool {\n    FileManager.default.isReadableFile(atPath: u.path)\n}\n",
         ["FerryGRDB/A.swift:2: FileManager in FerryGRDB's public synchronous `f`"]),
        ("public func f(u: URL) async throws {\n    try await client.deviceAttachments.add(fileAt: u)\n}\n", []),
        ("func f(u: URL) throws {\n    try DurableFile.sync(u)\n}\n", []),
    ]
    failures = []
    with tempfile.TemporaryDirectory() as temp:
        os.makedirs(os.path.join(temp, "Sources", "M"))
        os.makedirs(os.path.join(temp, "Sources", "FerryGRDB"))
        app_file = os.path.join(temp, "Sources", "FerryGRDB", "A.swift")
        for source, expected in app_cases:
            with open(app_file, "w", encoding="utf-8") as handle:
                handle.write(source)
            problems, _ = check(temp)
            if len(problems) != len(expected) or not all(any(t in p for p in problems) for t in expected):
                failures.append(f"{source!r} in FerryGRDB should report {expected}, got {problems}")
        os.remove(app_file)
        file = os.path.join(temp, "Sources", "M", "A.swift")
        for source, expected in cases:
            with open(file, "w", encoding="utf-8") as handle:
                handle.write(source)
            problems, _ = check(temp)
            if not expected and problems:
                failures.append(f"{source!r} should pass, got {problems}")
            if expected and len(problems) != len(expected):
                failures.append(f"{source!r} should report {len(expected)} call(s), got {problems}")
            for text in expected:
                if not any(text in problem for problem in problems):
                    failures.append(f"{source!r} should report {text!r}, got {problems}")
        # An ALLOWED entry silences its function only.
        with open(file, "w", encoding="utf-8") as handle:
            handle.write(cases[0][0] + cases[-1][0])
        ALLOWED[("M/A.swift", "f")] = "self-test"
        problems, _ = check(temp)
        del ALLOWED[("M/A.swift", "f")]
        if any("`f`" in p for p in problems) or not any("`g`" in p for p in problems):
            failures.append(f"ALLOWED should silence f only, got {problems}")
    for failure in failures:
        print(f"check_blocking --self-test: {failure}", file=sys.stderr)
    if failures:
        return 1
    print(f"check_blocking --self-test: {len(cases) + len(app_cases) + 1} cases pass")
    return 0


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    problems, count = check(os.path.abspath(root))
    for problem in problems:
        print(f"check_blocking: {problem}", file=sys.stderr)
    if problems:
        print(f"check_blocking: {len(problems)} blocking call(s) on the cooperative pool; move each onto its lane "
              "(docs/ARCHITECTURE.md, \"Concurrency\") or allow it in ALLOWED with the reason", file=sys.stderr)
        return 1
    for file, function in unused_allowances(os.path.abspath(root)):
        print(f"check_blocking: warning: ALLOWED entry ({file}, {function}) silences nothing; remove it", file=sys.stderr)
    print(f"check_blocking: no blocking call in an async function outside a lane ({count} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
