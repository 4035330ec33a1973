#!/usr/bin/env python3
"""Fresh in seconds, measured (issue 25): how long a committed row takes to reach every device.

  fresh.py --ferry BIN --nginx PATH --pg-url URL --mode onchange|anchor [--devices 200] [--commits 60]

`ferry serve` publishes the trips template (templates/trips.yml) into a store of its own, behind nginx running
deploy/nginx/ferry.conf (only ports and paths filled in, as scripts/lib/longpoll.py does), and N client directories
follow it. Then one row is committed per second (`INSERT … 'tick-i'`, through psql), and each device's arrival of each
version is timestamped as its line comes out.

- onchange: the triggers are installed, the server publishes on change (`--publish-on-change`, default debounce and
  max delay), and every device runs `ferry watch --json` (the manifest long-poll, through nginx).
- anchor: today's behaviour, the same way: the server publishes every 15 s (`--publish-every 15s`), and every device
  runs `ferry fetch --apply --json` every 30 s (first at a random offset).

For each commit and device: the time from the commit to the first version the device holds that contains the row
(which version contains which rows is read from the versions themselves). Printed: p50 and p99 over all (commit,
device) pairs and over commits (the last device), the versions published, and the origin's manifest requests per
version (from its /metrics). Each pair's time is also split in two at the moment the first version holding the row
was in the store (its `createdAt`, when the publish started, plus the publish's `seconds` from the server's log):
`published` (the commit to that moment: the debounce, a publish in flight, the publish itself) and `delivered`
(that moment to the device holding the row: the server noticing it, the long-poll, nginx, the patch and its apply),
with the publishes' own seconds. The triggers are removed at the end; every process is stopped by its PID.
"""
import argparse
import asyncio
import datetime
import json
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from longpoll import Nginx, free_port, origin_manifest_requests  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
TEMPLATE = os.path.join(ROOT, "templates", "trips.yml")


def percentile(values, p):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


class Server:
    def __init__(self, args, work, mode):
        self.port = free_port()
        self.store = os.path.join(work, "store")
        command = [args.ferry, "serve", "--store", self.store, "--port", str(self.port), "--config", TEMPLATE,
                   "--database-url", args.pg_url, "--keep", "500"]
        command += ["--publish-on-change"] if mode == "onchange" else ["--publish-every", "15s"]
        self.log = open(os.path.join(work, "serve.log"), "w")
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v1/datasets/trips/manifest", timeout=2).read()
                return
            except Exception:
                time.sleep(0.2)
        raise SystemExit("ferry serve did not serve the trips manifest within 30 s (see serve.log)")

    def manifest(self):
        # Counted, so that the origin's manifest requests per version leave out this script's own.
        self.own_requests = getattr(self, "own_requests", 0) + 1
        return json.load(urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v1/datasets/trips/manifest", timeout=10))

    def max_tick(self, version, work):
        """The highest tick row version `version` holds (0 when none)."""
        path = os.path.join(work, f"v{version}.sqlite")
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v1/datasets/trips/versions/{version}", timeout=30) as r, \
                open(path, "wb") as f:
            shutil.copyfileobj(r, f)
        db = sqlite3.connect(path)
        row = db.execute("SELECT max(CAST(substr(id, 6) AS INTEGER)) FROM trips WHERE id LIKE 'tick-%'").fetchone()
        db.close()
        return row[0] or 0

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


async def watch_device(args, base, directory, arrivals, stop):
    """`ferry watch --json`: each line is a version arriving; (time, version) appended to `arrivals`."""
    process = await asyncio.create_subprocess_exec(
        args.ferry, "watch", "--server", base, "--dataset", "trips", "--dir", directory, "--json", "--wait", "30",
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        while not stop.is_set():
            try:
                line = await asyncio.wait_for(process.stdout.readline(), timeout=1)
            except asyncio.TimeoutError:
                continue
            if not line:
                break
            now = time.time()
            try:
                version = json.loads(line).get("version")
            except ValueError:
                continue
            if version:
                arrivals.append((now, version))
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), timeout=15)
            except asyncio.TimeoutError:
                process.kill()
                await process.wait()


