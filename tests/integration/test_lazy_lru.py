"""Lazy LRU (lazy_lru.h): bump rings, LRU threads, second chance, NVM admission.

Every item carries an access field (readCount, time).  A read applies
readCount = min(readCount / (now - time + 1) + 1, 2 * THR_hot), and moves
the item to its LRU head only when that raises its temperature class
(defaults THR_hot 4, THR_warm 1: one read leaves a fresh item cold, a second
read within the same second makes it warm).  Workers never take an LRU
lock: they queue the item on their own ring and the LRU thread relinks it.
Meta tuples are on no LRU: NVM ages by a CLOCK over its slots, which spares
a tuple read since the hand last passed it.  A relink sets the item's time (its
last access), so `me <key>` shows a small `la` afterwards, while a read
that does not move the item leaves `la` alone: the tests let `la` grow to 2
or more, read, and watch both `la` and the general `stats` counters
lru_bumps_queued / lru_bumps_dropped / lru_bumps / lru_second_chances.

At the cold end of an LRU an item read since it was linked gets a second
chance (back to the head) instead of being evicted or moved down.  With an
NVM and an SSD tier, -o nvm_admission=obp:PCT sends cold items to SSD while
NVM is full and churning (`stats tiers`: nvm_admission_refused,
evict_cold_to_ssd).

The sampler is off where thresholds matter (-o temp_sample_interval=0), so
the defaults hold.  Timing: every wait for the server is a poll with a
deadline; the few fixed sleeps only give the server room to act (wrongly,
or once more), so a slow (sanitizer) build makes them no less true.
"""
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid

import pytest
from pymemcache.client.base import Client

from mcserver import (IS_STOCK, SERVER_BIN, base_args, free_port, remove_tier_file,
                      thread_switches, wait_until)

pytestmark = [pytest.mark.tac_only,
              pytest.mark.skipif(IS_STOCK, reason="tac-only behaviour; TAC_SERVER is stock memcached")]

LRU_COUNTERS = ("lru_bumps_queued", "lru_bumps_dropped", "lru_bumps", "lru_second_chances")


# ---------------------------------------------------------------- helpers

def value_of(i):
    return (b"%07d|" % i) * 125          # 1000 bytes, different per key


def stats(c, sub=b""):
    raw = c.stats(sub) if sub else {**c.stats(), **c.stats("tac")}  # `stats tac`: Lazy LRU
    return {k.decode(): (v.decode() if isinstance(v, bytes) else v) for k, v in raw.items()}


def counter(st, name):
    assert name in st, "stats output has no %s (its lru lines: %s)" % (
        name, sorted(k for k in st if "lru" in k))
    return int(st[name])


def lru_counters(c):
    st = stats(c)
    return {n: counter(st, n) for n in LRU_COUNTERS}


def meta(sock, key):
    """`me <key>` as a dict of its fields (la, tier, ...); None if absent."""
    sock.sendall(b"me " + key + b"\r\n")
    buf = b""
    deadline = time.time() + 10
    while not buf.endswith(b"\r\n"):
        assert time.time() < deadline, "no answer to me %r: %r" % (key, buf)
        chunk = sock.recv(4096)
        assert chunk, "connection closed during me %r" % key
        buf += chunk
    if buf.startswith(b"EN"):
        return None
    assert buf.startswith(b"ME " + key + b" "), buf
    return {m.group(1).decode(): m.group(2).decode()
            for m in re.finditer(rb"(\w+)=(\S+)", buf)}


def load(c, keys):
    for j in range(0, len(keys), 100):
        batch = {k: value_of(int(k[1:])) for k in keys[j:j + 100]}
        failed = c.set_many(batch, noreply=False)
        assert not failed, "sets refused: %r" % failed[:5]


def check_exact(c, keys):
    """Returns the keys present; asserts that each one's value is exact."""
    present = []
    for j in range(0, len(keys), 100):
        got = c.get_many(keys[j:j + 100])
        for k, v in got.items():
            assert v == value_of(int(k[1:])), "wrong value for %r: %r" % (k, v[:40])
            present.append(k)
    return present


OLD_LA = 2        # `la` an item reaches before the reads; below it = relinked


def wait_old(s, keys, seconds=10):
    assert wait_until(lambda: all(int(meta(s, k)["la"]) >= OLD_LA for k in keys), seconds), \
        [meta(s, k) for k in keys]


def relinked(s, k):
    return int(meta(s, k)["la"]) < OLD_LA


