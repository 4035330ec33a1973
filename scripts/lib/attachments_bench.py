"""scripts/bench attachments: photos from a device to the server and to other devices (issue 39). Stdlib only; every
process started here is stopped by its PID; all traffic stays on 127.0.0.1.

1. Delivery: COUNT photos of SIZE bytes are attached and named by rows on a device while offline. `ferry push` then
   runs through a relay (scripts/lib/relay.py) that throttles the upload to --rate; --cuts times the relay cuts every
   connection and --kills times the push is killed with -9, each when the bytes sent cross a threshold inside the
   push (the thresholds are spread over 5-90 % of the payload, jittered by --seed, and the kills read the relay's
   byte counter every 20 ms), so every cut and kill lands inside a push however fast the machine. The cuts and kills
   that landed are reported beside the planned ones, with the resumes the server counted (a PATCH at an offset
   above 0). Every photo must reach the server once (its SHA-256 verified, one upload each in /metrics), every row
   PostgreSQL, every planned cut and kill must land, and the bytes on the wire must stay within 1.05x the payload.
2. Upload throughput: `ferry push` of a second set of photos to a fresh server, beside `curl -T` of the same files
   (one curl, one connection, PUT /attachments/{sha256}) to another fresh server in the same run.
3. Download throughput: `ferry fetch --apply` on a fresh device (every photo eager), straight from the server and
   through nginx running deploy/nginx/ferry.conf (cold, then warm cache), beside nginx serving the same files
   statically to one curl.
"""
import argparse, hashlib, json, os, random, shutil, signal, subprocess, sys, tempfile, time, urllib.parse, urllib.request, uuid

sys.path.insert(0, os.path.dirname(__file__))
from longpoll import Nginx, free_port  # noqa: E402

A = argparse.ArgumentParser()
A.add_argument("--ferry", required=True)
A.add_argument("--database-url", required=True)
A.add_argument("--nginx", default="nginx")
A.add_argument("--count", type=int, default=200)
A.add_argument("--size", type=int, default=4 << 20)
A.add_argument("--rate", default="10M")
A.add_argument("--cuts", type=int, default=5)
A.add_argument("--kills", type=int, default=5)
A.add_argument("--seed", type=int, default=None)
ARGS = A.parse_args()
RNG = random.Random(ARGS.seed if ARGS.seed is not None else random.randrange(1 << 30))
PROCS = []
WORK = tempfile.mkdtemp(prefix="ferry-bench-attach-")
RELAY = os.path.join(os.path.dirname(__file__), "relay.py")

TEMPLATE = """dataset: photos
tables:
  - name: photos
    writable: true
    attachments:
      image: {download: eager}
"""
DDL = """CREATE TABLE photos (id text PRIMARY KEY, note text NOT NULL, image text,
  created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now());"""


def run(*args, check=True, timeout=3600):
    out = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
    if check and out.returncode != 0:
        raise SystemExit(f"{' '.join(args[:3])} failed ({out.returncode}): {out.stderr.strip()[-800:]}")
    return out


def ferry(*args, check=True):
    return run(ARGS.ferry, *args, check=check)


def start(*args, **kw):
    p = subprocess.Popen(list(args), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)
    PROCS.append(p)
    return p


def stop(p):
    if p and p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def psql(url, sql):
    return run("psql", url, "-qAtX", "-v", "ON_ERROR_STOP=1", "-c", sql).stdout.strip()


def wait_port(port):
    import socket
    for _ in range(400):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


def make_photos(label, count):
    folder = os.path.join(WORK, label)
    os.makedirs(folder)
    files = []
    for i in range(count):
        path = os.path.join(folder, f"IMG_{i:04d}.jpg")
        with open(path, "wb") as f:
            f.write(os.urandom(ARGS.size))
        files.append(path)
    return files


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class World:
    """A database, a template, a store with version 1 published, and `ferry serve` on it."""

    def __init__(self, name):
        psql(ARGS.database_url, f"DROP DATABASE IF EXISTS {name}")
        psql(ARGS.database_url, f"CREATE DATABASE {name}")
        self.url = urllib.parse.urlparse(ARGS.database_url)._replace(path="/" + name).geturl()
        psql(self.url, DDL)
        self.root = os.path.join(WORK, name)
        os.makedirs(self.root)
        self.template = os.path.join(self.root, "photos.yml")
        open(self.template, "w").write(TEMPLATE)
        self.store = os.path.join(self.root, "store")
        self.publish()
        self.port = free_port()
        self.server = start(ARGS.ferry, "serve", "--store", self.store, "--port", str(self.port), "--config",
                            self.template, "--database-url", self.url)
        wait_port(self.port)
        self.base = f"http://127.0.0.1:{self.port}"

    def publish(self):
        ferry("publish", "--config", self.template, "--database-url", self.url, "--store", self.store)

    def device(self, label, server=None):
        d = os.path.join(self.root, label)
        ferry("fetch", "--server", server or self.base, "--dataset", "photos", "--dir", d, "--apply")
        return d

    def stored(self):
        folder = os.path.join(self.store, "photos", "attachments")
        return {n for n in os.listdir(folder) if len(n) == 64} if os.path.isdir(folder) else set()

    def metric(self, needle):
        text = urllib.request.urlopen(f"{self.base}/metrics", timeout=10).read().decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(needle) and not line.startswith("#"))


