#!/usr/bin/env python3
"""bench/restart.py - how fast tac-memcached comes back after a graceful stop and a crash.

One three-tier server (-t 2 -m 256, NVM 1 GB under /dev/shm, SSD 4 GB under
--dir) is loaded with --records items of the YCSB shape (33 B keys, 1.1 KB
values, bench/tac-bench), then:

  before     YCSB-B (Zipf 0.99, 16 connections) for --seconds: throughput and
             the share of hits DRAM serves (stats tiers get_hits_dram / get_hits)
  graceful   SIGTERM, restart with the same options; measured: the stop's
             duration, time to an open port, time until recovery_state is
             done, items back and items/s; then YCSB-B in 1-second windows from
             the port's opening until one reaches 90% of `before`, and one
             --seconds run for the DRAM hit share
  crash      a 2 s pause (idle SSD bufs are written), SIGKILL, restart; the
             same measures, and the scan's rate (NVM + SSD bytes it covered
             over its time) beside `dd iflag=direct` of the SSD file
  scan       another 2 s pause and SIGKILL, and a restart left alone until it
             has recovered: the SSD part of the scan's own rate (the server
             logs the buf bytes it read and the span of that part) beside
             `dd iflag=direct` of the SSD file, read just before

With --memcached (default /usr/bin/memcached, if present) memcached's own warm
restart runs beside it: -e on /dev/shm, -m large enough for all items, the same
load, SIGUSR1, restart; time to an open port and items back.

    bench/restart.py [--records 2000000] [--seconds 20] [--server ./tac-memcached]

Results are printed and written to --dir/results.json (default
bench/out/restart).  Python 3 standard library only.
"""
import argparse
import glob
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# The client, the record shape and the stats helpers of write-pressure.py.
_spec = importlib.util.spec_from_file_location("write_pressure", os.path.join(HERE, "write-pressure.py"))
_wp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_wp)
BENCH, SHAPE, log, free_port, stats = _wp.BENCH, _wp.SHAPE, _wp.log, _wp.free_port, _wp.stats


class Server:
    def __init__(self, cmd, errpath, port):
        self.port = port
        self.cmd = cmd
        self.err = open(errpath, "a")
        self.t0 = time.time()
        self.proc = subprocess.Popen(cmd, stderr=self.err, stdout=self.err)
        self.open_s = None
        while time.time() - self.t0 < 600:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                self.open_s = time.time() - self.t0
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError("exited at start (rc %s): %s" % (self.proc.returncode, cmd))
                time.sleep(0.005)
        raise RuntimeError("did not open its port: %s" % cmd)

    def stop(self, sig):
        t = time.time()
        self.proc.send_signal(sig)
        self.proc.wait(600)
        self.err.close()
        return time.time() - t


def tac_bench(port, records, extra, json_path):
    cmd = [BENCH, "-s", "127.0.0.1:%d" % port, "-q", "--json", json_path, "-n", str(records),
           "--seed", "7"] + SHAPE + extra
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(json_path) as f:
        return json.load(f)


def ycsb_b(port, records, seconds, json_path, warmup=1):
    """Throughput and DRAM's share of the hits over one YCSB-B run."""
    a = stats(port, "tiers")
    g = stats(port)
    r = tac_bench(port, records, ["--no-load", "-w", "B", "-T", str(seconds), "--warmup", str(warmup)],
                  json_path)
    b = stats(port, "tiers")
    h = stats(port)
    hits = int(h["get_hits"]) - int(g["get_hits"])
    dram = int(b["get_hits_dram"]) - int(a["get_hits_dram"])
    return {"throughput": r["throughput"], "wrong": r["wrong"], "misses": r["misses"],
            "dram_hit_share": dram / hits if hits else 0.0}


def dd_read_rate(path):
    p = subprocess.run(["dd", "if=" + path, "of=/dev/null", "bs=1M", "count=1024", "iflag=direct"],
                       capture_output=True, text=True)
    line = p.stderr.strip().splitlines()[-1]
    secs = float(line.split(",")[-2].split()[0])
    return 1024 * 1048576 / secs / 1e6


