"""An idle server's background threads doze (base/bg.h, "doze").

The maintainer, the DRAM LRU thread, the evictors and SSD defrag used to
wake every 10-20 ms whatever the load: about 360 wake-ups a second for an
idle server with NVM and SSD.  Now a thread whose rounds keep finding
nothing sleeps up to a second, and the event that brings it work kicks it
awake: a queued LRU move, a failed allocation or a page taken by a DRAM
class, `slabs reassign`, `lru_crawler crawl`, an SSD writer nearing
defrag's watermark.  These tests count each thread's sleeps
(voluntary context switches in /proc) on an idle server, then check that
work given to a dozing server is done as before: a move is applied, a
crawl starts, and a fill far past DRAM is demoted and read back exact.

Timing: waits for the server are polls with deadlines; the reaction-time
checks take the median of several tries, so one slow scheduling on a
loaded run does not decide them.  The idle and reaction tests run in the
plain pass only (slow): a sanitizer changes neither; the fill runs in both.
"""
import os
import statistics
import time

import pytest

from mcserver import IS_STOCK, thread_switches, wait_until
from test_ssd import decode_value, load, make_value, read_check, ssd_dir, ssd_server  # noqa: F401

pytestmark = [pytest.mark.tac_only,
              pytest.mark.skipif(IS_STOCK, reason="tac-only threads; TAC_SERVER is stock memcached")]

# Past the maintainer's 2 s quiet window and the evictors' back-off to 1 s.
SETTLE = 3.5
WINDOW = 4.0

# Wake-ups a second each thread may take while idle.  Before dozing:
# tac-maint, tac-lru-dram and tac-evict about 100, tac-ssd-defrag 50.
IDLE_BOUND = {"tac-maint": 4, "tac-lru-dram": 4, "tac-evict": 4, "tac-ssd-defrag": 8}


def idle_rates(pid, names, seconds):
    before = {n: thread_switches(pid, n) for n in names}
    time.sleep(seconds)
    return {n: (thread_switches(pid, n) - before[n]) / seconds for n in names}


def gstat(conn, name):
    st = conn.stats_general()
    assert name in st, "stats has no %s" % name
    return int(st[name])


def three_tiers(server, ssd_dir, shm_file, mem=16):
    return ssd_server(server, ssd_dir, "256m", mem=mem, nvm="%s:32m" % shm_file("idle"),
                      opts=("temp_sample_interval=0",))


@pytest.mark.slow
def test_idle_three_tier_server_dozes(server, ssd_dir, shm_file):
    srv = three_tiers(server, ssd_dir, shm_file)
    conn = srv.connect()
    # Some data in every tier first, so that the tiers have state to mind.
    keys = [b"idle:%s:%06d" % (b"k" * (20 + i % 30), i) for i in range(6000)]
    items = [(k, make_value(k, 1, size=100 + (i * 7919) % 9000)) for i, k in enumerate(keys)]
    stored, failures, _ = load(conn, items)
    assert not failures, failures
    time.sleep(SETTLE)
    rates = idle_rates(srv.proc.pid, list(IDLE_BOUND), WINDOW)
    print("idle wake-ups a second:", rates)
    over = {n: r for n, r in rates.items() if r > IDLE_BOUND[n]}
    assert not over, "idle threads woke more than %r a second: %r" % (IDLE_BOUND, over)
    # Idle, nothing was lost.
    want = dict(items)
    hits, misses, wrong = read_check(conn, stored, lambda k: (0, want[k]))
    assert not wrong, wrong[:5]
    assert not misses, "%d of %d missing, e.g. %r" % (len(misses), len(stored), misses[:3])


@pytest.mark.slow
def test_dram_only_idle_server_dozes(server):
    srv = server(["-m", "32", "-o", "temp_sample_interval=0"])
    time.sleep(SETTLE)
    rates = idle_rates(srv.proc.pid, ["tac-maint", "tac-lru-dram", "tac-worker"], WINDOW)
    print("idle wake-ups a second:", rates)
    assert rates["tac-maint"] <= IDLE_BOUND["tac-maint"], rates
    assert rates["tac-lru-dram"] <= IDLE_BOUND["tac-lru-dram"], rates
    # The workers (all four of them) have no timer without -o idle_timeout:
    # they sleep until a client or a queued connection wakes them.
    assert rates["tac-worker"] <= 0.5, rates


def reaction(poll, act, deadline=10.0):
    """Seconds from act() until poll() is true."""
    t0 = time.monotonic()
    act()
    assert wait_until(poll, deadline, step=0.005), "no reaction within %.0f s" % deadline
    return time.monotonic() - t0


@pytest.mark.slow
def test_dozing_threads_react_at_once(server):
    """A dozing LRU thread applies a move as soon as it is queued, and a
    dozing maintainer starts a crawl as soon as it is asked: each at once,
    not at the end of a one-second doze."""
    srv = server(["-m", "32", "-o", "temp_sample_interval=0"])
    conn = srv.connect()
    moves, crawls = [], []
    for i in range(5):
        time.sleep(SETTLE if i == 0 else 1.2)      # dozing again
        key = b"react:%s:%02d" % (b"m" * 40, i)
        val = make_value(key, i, size=500)
        assert conn.line(b"set %s 0 0 %d\r\n%s\r\n" % (key, len(val), val)) == b"STORED\r\n"
        time.sleep(1.2)
        n0 = gstat(conn, "lru_bumps")

        def two_reads():
            # A second read within a second makes the item warm: one move.
            for _ in range(2):
                assert val in conn.get(b"get %s\r\n" % key)
        moves.append(reaction(lambda: gstat(conn, "lru_bumps") > n0, two_reads))

        time.sleep(1.2)
        c0 = gstat(conn, "lru_crawler_starts")
        crawls.append(reaction(lambda: gstat(conn, "lru_crawler_starts") > c0,
                               lambda: conn.line(b"lru_crawler crawl all\r\n")))
    print("move applied after %r s; crawl started after %r s" % (moves, crawls))
    # A missed kick waits out the doze: up to 1 s, 0.5 s on average.
    assert statistics.median(moves) < 0.2, moves
    assert statistics.median(crawls) < 0.2, crawls


def test_fill_after_a_doze_moves_down_and_reads_back(server, ssd_dir, shm_file):
    """Stores that start after the evictors and the maintainer dozed fill
    DRAM, NVM and SSD as before: every value reads back exact and no store
    waited out its limit."""
    srv = three_tiers(server, ssd_dir, shm_file)
    conn = srv.connect()
    time.sleep(SETTLE)
    keys = [b"fill:%s:%06d" % (b"f" * (25 + i % 35), i) for i in range(20000)]
    sizes = [100 + (i * 104729) % 4000 if i % 50 else 60000 + i % 40000 for i in range(len(keys))]
    items = [(k, make_value(k, 1, size=s)) for k, s in zip(keys, sizes)]
    stored, failures, nbytes = load(conn, items)
    assert not failures, list(failures.items())[:5]
    assert nbytes > 3 * 16 << 20, "the fill must go far past DRAM"
    st = conn.stats(b"tiers")
    assert int(st.get("evict_dram_to_nvm", 0)) + int(st.get("evict_dram_to_ssd", 0)) > 0, st
    want = dict(items)
    hits, misses, wrong = read_check(conn, stored, lambda k: (0, want[k]))
    assert not wrong, wrong[:5]
    assert not misses, "%d of %d missing, e.g. %r" % (len(misses), len(stored), misses[:3])
    assert gstat(conn, "store_wait_timeouts") == 0