def bump_until_relinked(c, s, keys, seconds=10):
    """Reads every key twice more (warm: a move), then waits until `me`
    shows each relinked (its time reset, so `la` < OLD_LA); a key whose
    reads straddled a second boundary is read once more (its readCount
    then rises on the next read).  Returns the keys never relinked."""
    for k in keys:
        for _ in range(2):
            assert c.get(k) == value_of(int(k[1:]))
    pending = list(keys)
    deadline = time.time() + seconds
    next_read = time.time() + 0.5
    while pending and time.time() < deadline:
        pending = [k for k in pending if not relinked(s, k)]
        if pending and time.time() > next_read:
            for k in pending:
                assert c.get(k) == value_of(int(k[1:]))
            next_read = time.time() + 0.5
        time.sleep(0.05)
    return pending


@pytest.fixture
def dirs():
    """An SSD directory (on a file system that takes O_DIRECT: $TAC_SSD_DIR or
    the temp dir) and a unique NVM path under /dev/shm; both removed."""
    d = tempfile.mkdtemp(prefix="tac-llru-", dir=os.environ.get("TAC_SSD_DIR") or None)
    nvm = "/dev/shm/tac-llru-%d-%s" % (os.getpid(), uuid.uuid4().hex[:10])
    yield d, nvm
    shutil.rmtree(d, ignore_errors=True)
    remove_tier_file(nvm)


# ---------------------------------------------------------------- DRAM lane

def test_warm_read_is_queued_and_relinked(server):
    """One read leaves a fresh item where it is; the read that makes it warm
    queues it on the worker's ring and the DRAM LRU thread relinks it."""
    srv = server(["-m", "64", "-o", "temp_sample_interval=0"])
    c = Client(srv.addr, timeout=10)
    s = socket.create_connection((srv.host, srv.port), timeout=10)
    keys = [b"d%06d" % i for i in range(300)]
    load(c, keys)
    picks = keys[10:300:50]                                  # 6 keys
    wait_old(s, picks)          # la counts seconds since the item's time
    for k in picks:                                          # read 1: 0 -> 1, cold
        assert c.get(k) == value_of(int(k[1:]))
    time.sleep(0.3)                                          # room for a (wrong) relink
    unmoved = [k for k in picks if relinked(s, k)]
    queued_after_cold_reads = stats(c).get("lru_bumps_queued")
    # Reads 2 and 3: 1 -> 2 -> 3, warm: each moves once.
    never = bump_until_relinked(c, s, picks)
    assert not unmoved, "a single (cold) read relinked %r" % unmoved
    assert not never, "warm items never relinked: %r" % [meta(s, k) for k in never]
    # The counters (polled: the LRU thread counts after relinking).
    assert queued_after_cold_reads is not None, "stats output has no lru_bumps_queued"
    assert int(queued_after_cold_reads) == 0, "cold reads were queued"
    last = {}

    def settled():
        last.update(lru_counters(c))
        return last["lru_bumps"] >= len(picks)
    assert wait_until(settled, 10), last
    assert last["lru_bumps_queued"] >= last["lru_bumps"] > 0, last
    assert last["lru_bumps_dropped"] == 0, last
    # Each pick moved once (warm), plus at most a few extra if a read
    # straddled a second boundary; nothing else was read.
    assert last["lru_bumps_queued"] <= 3 * len(picks), last
    for k in picks:
        assert c.get(k) == value_of(int(k[1:]))


def test_lru_thread_sleeps_while_moves_trickle_in(server):
    """The DRAM LRU thread wakes when a worker's ring fills to a quarter or
    every 10 ms, not once per few queued moves: with moves queued all the
    time, it wakes no more than about 100 times a second plus one wake per
    256 moves.  (It used to nap 200 us after every batch it found: thousands
    of wake-ups a second, each one taken from the workers' core.)"""
    srv = server(["-m", "64", "-o", "temp_sample_interval=0"])
    c = Client(srv.addr, timeout=10)
    keys = [b"d%06d" % i for i in range(6000)]
    load(c, keys)
    before = lru_counters(c)
    woke0 = thread_switches(srv.proc.pid, "tac-lru-dram")
    t0 = time.time()
    rounds = 0
    while time.time() - t0 < 3.0:
        # Two reads of a key within a second make it warm: one queued move
        # per two requests, a steady trickle over the whole window.
        for k in keys[(rounds * 500) % len(keys):][:500]:
            for _ in range(2):
                assert c.get(k) == value_of(int(k[1:])), "wrong value for %r" % k
        rounds += 1
    span = time.time() - t0
    woke = thread_switches(srv.proc.pid, "tac-lru-dram") - woke0
    after = lru_counters(c)
    queued = after["lru_bumps_queued"] - before["lru_bumps_queued"]
    assert queued >= 2000, "too few moves queued to judge (%d in %d rounds)" % (queued, rounds)
    bound = 150 * span + queued / 100
    print("lru thread woke %d times in %.1f s, %d moves queued" % (woke, span, queued))
    assert woke <= bound, "the LRU thread woke %d times in %.1f s for %d queued moves " \
        "(bound %.0f)" % (woke, span, queued, bound)
    # The moves were made, not lost.
    last = {}

    def applied():
        last.update(lru_counters(c))
        return last["lru_bumps"] - before["lru_bumps"] >= queued - (
            last["lru_bumps_dropped"] - before["lru_bumps_dropped"])
    assert wait_until(applied, 10), (before, last)


