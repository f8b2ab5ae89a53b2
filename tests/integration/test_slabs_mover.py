"""Slab page mover: the `slabs` commands and memory following the item sizes.

The commands answer as stock memcached 1.6 does.  Stock memcached's automove
waits for eviction statistics over long windows, so the page-move scenario is
tac-only: tac's mover acts within a few maintainer ticks.
"""
import random
import time

import pytest

from mcserver import recv_until
from test_ssd import load, make_value, nvm_file, read_check, ssd_dir, ssd_server  # noqa: F401 (fixtures)


def test_slabs_commands(srv):
    c = srv.connect()
    assert c.line(b"slabs automove 1\r\n") == b"OK\r\n"
    assert c.line(b"slabs automove x\r\n") == b"CLIENT_ERROR bad command line format\r\n"
    assert c.line(b"slabs reassign 1 1\r\n") == b"SAME src and dst class are identical\r\n"
    assert c.line(b"slabs reassign 99 1\r\n") == b"BADCLASS invalid src or dst class id\r\n"
    assert c.line(b"slabs reassign 1 2\r\n") == b"NOSPARE source class has no spare pages\r\n"
    assert c.line(b"slabs foo bar\r\n") == b"ERROR\r\n"
    assert c.line(b"slabs\r\n") == b"ERROR\r\n"


@pytest.mark.tac_only
def test_reassign_from_the_global_pool(server):
    """`slabs reassign 0 <dst>` (memcached's error-extstore.t): source 0 is the global page
    pool, here the pooled pages and the -m budget not yet spent (memcached's pool holds
    that budget when extstore prefills it at start); each move gives dst one page at once,
    until less than two pages are left (NOSPARE)."""
    s = server(["-m", "8"])
    c = s.connect()
    assert c.line(b"set k 0 0 1\r\nv\r\n") == b"STORED\r\n"
    assert c.line(b"slabs reassign 0 0\r\n") == b"SAME src and dst class are identical\r\n"
    assert c.line(b"slabs reassign 0 99\r\n") == b"BADCLASS invalid src or dst class id\r\n"
    before = int(c.stats(b"slabs")["1:total_pages"])
    moves = 0
    while True:
        r = c.line(b"slabs reassign 0 1\r\n")
        if r != b"OK\r\n":
            break
        moves += 1
        assert moves < 8, "more pages than -m 8 holds"
    assert r == b"NOSPARE source class has no spare pages\r\n"
    st = c.stats(b"slabs")
    assert int(st["1:total_pages"]) == before + moves
    assert moves >= 4, (moves, st)
    assert int(st["total_malloced"]) + 2 * 1024 * 1024 > 8 * 1024 * 1024, st
    # The new pages hold items of their class.
    for i in range(2000):
        c.send(b"set p%d 0 0 1 noreply\r\nv\r\n" % i)
    assert c.line(b"get p1999\r\n") == b"VALUE p1999 0 1\r\nv\r\nEND\r\n"


def _fill(c, prefix, size, n):
    val = b"v" * size
    for b0 in range(0, n, 200):
        batch = range(b0, min(n, b0 + 200))
        c.send(b"".join(b"set %s%d 0 0 %d\r\n%s\r\n" % (prefix, i, size, val) for i in batch))
        out = b""
        while out.count(b"\r\n") < len(batch):
            out += recv_until(c.sock, b"\r\n")
        assert out == b"STORED\r\n" * len(batch), out[:200]


@pytest.mark.tac_only
def test_memory_moves_to_new_item_size(server):
    # Fill -m 16 with small items, then switch to large ones: without page
    # moves the large class would be stuck with one page and keep few items.
    s = server(["-m", "16", "-t", "2"])
    c = s.connect()
    _fill(c, b"s", 100, 100000)
    deadline = time.time() + 20
    kept = 0
    while time.time() < deadline:
        _fill(c, b"b", 4000, 3000)
        hits = c.get(b"get " + b" ".join(b"b%d" % i for i in range(2500, 3000)) + b"\r\n")
        kept = hits.count(b"VALUE ")
        if kept == 500:
            break
        time.sleep(0.5)
    st = c.stats()
    assert kept == 500, "only %d of the last 500 large items kept; slabs_moved=%s" % (
        kept, st.get("slabs_moved"))
    assert int(st["slabs_moved"]) > 0


