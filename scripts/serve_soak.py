#!/usr/bin/env python3
"""Overload and soak `cargo xtask serve` on loopback; run it through scripts/serve_soak.sh.

Four servers (embeddings, a classifier that also reranks, a tagger, a generator) take, in turn:

1. a baseline: steady clients on /embed, to measure what the machine answers per second and
   its p99;
2. overload: ten times that rate, open loop, for --overload-seconds: every request past
   --max-concurrent-requests must get 429 within milliseconds, every accepted one its correct
   answer;
3. recovery: the baseline load again, until its p99 is back under 1.5 times the baseline's;
4. idle connections: --idle-connections (10000) held open without a request while the
   baseline load runs: every request must still be answered, none refused;
5. soak: mixed traffic for the rest of the minutes: every route, generations streamed and not,
   clients that hang up mid-stream, long inputs under --auto-truncate, bad requests.

Sampled answers are compared with the command line's (`embed --normalize`, `tag`) and with
what the idle server gave. Resident memory is read from /proc every 10 s. It fails (exit 1) on
any 5xx, wrong answer or timeout, on memory growing more than 10% after --warmup-minutes of
the soak (the median of its samples in the last third of the time after the warm-up against
that in the first third), or on the p99 of the soak's last minutes drifting more than 20% from that of its
first minutes after the warm-up; it prints a JSON report either way. Python's standard library
only.
"""

import argparse
import http.client
import json
import os
import random
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time

TEXTS = [
    "the cat sat on the mat",
    "a much longer sentence about the dog that ran across the field to fetch the ball",
    "hello world",
    "x",
    "where did the cat sit",
    "the sun rose over the quiet town and the people went to work",
]


class Server:
    """One `xtask serve` process on a free loopback port."""

    def __init__(self, xtask, model, flags):
        self.proc = subprocess.Popen([xtask, "serve", "--model", model, "--port", "0", *flags],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for line in self.proc.stderr:
            if line.startswith("listening on http://"):
                self.host, port = line.split()[2][len("http://"):].split(":")
                self.port = int(port)
                break
        else:
            raise SystemExit(f"{model}: the server exited before listening")
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()

    def request(self, method, route, body=None, timeout=30.0):
        """(status, parsed JSON or text, seconds)."""
        started = time.perf_counter()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            payload = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
            conn.request(method, route, body=payload, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            data = response.read()
            took = time.perf_counter() - started
            try:
                return response.status, json.loads(data), took
            except ValueError:
                return response.status, data.decode(errors="replace"), took
        finally:
            conn.close()

    def stream(self, body, hang_up_after=None):
        """The events of /generate_stream; with hang_up_after, close after that many."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            conn.request("POST", "/generate_stream", body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            if response.status != 200:
                return response.status, []
            events = []
            for line in response:
                if line.startswith(b"data:"):
                    events.append(json.loads(line[5:]))
                    if hang_up_after is not None and len(events) >= hang_up_after:
                        break
            return 200, events
        finally:
            conn.close()

    def rss_mb(self):
        with open(f"/proc/{self.proc.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def close(a, b, tol=1e-5):
    """Whether two JSON answers are equal, numbers to `tol`."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return abs(a - b) <= tol
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(close(x, y, tol) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k], tol) for k in a)
    return a == b


def percentile(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(p / 100 * len(values)))]


class Tally:
    """Thread-safe counts of statuses, failures and latencies, by label."""

    def __init__(self):
        self.lock = threading.Lock()
        self.statuses = {}
        self.latencies = {}
        self.failures = []

    def add(self, label, status, took):
        with self.lock:
            self.statuses.setdefault(label, {}).setdefault(status, 0)
            self.statuses[label][status] += 1
            self.latencies.setdefault((label, status), []).append(took)

    def fail(self, message):
        with self.lock:
            if len(self.failures) < 50:
                self.failures.append(message)