def attach_offline(device, files):
    shas = []
    for i, path in enumerate(files):
        out = json.loads(ferry("attach", "--dir", device, path, "--json").stdout)
        shas.append(out["sha256"])
        ferry("exec", "--dir", device,
              f"INSERT INTO photos (id, note, image) VALUES ('{uuid.uuid4()}', 'photo {i}', '{out['sha256']}')")
    return shas


def plan_events(payload):
    """Where the cuts and kills fire: --cuts + --kills thresholds of bytes sent, one in each of as many equal slices
    of 5-90 % of the payload (at a random point of its middle half), shuffled between cuts and kills."""
    n = ARGS.cuts + ARGS.kills
    low, high = 0.05 * payload, 0.90 * payload
    width = (high - low) / max(n, 1)
    marks = [int(low + width * (i + RNG.uniform(0.25, 0.75))) for i in range(n)]
    kinds = ["cut"] * ARGS.cuts + ["kill"] * ARGS.kills
    RNG.shuffle(kinds)
    return sorted(m for m, k in zip(marks, kinds) if k == "cut"), sorted(m for m, k in zip(marks, kinds) if k == "kill")


def relay_up(stats):
    """The upload bytes the relay forwarded so far (0 before its first stats file)."""
    try:
        return json.load(open(stats))["up"]
    except (OSError, ValueError):
        return 0


def delivery(world):
    files = make_photos("delivery", ARGS.count)
    payload = ARGS.count * ARGS.size
    device = world.device("field")
    shas = attach_offline(device, files)
    stats = os.path.join(WORK, "relay.json")
    port_file = os.path.join(WORK, "relay.port")
    cut_at, kill_at = plan_events(payload)
    relay = start(sys.executable, RELAY, "--target", str(world.port), "--port-file", port_file, "--stats", stats,
                  "--rate", ARGS.rate, "--cut-at", ",".join(map(str, cut_at)), "--stats-every", "0.02")
    while not os.path.exists(port_file):
        time.sleep(0.05)
    via = f"http://127.0.0.1:{open(port_file).read()}"
    push = [ARGS.ferry, "push", "--server", via, "--dataset", "photos", "--dir", device, "--json"]
    print(f"  planned: cuts at {', '.join(f'{b / 2**20:.0f}' for b in cut_at) or 'none'} MiB sent, kills at "
          f"{', '.join(f'{b / 2**20:.0f}' for b in kill_at) or 'none'} MiB sent", flush=True)
    started = time.monotonic()
    kills, attempts, done = 0, 0, False
    pending_kills = list(kill_at)
    while attempts < 60 and not done:
        attempts += 1
        p = subprocess.Popen(push, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        PROCS.append(p)
        killed = False
        while pending_kills and p.poll() is None:
            sent = relay_up(stats)
            if sent >= pending_kills[0]:
                if p.poll() is None:  # still pushing as the threshold was crossed: the kill lands inside the push
                    os.kill(p.pid, signal.SIGKILL)
                    p.wait()
                    kills += 1
                    killed = True
                    print(f"  push killed with -9 ({kills}/{ARGS.kills}) at {sent / 2**20:.0f} MiB sent "
                          f"(threshold {pending_kills[0] / 2**20:.0f} MiB), {time.monotonic() - started:.0f} s",
                          flush=True)
                del pending_kills[0]
                break
            time.sleep(0.02)
        if killed:
            continue
        out, err = p.communicate(timeout=3600)
        if p.returncode == 0:
            last = json.loads(out.strip().splitlines()[-1])
            done = not (last.get("attachments") or {}).get("pending") and not last.get("pending")
        else:
            print(f"  push exited {p.returncode} (a cut link): {err.strip()[-200:]}", flush=True)
    seconds = time.monotonic() - started
    stop(relay)
    wire = json.load(open(stats))
    cuts = len(wire["cut_log"])
    held = world.stored()
    store_dir = os.path.join(world.store, "photos", "attachments")
    bad = [s for s in shas if s not in held or sha256(os.path.join(store_dir, s)) != s]
    rows = int(psql(world.url, "SELECT count(*) FROM photos WHERE image IS NOT NULL"))
    uploads = world.metric("ferry_attachment_uploads_total")
    resumes = world.metric("ferry_attachment_resumes_total")
    ratio = wire["up"] / payload
    print(f"delivery: {len(shas) - len(bad)}/{len(shas)} photos held and verified, {rows} rows in PostgreSQL, "
          f"{uploads:.0f} uploads stored (0 duplicates when {len(shas)}), {attempts} pushes, {seconds:.0f} s",
          flush=True)
    cut_mib = ", ".join(f"{c['up'] / 2**20:.0f} MiB" for c in wire["cut_log"]) or "none"
    print(f"delivery: kills landed inside a push {kills}/{len(kill_at)} planned, link cuts landed {cuts}/{len(cut_at)} "
          f"planned (at {cut_mib} sent), {resumes:.0f} resumes (PATCHes at an offset above 0)", flush=True)
    print(f"delivery: {wire['up']:,} bytes sent for {payload:,} bytes of photos: {ratio:.3f}x (target <= 1.05x)",
          flush=True)
    ok = (not bad and rows == len(shas) and ratio <= 1.05 and uploads == len(shas) and kills == len(kill_at)
          and cuts == len(cut_at) and done)
    print(f"delivery: {'PASS' if ok else 'FAIL'}", flush=True)
    return ok


class StaticNginx:
    """nginx serving a directory as static files (sendfile on, one worker), the download anchor."""

    def __init__(self, folder):
        root = tempfile.mkdtemp(prefix="static-", dir=WORK)
        os.chmod(root, 0o777)
        self.port = free_port()
        open(f"{root}/nginx.conf", "w").write(f"""
worker_processes 1;
pid {root}/nginx.pid;
error_log {root}/error.log warn;
events {{ worker_connections 256; }}
http {{
  access_log off; sendfile on; tcp_nopush on;
  client_body_temp_path {root}/body; proxy_temp_path {root}/proxy; fastcgi_temp_path {root}/fcgi;
  uwsgi_temp_path {root}/uwsgi; scgi_temp_path {root}/scgi;
  server {{ listen 127.0.0.1:{self.port}; root {folder}; }}
}}
""")
        self.process = start(ARGS.nginx, "-p", root, "-c", f"{root}/nginx.conf", "-g", "daemon off;")
        wait_port(self.port)

    def stop(self):
        stop(self.process)


def parse_rate(text):
    mult = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:].upper(), 1)
    return int(float(text[:-1] if mult > 1 else text) * mult)