@pytest.mark.tac_only
def test_free_pages_return_to_the_pool_and_live_items_are_rescued(server):
    """memcached's free rule (slabs-reassign2.t): a class left with pages' worth of free
    chunks gives pages back to the global pool within seconds, its live items are moved
    into free chunks of their class (rescued, not evicted, every value intact), and
    total_malloced still counts the pooled pages."""
    s = server(["-m", "60", "-t", "2"])
    c = s.connect(timeout=30)
    size, n = 11000, 5000
    vals = {i: (b"%d|" % i).ljust(size, b"abcdefgh"[i % 8:i % 8 + 1]) for i in range(n)}
    for b0 in range(0, n, 100):
        batch = range(b0, min(n, b0 + 100))
        c.send(b"".join(b"set nfoo%d 0 0 %d noreply\r\n%s\r\n" % (i, size, vals[i])
                        for i in batch))
    st = c.stats()
    assert int(st["curr_items"]) > 4000, st["curr_items"]
    malloced = int(c.stats(b"slabs")["total_malloced"])
    live = [i for i in range(n) if c.get(b"get nfoo%d\r\n" % i) != b"END\r\n"]
    for i in live:
        if i % 2 == 0:
            assert c.line(b"delete nfoo%d\r\n" % i) == b"DELETED\r\n"
    kept = [i for i in live if i % 2 == 1]
    evictions = int(c.stats()["evictions"])
    deadline = time.time() + 20
    while int(c.stats()["slab_global_page_pool"]) <= 20:
        assert time.time() < deadline, c.stats()["slab_global_page_pool"]
        time.sleep(0.2)
    st = c.stats()
    assert int(st["slab_reassign_rescues"]) > 0
    assert st["evictions"] == str(evictions), "a page given back evicted live items"
    assert int(c.stats(b"slabs")["total_malloced"]) == malloced
    for i in kept:
        want = b"VALUE nfoo%d 0 %d\r\n%s\r\nEND\r\n" % (i, size, vals[i])
        assert c.get(b"get nfoo%d\r\n" % i) == want, i


@pytest.mark.tac_only
def test_small_m_over_many_sizes_becomes_an_index(server, ssd_dir, nvm_file):  # noqa: F811 (fixtures)
    """-m 16 with values of every size from 100 B to 4 KB: each of some 16
    slab classes takes its one page and -m is spent.  Meta tuples must still
    grow: the data class whose one page holds the fewest items gives it to
    their class (its items move down), so DRAM becomes mostly an index of
    the lower tiers.  Every set is stored and every value comes back exact.
    (Before, the meta tuples' class could never get a page there: the load
    stalled at about 37,600 keys of 120,000, each store waiting for room.)"""
    srv = ssd_server(server, ssd_dir, "512m", mem=16, nvm=nvm_file() + ":32m")
    rnd = random.Random(7)
    sizes = {b"ix%06d" % i: rnd.randint(100, 4096) for i in range(120000)}
    c = srv.connect()
    stored, failures, _ = load(c, ((k, make_value(k, 1, n)) for k, n in sizes.items()))
    st = {**c.stats(), **c.stats(b"tiers")}
    assert not failures, "sets refused: %r; %r" % (list(failures.items())[:3], st)
    assert int(st["meta_tuples"]) > 90000, st
    assert int(st["dram_page_moves_reserve"]) > 0, st
    keys = list(sizes)
    hits, misses, wrong = read_check(srv.connect(), keys, lambda k: (0, make_value(k, 1, sizes[k])))
    assert not wrong, wrong[:3]
    assert not misses, "%d keys missing: %r" % (len(misses), misses[:3])
