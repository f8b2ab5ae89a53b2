#!/usr/bin/env python3
"""crash-rounds.py - restarts under CPU load: does a crash recovery lose keys?

The reproduction of issue 37's hypothesis 7, per seed: a server with
-m 16, NVM 8 MB, SSD 48 MB, dram_log=on and a tier key takes 7,500 keys
(values 1.5-6 KB); four graceful restarts follow, each with every key read
back, then new keys, new versions and deletes, then every key read again;
right after that the server is SIGKILLed; after the crash recovery every key is read and checked
against the acknowledged writes (value, flags, CAS; deleted keys must miss).
Two CPU hogs run beside it all the while (--hogs).

    bench/crash-rounds.py [--seeds N] [--first S] [--hogs 2] [--server PATH]

Prints one line per seed and a summary: seeds run, seeds that lost keys,
keys lost in all, and for a seed that lost keys the eviction and drop
counters after the recovery.  Exits 1 if any key was lost or wrong.
"""
import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))

from mcserver import SERVER_BIN, Server, free_port  # noqa: E402
from test_restart import DataSet, gets_all, graceful_stop, write_round  # noqa: E402
from test_restart import load as ds_load  # noqa: E402


class Factory:
    """What test_restart's helpers need of pytest's server fixture."""

    def __init__(self, tmpdir, binary):
        self.tmpdir, self.binary, self.servers = tmpdir, binary, []

    def start(self, args, port):
        srv = Server(args, self.tmpdir, port=port, binary=self.binary)
        self.servers.append(srv)
        return srv


def wait_done(srv, timeout=120):
    c = srv.connect(timeout=60)
    deadline = time.time() + timeout
    while c.stats(b"tac")["recovery_state"] not in ("done", "failed"):
        if time.time() > deadline or not srv.alive():
            raise RuntimeError("recovery did not finish: %s" % srv.stderr_text()[-2000:])
        time.sleep(0.05)
    return c


def one_seed(seed, binary, work):
    rng = random.Random(seed)
    d = tempfile.mkdtemp(dir=work)
    nvm = "/dev/shm/tac-crash-rounds-%d-%d" % (os.getpid(), seed)
    key = os.path.join(d, "tier.key")
    with open(key, "wb") as f:
        f.write(rng.randbytes(32))
    os.chmod(key, 0o600)
    args = ["-m", "16", "-t", "2", "-o",
            "nvm_path=%s:8m,ssd_path=%s/ssd:48m,ssd_page_size=2m,ssd_buf_size=64k,tier_key=%s,dram_log=on"
            % (nvm, d, key)]
    fac = Factory(d, binary)
    port = free_port()
    try:
        ds = DataSet(seed, 7500, 1500, 6000)
        srv = fac.start(args, port)
        ds_load(srv, ds, ds.keys)
        c = srv.connect(timeout=60)
        ds.record(gets_all(c, ds.all_keys()), "after loading")
        for rnd in range(4):
            graceful_stop(srv, "SIGTERM")
            srv = fac.start(args, port)
            c = wait_done(srv)
            # As test_at_rest does: every key read back (reads move items up,
            # and others down), then the writes, then every key read again.
            ds.compare(gets_all(c, ds.all_keys()), "graceful restart %d" % rnd)
            write_round(c, ds, rng, "after graceful restart %d" % rnd)
            ds.record(gets_all(c, ds.all_keys()), "after the writes of round %d" % rnd)
        srv.expect_exit = True
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait(30)
        srv = fac.start(args, port)
        c = wait_done(srv)
        found = gets_all(c, ds.all_keys())
        lost = [k for k in ds.val if k not in found]
        wrong = [k for k in ds.val if k in found and found[k][2] != ds.val[k]]
        back = [k for k in ds.gone if k in found]
        why = {}
        if lost or wrong or back:
            gen, tiers = c.stats(), c.stats(b"tiers")
            why = {k: v for dd in (gen, tiers) for k, v in dd.items()
                   if any(w in k for w in ("evict", "dropped", "_items"))}
            why.update({k: v for k, v in c.stats(b"tac").items() if k.startswith("recovery_")})
        graceful_stop(srv, "SIGTERM")
        return len(ds.val), lost, wrong, back, why
    finally:
        for s in fac.servers:
            if s.alive():
                s.proc.kill()
                s.proc.wait()
        for p in (nvm, nvm + ".dramlog"):
            if os.path.exists(p):
                os.unlink(p)
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=300)
    ap.add_argument("--first", type=int, default=1)
    ap.add_argument("--hogs", type=int, default=2)
    ap.add_argument("--server", default=SERVER_BIN)
    a = ap.parse_args()
    hogs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(a.hogs)]
    work = tempfile.mkdtemp(prefix="crash-rounds-")
    t0 = time.time()
    bad, lost_all, ran = 0, 0, 0
    try:
        for seed in range(a.first, a.first + a.seeds):
            try:
                n, lost, wrong, back, why = one_seed(seed, a.server, work)
                status = "ok" if not (lost or wrong or back) else "LOST %d, WRONG %d, BACK %d %s" % (
                    len(lost), len(wrong), len(back), why)
            except AssertionError as e:   # a check between the graceful restarts
                n, lost, status = 0, [], "FAILED before the kill: %s" % str(e)[:400]
            ran += 1
            lost_all += len(lost)
            bad += status != "ok"
            print("seed %d: %d keys: %s" % (seed, n, status), flush=True)
    finally:
        for h in hogs:
            h.kill()
        shutil.rmtree(work, ignore_errors=True)
    print("%d seeds, %d with lost, wrong or returned keys, %d keys lost in all; %d CPU hogs; %.0f s"
          % (ran, bad, lost_all, a.hogs, time.time() - t0))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
