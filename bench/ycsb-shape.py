#!/usr/bin/env python3
"""The shape of YCSB's memcached binding (spymemcached) against tac-memcached, verified.

YCSB workload A as a user ran it: 33 B keys (usertable-user<19 digits>), values of
about 1.1 KB (10 fields x 100 B), a million records, 8 client threads that share one
or two connections (spymemcached queues every thread's requests onto one socket and
pipelines them), 50% updates and 50% reads, keys chosen zipfian-ish.  The server runs
with -t 2 -m 256, 512 MB of NVM and 4 GB of SSD by default.

Phases: load (every record once, 16 sets in flight per thread), run (--seconds of
workload A, each thread synchronous apart from occasional bursts of pipelined
updates), and a sweep that reads every record back.  Every value is verified the way
tests/stress/test_stress_shapes.py verifies it (that file's workers run here).  A
line of server stats is printed every --interval seconds: ops/s, refusals,
store_no_memory, nvm_alloc_failures, meta_alloc_failures, evictor_backlog,
nvm_pages_used/total, ssd_pages_free.

    .venv/bin/python bench/ycsb-shape.py                     # ./tac-memcached, 1M records
    .venv/bin/python bench/ycsb-shape.py --records 200000 -m 64 --nvm 64m --conns 2 --hog 2
    .venv/bin/python bench/ycsb-shape.py --port 11211        # a server that is already running

Exit status 1 if any store was refused or any value was wrong or lost.
"""
import argparse
import glob
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path[:0] = [os.path.join(REPO, "tests", "stress"), os.path.join(REPO, "tests", "integration")]

import shapes_client as sc  # noqa: E402
import test_stress_shapes as ts  # noqa: E402

WATCH = ["store_no_memory", "nvm_alloc_failures", "meta_alloc_failures", "evictor_backlog", "evictions",
         "ssd_large_bufs", "store_wait_timeouts", "nvm_pages_used", "nvm_pages_total", "ssd_pages_free",
         "ssd_pages_total", "dram_items", "nvm_items", "ssd_items", "meta_tuples"]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", default=os.path.join(REPO, "tac-memcached"))
    ap.add_argument("--port", type=int, help="use a running server instead of starting one")
    ap.add_argument("-t", "--server-threads", type=int, default=2)
    ap.add_argument("-m", "--dram-mb", type=int, default=256)
    ap.add_argument("--nvm", default="512m", help="NVM size, 0 for none")
    ap.add_argument("--ssd", default="4g", help="SSD size, 0 for none")
    ap.add_argument("--ssd-dir", default=os.environ.get("TAC_SSD_DIR") or tempfile.gettempdir())
    ap.add_argument("--server-opt", action="append", default=[], help="more -o options")
    ap.add_argument("--records", type=int, default=1000000)
    ap.add_argument("--key-len", type=int, default=33)
    ap.add_argument("--value", default="1.1k", choices=ts.VALUE_SIZES)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--conns", type=int, default=1, help="connections the threads share")
    ap.add_argument("--updates", type=int, default=50, help="percent of run-phase operations that are updates")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--hog", type=int, default=0, help="busy-loop processes during load and run")
    ap.add_argument("--interval", type=float, default=5)
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--seed", type=int, default=int(os.environ.get("STRESS_SEED", random.randrange(1 << 30))))
    a = ap.parse_args()

    ts.THREADS = a.threads
    ts.CONN_OF = ["c%d" % (t % a.conns) for t in range(a.threads)]
    proc = None
    tmp = tempfile.mkdtemp(prefix="ycsb-shape-", dir=a.ssd_dir)
    nvm_path = "/dev/shm/ycsb-shape-%s" % uuid.uuid4().hex[:10]
    port = a.port
    try:
        if port is None:
            port = free_port()
            opts = list(a.server_opt)
            if a.nvm != "0":
                opts.append("nvm_path=%s:%s" % (nvm_path, a.nvm))
            if a.ssd != "0":
                opts.append("ssd_path=%s:%s" % (os.path.join(tmp, "ssd"), a.ssd))
            cmd = [a.server, "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", str(a.server_threads),
                   "-m", str(a.dram_mb)] + (["-u", "root"] if os.geteuid() == 0 else []) + \
                  (["-o", ",".join(opts)] if opts else [])
            print("server: %s" % " ".join(cmd))
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
            for _ in range(300):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.1)
        return run(a, port, proc)
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
        for path in [nvm_path] + glob.glob(glob.escape(nvm_path) + ".state*"):
            if os.path.exists(path):
                os.unlink(path)