def throughput(world):
    files = make_photos("upload", ARGS.count)
    payload = ARGS.count * ARGS.size
    device = world.device("uploader")
    attach_offline(device, files)
    t = time.monotonic()
    ferry("push", "--server", world.base, "--dataset", "photos", "--dir", device)
    ferry_s = time.monotonic() - t
    anchor = World("bench_attach_curl")
    # No `Expect: 100-continue`: curl would wait a second for an interim answer before each body.
    args = ["curl", "-sS", "--fail", "-o", "/dev/null", "-H", "Expect:"]
    for path in files:
        args += ["-T", path, f"{anchor.base}/v1/datasets/photos/attachments/{sha256(path)}"]
    t = time.monotonic()
    run(*args)
    curl_s = time.monotonic() - t
    stop(anchor.server)
    mib = payload / (1 << 20)
    print(f"upload: ferry push {mib / ferry_s:.0f} MiB/s ({ferry_s:.1f} s), curl -T {mib / curl_s:.0f} MiB/s "
          f"({curl_s:.1f} s): {curl_s / ferry_s:.2f}x curl (target >= 0.9x)", flush=True)

    # Downloads: every photo of both sets is named by a published row.
    world.publish()
    time.sleep(1.2)  # the server sees the new manifest within a second
    total = int(psql(world.url, "SELECT count(*) FROM photos")) * ARGS.size / (1 << 20)
    t = time.monotonic()
    world.device("reader")
    direct_s = time.monotonic() - t
    nginx = Nginx(ARGS.nginx, world.port, WORK, 64)
    try:
        via = f"http://127.0.0.1:{nginx.port}"
        t = time.monotonic()
        world.device("reader-cold", server=via)
        cold_s = time.monotonic() - t
        t = time.monotonic()
        world.device("reader-warm", server=via)
        warm_s = time.monotonic() - t
    finally:
        nginx.stop()
    static = StaticNginx(os.path.join(world.store, "photos", "attachments"))
    try:
        names = sorted(world.stored())
        out = os.path.join(WORK, "curl-out")
        os.makedirs(out)
        args = ["curl", "-sS", "--fail"]
        for n in names:
            args += [f"http://127.0.0.1:{static.port}/{n}", "-o", os.path.join(out, n)]
        t = time.monotonic()
        run(*args)
        nginx_s = time.monotonic() - t
    finally:
        static.stop()
    for label, s in [("ferry direct", direct_s), ("ferry behind nginx, cold cache", cold_s),
                     ("ferry behind nginx, warm cache", warm_s)]:
        print(f"download: {label} {total / s:.0f} MiB/s ({s:.1f} s) vs nginx static {total / nginx_s:.0f} MiB/s "
              f"({nginx_s:.1f} s): {nginx_s / s:.2f}x nginx (target >= 0.9x)", flush=True)


def main():
    try:
        world = World("bench_attach")
        ok = delivery(world)
        throughput(world)
        if not ok:
            sys.exit(1)
    finally:
        for p in PROCS:
            stop(p)
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