def test_second_chance_keeps_read_items(server):
    """DRAM only: at the LRU tail, items read since they were linked go back
    to the head; unread items of the same age are evicted."""
    srv = server(["-m", "8", "-o", "temp_sample_interval=0"])
    c = Client(srv.addr, timeout=10)
    n = 6000                                  # ~6.6 MB of 1000 B items: -m 8 nearly full
    old = [b"o%06d" % i for i in range(n)]
    load(c, old)
    st = stats(c)
    assert int(st["evictions"]) == 0, "precondition: the first load fits (%s)" % st["evictions"]
    assert int(st["curr_items"]) == n
    oldest = old[:n // 5]                     # the oldest 20 %: every other key is read once
    read, unread = oldest[0::2], oldest[1::2]
    assert len(check_exact(c, read)) == len(read)
    new = [b"n%06d" % i for i in range(n)]    # as many again: the oldest must go
    load(c, new)
    st = stats(c)
    assert int(st["evictions"]) > 0, st
    read_alive = len(check_exact(c, read))
    unread_alive = len(check_exact(c, unread))
    msg = "read survivors %d/%d, unread survivors %d/%d, evictions %s" % (
        read_alive, len(read), unread_alive, len(unread), st["evictions"])
    assert read_alive >= len(read) // 2, msg
    assert read_alive >= 2 * unread_alive and read_alive > unread_alive, msg
    # Newest items are all there (the spared ones did not push them out).
    assert len(check_exact(c, new[-1000:])) == 1000
    st = stats(c)
    assert counter(st, "lru_second_chances") > 0, msg


# ---------------------------------------------------------------- NVM CLOCK

def tiers(c):
    return stats(c, b"tiers")


def test_nvm_clock_spares_read_items(server, dirs):
    """NVM meta tuples are on no LRU: a CLOCK hand per NVM slot class walks
    the slots and moves what it passes down to SSD, except a tuple read since
    the hand last passed it, which gets one more lap.  NVM tuples read once
    (a cold read: no move up, no relink) stay in NVM while NVM turns over;
    as old unread ones go to SSD.  Every value stays exact."""
    d, nvm = dirs
    srv = server(["-m", "8", "-o", "nvm_path=%s:32m,ssd_path=%s/ssd:256m,"
                  "temp_sample_interval=0" % (nvm, d)])
    c = Client(srv.addr, timeout=20)
    s = socket.create_connection((srv.host, srv.port), timeout=10)
    first = [b"k%06d" % i for i in range(30000)]            # ~30 MB: DRAM and most of NVM
    load(c, first)
    in_nvm = [k for k in first[:12000:10] if (meta(s, k) or {}).get("tier") == "nvm"]
    assert len(in_nvm) >= 200, "precondition: old keys in NVM (%d)" % len(in_nvm)
    read, unread = in_nvm[0::2], in_nvm[1::2]
    assert len(check_exact(c, read)) == len(read)          # one read each: cold, stays put
    st0 = tiers(c)
    second = [b"k%06d" % i for i in range(30000, 60000)]    # as many again: NVM turns over
    load(c, second)
    st = tiers(c)

    def share_in_nvm(keys):
        return sum(1 for k in keys if (meta(s, k) or {}).get("tier") == "nvm") / len(keys)
    kept_read, kept_unread = share_in_nvm(read), share_in_nvm(unread)
    passed = int(st["nvm_clock_passed"]) - int(st0["nvm_clock_passed"])
    spared = int(st["nvm_clock_spared"]) - int(st0["nvm_clock_spared"])
    down = int(st["evict_nvm_to_ssd"]) - int(st0["evict_nvm_to_ssd"])
    msg = ("read kept in NVM %.2f, unread %.2f; hand passed %d slots, spared %d, "
           "moved %d down, laps %s" % (kept_read, kept_unread, passed, spared, down,
                                       st["nvm_clock_laps"]))
    print(msg)
    assert down > 5000, msg                                 # NVM did turn over
    assert spared >= len(read) // 2, msg
    assert kept_read >= 0.25 and kept_read >= 4 * kept_unread, msg
    assert int(st["nvm_clock_laps"]) >= 1, msg
    # Nothing was lost on the way: SSD holds what NVM let go.
    assert len(check_exact(c, read + unread)) == len(read) + len(unread), msg
    assert len(check_exact(c, second[-2000:])) == 2000


# ---------------------------------------------------------------- NVM admission

def load_tiers(server, d, nvm, admission, extra=""):
    srv = server(["-m", "16", "-o", "nvm_path=%s:16m,ssd_path=%s/ssd:128m,nvm_admission=%s%s"
                  % (nvm, d, admission, extra)])
    c = Client(srv.addr, timeout=20)
    keys = [b"a%06d" % i for i in range(90000)]           # ~3x DRAM + NVM, no reads
    # The policy decides at most once a (server) second: let one pass after
    # NVM is surely full (at a third of the load), so a fast load cannot end
    # before the first decision made with a full NVM.
    load(c, keys[:45000])
    time.sleep(1.1)
    load(c, keys[45000:])
    return c, keys


def assert_all_exact(c, keys):
    present = set(check_exact(c, keys))
    missing = [k for k in keys if k not in present]
    assert not missing, "%d keys lost, e.g. %r" % (len(missing), missing[:5])


ADMISSION_FIELDS = ("nvm_inserts", "nvm_removals", "nvm_admission_refused", "evict_cold_to_ssd",
                    "evict_dram_to_nvm", "evict_dram_to_ssd", "evict_nvm_to_ssd", "set_fallback_ssd",
                    "get_hits_nvm", "nvm_bytes", "nvm_capacity")


@pytest.mark.parametrize("watermark", ["default", "1m"])
def test_obp_admission_sends_cold_items_to_ssd(server, dirs, watermark):
    """obp:0 refuses NVM to cold items once NVM is full and churns at all
    (no reads here, so any churn exceeds 0 % of the lookups).  `1m` sets
    nvm_free_watermark explicitly; `default` keeps 1 % of the NVM size."""
    d, nvm = dirs
    extra = "" if watermark == "default" else ",nvm_free_watermark=" + watermark
    c, keys = load_tiers(server, d, nvm, "obp:0", extra)
    settings = stats(c, b"settings")
    assert settings["nvm_admission"] == "obp:0", settings.get("nvm_admission")
    st = stats(c, b"tiers")
    info = " ".join("%s=%s" % (f, st.get(f)) for f in ADMISSION_FIELDS) + \
        " nvm_free_watermark_bytes=%s" % settings.get("nvm_free_watermark_bytes")
    assert int(st["nvm_inserts"]) > 0, info                 # NVM filled first
    assert int(st["nvm_admission_refused"]) > 0, info
    assert int(st["evict_cold_to_ssd"]) + int(st["set_fallback_ssd"]) > 0, info
    assert_all_exact(c, keys)


def test_always_admission_never_refuses(server, dirs):
    d, nvm = dirs
    c, keys = load_tiers(server, d, nvm, "always")
    assert stats(c, b"settings")["nvm_admission"] == "always"
    st = stats(c, b"tiers")
    info = " ".join("%s=%s" % (f, st.get(f)) for f in ADMISSION_FIELDS)
    assert int(st["nvm_inserts"]) > 0 and int(st["evict_nvm_to_ssd"]) > 0, info
    assert int(st["nvm_admission_refused"]) == 0, info
    assert int(st["evict_cold_to_ssd"]) == 0, info
    assert_all_exact(c, keys)


@pytest.mark.parametrize("value", ["obp:x", "sometimes", "obp:", "obp:-1"])
def test_bad_admission_is_refused(value):
    p = subprocess.run([SERVER_BIN] + base_args() + ["-l", "127.0.0.1", "-p", str(free_port()), "-U", "0",
                                                      "-o", "nvm_admission=" + value],
                       capture_output=True, timeout=30)
    assert p.returncode != 0, (p.returncode, p.stderr[-500:])
    assert b"nvm_admission" in p.stderr + p.stdout, p.stderr[-500:]