async def poll_device(args, base, directory, arrivals, stop, every=30.0):
    """Today's behaviour: `ferry fetch --apply --json` every `every` seconds, the first at a random offset."""
    await asyncio.sleep(random.uniform(0, every))
    while not stop.is_set():
        started = time.monotonic()
        process = await asyncio.create_subprocess_exec(
            args.ferry, "fetch", "--server", base, "--dataset", "trips", "--dir", directory, "--json", "--apply",
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        out, _ = await process.communicate()
        now = time.time()
        try:
            version = json.loads(out).get("version")
        except ValueError:
            version = None
        if version:
            arrivals.append((now, version))
        try:
            await asyncio.wait_for(stop.wait(), timeout=max(0.0, every - (time.monotonic() - started)))
        except asyncio.TimeoutError:
            pass


def psql(url, sql):
    subprocess.run(["psql", url, "-q", "-v", "ON_ERROR_STOP=1", "-c", sql], check=True, stdout=subprocess.DEVNULL)


async def run(args):
    work = tempfile.mkdtemp(prefix="ferry-fresh-")
    server = nginx = None
    try:
        psql(args.pg_url, "DELETE FROM trips WHERE id LIKE 'tick-%'")
        if args.mode == "onchange":
            subprocess.run([args.ferry, "triggers", "install", "--config", TEMPLATE, "--database-url", args.pg_url],
                           check=True, stdout=subprocess.DEVNULL)
        server = Server(args, work, args.mode)
        nginx = Nginx(args.nginx, server.port, work, args.devices * 2 + 64)
        base = f"http://127.0.0.1:{nginx.port}"
        arrivals = [[] for _ in range(args.devices)]
        stop = asyncio.Event()
        device = watch_device if args.mode == "onchange" else poll_device
        tasks = [asyncio.create_task(device(args, base, os.path.join(work, f"d{i}"), arrivals[i], stop))
                 for i in range(args.devices)]
        # Every device holds the first version before the first commit (the anchor's first fetch is at a random
        # offset up to 30 s, so it waits for that).
        first = server.manifest()["version"]
        deadline = time.time() + 120
        while any(not a for a in arrivals) and time.time() < deadline:
            await asyncio.sleep(0.2)
        missing = sum(1 for a in arrivals if not a)
        if missing:
            raise SystemExit(f"{missing} devices did not hold version {first} within 120 s")
        version_before = server.manifest()["version"]
        origin_before = origin_manifest_requests(server.port)
        own_before = server.own_requests

        commits = {}
        start = time.monotonic()
        for i in range(1, args.commits + 1):
            await asyncio.sleep(max(0.0, start + i - 1 - time.monotonic()))
            await asyncio.to_thread(psql, args.pg_url, f"INSERT INTO trips (id, name) VALUES ('tick-{i}', 'tick {i}')")
            commits[i] = time.time()
        # Until every device holds a version with the last tick (or the anchor's worst case has passed)
        limit = time.time() + (90 if args.mode == "anchor" else 60)
        last_version = None
        while time.time() < limit:
            manifest = server.manifest()
            if last_version != manifest["version"] and server.max_tick(manifest["version"], work) >= args.commits:
                last_version = manifest["version"]
            if last_version and all(a and a[-1][1] >= last_version for a in arrivals):
                break
            await asyncio.sleep(0.5)
        stop.set()
        await asyncio.gather(*tasks)
        versions = server.manifest()["version"] - version_before
        origin = origin_manifest_requests(server.port) - origin_before - (server.own_requests - own_before)

        ticks = {}
        for version in range(version_before, server.manifest()["version"] + 1):
            ticks[version] = server.max_tick(version, work)
        stored = published_at(server, work)
        pairs, per_commit, never, publish_waits, deliveries = [], [], 0, [], []
        for i, committed in commits.items():
            slowest = 0.0
            first = min((v for v, tick in ticks.items() if tick >= i), default=None)
            in_store = stored.get(first)
            if in_store is not None:
                publish_waits.append(in_store - committed)
            for a in arrivals:
                held = next((t for t, v in a if ticks.get(v, 0) >= i and t >= committed - 0.001), None)
                if held is None:
                    never += 1
                    continue
                pairs.append(held - committed)
                slowest = max(slowest, held - committed)
                if in_store is not None:
                    deliveries.append(held - in_store)
            per_commit.append(slowest)
        seconds = [s for _, s in publish_seconds(work).items()]
        print(json.dumps({
            "mode": args.mode, "devices": args.devices, "commits": args.commits, "versions": versions,
            "p50": percentile(pairs, 50), "p99": percentile(pairs, 99),
            "everyDeviceP50": percentile(per_commit, 50), "everyDeviceP99": percentile(per_commit, 99),
            "originManifestRequests": origin, "originPerVersion": origin / versions if versions else None,
            "missed": never,
            "publishedP50": percentile(publish_waits, 50), "publishedP99": percentile(publish_waits, 99),
            "deliveredP50": percentile(deliveries, 50), "deliveredP99": percentile(deliveries, 99),
            "publishSecondsP50": percentile(seconds, 50), "publishSecondsP99": percentile(seconds, 99),
        }))
    finally:
        if nginx:
            nginx.stop()
        if server:
            server.stop()
        if args.mode == "onchange":
            subprocess.run([args.ferry, "triggers", "remove", "--config", TEMPLATE, "--database-url", args.pg_url],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(work, ignore_errors=True)


def publish_seconds(work):
    """{version: seconds} of each new version, from the server's log lines (`… new version`, `version=N`,
    `seconds=S`)."""
    out = {}
    with open(os.path.join(work, "serve.log"), encoding="utf-8", errors="replace") as f:
        for line in f:
            if "new version" not in line:
                continue
            version, seconds = re.search(r"\bversion=(\d+)", line), re.search(r"\bseconds=([0-9.]+)", line)
            if version and seconds:
                out[int(version.group(1))] = float(seconds.group(1))
    return out


def published_at(server, work):
    """{version: the Unix time it was in the store}: its createdAt (the publish's start) plus the publish's seconds."""
    seconds = publish_seconds(work)
    with open(os.path.join(server.store, "trips", "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    out = {}
    for entry in manifest.get("scopes", []):
        for record in entry.get("retained", []):
            version = record["version"]
            if version in seconds:
                created = datetime.datetime.fromisoformat(record["createdAt"].replace("Z", "+00:00")).timestamp()
                out[version] = created + seconds[version]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ferry", required=True)
    parser.add_argument("--nginx", default="/usr/sbin/nginx")
    parser.add_argument("--pg-url", required=True)
    parser.add_argument("--mode", choices=["onchange", "anchor"], required=True)
    parser.add_argument("--devices", type=int, default=200)
    parser.add_argument("--commits", type=int, default=60)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
