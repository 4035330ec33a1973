#!/usr/bin/env python3
"""Fails when a Swift file imports a module its target does not declare in Package.swift.

SwiftPM builds such a file as long as another dependency happens to bring the module in (and
`--explicit-target-dependency-import-check` does not look at products of other packages), so an
undeclared dependency would break only later, when that other dependency changes. Run by scripts/test.
Usage: python3 scripts/lib/check_imports.py [PACKAGE_DIR]
"""
import glob
import os
import re
import sys

# Modules of the toolchain and the OS: never declared in Package.swift.
SYSTEM = {"Foundation", "FoundationEssentials", "FoundationNetworking", "Glibc", "Musl", "Darwin", "Android",
          "WinSDK", "Dispatch", "Security", "Testing", "XCTest", "Synchronization", "_Concurrency", "os"}
IMPORT = re.compile(r"^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:public\s+|internal\s+|package\s+)?import\s+"
                    r"(?:struct\s+|class\s+|enum\s+|protocol\s+|func\s+|var\s+|let\s+|typealias\s+)?(\w+)")
TARGET = re.compile(r'\.(target|testTarget|executableTarget)\(\s*name:\s*"([^"]+)"(.*?)swiftSettings', re.S)


def main() -> int:
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    manifest = open(os.path.join(root, "Package.swift"), encoding="utf-8").read()
    problems = []
    reported = set()  # (target, module): one line each
    targets = list(TARGET.finditer(manifest))
    if not targets:
        print("check_imports: found no targets in Package.swift (has its layout changed?)", file=sys.stderr)
        return 1
    for match in targets:
        kind, name, body = match.groups()
        declared = set(re.findall(r'\.product\(name:\s*"([^"]+)"', body))
        # Targets of this package: the plain strings of the dependency list (a product's strings are named).
        dependencies = re.search(r"dependencies:\s*\[(.*?)\]\s*,\s*(?:path|swiftSettings)", body + "swiftSettings", re.S)
        if dependencies:
            declared |= set(re.findall(r'(?<!name: )(?<!package: )"([A-Za-z_]\w*)"', dependencies.group(1)))
        path = re.search(r'path:\s*"([^"]+)"', body)
        folder = path.group(1) if path else os.path.join("Tests" if kind == "testTarget" else "Sources", name)
        files = sorted(glob.glob(os.path.join(root, folder, "**", "*.swift"), recursive=True))
        if not files:
            problems.append(f"{name}: no Swift files under {folder}")
        for file in files:
            with open(file, encoding="utf-8") as handle:
                for number, line in enumerate(handle, 1):
                    found = IMPORT.match(line)
                    if not found:
                        continue
                    module = found.group(1)
                    if module in SYSTEM or module == name or module in declared:
                        continue
                    if (name, module) in reported:
                        continue
                    reported.add((name, module))
                    problems.append(f"{os.path.relpath(file, root)}:{number}: imports {module}, which target "
                                    f"{name} does not declare in Package.swift; add it to the target's dependencies")
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    print(f"check_imports: {len(targets)} targets import only what they declare")
    return 0


if __name__ == "__main__":
    sys.exit(main())
