#!/usr/bin/env python3
"""Fails when a target's declared dependencies in Package.swift and its Swift files' imports disagree.

Two failures, each naming the target and the module:
- a file imports a module its target does not declare. SwiftPM builds such a file as long as another dependency
  happens to bring the module in (and `--explicit-target-dependency-import-check` does not look at products of other
  packages), so the undeclared dependency would break only later, when that other dependency changes;
- a target declares a dependency that none of its files imports. It links (and, for an app, ships) a module for
  nothing, and it hides which target really needs it. A C library another target imports is linked through that
  target, so a target needs to declare it only when it imports it. A dependency that must stay anyway goes into
  UNUSED_ALLOWED with the reason.

Run by scripts/test.
Usage: python3 scripts/lib/check_imports.py [PACKAGE_DIR]
       python3 scripts/lib/check_imports.py --self-test   checks the checker on small packages in a temp directory
"""
import glob
import os
import re
import sys
import tempfile

# Modules of the toolchain and the OS: never declared in Package.swift.
SYSTEM = {"Foundation", "FoundationEssentials", "FoundationNetworking", "FoundationXML", "Glibc", "Musl", "Darwin",
          "Android", "WinSDK", "Dispatch", "Security", "Testing", "XCTest", "Synchronization", "_Concurrency", "os"}
# (target, dependency) pairs that may be declared although no file of the target imports them, each with the reason.
# Empty today: every C library is linked through the target that imports it (checked by building `ferry`,
# `field-notes` and the tests after removing the unused declarations).
UNUSED_ALLOWED: dict = {}
IMPORT = re.compile(r"^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:public\s+|internal\s+|package\s+)?import\s+"
                    r"(?:struct\s+|class\s+|enum\s+|protocol\s+|func\s+|var\s+|let\s+|typealias\s+)?(\w+)")
TARGET = re.compile(r'\.(target|testTarget|executableTarget)\(\s*name:\s*"([^"]+)"(.*?)swiftSettings', re.S)


def check(root: str) -> tuple:
    """The problems (one line each) and the number of targets checked."""
    manifest = open(os.path.join(root, "Package.swift"), encoding="utf-8").read()
    problems = []
    reported = set()  # (target, module): one line each
    targets = list(TARGET.finditer(manifest))
    if not targets:
        return ["check_imports: found no targets in Package.swift (has its layout changed?)"], 0
    for match in targets:
        kind, name, body = match.groups()
        declared = set(re.findall(r'\.product\(name:\s*"([^"]+)"', body))
        # Targets of this package: the plain strings of the dependency list (a product's strings are named).
        dependencies = re.search(r"dependencies:\s*\[(.*?)\]\s*,\s*(?:path|swiftSettings)", body + "swiftSettings", re.S)
        if dependencies:
            declared |= set(re.findall(r'(?<!name: )(?<!package: )"([A-Za-z_]\w*)"', dependencies.group(1)))
            # A target of this package under a condition: `.target(name: "CISAL", condition: .when(…))`.
            declared |= set(re.findall(r'\.target\(\s*name:\s*"([A-Za-z_]\w*)"', dependencies.group(1)))
        path = re.search(r'path:\s*"([^"]+)"', body)
        folder = path.group(1) if path else os.path.join("Tests" if kind == "testTarget" else "Sources", name)
        files = sorted(glob.glob(os.path.join(root, folder, "**", "*.swift"), recursive=True))
        if not files:
            problems.append(f"{name}: no Swift files under {folder}")
        imported = set()
        for file in files:
            with open(file, encoding="utf-8") as handle:
                for number, line in enumerate(handle, 1):
                    found = IMPORT.match(line)
                    if not found:
                        continue
                    module = found.group(1)
                    imported.add(module)
                    if module in SYSTEM or module == name or module in declared:
                        continue
                    if (name, module) in reported:
                        continue
                    reported.add((name, module))
                    problems.append(f"{os.path.relpath(file, root)}:{number}: imports {module}, which target "
                                    f"{name} does not declare in Package.swift; add it to the target's dependencies")
        for module in sorted(declared - imported):
            if (name, module) in UNUSED_ALLOWED:
                continue
            problems.append(f"Package.swift: target {name} declares {module}, which none of its files imports; remove "
                            f"it from the target's dependencies (if it must stay, add ({name!r}, {module!r}) to "
                            f"UNUSED_ALLOWED in scripts/lib/check_imports.py with the reason)")
    return problems, len(targets)


def self_test() -> int:
    """The checker names the target and module of an undeclared import and of an unused declaration, honours
    UNUSED_ALLOWED, and passes a package whose declarations and imports agree."""
    manifest = ('targets: [\n'
                '    .target(name: "A", dependencies: ["B", .product(name: "Logging", package: "swift-log")], swiftSettings: s),\n'
                '    .target(name: "B", dependencies: [], swiftSettings: s),\n'
                ']\n')
    cases = [
        # (A's file, expected substrings of the problems; empty: must pass)
        ("import B\nimport Logging\nimport Foundation\n", []),
        ("import B\n", ["Package.swift: target A declares Logging, which none of its files imports"]),
        ("import B\nimport Logging\nimport Crypto\n", ["Sources/A/A.swift:3: imports Crypto, which target A does not declare"]),
        ("@preconcurrency import Logging\n", ["target A declares B, which none of its files imports"]),
    ]
    failures = []
    with tempfile.TemporaryDirectory() as temp:
        with open(os.path.join(temp, "Package.swift"), "w", encoding="utf-8") as handle:
            handle.write(manifest)
        for target in ["A", "B"]:
            os.makedirs(os.path.join(temp, "Sources", target))
        with open(os.path.join(temp, "Sources", "B", "B.swift"), "w", encoding="utf-8") as handle:
            handle.write("import Foundation\n")
        for source, expected in cases:
            with open(os.path.join(temp, "Sources", "A", "A.swift"), "w", encoding="utf-8") as handle:
                handle.write(source)
            problems, _ = check(temp)
            if not expected and problems:
                failures.append(f"{source!r} should pass, got {problems}")
            for text in expected:
                if not any(text in problem for problem in problems):
                    failures.append(f"{source!r} should report {text!r}, got {problems}")
        # An allow entry keeps an unused declaration, and only that one.
        with open(os.path.join(temp, "Sources", "A", "A.swift"), "w", encoding="utf-8") as handle:
            handle.write("import Foundation\n")
        UNUSED_ALLOWED[("A", "Logging")] = "self-test"
        problems, _ = check(temp)
        del UNUSED_ALLOWED[("A", "Logging")]
        if any("declares Logging" in problem for problem in problems) or not any("declares B" in p for p in problems):
            failures.append(f"UNUSED_ALLOWED should keep A → Logging only, got {problems}")
    for failure in failures:
        print(f"check_imports --self-test: {failure}", file=sys.stderr)
    if failures:
        return 1
    print(f"check_imports --self-test: undeclared imports and unused declarations are named with their target "
          f"({len(cases) + 1} cases)")
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--self-test"]:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    problems, count = check(root)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    print(f"check_imports: {count} targets import exactly what they declare")
    return 0


if __name__ == "__main__":
    sys.exit(main())