def run_for(seconds, workers, work):
    """Run `work(worker, deadline)` on `workers` threads until `seconds` pass."""
    deadline = time.monotonic() + seconds
    threads = [threading.Thread(target=work, args=(w, deadline)) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def cpu_name():
    try:
        with open("/proc/cpuinfo") as info:
            return next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--xtask", required=True)
    parser.add_argument("--embed-model", required=True)
    parser.add_argument("--classifier", required=True, help="a one-label classifier: /predict and /rerank")
    parser.add_argument("--tagger", required=True)
    parser.add_argument("--generator", required=True)
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--baseline-seconds", type=float, default=20)
    parser.add_argument("--overload-seconds", type=float, default=60)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--max-concurrent-requests", type=int, default=32)
    parser.add_argument("--warmup-minutes", type=float, default=5, help="of the soak, before memory and p99 are compared")
    parser.add_argument("--idle-connections", type=int, default=10000)
    parser.add_argument("--idle-seconds", type=float, default=20)
    args = parser.parse_args()

    flags = ["--auto-truncate", "--max-concurrent-requests", str(args.max_concurrent_requests)]
    servers = {
        "embed": Server(args.xtask, args.embed_model, ["--task", "embed", *flags]),
        "classify": Server(args.xtask, args.classifier, flags),
        "tag": Server(args.xtask, args.tagger, flags),
        "generate": Server(args.xtask, args.generator, flags),
    }
    report = {"phases": {}}
    tally = Tally()
    rss = {name: [] for name in servers}
    stop_sampling = threading.Event()

    def sample_memory():
        while not stop_sampling.wait(10):
            for name, server in servers.items():
                rss[name].append(round(server.rss_mb(), 1))

    # The requests, each with the answer the idle server gives.
    gen = {"max_new_tokens": 8}
    cases = [
        ("embed", "/embed", {"inputs": TEXTS}),
        ("embed", "/v1/embeddings", {"input": TEXTS[:3]}),
        ("embed", "/embed", {"inputs": " ".join(TEXTS * 40)}),  # long: truncated
        ("classify", "/predict", {"inputs": TEXTS}),
        ("classify", "/rerank", {"query": TEXTS[4], "texts": TEXTS}),
        ("tag", "/tag", {"inputs": TEXTS}),
        ("generate", "/generate", {"inputs": TEXTS[0], "parameters": gen}),
    ]
    bad = [
        ("embed", "/embed", {"inputs": 3}, 422),
        ("embed", "/embed", b'{"inputs": ["a"', 422),
        ("embed", "/predict", {"inputs": "a"}, 400),
        ("generate", "/generate", {"inputs": "a", "parameters": {"max_new_tokens": 0}}, 422),
        ("classify", "/embed", {"inputs": "a"}, 400),
    ]
    expected = []
    for name, route, body in cases:
        status, answer, _ = servers[name].request("POST", route, body)
        if status != 200:
            raise SystemExit(f"{name} {route}: {status} {answer} when idle")
        expected.append(answer)
    embed_body = {"inputs": TEXTS[:2]}
    embed_answer = servers["embed"].request("POST", "/embed", embed_body)[1]
    # The command line's answers for the same texts.
    def cli(*argv):
        out = subprocess.run([args.xtask, *argv], capture_output=True, text=True, check=True)
        return json.loads(out.stdout)
    cli_checks = {
        "/embed": close(cli("embed", "--model", args.embed_model, "--normalize", *TEXTS), expected[0], 1e-5),
        "/tag": close(cli("tag", "--model", args.tagger, *TEXTS), expected[5], 1e-6),
    }
    report["cli_matches"] = cli_checks
    for route, same in cli_checks.items():
        if not same:
            raise SystemExit(f"{route}: the idle server's answer is not the command line's")

    def check(label, server, route, body, want):
        try:
            status, answer, took = server.request("POST", route, body)
        except Exception as e:  # a timeout or a reset: never acceptable
            tally.add(label, "error", 0.0)
            tally.fail(f"{label} {route}: {type(e).__name__}: {e}")
            return None, 0.0
        tally.add(label, status, took)
        if status >= 500:
            tally.fail(f"{label} {route}: {status} {answer}")
        elif status == 200 and want is not None and not close(answer, want):
            tally.fail(f"{label} {route}: a wrong answer")
        return status, took

    threading.Thread(target=sample_memory, daemon=True).start()
    embed = servers["embed"]

    # 1. Baseline: closed-loop clients on /embed.
    def steady(label):
        def work(_, deadline):
            while time.monotonic() < deadline:
                check(label, embed, "/embed", embed_body, embed_answer)
        return work

    started = time.monotonic()
    run_for(args.baseline_seconds, args.clients, steady("baseline"))
    ok = tally.latencies.get(("baseline", 200), [])
    capacity = len(ok) / (time.monotonic() - started)
    base_p99 = percentile(ok, 99)
    report["phases"]["baseline"] = {"requests_per_s": round(capacity, 1), "p50_ms": round(percentile(ok, 50) * 1e3, 1), "p99_ms": round(base_p99 * 1e3, 1)}

    # 2. Overload: ten times the capacity, open loop, spread over many clients.
    rate = 10 * capacity
    overload_clients = 64

    def overload(worker, deadline):
        interval = overload_clients / rate
        due = time.monotonic() + random.random() * interval
        while due < deadline:
            time.sleep(max(0.0, due - time.monotonic()))
            check("overload", embed, "/embed", embed_body, embed_answer)
            due += interval

    rss_before = embed.rss_mb()
    run_for(args.overload_seconds, overload_clients, overload)
    refused = tally.latencies.get(("overload", 429), [])
    accepted = tally.latencies.get(("overload", 200), [])
    report["phases"]["overload"] = {
        "offered_per_s": round(rate, 1),
        "accepted": len(accepted),
        "refused_429": len(refused),
        "p99_429_ms": round(percentile(refused, 99) * 1e3, 1),
        "max_429_ms": round(max(refused, default=float("nan")) * 1e3, 1),
        "p99_accepted_ms": round(percentile(accepted, 99) * 1e3, 1),
        "rss_mb_before_after": [round(rss_before, 1), round(embed.rss_mb(), 1)],
    }

    # 3. Recovery: baseline load in 1 s windows until p99 is back.
    recovered = None
    for second in range(60):
        label = f"recovery-{second}"
        run_for(1.0, args.clients, steady(label))
        window = tally.latencies.get((label, 200), [])
        if window and percentile(window, 99) <= 1.5 * base_p99:
            recovered = second + 1
            break
    report["phases"]["recovery"] = {"seconds_to_baseline_p99": recovered}
    if recovered is None:
        tally.fail("p99 not back under 1.5x the baseline's within 60 s of the overload")

    # 4. Idle connections: held open, silent, while the baseline load runs.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    idle = []
    for _ in range(min(args.idle_connections, hard - 256)):
        try:
            idle.append(socket.create_connection((embed.host, embed.port)))
        except OSError:
            break
    run_for(args.idle_seconds, args.clients, steady("idle"))
    served = tally.statuses.get("idle", {})
    report["phases"]["idle_connections"] = {
        "held": len(idle),
        "statuses": {str(k): v for k, v in served.items()},
        "p99_ms": round(percentile(tally.latencies.get(("idle", 200), []), 99) * 1e3, 1),
    }
    if set(served) != {200}:
        tally.fail(f"with {len(idle)} idle connections open: {served}")
    for s in idle:
        s.close()

    # 5. Soak: mixed traffic until the minutes are up.
    soak_seconds = max(0.0, args.minutes * 60 - (time.monotonic() - started))
    rss_start = {name: server.rss_mb() for name, server in servers.items()}
    minute_p99 = []

    def mixed(worker, deadline):
        rng = random.Random(worker)
        while time.monotonic() < deadline:
            pick = rng.random()
            if pick < 0.6:
                i = rng.randrange(len(cases))
                name, route, body = cases[i]
                check(f"soak {route}", servers[name], route, body, expected[i])
            elif pick < 0.75:
                hang_up = rng.choice([None, 1, 3])
                try:
                    status, events = servers["generate"].stream({"inputs": rng.choice(TEXTS), "parameters": gen}, hang_up)
                    tally.add("soak /generate_stream", status, 0.0)
                    if status >= 500:
                        tally.fail(f"/generate_stream: {status}")
                    elif hang_up is None and status == 200 and (not events or events[-1].get("generated_text") is None):
                        tally.fail("/generate_stream: no final event")
                except Exception as e:
                    tally.add("soak /generate_stream", "error", 0.0)
                    tally.fail(f"/generate_stream: {type(e).__name__}: {e}")
            else:
                name, route, body, want = rng.choice(bad)
                status, _ = check(f"soak bad {route}", servers[name], route, body, None)
                if status is not None and status not in (want, 429):
                    tally.fail(f"bad request to {route}: {status}, not {want}")

    soak_started = time.monotonic()
    minutes = []  # latencies of each minute's successful soak requests
    rss_warm = None
    warm_sample = {}
    while time.monotonic() - soak_started < soak_seconds:
        chunk = min(60.0, soak_seconds - (time.monotonic() - soak_started))
        before = {k: len(v) for k, v in tally.latencies.items()}
        run_for(chunk, args.clients, mixed)
        fresh = [t for k, v in tally.latencies.items() if k[0].startswith("soak /") and k[1] == 200 for t in v[before.get(k, 0):]]
        minutes.append(fresh)
        minute_p99.append(round(percentile(fresh, 99) * 1e3, 1))
        if rss_warm is None and time.monotonic() - soak_started >= args.warmup_minutes * 60:
            rss_warm = {name: server.rss_mb() for name, server in servers.items()}
            warm_sample = {name: len(rss[name]) for name in servers}
    stop_sampling.set()
    rss_end = {name: server.rss_mb() for name, server in servers.items()}
    warm = max(1, round(args.warmup_minutes))
    after = minutes[warm:]
    span = max(1, len(after) // 3)
    first = [t for m in after[:span] for t in m]
    last = [t for m in after[-span:] for t in m]
    drift = (percentile(last, 99) - percentile(first, 99)) / percentile(first, 99) if len(after) >= 2 else float("nan")
    report["phases"]["soak"] = {
        "minutes": round(soak_seconds / 60, 2),
        "p99_ms_per_minute": minute_p99,
        "p99_drift": round(drift, 3),
        "rss_mb_start_warm_end": {k: [round(rss_start[k], 1), round((rss_warm or rss_end)[k], 1), round(rss_end[k], 1)] for k in servers},
    }
    if rss_warm is None or len(after) < 2:
        tally.fail(f"the soak ({soak_seconds / 60:.1f} min) is too short for its warm-up ({args.warmup_minutes} min) and two minutes after it")
    else:
        if abs(drift) > 0.2:
            tally.fail(f"the soak's p99 drifted {drift:+.0%} from its first minutes after warm-up to its last")
        # Growth is the median of the 10 s samples of the last third after the warm-up against
        # that of the first third: resident memory swings by a fifth within seconds as the
        # allocator takes and returns batches' buffers, so two single samples measure the swing,
        # not growth.
        memory = {}
        for name in servers:
            samples = rss[name][warm_sample[name]:]
            third = max(1, len(samples) // 3)
            early, late = statistics.median(samples[:third]), statistics.median(samples[-third:])
            growth = (late - early) / early
            memory[name] = {"first_third_median": early, "last_third_median": late, "max": max(samples), "growth": round(growth, 3)}
            if growth > 0.10:
                tally.fail(f"{name}: memory grew {growth:.0%} after the warm-up (median {early:.0f} MB in its first third, {late:.0f} MB in its last)")
        report["phases"]["soak"]["rss_mb_after_warmup"] = memory
    report["rss_mb_every_10s"] = rss
    report["statuses"] = {label: {str(s): n for s, n in counts.items()} for label, counts in sorted(tally.statuses.items()) if not label.startswith("recovery-")}
    report["machine"] = {"cpu": cpu_name(), "cores": os.cpu_count()}
    report["failures"] = tally.failures
    for server in servers.values():
        server.stop()
    print(json.dumps(report, indent=2))
    sys.exit(1 if tally.failures else 0)


if __name__ == "__main__":
    main()
