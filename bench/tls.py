#!/usr/bin/env python3
"""TLS cost, side by side in one run: tac-memcached plain and with -Z, stock memcached
plain and with -Z, under the same tac-bench load (YCSB, a data set that fits in DRAM).

Each system is started fresh for each repeat, in turn (so drift hits them alike), loaded,
then run.  Reported per system: the median over the repeats of throughput, p99 latency and
server CPU per operation (rusage from `stats`, read on a plain `notls:` port).  Ratios:
tac TLS / tac plain, and tac TLS / memcached TLS.

    bench/tls.py [--repeat 3] [--duration 10] [--records 200000] [--workload B]
                 [--out bench/out/tls]
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BENCH = os.path.join(REPO, "bench", "tac-bench")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def make_certs(d):
    for args in (["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
                  "ca.pem", "-days", "2", "-subj", "/CN=bench ca"],
                 ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "srv.key", "-out",
                  "srv.csr", "-subj", "/CN=127.0.0.1"],
                 ["x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                  "-CAcreateserial", "-out", "srv.pem", "-days", "2"]):
        subprocess.run(["openssl"] + args, cwd=d, check=True, capture_output=True)


def stats(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"stats\r\n")
    buf = b""
    while not buf.endswith(b"END\r\n"):
        buf += s.recv(65536)
    s.close()
    out = {}
    for ln in buf.decode().split("\r\n"):
        if ln.startswith("STAT "):
            _, k, v = ln.split(" ", 2)
            out[k] = v
    return out


def cpu(st):
    return float(st["rusage_user"]) + float(st["rusage_system"])


def run_one(system, tls, certs, args, outdir, rep):
    port, plain = free_port(), free_port()
    binary = os.path.join(REPO, "tac-memcached") if system == "tac" else "/usr/bin/memcached"
    cmd = [binary, "-p", str(port), "-U", "0", "-t", str(args.server_threads), "-m", "1024",
           "-c", "4096"]
    if os.geteuid() == 0:
        cmd += ["-u", "root"]
    if tls:
        cmd += ["-Z", "-o", "ssl_chain_cert=%s/srv.pem,ssl_key=%s/srv.key" % (certs, certs),
                "-l", "127.0.0.1,notls:127.0.0.1:%d" % plain]
    else:
        cmd += ["-l", "127.0.0.1"]
        plain = port
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(200):
            try:
                stats(plain)
                break
            except OSError:
                time.sleep(0.05)
        load = [BENCH, "-s", "127.0.0.1:%d" % port, "-n", str(args.records), "-k", "40",
                "-v", str(args.value_size), "-t", "1", "-c", "4", "-d", "8", "-q",
                "-w", args.workload, "--seed", str(rep + 1)]
        if tls:
            load += ["--tls", "--stats-port", str(plain)]
        subprocess.run(load + ["--load-only"], check=True, capture_output=True)
        before = stats(plain)
        js = os.path.join(outdir, "%s-%s-%d.json" % (system, "tls" if tls else "plain", rep))
        subprocess.run(load + ["--no-load", "-T", str(args.duration), "--json", js],
                       check=True, capture_output=True)
        after = stats(plain)
        r = json.load(open(js))
        assert r["wrong"] == 0 and r["errors"] == 0, r
        ops = r["ops"] or 1
        return {"throughput": r["throughput"],
                "p99_us": r["latency"]["all"]["p99_us"] if "p99_us" in r["latency"]["all"]
                else r["latency"]["all"].get("p99"),
                "server_cpu_us_per_op": (cpu(after) - cpu(before)) * 1e6 / ops}
    finally:
        proc.terminate()
        proc.wait(10)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--records", type=int, default=200000)
    ap.add_argument("--value-size", default="1000")
    ap.add_argument("--workload", default="B")
    ap.add_argument("--server-threads", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(REPO, "bench", "out", "tls"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    certs = tempfile.mkdtemp(prefix="tac-tls-bench-")
    make_certs(certs)
    systems = [("tac", False), ("tac", True), ("memcached", False), ("memcached", True)]
    res = {s: [] for s in systems}
    try:
        for rep in range(args.repeat):
            for s in systems:
                res[s].append(run_one(s[0], s[1], certs, args, args.out, rep))
                print("%s %s rep %d: %r" % (s[0], "tls" if s[1] else "plain", rep,
                                            res[s][-1]), flush=True)
    finally:
        shutil.rmtree(certs, ignore_errors=True)
    med = {s: {k: statistics.median(r[k] for r in res[s]) for k in res[s][0]} for s in systems}
    print("\n| system | ops/s | p99 | server CPU us/op |")
    print("|---|---|---|---|")
    for s in systems:
        m = med[s]
        print("| %s %s | %.0f | %s | %.2f |" % (s[0], "-Z" if s[1] else "plain", m["throughput"],
                                              m["p99_us"], m["server_cpu_us_per_op"]))
    t, tz = med[("tac", False)], med[("tac", True)]
    mz = med[("memcached", True)]
    print("\ntac TLS / tac plain: throughput %.3f, server CPU per op %.3f" %
          (tz["throughput"] / t["throughput"],
           tz["server_cpu_us_per_op"] / t["server_cpu_us_per_op"]))
    print("tac TLS / memcached TLS: throughput %.3f, server CPU per op %.3f" %
          (tz["throughput"] / mz["throughput"],
           tz["server_cpu_us_per_op"] / mz["server_cpu_us_per_op"]))
    json.dump({"%s-%s" % (s[0], "tls" if s[1] else "plain"): {"median": med[s], "runs": res[s]}
               for s in systems}, open(os.path.join(args.out, "results.json"), "w"), indent=1)


if __name__ == "__main__":
    sys.exit(main())