def run(a, port, proc):
    case = ts.Case(a.key_len, a.value, "-", a.updates, a.hog > 0)
    print("seed %d: %d records, %d B keys, %s values, %d threads on %d connection(s), %d%% updates, %gs, hog %d"
          % (a.seed, a.records, a.key_len, a.value, a.threads, a.conns, a.updates, a.seconds, a.hog))
    keys = sc.make_keys(a.records, a.key_len)
    runs = ts.Run(a.records, keys)
    rnd = random.Random(a.seed)
    muxes = {name: sc.Mux(port, name) for name in sorted(set(ts.CONN_OF))}
    stats_mux = sc.Mux(port, "stats")
    workers = [ts.Worker(runs, t, muxes[ts.CONN_OF[t]], case, a.seed ^ rnd.getrandbits(30), stats_mux)
               for t in range(a.threads)]
    failed = []
    done = threading.Event()

    def guarded(fn):
        def body():
            try:
                fn()
            except Exception as e:  # noqa: BLE001
                failed.append("%s: %s" % (type(e).__name__, e))
        return body

    t0 = time.monotonic()

    def monitor():
        last_ops, last_t = 0, time.monotonic()
        peak_backlog = 0
        while not done.wait(a.interval):
            try:
                st = stats_mux.stats(b"tiers", timeout=60)
                st.update(stats_mux.stats(timeout=60))
                st.update(stats_mux.stats(b"tac", timeout=60))
            except (ConnectionError, TimeoutError) as e:
                print("stats failed: %s" % e)
                return
            ops = sum(sum(w.ops[k] for k in ("set", "get")) for w in workers)
            now = time.monotonic()
            peak_backlog = max(peak_backlog, int(st.get("evictor_backlog", 0)))
            print("+%5.0fs %-7s %7.0f ops/s refused %d | %s" % (
                now - t0, runs.phase, (ops - last_ops) / (now - last_t), sum(runs.refusals.values()),
                " ".join("%s=%s" % (k, st.get(k, "-")) for k in WATCH)), flush=True)
            last_ops, last_t = ops, now

    mon = threading.Thread(target=monitor, daemon=True)
    mon.start()
    with sc.CpuHog(a.hog):
        th = [threading.Thread(target=guarded(w.preload)) for w in workers]
        for t in th:
            t.start()
        for t in th:
            t.join()
        t_load = time.monotonic() - t0
        load_stored = sum(w.ops["stored"] for w in workers)
        print("load: %d records in %.1fs (%.0f/s), refused so far %d"
              % (load_stored, t_load, load_stored / t_load, sum(runs.refusals.values())), flush=True)
        runs.phase = "run"
        stop = threading.Event()
        t1 = time.monotonic()
        th = [threading.Thread(target=guarded(lambda w=w: w.loop(stop))) for w in workers]
        for t in th:
            t.start()
        while time.monotonic() - t1 < a.seconds and any(t.is_alive() for t in th) and \
                (proc is None or proc.poll() is None):
            time.sleep(0.2)
        stop.set()
        for t in th:
            t.join()
        t_run = time.monotonic() - t1
    run_ops = sum(w.ops["set"] + w.ops["get"] for w in workers) - a.records
    print("run: %d ops in %.1fs (%.0f/s)" % (run_ops, t_run, run_ops / t_run), flush=True)
    done.set()
    if not a.no_sweep and not failed:
        ts1 = time.monotonic()
        ts.sweep(runs, stats_mux, a.value)
        print("sweep: %.1fs" % (time.monotonic() - ts1))
    st = stats_mux.stats(b"tiers")
    st.update(stats_mux.stats())
    pairs = [p for w in workers for p in w.pairs]
    stalls = sc.stall_windows(pairs, 1.0)
    for w in workers:
        runs.ops.update(w.ops)
    refused = sum(runs.refusals.values())
    print("stores %d, refusals %d %s, wrong %d, lost keys %d, bad replies %d, stall windows > 1s %d%s, client errors %s"
          % (runs.ops["stored"], refused, dict(runs.refusals) or "", len(runs.errors), len(runs.lost_keys),
             len(runs.bad_replies), len(stalls), " (longest %.2fs)" % stalls[0][1] if stalls else "", failed[:3]))
    print("final stats: %s" % " ".join("%s=%s" % (k, st.get(k, "-")) for k in WATCH + ["store_waits_done"]))
    if runs.first_refusal:
        print("first refusal at +%.1fs: %s" % (runs.first_refusal[0] - t0, runs.first_refusal[2]))
    for e in [x for x in runs.errors + runs.lost + runs.bad_replies if x][:10]:
        print("  " + e)
    for m in list(muxes.values()) + [stats_mux]:
        m.close()
    return 1 if refused or runs.errors or runs.lost or runs.bad_replies or failed else 0


if __name__ == "__main__":
    sys.exit(main())
