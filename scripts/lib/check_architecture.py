#!/usr/bin/env python3
"""Fails when docs/ARCHITECTURE.md's module drawing or module table disagrees with Package.swift.

Package.swift is the truth: each target's dependencies on the other targets. The doc states them twice:
- the module table (`| module | role | depends on |`): the Ferry modules a row's last column names must be exactly the
  ones its target declares;
- the dependency drawing (the code block after the table): `A ◀── B, C` says B and C depend on A (`every other
  module` names all the table's modules but A), `ferry ──▶ A, B` says ferry depends on A and B. Its edges must be
  exactly Package.swift's, edge for edge, between the table's modules.

Run by scripts/test.
Usage: python3 scripts/lib/check_architecture.py [PACKAGE_DIR]
       python3 scripts/lib/check_architecture.py --self-test   proves it catches a missing edge and a wrong table row
"""
import os
import re
import sys
import tempfile


def package_edges(package: str) -> dict:
    """Target → the set of other targets it depends on, from Package.swift's text."""
    targets = {}
    for match in re.finditer(r"\.(?:target|executableTarget)\(\s*name:\s*\"([^\"]+)\",\s*dependencies:\s*\[", package):
        depth, i = 1, match.end()
        while depth and i < len(package):
            depth += {"[": 1, "]": -1}.get(package[i], 0)
            i += 1
        # Every quoted name in the list: the targets among them are its dependencies (products are filtered below).
        targets[match.group(1)] = set(re.findall(r"\"([^\"]+)\"", package[match.end():i]))
    names = set(targets)
    return {name: {d for d in deps if d in names} for name, deps in targets.items()}


def doc_table(doc: str) -> dict:
    """Module → the modules its table row's last column names."""
    rows = {}
    for line in doc.splitlines():
        match = re.match(r"\| `([\w-]+)` \|.*\| ([^|]*) \|$", line)
        if match:
            rows[match.group(1)] = set(re.findall(r"\b(Ferry\w+)\b", match.group(2)))
    return rows


def doc_drawing(doc: str, modules: set) -> set:
    """(module, dependency) edges of the dependency drawing: the first code block after the module table."""
    table_end = doc.find("| `ferry` |")
    start = doc.find("```", table_end)
    end = doc.find("```", start + 3)
    edges = set()
    for line in doc[start + 3:end].splitlines():
        if "◀──" in line:
            target, _, users = line.partition("◀──")
            target = target.strip()
            names = modules - {target} if "every other module" in users else re.findall(r"[\w-]+", users)
            edges |= {(user, target) for user in names if user in modules}
        elif "──▶" in line:
            user, _, targets = line.partition("──▶")
            edges |= {(user.strip(), t) for t in re.findall(r"[\w-]+", targets) if t in modules}
    return edges


def check(root: str) -> list:
    package = package_edges(open(os.path.join(root, "Package.swift"), encoding="utf-8").read())
    doc = open(os.path.join(root, "docs", "ARCHITECTURE.md"), encoding="utf-8").read()
    table = doc_table(doc)
    problems = []
    for module, named in sorted(table.items()):
        declared = package.get(module)
        if declared is None:
            problems.append(f"the table names `{module}`, which Package.swift has no target for")
        elif named != declared:
            problems.append(f"the table's `{module}` depends on {sorted(named)}; Package.swift says {sorted(declared)}")
    modules = set(table)
    drawn = doc_drawing(doc, modules)
    declared = {(m, d) for m in modules for d in package.get(m, set()) if d in modules}
    for user, target in sorted(declared - drawn):
        problems.append(f"the drawing lacks {user} ──▶ {target}, which Package.swift declares")
    for user, target in sorted(drawn - declared):
        problems.append(f"the drawing shows {user} ──▶ {target}, which Package.swift does not declare")
    return problems


def self_test() -> int:
    package = """
        .target(name: "FerryCore", dependencies: ["CSQLite", .product(name: "Crypto", package: "swift-crypto")]),
        .target(name: "FerryA", dependencies: ["FerryCore"]),
        .executableTarget(name: "ferry", dependencies: ["FerryA", "FerryCore"]),
    """
    good = ("| module | role | depends on |\n| --- | --- | --- |\n| `FerryCore` | c | swift-crypto |\n"
            "| `FerryA` | a | FerryCore |\n| `ferry` | cli | FerryCore, FerryA |\n\n```\n"
            "FerryCore ◀── every other module\nferry ──▶ FerryA\n```\n")
    cases = [
        (good, []),
        (good.replace("ferry ──▶ FerryA\n", ""), ["lacks ferry ──▶ FerryA"]),
        (good.replace("| `FerryA` | a | FerryCore |", "| `FerryA` | a | FerryCore, FerryB |"), ["`FerryA` depends on"]),
        (good.replace("ferry ──▶ FerryA", "ferry ──▶ FerryA\nFerryA ◀── FerryCore"), ["shows FerryCore ──▶ FerryA"]),
    ]
    failures = []
    with tempfile.TemporaryDirectory() as temp:
        os.makedirs(os.path.join(temp, "docs"))
        open(os.path.join(temp, "Package.swift"), "w", encoding="utf-8").write(package)
        for doc, expected in cases:
            open(os.path.join(temp, "docs", "ARCHITECTURE.md"), "w", encoding="utf-8").write(doc)
            problems = check(temp)
            if len(problems) != len(expected) or not all(any(e in p for p in problems) for e in expected):
                failures.append(f"expected {expected}, got {problems}")
    for failure in failures:
        print(f"check_architecture --self-test: {failure}", file=sys.stderr)
    if failures:
        return 1
    print(f"check_architecture --self-test: {len(cases)} cases pass")
    return 0


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    problems = check(os.path.abspath(root))
    for problem in problems:
        print(f"check_architecture: {problem} (docs/ARCHITECTURE.md)", file=sys.stderr)
    if problems:
        return 1
    print("check_architecture: the drawing and the module table match Package.swift")
    return 0


if __name__ == "__main__":
    sys.exit(main())
