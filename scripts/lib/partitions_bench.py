"""Helpers of scripts/bench partitions (scripts/bench.d/partitions.sh), stdlib only.

  partitions_bench.py bytes BEFORE AFTER              body bytes the server sent between two /metrics texts, split
                                                      into the listing, the shared stream, partition streams and
                                                      the rest: one JSON object
  partitions_bench.py wait LISTING_URL KEY VERSION S  waits until the listing names partition KEY at a version
                                                      above VERSION (at most S seconds); prints that version
  partitions_bench.py version LISTING_URL KEY         prints partition KEY's version in the listing (0: absent)
  partitions_bench.py requests BASE_URL COUNT PATH... GETs the paths in turn over one keep-alive connection until
                                                      COUNT requests were answered; prints the status counts
  partitions_bench.py rows DATABASE                   rows per table of a device's database.db, as JSON
  partitions_bench.py last-json FILE KEY              KEY of the last JSON line of FILE (empty when absent)
"""
import http.client, json, re, sqlite3, sys, time, urllib.parse, urllib.request

# A route label holds braces itself (route="/v1/datasets/{dataset}/snapshot"): the labels end at the last '}'.
LINE = re.compile(r'^ferry_http_response_bytes_total\{(?P<labels>.*)\}\s+(?P<value>[0-9.eE+]+)\s*$')


def response_bytes(path):
    """{route: bytes} of one /metrics text."""
    counts = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            route = re.search(r'route="([^"]*)"', m.group("labels"))
            key = route.group(1) if route else "?"
            counts[key] = counts.get(key, 0) + int(float(m.group("value")))
    return counts


def kind(route):
    if route.rstrip("/").endswith("/partitions"):
        return "listing"
    if "/shared/" in route:
        return "shared"
    if "/partitions/" in route:
        return "partitions"
    return "other"


def cmd_bytes(before, after):
    a, b = response_bytes(before), response_bytes(after)
    out = {"listing": 0, "shared": 0, "partitions": 0, "other": 0, "routes": {}}
    for route in sorted(set(a) | set(b)):
        diff = b.get(route, 0) - a.get(route, 0)
        if diff and route != "/metrics":  # the scrapes themselves
            out[kind(route)] += diff
            out["routes"][route] = diff
    out["total"] = out["listing"] + out["shared"] + out["partitions"] + out["other"]
    print(json.dumps(out))


def listing_version(url, key):
    with urllib.request.urlopen(url, timeout=10) as r:
        listing = json.load(r)
    for entry in listing.get("partitions", []):
        if entry.get("key") == key:
            return int(entry.get("version", 0))
    return 0


def cmd_wait(url, key, version, seconds):
    deadline = time.monotonic() + float(seconds)
    seen = 0
    while time.monotonic() < deadline:
        try:
            seen = listing_version(url, key)
        except OSError:
            seen = 0
        if seen > int(version):
            print(seen)
            return
        time.sleep(0.1)
    sys.exit(f"{url} did not list partition {key} above version {version} within {seconds} s (last: {seen})")


def cmd_requests(base, count, paths):
    parsed = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
    statuses = {}
    for i in range(int(count)):
        conn.request("GET", paths[i % len(paths)])
        response = conn.getresponse()
        response.read()
        statuses[response.status] = statuses.get(response.status, 0) + 1
    conn.close()
    print(" ".join(f"{status}:{n}" for status, n in sorted(statuses.items())))


def cmd_rows(database):
    db = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    tables = [r[0] for r in db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE 'ferry_%'")]
    print(json.dumps({t: db.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in sorted(tables)}))


def cmd_last_json(path, key):
    last = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    last = json.loads(line)
                except ValueError:
                    pass
    value = (last or {}).get(key)
    print("" if value is None else value)


COMMANDS = {"bytes": cmd_bytes, "wait": cmd_wait, "version": lambda url, key: print(listing_version(url, key)),
            "requests": lambda base, count, *paths: cmd_requests(base, count, paths), "rows": cmd_rows,
            "last-json": cmd_last_json}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        sys.exit(__doc__)
    COMMANDS[sys.argv[1]](*sys.argv[2:])
