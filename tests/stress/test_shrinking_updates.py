"""Updates that shrink values, on three tiers: every size change finds room.

The shape of YCSB's own memcached binding (issue #36): a load of ~1.1 KB
values past DRAM + NVM, then Zipf reads and `replace`s whose values hold one
~100 B field, so every update needs a chunk of a small DRAM class and a slot
of a small NVM class, classes the load gave (almost) no pages.  On 3db0996
the small classes found no room and no path down served them: updates
waited out store_wait_ms and were refused (`SERVER_ERROR out of memory`),
a few hundred operations a second.

THREADS client threads; the last SHARING of them use connections two
threads share (one batch of BATCH requests at a time under the
connection's lock, as a client library multiplexes its callers).  Each
thread does OPS operations: half `get` of a Zipf-chosen key (YCSB's
zipfian constant, ranks scattered over the keys), half `replace` of one
with a ~110 B value.
Every value read is verified (its key and checksum).  Pass or fail comes
from counters, never from timing: every replace answers STORED, every get
finds its key (the tiers hold every byte loaded), store_wait_timeouts stays
0, and every thread finishes its operations before a generous deadline
(each refused update costs store_wait_ms, so a stall cannot finish).
On 3db0996 it fails: 204 store_wait_timeouts, 75,200 of 200,000
operations done when the deadline passed; with the fix they all run in
about 6 s (13 s with the machine busy, 20 s under ASan).

Seed: STRESS_SEED (printed).
"""
import os
import random
import threading
import time
import zlib
from itertools import accumulate

import pytest

from mcserver import IS_STOCK, remove_tier_file
from test_stress_tiers import Raw

pytestmark = [pytest.mark.tac_only,
              pytest.mark.skipif(IS_STOCK, reason="tac-only behaviour; TAC_SERVER is stock memcached")]

KEYS = 50000        # ~57 MB of 1.1 KB values: past -m 16 + NVM 40 MB
BIG = 1100          # the loaded value size
SMALL = 110         # the updated value size
THREADS = 8
SHARING = 4         # threads 4..7 share two connections
OPS = 25000         # per thread
BATCH = 16          # requests sent at once per turn on a connection
DEADLINE = 60.0     # seconds for the run phase; a stalled run cannot meet it
ZIPF = 0.99


