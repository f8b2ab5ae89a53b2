#!/usr/bin/env python3
"""bench/write-pressure.py - write throughput and sustained writes over three tiers.

Two benchmarks, both with the YCSB-A record shape: 33 B keys, 1.1 KB values,
1M records, Zipf 0.99, 16 connections in a closed loop (one request in
flight each), the client bench/tac-bench.

  throughput  YCSB-A (50% reads, 50% updates).  Each repeat starts, loads and
              runs two servers one after the other:
                three   -t 2 -m 96, NVM 192 MB, SSD 1.5 GB (1:2:16)
                ssd     -t 2 -m 96, SSD 1.5 GB
              and reports three/ssd; the median of --repeat ratios decides
              (the goal is at least 0.8).
  sustained   100% updates on the three-tier server for --seconds (300),
              sampling `stats` every second.  Reports store_no_memory,
              store_wait_timeouts, the evictor backlog (evictor_backlog_bytes:
              its peak over the first minute against its peak over the last
              four; evictor_backlog, the classes short, beside it), and the MB/s
              written to SSD beside the disk's sequential write rate, measured
              with dd oflag=direct on the SSD file's file system in the same run.

    bench/write-pressure.py throughput [--repeat 3] [--seconds 30]
    bench/write-pressure.py sustained [--seconds 300]

The SSD and NVM files go under --dir (default bench/out/write-pressure; the SSD
file must be on a disk file system) and /dev/shm.  Results are printed and
written to --dir/results.json.  Python 3 standard library only.
"""
import argparse
import json
import glob
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BENCH = os.path.join(HERE, "tac-bench")

SHAPE = ["-k", "33", "-v", "1100", "--theta", "0.99", "-c", "16", "-d", "1", "-t", "2"]


def log(msg):
    print(msg, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def stats(port, sub=""):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(("stats %s\r\n" % sub).encode() if sub else b"stats\r\n")
    buf = b""
    while not buf.endswith(b"END\r\n"):
        chunk = s.recv(1 << 16)
        if not chunk:
            break
        buf += chunk
    s.close()
    out = {}
    for line in buf.decode().split("\r\n"):
        p = line.split(" ", 2)
        if len(p) == 3 and p[0] == "STAT":
            out[p[1]] = p[2]
    return out


def all_stats(port):
    st = stats(port)
    st.update(stats(port, "tac"))
    st.update(stats(port, "tiers"))
    return st


class Server:
    def __init__(self, binary, args, dirpath, label):
        self.port = free_port()
        self.label = label
        self.files = []
        self.errlog = open(os.path.join(dirpath, "%s.stderr" % label), "w")
        cmd = [binary, "-p", str(self.port), "-U", "0", "-c", "4096"] + args
        if os.geteuid() == 0:
            cmd += ["-u", "root"]
        self.cmd = cmd
        self.proc = subprocess.Popen(cmd, stderr=self.errlog)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError("%s exited at start (rc %s): %s" % (label, self.proc.returncode, cmd))
                time.sleep(0.05)
        raise RuntimeError("%s did not start" % label)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.errlog.close()


def tier_args(kind, d, tag):
    nvm = "/dev/shm/tac-wp-%d-%s" % (os.getpid(), tag)
    ssd = os.path.join(d, "ssd-%s.dat" % tag)
    remove_tier_files([nvm, ssd])
    if kind == "three":
        return ["-t", "2", "-m", "96", "-o", "nvm_path=%s:192m,ssd_path=%s:1536m" % (nvm, ssd)], [nvm, ssd]
    return ["-t", "2", "-m", "96", "-o", "ssd_path=%s:1536m" % ssd], [ssd]


def remove_tier_files(files):
    """The tier files and the restart state and journal beside them."""
    for f in files:
        for path in [f] + glob.glob(glob.escape(f) + ".state*"):
            if os.path.exists(path):
                os.unlink(path)


def stop_and_clean(srv, files):
    srv.stop()
    remove_tier_files(files)


def tac_bench(port, extra, json_path):
    cmd = [BENCH, "-s", "127.0.0.1:%d" % port, "-q", "--json", json_path] + SHAPE + extra
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(json_path) as f:
        return json.load(f)


def load(port, records, seed, json_path):
    r = tac_bench(port, ["-n", str(records), "--seed", str(seed), "--load-only"], json_path)
    return r["load"]


def run_one(kind, args, d, tag):
    targs, files = tier_args(kind, d, tag)
    srv = Server(args.server, targs, d, "%s-%s" % (kind, tag))
    try:
        t = time.time()
        ld = load(srv.port, args.records, args.seed, os.path.join(d, "%s-%s-load.json" % (kind, tag)))
        lsecs = time.time() - t
        r = tac_bench(srv.port, ["-n", str(args.records), "--seed", str(args.seed), "--no-load", "-w", "A",
                                 "-T", str(args.seconds), "--warmup", "2"],
                      os.path.join(d, "%s-%s-run.json" % (kind, tag)))
        st = all_stats(srv.port)
    finally:
        stop_and_clean(srv, files)
    res = {"system": kind, "cmd": " ".join(srv.cmd), "load_seconds": round(lsecs, 1),
           "load_errors": ld["errors"], "throughput": r["throughput"],
           "p99_us": r["latency"]["all"]["p99_us"], "wrong": r["wrong"], "errors": r["errors"],
           "misses": r["misses"], "hits": r["hits"]}
    for k in ("store_no_memory", "store_wait_timeouts", "store_waits", "evictions", "ssd_items_dropped"):
        res[k] = int(st.get(k, 0))
    log("  %-5s %9.0f ops/s  p99 %6.0f us  load %5.1fs (errors %d)  wrong %d errors %d  "
        "no_memory %d wait_timeouts %d waits %d evictions %d"
        % (kind, res["throughput"], res["p99_us"], lsecs, ld["errors"], res["wrong"], res["errors"],
           res["store_no_memory"], res["store_wait_timeouts"], res["store_waits"], res["evictions"]))
    return res


def throughput(args, d):
    runs = []
    for i in range(args.repeat):
        log("repeat %d/%d" % (i + 1, args.repeat))
        three = run_one("three", args, d, "r%d" % i)
        ssd = run_one("ssd", args, d, "r%d" % i)
        ratio = three["throughput"] / ssd["throughput"] if ssd["throughput"] else 0
        log("  ratio three/ssd %.3f" % ratio)
        runs.append({"three": three, "ssd": ssd, "ratio": ratio})
    med = statistics.median(r["ratio"] for r in runs)
    log("median ratio three/ssd over %d repeats: %.3f (goal >= 0.8)" % (len(runs), med))
    return {"runs": runs, "median_ratio": med}


def dd_rate(d):
    """Sequential O_DIRECT write rate of the file system holding d, MB/s."""
    f = os.path.join(d, "dd-probe.dat")
    try:
        p = subprocess.run(["dd", "if=/dev/zero", "of=" + f, "bs=1M", "count=1024", "oflag=direct"],
                           capture_output=True, text=True)
        line = p.stderr.strip().splitlines()[-1]
        # "... bytes (...) copied, 1.234 s, 870 MB/s"
        secs = float(line.split(",")[-2].split()[0])
        return 1024 * 1048576 / secs / 1e6
    finally:
        if os.path.exists(f):
            os.unlink(f)


def sustained(args, d):
    disk = dd_rate(d)
    log("disk: sequential O_DIRECT writes %.0f MB/s (dd bs=1M count=1024 oflag=direct)" % disk)
    targs, files = tier_args("three", d, "sus")
    srv = Server(args.server, targs, d, "three-sus")
    samples = []
    try:
        ld = load(srv.port, args.records, args.seed, os.path.join(d, "sus-load.json"))
        log("loaded %d records (errors %d); %d s of 100%% updates" % (args.records, ld["errors"], args.seconds))
        cmd = [BENCH, "-s", "127.0.0.1:%d" % srv.port, "-q", "--json", os.path.join(d, "sus-run.json")] + \
            SHAPE + ["-n", str(args.records), "--seed", str(args.seed), "--no-load", "--read", "0",
                     "--update", "1", "-T", str(args.seconds), "--warmup", "0"]
        client = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
        t0 = time.time()
        while client.poll() is None:
            time.sleep(1)
            st = all_stats(srv.port)
            samples.append({"t": round(time.time() - t0, 1),
                            "evictor_backlog": int(st.get("evictor_backlog", 0)),
                            "evictor_backlog_bytes": int(st.get("evictor_backlog_bytes", 0)),
                            "ssd_bytes_written": int(st.get("ssd_bytes_written", 0)),
                            "store_no_memory": int(st.get("store_no_memory", 0)),
                            "store_wait_timeouts": int(st.get("store_wait_timeouts", 0)),
                            "store_waits": int(st.get("store_waits", 0)),
                            "cmd_set": int(st.get("cmd_set", 0))})
        if client.returncode != 0:
            raise RuntimeError("tac-bench failed (rc %d)" % client.returncode)
        with open(os.path.join(d, "sus-run.json")) as f:
            r = json.load(f)
        final = all_stats(srv.port)
    finally:
        stop_and_clean(srv, files)
    def peaks(name):
        first = [s[name] for s in samples if s["t"] <= 60]
        rest = [s[name] for s in samples if s["t"] > args.seconds - 240]
        return (max(first) if first else 0), (max(rest) if rest else 0)
    first_b, rest_b = peaks("evictor_backlog_bytes")
    first_c, rest_c = peaks("evictor_backlog")
    span = samples[-1]["t"] - samples[0]["t"] if len(samples) > 1 else 1
    mbps = (samples[-1]["ssd_bytes_written"] - samples[0]["ssd_bytes_written"]) / span / 1e6
    res = {"cmd": " ".join(srv.cmd), "disk_seq_write_mbps": round(disk), "throughput": r["throughput"],
           "wrong": r["wrong"], "errors": r["errors"],
           "store_no_memory": int(final.get("store_no_memory", 0)),
           "store_wait_timeouts": int(final.get("store_wait_timeouts", 0)),
           "store_waits": int(final.get("store_waits", 0)),
           "evictions": int(final.get("evictions", 0)),
           "backlog_peak_first_minute": first_b, "backlog_peak_last_4_minutes": rest_b,
           "backlog_classes_peak_first_minute": first_c,
           "backlog_classes_peak_last_4_minutes": rest_c,
           "ssd_write_mbps": round(mbps, 1), "samples": samples}
    ok_backlog = res["backlog_peak_last_4_minutes"] <= 1.2 * max(res["backlog_peak_first_minute"], 1)
    log("updates %.0f ops/s (wrong %d, errors %d); store_no_memory %d, store_wait_timeouts %d, "
        "store_waits %d, evictions %d" % (res["throughput"], res["wrong"], res["errors"],
                                          res["store_no_memory"], res["store_wait_timeouts"],
                                          res["store_waits"], res["evictions"]))
    log("evictor backlog: peak %d bytes in the first minute, %d in the last 4 minutes (%s); "
        "classes short: peak %d, then %d"
        % (first_b, rest_b, "within 1.2x" if ok_backlog else "ABOVE 1.2x", first_c, rest_c))
    log("SSD written %.1f MB/s sustained; the disk writes %.0f MB/s sequentially (%.0f%%)"
        % (mbps, disk, 100 * mbps / disk if disk else 0))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["throughput", "sustained"])
    ap.add_argument("--server", default=os.path.join(REPO, "tac-memcached"))
    ap.add_argument("--records", type=int, default=1000000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=None, help="run length (throughput 30, sustained 300)")
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--dir", default=os.path.join(HERE, "out", "write-pressure"))
    args = ap.parse_args()
    if args.seconds is None:
        args.seconds = 30 if args.mode == "throughput" else 300
    os.makedirs(args.dir, exist_ok=True)
    if not os.access(BENCH, os.X_OK):
        sys.exit("build bench/tac-bench first (make -C bench or make bench)")
    log("write-pressure %s: %s" % (args.mode, " ".join(sys.argv[1:])))
    res = throughput(args, args.dir) if args.mode == "throughput" else sustained(args, args.dir)
    res["argv"] = sys.argv
    with open(os.path.join(args.dir, "%s.json" % args.mode), "w") as f:
        json.dump(res, f, indent=1)
    if args.mode == "sustained":
        bad = res["store_no_memory"] or res["store_wait_timeouts"] or res["wrong"] or \
            res["backlog_peak_last_4_minutes"] > 1.2 * max(res["backlog_peak_first_minute"], 1)
        sys.exit(1 if bad else 0)
    sys.exit(0 if res["median_ratio"] >= 0.8 else 1)


if __name__ == "__main__":
    main()