def comeback(srv, args, before, label, d):
    """After a restart: recovery time, and 1-second YCSB-B windows until one
    reaches 90% of `before` (from the port's opening)."""
    windows = []
    t_open = srv.t0 + srv.open_s
    back90 = None
    done_s = None
    while time.time() - t_open < 300:
        st = stats(srv.port, "tac")
        if done_s is None and st.get("recovery_state") in ("done", "failed", "none"):
            done_s = time.time() - srv.t0
            final = st
        w = ycsb_b(srv.port, args.records, 1, os.path.join(d, "%s-window.json" % label), warmup=0)
        windows.append(round(w["throughput"]))
        if back90 is None and w["throughput"] >= 0.9 * before:
            back90 = time.time() - srv.t0
        if back90 is not None and done_s is not None:
            break
    if done_s is None:
        final = stats(srv.port, "tac")
    items = int(final.get("recovery_items", 0))
    rec_s = float(final.get("recovery_seconds", 0))
    return {"open_s": round(srv.open_s, 3), "recovered_s": round(done_s, 2) if done_s else None,
            "recovery_state": final.get("recovery_state"), "items": items,
            "dropped": int(final.get("recovery_dropped", 0)), "stale": int(final.get("recovery_stale", 0)),
            "items_per_s": round(items / max(done_s - srv.open_s, 1e-3)) if done_s else None,
            "back_to_90pct_s": round(back90, 2) if back90 else None, "windows": windows,
            "recovery_seconds_stat": rec_s}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=2000000)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--server", default=os.path.join(REPO, "tac-memcached"))
    ap.add_argument("--memcached", default="/usr/bin/memcached")
    ap.add_argument("--dir", default=os.path.join(HERE, "out", "restart"))
    args = ap.parse_args()
    d = os.path.abspath(args.dir)
    os.makedirs(d, exist_ok=True)
    nvm = "/dev/shm/tac-restart-bench-%d" % os.getpid()
    ssd = os.path.join(d, "ssd.dat")

    def clean():
        for f in [nvm, ssd] + glob.glob(glob.escape(nvm) + ".state*") + glob.glob(glob.escape(ssd) + ".state*"):
            if os.path.exists(f):
                os.unlink(f)

    clean()
    port = free_port()
    cmd = [args.server, "-p", str(port), "-U", "0", "-c", "4096", "-t", "2", "-m", "256",
           "-o", "nvm_path=%s:1g,ssd_path=%s:4g" % (nvm, ssd)]
    if os.geteuid() == 0:
        cmd += ["-u", "root"]
    errpath = os.path.join(d, "server.stderr")
    res = {"cmd": " ".join(cmd), "records": args.records}
    try:
        srv = Server(cmd, errpath, port)
        t = time.time()
        tac_bench(port, args.records, ["--load-only"], os.path.join(d, "load.json"))
        res["load_s"] = round(time.time() - t, 1)
        tiers = stats(port, "tiers")
        res["tiers_before"] = {k: int(tiers[k]) for k in ("dram_items", "nvm_items", "ssd_items")}
        log("loaded %d items in %.1f s: %s" % (args.records, res["load_s"], res["tiers_before"]))
        before = ycsb_b(port, args.records, args.seconds, os.path.join(d, "before.json"))
        res["before"] = before
        log("before: YCSB-B %.0f ops/s, DRAM hit share %.3f" % (before["throughput"], before["dram_hit_share"]))

        res["graceful_stop_s"] = round(srv.stop(signal.SIGTERM), 2)
        srv = Server(cmd, errpath, port)
        g = comeback(srv, args, before["throughput"], "graceful", d)
        after = ycsb_b(port, args.records, args.seconds, os.path.join(d, "after-graceful.json"))
        g["after"] = after
        res["graceful"] = g
        log("graceful: stop %.2f s, port %.3f s, recovered %s s (%d items, %s/s), 90%% at %s s; "
            "YCSB-B %.0f ops/s, DRAM hit share %.3f (before %.3f)"
            % (res["graceful_stop_s"], g["open_s"], g["recovered_s"], g["items"], g["items_per_s"],
               g["back_to_90pct_s"], after["throughput"], after["dram_hit_share"], before["dram_hit_share"]))

        time.sleep(2)
        tiers = stats(port, "tiers")
        res["tiers_before_crash"] = {k: int(tiers[k]) for k in ("dram_items", "nvm_items", "ssd_items")}
        srv.stop(signal.SIGKILL)
        disk = dd_read_rate(ssd)
        srv = Server(cmd, errpath, port)
        c = comeback(srv, args, before["throughput"], "crash", d)
        after = ycsb_b(port, args.records, args.seconds, os.path.join(d, "after-crash.json"))
        c["after"] = after
        nvm_bytes = 1 << 30
        ssd_live = int(stats(port, "tiers").get("ssd_live_bytes", 0))
        c["dd_iflag_direct_mb_s"] = round(disk)
        scan = (c["recovered_s"] or 0) - c["open_s"]
        c["scan_mb_s"] = round((nvm_bytes + ssd_live) / 1e6 / scan) if scan > 0 else None
        res["crash"] = c
        log("crash: port %.3f s, recovered %s s (%d items, %s/s, %d dropped), 90%% at %s s; "
            "scan ~%s MB/s over NVM + live SSD against dd iflag=direct %d MB/s; YCSB-B %.0f ops/s"
            % (c["open_s"], c["recovered_s"], c["items"], c["items_per_s"], c["dropped"],
               c["back_to_90pct_s"], c["scan_mb_s"], c["dd_iflag_direct_mb_s"], after["throughput"]))

        time.sleep(2)
        srv.stop(signal.SIGKILL)
        disk = dd_read_rate(ssd)
        srv = Server(cmd, errpath, port)
        while stats(port, "tac").get("recovery_state") not in ("done", "failed", "none"):
            time.sleep(0.05)
        with open(errpath) as f:
            line = [ln for ln in f if "SSD scan:" in ln][-1]
        # "restart: SSD scan: 1234.5 MB of bufs in 1.23 s (1000 MB/s), 2 threads"
        mb = float(line.split("SSD scan: ")[1].split()[0])
        secs = float(line.split(" in ")[1].split()[0])
        res["scan"] = {"ssd_mb": mb, "ssd_s": secs, "ssd_mb_s": round(mb / secs),
                       "dd_iflag_direct_mb_s": round(disk), "ratio": round(mb / secs / disk, 3),
                       "log": line.strip()}
        log("scan alone: SSD %.1f MB in %.2f s, %d MB/s against dd iflag=direct %d MB/s: %.2f"
            % (mb, secs, mb / secs, disk, mb / secs / disk))
        srv.stop(signal.SIGTERM)
    finally:
        clean()

    if args.memcached and os.path.exists(args.memcached):
        mem = "/dev/shm/mc-restart-bench-%d" % os.getpid()
        mport = free_port()
        mb = max(1024, int(args.records * 1400 / 1048576) + 512)
        mcmd = [args.memcached, "-p", str(mport), "-U", "0", "-c", "4096", "-t", "2", "-m", str(mb),
                "-e", mem]
        if os.geteuid() == 0:
            mcmd += ["-u", "root"]
        try:
            m = Server(mcmd, os.path.join(d, "memcached.stderr"), mport)
            tac_bench(mport, args.records, ["--load-only", "--no-stats"], os.path.join(d, "mc-load.json"))
            items = int(stats(mport)["curr_items"])
            stop_s = m.stop(signal.SIGUSR1)
            # memcached 1.6.18 refuses its memory file ("restart incompatible
            # due to setting for [stop_time]") when restarted within the
            # second it stopped in.
            time.sleep(2)
            m = Server(mcmd, os.path.join(d, "memcached.stderr"), mport)
            back = int(stats(mport)["curr_items"])
            res["memcached"] = {"cmd": " ".join(mcmd), "items": items, "stop_s": round(stop_s, 2),
                                "open_s": round(m.open_s, 3), "items_back": back}
            log("memcached -e: %d items, stop %.2f s, port %.3f s, %d items back at once"
                % (items, stop_s, m.open_s, back))
            m.stop(signal.SIGTERM)
        finally:
            for f in glob.glob(glob.escape(mem) + "*"):
                os.unlink(f)

    with open(os.path.join(d, "results.json"), "w") as f:
        json.dump(res, f, indent=1)
    log("results in %s" % os.path.join(d, "results.json"))


if __name__ == "__main__":
    sys.exit(main())