def make_value(key, ver, size, rnd):
    head = b"%s|%d|" % (key, ver)
    pad = (b"%016x" % rnd.getrandbits(64)) * (size // 16 + 1)
    pad = pad[:max(1, size - len(head) - 9)]
    return head + b"%08x|" % zlib.crc32(head + pad) + pad


def check_value(key, raw):
    parts = raw.split(b"|", 3)
    if len(parts) != 4 or parts[0] != key:
        return "value of %r malformed: %r" % (key, raw[:80])
    head = parts[0] + b"|" + parts[1] + b"|"
    if int(parts[2], 16) != zlib.crc32(head + parts[3]):
        return "value of %r fails its checksum: %r" % (key, raw[:80])
    return None


class Conn(Raw):
    """test_stress_tiers' client, with a lock for threads sharing it."""

    def __init__(self, port):
        super().__init__(port)
        self.lock = threading.Lock()

    def read_get(self, key):
        val = None
        while True:
            ln = self.line()
            if ln == b"END":
                return val
            p = ln.split(b" ")
            if p[0] != b"VALUE" or p[1] != key:
                raise AssertionError("bad get reply for %r: %r" % (key, ln[:100]))
            data = self.exact(int(p[3]) + 2)
            val = data[:-2]



def key_of(i):
    return b"user%019d" % (i * 2654435761 % (1 << 61))


def load(port, rnd):
    c = Conn(port)
    batch = 200
    for start in range(0, KEYS, batch):
        keys = range(start, min(KEYS, start + batch))
        c.sock.sendall(b"".join(_set_cmd(i, rnd) for i in keys))
        for i in keys:
            r = c.line()
            assert r == b"STORED", "load of %r answered %r" % (key_of(i), r)
    return c


def _set_cmd(i, rnd):
    v = make_value(key_of(i), 0, BIG, rnd)
    return b"set %s 0 0 %d\r\n%s\r\n" % (key_of(i), len(v), v)


@pytest.fixture
def dirs(tmp_path):
    nvm = "/dev/shm/tac-shrink-%d.nvm" % os.getpid()
    remove_tier_file(nvm)
    yield nvm, str(tmp_path / "ssd")
    remove_tier_file(nvm)


def test_shrinking_updates_find_room(server, dirs):
    nvm, ssd = dirs
    seed = int(os.environ.get("STRESS_SEED", random.randrange(1 << 30)))
    print("STRESS_SEED=%d" % seed)
    rnd = random.Random(seed)
    srv = server(["-t", "2", "-m", "16", "-o",
                  "nvm_path=%s:40m,ssd_path=%s:256m" % (nvm, ssd)])
    ctl = load(srv.port, rnd)
    before = ctl.stats(b"tiers")
    assert int(before["evict_nvm_to_ssd"]) + int(before["set_fallback_ssd"]) + \
        int(before["evict_dram_to_ssd"]) > 0, "the load did not reach the SSD: %r" % before

    # YCSB's zipfian: rank r drawn with weight 1 / r^0.99, ranks scattered
    # over the key space.
    cum = list(accumulate(1.0 / (r + 1) ** ZIPF for r in range(KEYS)))
    perm = list(range(KEYS))
    rnd.shuffle(perm)
    conns = [Conn(srv.port) for _ in range(THREADS - SHARING)] + \
        [Conn(srv.port) for _ in range(SHARING // 2)]
    lock = threading.Lock()
    res = {"ops": [0] * THREADS, "non_ok": [], "misses": 0, "wrong": []}
    deadline = time.monotonic() + DEADLINE

    def worker(tid):
        r = random.Random(seed * 31 + tid)
        own = THREADS - SHARING
        c = conns[tid] if tid < own else conns[own + (tid - own) // 2]
        done = 0
        while done < OPS and time.monotonic() < deadline:
            # A batch of requests per turn on the connection, answered in
            # order: half gets, half replaces.
            batch = []
            for _ in range(min(BATCH, OPS - done)):
                k = key_of(perm[_zipf_rank(r, cum)])
                if r.random() < 0.5:
                    batch.append((k, None))
                else:
                    batch.append((k, make_value(k, tid * 1000000 + done + len(batch) + 1, SMALL, r)))
            with c.lock:
                c.sock.sendall(b"".join(
                    b"get %s\r\n" % k if v is None else
                    b"replace %s 0 0 %d\r\n%s\r\n" % (k, len(v), v) for k, v in batch))
                answers = [c.read_get(k) if v is None else c.line() for k, v in batch]
            for (k, v), a in zip(batch, answers):
                if v is None and a is None:
                    with lock:
                        res["misses"] += 1
                elif v is None:
                    err = check_value(k, a)
                    if err:
                        with lock:
                            res["wrong"].append(err)
                elif a != b"STORED":
                    with lock:
                        res["non_ok"].append((k, a))
            done += len(batch)
            res["ops"][tid] = done

    ts = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    took = time.monotonic() - t0
    st = ctl.stats(b"tac")   # store_wait_timeouts: this server's own counter
    tiers = ctl.stats(b"tiers")
    # Shown when the test fails: where the room was.
    print("stats tiers:", tiers)
    print("stats slabs:", {k: v for k, v in ctl.stats(b"slabs").items()
                           if k.split(":")[-1] in ("chunk_size", "total_pages", "free_chunks", "used_chunks")})
    print("stats nvm:", ctl.stats(b"nvm"))
    print("run: %d ops in %.1f s; non-OK %d, misses %d; store_wait_timeouts %s, "
          "meta_alloc_failures %s, nvm_alloc_failures %s, set_fallback_ssd %s"
          % (sum(res["ops"]), took, len(res["non_ok"]), res["misses"],
             st.get("store_wait_timeouts"), tiers["meta_alloc_failures"],
             tiers["nvm_alloc_failures"], tiers["set_fallback_ssd"]))
    assert not res["wrong"], res["wrong"][:5]
    assert res["ops"] == [OPS] * THREADS, "no progress: ops per thread %r, non-OK %r" % (
        res["ops"], res["non_ok"][:5])
    assert not res["non_ok"], "%d replaces not STORED: %r" % (len(res["non_ok"]), res["non_ok"][:5])
    assert st["store_wait_timeouts"] == "0"
    assert res["misses"] == 0, "%d loaded keys missed" % res["misses"]


def _zipf_rank(r, cum):
    x = r.random() * cum[-1]
    lo, hi = 0, len(cum) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if cum[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo
