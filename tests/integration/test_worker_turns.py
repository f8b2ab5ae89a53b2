"""Workers that outnumber the server's cores take turns (net/thread.c, worker_loop).

A busy worker never sleeps, and the kernel would take the core from it only
at a scheduler tick (4 ms), so with more workers than cores each worker
offers the core (sched_yield) once it has held it for a turn: 0.1 ms while
SSD reads are in flight (their completions wait for their own worker), 1 ms
otherwise.  `stats tac`'s `worker_turns` counts the offers.

The server here runs on one core with `-t 2`, DRAM only, under gets and sets
from several client threads for a few seconds, each value checked.  With
no read in flight a worker cannot take more than one turn per millisecond:
the bound below holds whatever the machine's speed.  This load gives about
1.5 turns per millisecond in all, against a bound of 2; a 0.1 ms turn
everywhere gave 5.7.  With `-t 1` a lone worker keeps its core and takes
none.
"""
import os
import threading
import time
import zlib

import pytest

from mcserver import IS_STOCK

pytestmark = [pytest.mark.tac_only,
              pytest.mark.skipif(IS_STOCK, reason="tac-only stat; TAC_SERVER is stock memcached")]

LOAD_SECONDS = 3.0
CLIENTS = 6


def on_one_core(server, args):
    """Start a server whose CPU affinity is one core (inherited at start)."""
    old = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(old)})
    try:
        return server(args=args)
    finally:
        os.sched_setaffinity(0, old)


def value_of(key, version):
    body = b"%s:%d:" % (key, version) + bytes(range(256)) * (1 + len(key) % 3)
    return body + b":%08x" % zlib.crc32(body)


def hammer(srv, idx, deadline, errors, counts):
    """Sets and gets of 30-60 B keys; every value read must be the one stored."""
    try:
        c = srv.connect()
        keys = [("turns:%d:%d:" % (idx, i)).encode() + b"k" * (20 + (i * 7) % 30) for i in range(50)]
        version = {}
        n = 0
        while time.time() < deadline:
            key = keys[n % len(keys)]
            if n % 4 == 0 or key not in version:
                version[key] = version.get(key, 0) + 1
                val = value_of(key, version[key])
                assert c.line(b"set %s 0 0 %d\r\n%s\r\n" % (key, len(val), val)) == b"STORED\r\n"
            else:
                want = value_of(key, version[key])
                got = c.get(b"get %s\r\n" % key)
                assert got == b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (key, len(want), want), got[:200]
            n += 1
        counts[idx] = n
    except Exception as e:  # noqa: BLE001 - reported by the main thread
        errors.append(repr(e))


def turns_under_load(srv):
    c = srv.connect()
    before = int(c.stats(b"tac")["worker_turns"])
    errors, counts = [], {}
    t0 = time.time()
    threads = [threading.Thread(target=hammer, args=(srv, i, t0 + LOAD_SECONDS, errors, counts))
               for i in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    elapsed = time.time() - t0
    assert not errors, errors[:3]
    assert sum(counts.values()) > 1000, counts
    return int(c.stats(b"tac")["worker_turns"]) - before, elapsed


def test_workers_on_one_core_take_turns_of_a_millisecond(server):
    srv = on_one_core(server, ["-t", "2", "-m", "64"])
    turns, elapsed = turns_under_load(srv)
    # Each worker: at most one turn per ms of the run (plus its idle start).
    bound = 2 * (elapsed * 1000 + 50)
    assert 0 < turns <= bound, "worker_turns %d in %.2f s (bound %d)" % (turns, elapsed, bound)


def test_a_lone_worker_keeps_its_core(server):
    srv = on_one_core(server, ["-t", "1", "-m", "64"])
    turns, _ = turns_under_load(srv)
    assert turns == 0
