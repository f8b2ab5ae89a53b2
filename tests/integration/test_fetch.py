"""Fetch threads move hot items back up (TaC 4.2, hybrid swapping).

With -o fetch_threads, an NVM item read often enough to be hot is copied
back to DRAM, and a hot SSD item brings its buf up: the item moves to DRAM
(warm ones to NVM).  The item keeps its value, flags and CAS.  The default
thresholds are used (THR_hot 4: five reads in quick succession make an
item hot), so the sampler is off here.
"""
import os
import re
import shutil
import socket
import tempfile
import time

import pytest
from pymemcache.client.base import Client

from mcserver import IS_STOCK, remove_tier_file

pytestmark = [pytest.mark.tac_only,
              pytest.mark.skipif(IS_STOCK, reason="tac-only behaviour; TAC_SERVER is stock memcached")]


def value_of(i):
    return (b"%06d:" % i) * 500      # 3500 bytes, different per key


def tier_of(sock, key):
    sock.sendall(b"me " + key + b"\r\n")
    buf = b""
    while not buf.endswith(b"\r\n"):
        buf += sock.recv(4096)
    m = re.search(rb"tier=(\w+)", buf)
    return m.group(1).decode() if m else None


@pytest.fixture
def dirs():
    d = tempfile.mkdtemp(prefix="tac-fetch-", dir=os.environ.get("TAC_SSD_DIR") or None)
    nvm = "/dev/shm/tac-fetch-%d-%s" % (os.getpid(), os.path.basename(d))
    yield d, nvm
    shutil.rmtree(d, ignore_errors=True)
    remove_tier_file(nvm)


