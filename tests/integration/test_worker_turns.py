"""Workers that outnumber the server's cores take turns (net/thread.c, worker_loop).

A busy worker never sleeps, and the kernel would take the core from it only
at a scheduler tick (4 ms), so with more workers than cores each worker
offers the core (sched_yield) once it has held it for a turn: 0.1 ms while
SSD reads are in flight (their completions wait for their own worker), 0.3 ms
otherwise.  `stats tac`'s `worker_turns` counts the offers.

The server here runs on one core with `-t 2`, DRAM only, and bench/tac-bench
(16 connections, YCSB-B, 40 B keys, 100-4,000 B values, every value read
checked) keeps both workers busy for a few seconds from the other core.
With no read in flight a worker cannot take more than one turn per 0.3 ms:
the bound below holds whatever the machine's speed.  Under this load the
0.3 ms turn took 8,400 turns in 3 s against a bound of 20,100, and the
0.1 ms turn everywhere 21,700.  With `-t 1` a lone
worker keeps its core and takes none.
"""
import json
import os
import subprocess
import time

import pytest

from mcserver import IS_STOCK, REPO

pytestmark = [pytest.mark.tac_only,
              pytest.mark.skipif(IS_STOCK, reason="tac-only stat; TAC_SERVER is stock memcached")]

BENCH = os.path.join(REPO, "bench", "tac-bench")
CALM_TURN_MS = 0.3
LOAD_SECONDS = 3


def cpus():
    return sorted(os.sched_getaffinity(0))


def on_core(server, cpu, args):
    """Start a server whose CPU affinity is one core (inherited at start)."""
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        return server(args=args)
    finally:
        os.sched_setaffinity(0, old)


def bench(srv, cpu, tmp_path, *args):
    out = str(tmp_path / "bench.json")
    cmd = ["taskset", "-c", str(cpu), BENCH, "-s", srv.addr, "-q", "--json", out,
           "-n", "20000", "-k", "40", "-v", "uniform:100-4000", "-c", "16", "-d", "1",
           "--seed", "29"] + list(args)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    with open(out) as f:
        return json.load(f)


def turns_under_load(srv, cpu, tmp_path):
    bench(srv, cpu, tmp_path, "--load-only")
    c = srv.connect()
    before = int(c.stats(b"tac")["worker_turns"])
    t0 = time.monotonic()
    res = bench(srv, cpu, tmp_path, "--no-load", "-w", "B", "-T", str(LOAD_SECONDS),
                "--warmup", "0")
    elapsed = time.monotonic() - t0
    turns = int(c.stats(b"tac")["worker_turns"]) - before
    assert res["wrong"] == 0 and res["errors"] == 0 and res["misses"] == 0, res
    assert res["ops"] > 1000, res
    return turns, elapsed


@pytest.fixture
def two_cpus():
    if not os.path.exists(BENCH):
        pytest.fail("%s is not built (make builds it)" % BENCH)
    have = cpus()
    if len(have) < 2:
        pytest.skip("needs two CPUs: one for the server, one for the load")
    return have[0], have[1]


def test_workers_on_one_core_take_turns(server, two_cpus, tmp_path):
    srv_cpu, load_cpu = two_cpus
    srv = on_core(server, srv_cpu, ["-t", "2", "-m", "256"])
    turns, elapsed = turns_under_load(srv, load_cpu, tmp_path)
    # Each worker: at most one turn per CALM_TURN_MS of the window.
    bound = 2 * (elapsed * 1000 / CALM_TURN_MS + 1)
    print("worker_turns %d in %.2f s, bound %d" % (turns, elapsed, bound))
    assert 0 < turns <= bound, "worker_turns %d in %.2f s (bound %d)" % (turns, elapsed, bound)


def test_a_lone_worker_keeps_its_core(server, two_cpus, tmp_path):
    srv_cpu, load_cpu = two_cpus
    srv = on_core(server, srv_cpu, ["-t", "1", "-m", "256"])
    turns, _ = turns_under_load(srv, load_cpu, tmp_path)
    assert turns == 0