def test_hot_items_come_back_to_dram(server, dirs):
    d, nvm = dirs
    srv = server(["-m", "16", "-o", "nvm_path=%s:24m,ssd_path=%s/ssd:256m,fetch_threads=1,"
                                    "temp_sample_interval=0" % (nvm, d)])
    c = Client(srv.addr, timeout=10)
    s = socket.create_connection((srv.host, srv.port))
    n = 24000                                            # ~84 MB: DRAM, NVM and SSD
    for i in range(n):
        c.set(b"k%05d" % i, value_of(i), flags=i % 7)
    where = {}
    for i in range(0, n, 97):
        where.setdefault(tier_of(s, b"k%05d" % i), []).append(i)
    assert where.get("ssd") and where.get("nvm"), {t: len(v) for t, v in where.items()}
    picks = {"ssd": where["ssd"][:3], "nvm": where["nvm"][:3]}
    for tier, idx in picks.items():
        for i in idx:
            key = b"k%05d" % i
            cas0 = c.gets(key)[1]
            deadline = time.time() + 10
            while time.time() < deadline:
                for _ in range(8):                       # hot: readCount > 4
                    v = c.get(key)
                    assert v == value_of(i), "wrong value for %r while it is being fetched" % key
                if tier_of(s, key) == "dram":
                    break
                time.sleep(0.05)
            assert tier_of(s, key) == "dram", "hot %s item %r did not come up" % (tier, key)
            got, cas1 = c.gets(key)
            assert got == value_of(i) and cas1 == cas0, "the fetch changed the item"
            assert c.get_many([key])[key] == value_of(i)
    st = {k.decode(): v for k, v in c.stats(b"tiers").items()}
    # Six items came up, each in at least one move.  An SSD item may come
    # up in one step or through NVM (warm first), and a slow run may see an
    # NVM pick pushed down to SSD before its fetch: count the moves together.
    assert st["fetch_nvm_to_dram"] + st["fetch_ssd_to_dram"] + st["fetch_ssd_to_nvm"] >= 6, st
    # A buf comes up whole only when it is warm itself: a second warm read
    # of one of its tuples within 2 s.  Neighbours in load order were
    # evicted together, so most share a buf: read a run of them, from the
    # middle of the SSD's keys (past the last one sampled, NVM's may begin).
    first = where["ssd"][len(where["ssd"]) // 2]
    run = [i for i in range(first, min(n, first + 40)) if tier_of(s, b"k%05d" % i) == "ssd"]
    assert len(run) >= 10, "only %d of keys %d.. are on SSD" % (len(run), first)
    for _ in range(3):
        for i in run:
            assert c.get(b"k%05d" % i) == value_of(i)
        time.sleep(0.2)
    st = {k.decode(): v for k, v in c.stats(b"tiers").items()}
    assert st["fetch_ssd_bufs"] >= 1, st
    # Everything is still there and exact (nothing was lost in the moves).
    keys = [b"k%05d" % i for i in range(n)]
    for j in range(0, n, 100):
        got = c.get_many(keys[j:j + 100])
        for k in keys[j:j + 100]:
            assert got.get(k) == value_of(int(k[1:])), k


def test_fetchers_default_to_the_worker_count(server, dirs):
    d, nvm = dirs
    srv = server(["-m", "16", "-t", "3", "-o", "ssd_path=%s/ssd:64m" % d])
    c = Client(srv.addr, timeout=10)
    st = c.stats(b"settings")
    assert int(st[b"fetch_threads"]) == 3
    srv = server(["-m", "16", "-o", "ssd_path=%s/ssd2:64m,fetch_threads=0" % d])
    c = Client(srv.addr, timeout=10)
    assert int(c.stats(b"settings")[b"fetch_threads"]) == 0


def load_and_find(c, s, n):
    for i in range(n):
        c.set(b"k%05d" % i, value_of(i))
    where = {}
    for i in range(0, n, 97):
        where.setdefault(tier_of(s, b"k%05d" % i), []).append(i)
    return where


def wait_tier(s, key, tier, c=None, reads=1, seconds=5):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if c is not None:
            for _ in range(reads):
                c.get(key)
        if tier_of(s, key) == tier:
            return True
        time.sleep(0.05)
    return False


def test_policy_anti2_treats_nvm_as_memory(server, dirs):
    """anti2: NVM is more DRAM.  A read NVM item stays where it is (no
    temperatures, no NVM -> DRAM move); a read SSD item, even a cold one,
    comes back up into memory (DRAM or NVM), alone, not with its buf."""
    d, nvm = dirs
    srv = server(["-m", "16", "-o", "nvm_path=%s:24m,ssd_path=%s/ssd:256m,fetch_threads=1,"
                                    "temp_sample_interval=0,tier_policy=anti2" % (nvm, d)])
    c = Client(srv.addr, timeout=10)
    s = socket.create_connection((srv.host, srv.port))
    assert c.stats(b"settings")[b"tier_policy"] == b"anti2"
    where = load_and_find(c, s, 24000)
    assert where.get("ssd") and where.get("nvm")
    i = where["nvm"][-1]                                 # the newest: last to leave NVM
    key = b"k%05d" % i
    for _ in range(20):                                  # hot by any threshold
        assert c.get(key) == value_of(i)
    time.sleep(1)
    assert tier_of(s, key) == "nvm"
    i = where["ssd"][0]
    key = b"k%05d" % i
    assert c.get(key) == value_of(i)                     # one read: cold, yet it moves
    deadline = time.time() + 10
    while tier_of(s, key) == "ssd" and time.time() < deadline:
        time.sleep(0.05)
        c.get(key)         # a fetch that found no room gives up until the next read
    assert tier_of(s, key) in ("dram", "nvm"), "anti2: a read SSD item did not come up"
    assert c.get(key) == value_of(i)
    st = c.stats(b"tiers")
    assert st[b"fetch_ssd_bufs"] == 0                    # the item alone, not its buf
    assert st[b"fetch_nvm_to_dram"] == 0


@pytest.mark.parametrize("policy", ["tac", "anti2"])
def test_sets_land_by_policy(server, dirs, policy):
    """With room everywhere, tac puts every new item in DRAM; anti2 treats
    DRAM and NVM as one memory and puts each one in NVM with probability
    NVM / (DRAM + NVM) by size: 48 / (16 + 48) = 75% here."""
    d, nvm = dirs
    srv = server(["-m", "16", "-o", "nvm_path=%s:48m,tier_policy=%s" % (nvm, policy)])
    c = Client(srv.addr, timeout=10)
    s = socket.create_connection((srv.host, srv.port))
    n = 1000                                             # ~3.5 MB: fits DRAM
    for i in range(n):                                   # acknowledged before `me` looks
        assert c.set(b"k%05d" % i, value_of(i), flags=i % 7, noreply=False)
    tiers = [tier_of(s, b"k%05d" % i) for i in range(n)]
    in_nvm = tiers.count("nvm")
    assert tiers.count("dram") + in_nvm == n, set(tiers)
    if policy == "tac":
        assert in_nvm == 0
    else:
        assert 650 <= in_nvm <= 850, in_nvm           # 750 +- 5.8 sigma
    for i in range(0, n, 7):                             # NVM items read back whole
        assert c.get(b"k%05d" % i) == value_of(i)


def test_policy_antituple_moves_only_the_tuple(server, dirs):
    d, nvm = dirs
    srv = server(["-m", "16", "-o", "ssd_path=%s/ssd:256m,fetch_threads=1,"
                                    "temp_sample_interval=0,tier_policy=antituple" % d])
    c = Client(srv.addr, timeout=10)
    s = socket.create_connection((srv.host, srv.port))
    where = load_and_find(c, s, 24000)
    i = where["ssd"][0]
    key = b"k%05d" % i
    assert wait_tier(s, key, "dram", c=c, reads=8, seconds=10), \
        "antituple: a hot SSD item did not come up"
    assert c.get(key) == value_of(i)
    st = c.stats(b"tiers")
    assert st[b"fetch_ssd_bufs"] == 0 and st[b"fetch_ssd_to_dram"] >= 1, st


def test_policy_twotier_leaves_nvm_out(server, dirs):
    d, nvm = dirs
    srv = server(["-m", "16", "-o", "nvm_path=%s:24m,ssd_path=%s/ssd:64m,tier_policy=twotier"
                                    % (nvm, d)])
    c = Client(srv.addr, timeout=10)
    assert c.stats(b"tiers")[b"tiers"] == b"dram,ssd"
    assert c.stats(b"settings")[b"tier_policy"] == b"twotier"
    assert "not used" in srv.stderr_text()
    assert not os.path.exists(nvm)


def test_bad_policy_is_refused():
    from mcserver import SERVER_BIN, base_args, free_port
    import subprocess
    p = subprocess.run([SERVER_BIN] + base_args() + ["-p", str(free_port()), "-U", "0",
                                                      "-o", "tier_policy=lru2"],
                       capture_output=True, timeout=15)
    assert p.returncode != 0 and b"tier_policy=lru2" in p.stderr


def test_moves_up_use_the_readers_copy(server, dirs):
    """A read that finds an item warm or hot hands the copy of the value it
    just made to the fetcher, which moves that copy up instead of reading
    the tier again: every SSD read is a get's own (ssd_reads grows with
    get_hits_ssd alone), and each move counts in fetch_copies_used.  The
    items keep their values, flags and CAS.  With tier_policy=antituple no
    read brings a whole buf up: the reads that warm a key here would make
    its buf warm under tac (two warm reads of one buf within 2 s), and the
    NVM CLOCK sends keys to SSD in slot order, so two keys may share a buf."""
    d, nvm = dirs
    srv = server(["-m", "16", "-o", "nvm_path=%s:24m,ssd_path=%s/ssd:256m,fetch_threads=1,"
                                    "temp_sample_interval=0,tier_policy=antituple" % (nvm, d)])
    c = Client(srv.addr, timeout=10)
    s = socket.create_connection((srv.host, srv.port))
    where = load_and_find(c, s, 24000)
    # A warm read moves its own tuple, never its buf.
    ssd_keys = [i for i in where.get("ssd", []) if i % 485 == 0][:4]
    nvm_keys = where.get("nvm", [])[:2]
    assert len(ssd_keys) >= 2 and nvm_keys, {t: len(v) for t, v in where.items()}

    def tiers():
        return {k.decode(): v for k, v in c.stats(b"tiers").items() if isinstance(v, int)}

    before = tiers()
    for i in ssd_keys + nvm_keys:
        key = b"k%05d" % i
        cas0 = c.gets(key)[1]
        deadline = time.time() + 10
        while tier_of(s, key) not in ("dram",) and time.time() < deadline:
            assert c.get(key) == value_of(i), "wrong value for %r while it moves up" % key
            time.sleep(0.02)
        assert tier_of(s, key) == "dram", "hot item %r did not come up to DRAM" % key
        got, cas1 = c.gets(key)
        assert got == value_of(i) and cas1 == cas0, "the move changed %r" % key
    after = tiers()
    d_reads = after["ssd_reads"] - before["ssd_reads"]
    d_hits = after["get_hits_ssd"] - before["get_hits_ssd"]
    moves = sum(after[k] - before[k] for k in ("fetch_nvm_to_dram", "fetch_ssd_to_dram", "fetch_ssd_to_nvm"))
    print("SSD reads %d for %d SSD hits; moves up %d, from the reader's copy %d; whole bufs %d"
          % (d_reads, d_hits, moves, after["fetch_copies_used"] - before["fetch_copies_used"],
             after["fetch_ssd_bufs"] - before["fetch_ssd_bufs"]))
    assert after["fetch_ssd_bufs"] == before["fetch_ssd_bufs"], "a lone read brought its buf up"
    assert d_hits >= len(ssd_keys) and d_reads == d_hits, \
        "%d SSD reads for %d SSD hits: a move up read the SSD again" % (d_reads, d_hits)
    assert moves >= len(ssd_keys) + len(nvm_keys)
    assert after["fetch_copies_used"] - before["fetch_copies_used"] == moves, (before, after)
