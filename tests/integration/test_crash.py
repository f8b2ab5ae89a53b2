"""SIGKILL, then a restart on the same options: never a stale or corrupt value.

After a kill -9 the server restarts on the same options (-t 2 -m 16, NVM
under /dev/shm, SSD in tmp_path), opens its port at once and recovers in
the background by scanning the NVM slots and SSD pages; `stats` shows
recovery_state going running -> done, and recovery_items, recovery_dropped
(tuples dropped as torn or corrupt) and recovery_stale (older versions or
invalidated copies skipped).

The guarantee: after every restart a get answers a miss or exactly the last
acknowledged value of its key (value bytes and client flags), never an older
acknowledged one and never a damaged one.  Items that lived only in DRAM may
be lost.  A key whose request was out (sent, not answered) at the kill may
hold its previous acknowledged state or the new one.  What invalidates the
copies in NVM and SSD: delete (even one that answered NOT_FOUND), an
overwrite by set, replace, cas, append, prepend, incr or decr, a touch to a
shorter TTL, flush_all (nothing stored before it comes back) and expiry.

A key that a restart missed may still come back at a later restart with the
value it had then (that is still its last acknowledged value), until one of
the invalidations above is acknowledged for it.

Values encode key, version and a checksum (`key|version|crc32|padding`, as
in test_restart), appended bytes carry the op number, counters are decimal;
keys look like YCSB's.  Every random choice comes from the seed;
TAC_CRASH_SEED=<n> repeats a run's choices (where the kills land depends on
timing), and every assertion message names it.
"""
import collections
import mmap
import os
import random
import signal
import threading
import time
import zlib

import pytest

import subprocess

from mcserver import SANITIZED, SERVER_BIN, START_TIMEOUT, base_args, free_port
from test_restart import (  # noqa: F401 (tier_files: fixture)
    IO_TIMEOUT,
    MB,
    RECOVERY_TIMEOUT,
    DataSet,
    Reader,
    assert_spread,
    chunks,
    describe,
    fill,
    gets_all,
    graceful_stop,
    load,
    recovery_stats,
    replies,
    restart,
    tier_args,
    tier_counts,
    tier_files,
)

SEED_ENV = "TAC_CRASH_SEED"
M_MB = 16
IDLE_WAIT = 2.5         # seconds; the server writes out an open SSD buf idle for 1 s
N_ITER = 14 if SANITIZED else 20   # SIGKILL restarts in the mixed-load test
N_MAIN, N_HOT, N_NUM = 3000, 300, 200
N_LOADER = 22000        # 1-3 KB each: with the op keys past 3x -m
# flush_all empties the 3000 op keys; one in 4000 ops lets the stream refill
# them in between (one in 400 would keep nearly all of them absent).
FLUSH_EVERY = 4000
EXPIRY_SLACK = 3.0      # seconds after TTL + touch's answer: the item must be gone
MAX_VALUE = 6000        # an append or prepend past this is a set instead
KILL_GRACE = 10.0
SKIP = 64 << 10         # damage stays past the first 64 KiB (the headers)
KEY_PREFIX = b"usertable-user"
INF = float("inf")


def crash_seed():
    seed = int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(1 << 31))
    print("%s=%d" % (SEED_ENV, seed))
    return seed


def tag(seed):
    return "%s=%d" % (SEED_ENV, seed)


def show(v):
    if v is None:
        return "a miss"
    if len(v) <= 24:
        return repr(v)
    return "%d B %r..%r" % (len(v), v[:44], v[-8:])


def new_key(rng, space, idx):
    """A YCSB-like key of 30-60 bytes; space 7 (values) and 8 (counters) keep
    them apart from DataSet's keys (usertable-user000...)."""
    n = rng.randint(30, 60) - len(KEY_PREFIX) - 8
    return b"%s%d%07d%s" % (KEY_PREFIX, space, idx, "".join(rng.choices("0123456789", k=n)).encode())


def make_value(rng, key, version, size):
    head = b"%s|%d|" % (key, version)
    pad = rng.randbytes(max(0, size - len(head) - 9))
    return head + b"%08x|" % zlib.crc32(head + pad) + pad


def rand_flags(rng):
    r = rng.random()
    return 0 if r < 0.2 else (rng.randrange(1, 1 << 16) if r < 0.6 else rng.randrange(1 << 16, 1 << 32))


# ---------------------------------------------------------------- server life

def sigkill(srv, seed, when):
    """SIGKILLs srv; asserts it was still running (it dies of the SIGKILL)."""
    srv.expect_exit = True
    for c in srv.conns:
        c.close()
    srv.conns = []
    srv.proc.kill()
    rc = srv.proc.wait(30)
    assert rc == -signal.SIGKILL, "%s: the server had already exited (rc=%s) before SIGKILL (%s)\n%s" % (
        when, rc, tag(seed), srv.stderr_text())


def start_again(server, old, args, seed, when, wait=True):
    """Restarts on old's port with args; the start itself must succeed."""
    try:
        return restart(server, old, args, wait=wait)
    except RuntimeError as e:
        pytest.fail("%s: the server did not start again (%s): %s" % (when, tag(seed), e), pytrace=False)


def connect_asap(srv, seed, when):
    deadline = time.time() + START_TIMEOUT
    while True:
        assert srv.alive(), "%s: the server exited during start-up (rc=%s, %s)\n%s" % (
            when, srv.proc.poll(), tag(seed), srv.stderr_text())
        try:
            return srv.connect(timeout=IO_TIMEOUT)
        except OSError:
            assert time.time() < deadline, "%s: no connection within %ss (%s)" % (when, START_TIMEOUT, tag(seed))
            time.sleep(0.005)


def wait_crash_recovered(srv, seed, when, allow_failed=False):
    """Polls `stats` until recovery_state is done (or failed, if allowed); before
    that it may only be running.  Returns a connection and the recovery stats."""
    c = srv.connect(timeout=IO_TIMEOUT)
    ends = ("done", "failed") if allow_failed else ("done",)
    deadline = time.time() + RECOVERY_TIMEOUT
    seen = []
    while True:
        assert srv.alive(), "%s: the server died while recovering (rc=%s, %s)\n%s" % (
            when, srv.proc.poll(), tag(seed), srv.stderr_text())
        rs = recovery_stats(c.stats(b"tac"))
        if not seen or seen[-1] != rs["state"]:
            seen.append(rs["state"])
        if rs["state"] in ends:
            break
        assert rs["state"] == "running", "%s: recovery_state went %s; after a crash it goes running -> %s (%s)" % (
            when, " -> ".join(seen), " or ".join(ends), tag(seed))
        assert time.time() < deadline, "%s: recovery not done within %ss: %s (%s)" % (
            when, RECOVERY_TIMEOUT, rs, tag(seed))
        time.sleep(0.05)
    rs["seen"] = " -> ".join(seen)
    return c, rs


def lower_count(c, seed, when):
    """nvm_items + ssd_items of `stats tiers`; both must be there and non-zero."""
    nvm, ssd = tier_counts(c.stats(b"tiers"))
    assert nvm is not None and ssd is not None, "%s: stats tiers lacks nvm_items or ssd_items (%s)" % (
        when, tag(seed))
    assert nvm > 0 and ssd > 0, "%s: the data set must sit in NVM and SSD: nvm_items %d, ssd_items %d (%s)" % (
        when, nvm, ssd, tag(seed))
    print("%s: nvm_items %d, ssd_items %d" % (when, nvm, ssd))
    return nvm + ssd


def loaded_and_idle(server, tier_files, seed, n):
    """A server on fresh tier files holding n verified items of 1-3 KB (past
    3x -m, spread over NVM and SSD), idle for IDLE_WAIT.  Returns its args, the
    data set, the server, nvm_items + ssd_items and the tier files."""
    nvm, ssd = tier_files()
    args = tier_args(nvm, ssd, m=M_MB)
    ds = DataSet(seed, n, 1024, 3072)
    srv = server(args)
    c = fill(srv, ds, M_MB)
    time.sleep(IDLE_WAIT)
    n_lower = lower_count(c, seed, "after loading %d items and %.1f s idle" % (n, IDLE_WAIT))
    return args, ds, srv, n_lower, (nvm, ssd)


def check_loaded(c, ds, when):
    """Every key is a miss or exactly its value and flags; returns the hits."""
    found = gets_all(c, ds.keys)
    exact, wrong = 0, []
    for k in ds.keys:
        hit = found.get(k)
        if hit is None:
            continue
        flags, _cas, got = hit
        if got == ds.val[k] and flags == ds.flags[k]:
            exact += 1
        else:
            wrong.append("%r: %s flags %d, want %s flags %d" % (k, describe(got), flags, describe(ds.val[k]),
                                                               ds.flags[k]))
    print("%s: %d of %d keys hit with their value, %d wrong" % (when, exact, len(ds.keys), len(wrong)))
    assert not wrong, "%s: %d of %d hits have a wrong value or flags (%s), e.g. %s" % (
        when, len(wrong), len(found), tag(ds.seed), wrong[:5])
    return exact


def damage(path, rng, nflips, seed, torn=False):
    """Flips one byte at nflips places of path's tuples past its first 64 KiB
    (in a tuple header or the first bytes of a key or value: each place is
    found by a key's bytes), and with torn overwrites one 4 KiB block in the
    middle of the data with zeros or random bytes.  Returns a description."""
    with open(path, "r+b") as f:
        size = os.fstat(f.fileno()).st_size
        mm = mmap.mmap(f.fileno(), size)
        try:
            occ = []
            pos = mm.find(KEY_PREFIX, SKIP + 64)
            while pos >= 0:
                occ.append(pos)
                pos = mm.find(KEY_PREFIX, pos + 1)
            assert len(occ) >= max(nflips, 2), "%s holds only %d keys' bytes past 64 KiB (%s)" % (
                path, len(occ), tag(seed))
            flips = []
            for p in sorted(rng.sample(occ, nflips)):
                off = min(p + rng.randrange(-40, 200), size - 1)
                mm[off] ^= rng.randrange(1, 256)
                flips.append(off)
            what = "%d bytes flipped between %d and %d" % (nflips, flips[0], flips[-1])
            if torn:
                mid = occ[len(occ) // 2]
                off = min(max(SKIP, mid - mid % 4096), size - size % 4096 - 4096)
                zeros = rng.random() < 0.5
                mm[off:off + 4096] = bytes(4096) if zeros else rng.randbytes(4096)
                what += ", 4 KiB at %d overwritten with %s" % (off, "zeros" if zeros else "random bytes")
            mm.flush()
        finally:
            mm.close()
        os.fsync(f.fileno())
    print("damaged %s (%d bytes, %d keys' bytes found): %s" % (path, size, len(occ), what))
    return what


# ---------------------------------------------------------------- the model of the mixed load

class Model:
    """What each key may hold.

    val, flags, ttl: the last acknowledged state, what the live server must
    show (ttl[k]: a deadline; the key may miss at any time and a hit after
    the deadline is an expired item; INF: may miss, no deadline known).
    lost[k]: states (value, flags, ttl) the key held when a restart missed
    it; a later restart may still bring one back, until an acknowledged
    invalidation.  hist[k]: checksums of values that must never come back
    (tells a stale hit from a corrupt one).  pending: (key, states) of the
    request out at a kill, the states it may have left besides the others."""

    def __init__(self, seed, numeric):
        self.seed = seed
        self.numeric = numeric
        self.keys = []
        self.val, self.flags, self.ttl, self.lost, self.hist = {}, {}, {}, {}, {}
        self.trace = {}
        self.pending = None
        self.opno = 0
        self.flushes_sent = 0

    def norm(self, k, v):
        # incr/decr in place pad a shorter number with spaces
        return v.rstrip(b" ") if k in self.numeric else v

    def same(self, k, got, want):
        return want is not None and self.norm(k, got) == want

    def add(self, k, v, flags):
        self.keys.append(k)
        self.val[k] = v
        self.flags[k] = flags

    def current(self, k):
        v = self.val.get(k)
        return None if v is None else (v, self.flags[k], self.ttl.get(k))

    def acceptable(self, k):
        cur = self.current(k)
        return ([cur] if cur else []) + self.lost.get(k, [])

    def note(self, k, text):
        d = self.trace.get(k)
        if d is None:
            d = self.trace[k] = collections.deque(maxlen=6)
        d.append("#%d %s" % (self.opno, text))

    def history(self, k):
        return "; ".join(self.trace.get(k, ())) or "none in the op stream"

    def _bury(self, k, keep=None):
        for st in self.acceptable(k):
            if st[0] != keep:
                self.hist.setdefault(k, set()).add(zlib.crc32(st[0]))
        self.lost.pop(k, None)

    def _set(self, k, v, flags, ttl):
        self.val[k] = v
        self.flags[k] = flags
        if ttl is None:
            self.ttl.pop(k, None)
        else:
            self.ttl[k] = ttl

    def write(self, k, v, flags, keep_ttl=False):
        """An acknowledged overwrite."""
        ttl = self.ttl.get(k) if keep_ttl else None
        self._bury(k)
        self._set(k, v, flags, ttl)

    def touch(self, k, deadline):
        self._bury(k, keep=self.val[k])
        self.ttl[k] = deadline

    def remove(self, k):
        """An acknowledged delete (DELETED or NOT_FOUND)."""
        self._bury(k)
        self.val.pop(k, None)
        self.flags.pop(k, None)
        self.ttl.pop(k, None)

    def gone(self, k, extra=()):
        """Absent now without an invalidation by the client (lost at a restart,
        expired, evicted): what it held may come back after a crash."""
        merged = {}
        for v, flags, ttl in self.acceptable(k) + list(extra):
            if (v, flags) in merged and merged[(v, flags)] != ttl:
                ttl = INF
            merged[(v, flags)] = ttl
        self.val.pop(k, None)
        self.flags.pop(k, None)
        self.ttl.pop(k, None)
        if merged:
            self.lost[k] = [(v, f, t) for (v, f), t in merged.items()][-4:]
        else:
            self.lost.pop(k, None)

    def flush(self):
        for k in list(self.val) + list(self.lost):
            self._bury(k)
        self.val.clear()
        self.flags.clear()
        self.ttl.clear()

    def adopt(self, k, matched):
        """A restart showed one of the acceptable states: it is the state now."""
        v, flags = matched[0][0], matched[0][1]
        ttls = set(st[2] for st in matched)
        ttl = matched[0][2] if len(ttls) == 1 else INF
        self._bury(k, keep=v)
        self._set(k, v, flags, ttl)

    def judge(self, k, states, flags, value, t):
        """(the states a hit read at t matches, None) or (None, (kind, why))."""
        same = [st for st in states if self.same(k, value, st[0])]
        match = [st for st in same if st[1] == flags]
        fresh = [st for st in match if st[2] is None or t <= st[2]]
        if fresh:
            return fresh, None
        if match:
            return None, ("stale", "%s, an expired item: its TTL ended %.1f s before the read" % (
                show(value), t - max(st[2] for st in match)))
        if same:
            return None, ("corrupt", "the right value with flags %d, want %s" % (
                flags, sorted(set(st[1] for st in same))))
        if zlib.crc32(self.norm(k, value)) in self.hist.get(k, ()):
            return None, ("stale", "%s flags %d, a value it held before an acknowledged overwrite, "
                                   "delete, touch or flush_all" % (show(value), flags))
        return None, ("corrupt", "%s flags %d, a value never stored" % (show(value), flags))

    def verify(self, c, when, problems, loader):
        """gets of every key after a restart: a miss, or an acceptable state.
        Misses become absent (and may come back later), hits the state; a
        wrong hit is recorded in problems and deleted."""
        t0 = time.time()
        found = gets_all(c, self.keys)
        pk, pstates = self.pending if self.pending else (None, [])
        self.pending = None
        out = collections.Counter()
        wrong = []
        for k in self.keys:
            extra = pstates if k == pk else []
            was_lost = k not in self.val and k in self.lost
            hit = found.get(k)
            if hit is None:
                if k in self.val:
                    out["lost"] += 1
                self.gone(k, extra)
                continue
            flags, _cas, value = hit
            states = self.acceptable(k) + list(extra)
            ok, bad = self.judge(k, states, flags, value, t0)
            if bad:
                problems[bad[0]].append("%s: %r: %s; it may hold %s; its last ops: %s" % (
                    when, k, bad[1], ", ".join(show(st[0]) for st in states) or "nothing (a miss)",
                    self.history(k)))
                wrong.append(k)
                continue
            self.adopt(k, ok)
            out["hit"] += 1
            if k in loader:
                out["loader"] += 1
            if was_lost:
                out["came back"] += 1
        if wrong:
            r = replies(c, [b"delete %s\r\n" % k for k in wrong])
            assert set(r) <= {b"DELETED", b"NOT_FOUND"}, "deleting the wrong keys answered %s (%s)" % (
                sorted(set(r)), tag(self.seed))
            for k in wrong:
                self.remove(k)
        out["wrong"] = len(wrong)
        return out


def read_value(rd, k, seed):
    """One get/gets answer: (flags, cas or None, value) or None on a miss."""
    ln = rd.line()
    if ln == b"END":
        return None
    parts = ln.split(b" ")
    assert len(parts) in (4, 5) and parts[0] == b"VALUE" and parts[1] == k, "get %r answered %r (%s)" % (
        k, ln[:200], tag(seed))
    data = rd.exact(int(parts[3]) + 2)
    assert data[-2:] == b"\r\n", "value of %r not followed by CRLF (%s)" % (k, tag(seed))
    end = rd.line()
    assert end == b"END", "get %r: %r after the value, want END (%s)" % (k, end[:200], tag(seed))
    return int(parts[2]), (int(parts[4]) if len(parts) == 5 else None), data[:-2]


class OpStream:
    """One request at a time on one connection, checked against the model."""

    def __init__(self, m, conn, rng, main, hot, nums, it, flush_ok):
        self.m, self.rng = m, rng
        self.sock = conn.sock
        self.rd = Reader(conn.sock)
        self.main, self.hot, self.nums = main, hot, nums
        self.it = it
        self.flush_ok = flush_ok
        self.counts = collections.Counter()
        self.tolerated = 0

    def fail(self, k, msg):
        raise AssertionError("live server, iteration %d, op #%d: %r: %s (%s)\nits last ops: %s" % (
            self.it, self.m.opno, k, msg, tag(self.m.seed), self.m.history(k)))

    def main_key(self):
        return self.rng.choice(self.hot if self.rng.random() < 0.3 else self.main)

    def any_key(self):
        return self.rng.choice(self.nums) if self.rng.random() < 0.1 else self.main_key()

    def step(self):
        m, rng = self.m, self.rng
        m.opno += 1
        if self.flush_ok and rng.random() < 1.0 / FLUSH_EVERY:
            return self.op_flush()
        r = rng.random() * 100
        if r < 40:
            self.op_set(self.main_key())
        elif r < 50:
            self.op_delete(self.any_key())
        elif r < 60:
            self.op_append(self.main_key(), rng.random() < 0.5)
        elif r < 70:
            self.op_delta(rng.choice(self.nums))
        elif r < 75:
            self.op_touch(self.any_key())
        elif r < 80:
            self.op_replace(self.main_key())
        elif r < 85:
            self.op_cas(self.main_key())
        else:
            self.op_get(self.any_key())

    # ---- requests

    def request(self, k, data, new):
        """Sends one request, reads its one-line answer.  While it is out, k
        may be left in any of the states `new` besides its acknowledged ones."""
        self.m.pending = (k, new)
        t = time.time()
        self.sock.sendall(data)
        r = self.rd.line()
        self.m.pending = None
        return r, t

    def storage(self, cmd, k, value, flags, new, cas=None):
        extra = b"" if cas is None else b" %d" % cas
        return self.request(k, b"%s %s %d 0 %d%s\r\n%s\r\n" % (cmd, k, flags, len(value), extra, value), new)

    def evictions(self):
        self.sock.sendall(b"stats\r\n")
        ev = 0
        while True:
            ln = self.rd.line()
            if ln == b"END":
                return ev
            if ln.startswith(b"STAT evictions "):
                ev = int(ln.split(b" ")[2])

    def present(self, k, t, what):
        """The server says k exists (request sent at t)."""
        m = self.m
        if k not in m.val:
            self.fail(k, "%s, but the key must be absent (deleted, flushed, expired or missed by a restart)" % what)
        dl = m.ttl.get(k)
        if dl is not None and t > dl:
            self.fail(k, "%s %.1f s after its TTL ended" % (what, t - dl))

    def absent(self, k, what):
        """The server says k does not exist."""
        m = self.m
        if k not in m.val:
            return
        if k in m.ttl:
            m.gone(k)
            return
        if not self.evictions():
            self.fail(k, "%s, but it holds %s, has no TTL, and the server evicted nothing" % (what, show(m.val[k])))
        self.tolerated += 1
        m.gone(k)

    def live_get(self, k, hit, t, what):
        m = self.m
        if hit is None:
            self.absent(k, "%s missed" % what)
            m.note(k, "%s: miss" % what)
            return
        flags, _cas, value = hit
        self.present(k, t, "%s hit %s" % (what, show(value)))
        cur = m.current(k)
        if not m.same(k, value, cur[0]) or flags != cur[1]:
            self.fail(k, "%s answered %s flags %d, want %s flags %d" % (what, show(value), flags, show(cur[0]),
                                                                       cur[1]))
        m.note(k, "%s: hit" % what)

    # ---- ops

    def op_set(self, k):
        m, rng = self.m, self.rng
        v = make_value(rng, k, m.opno, rng.randint(100, 4096))
        fl = rand_flags(rng)
        r, t = self.storage(b"set", k, v, fl, [(v, fl, None)])
        if r != b"STORED":
            self.fail(k, "set answered %r" % r)
        m.write(k, v, fl)
        m.note(k, "set %d B" % len(v))
        self.counts["set"] += 1

    def op_delete(self, k):
        r, t = self.request(k, b"delete %s\r\n" % k, [])
        if r == b"DELETED":
            self.present(k, t, "delete answered DELETED")
        elif r == b"NOT_FOUND":
            self.absent(k, "delete answered NOT_FOUND")
        else:
            self.fail(k, "delete answered %r" % r)
        self.m.remove(k)
        self.m.note(k, "delete: %s" % r.decode())
        self.counts["delete"] += 1

    def op_append(self, k, prepend):
        m, rng = self.m, self.rng
        cur = m.current(k)
        if cur and len(cur[0]) > MAX_VALUE:
            return self.op_set(k)
        cmd = b"prepend" if prepend else b"append"
        chunk = b"{%s%d}" % (cmd[:1], m.opno) + rng.randbytes(rng.randint(8, 200))
        new = []
        if cur:
            new = [((chunk + cur[0]) if prepend else (cur[0] + chunk), cur[1], cur[2])]
        r, t = self.storage(cmd, k, chunk, 0, new)
        if r == b"STORED":
            self.present(k, t, "%s answered STORED" % cmd.decode())
            m.write(k, new[0][0], new[0][1], keep_ttl=True)
        elif r == b"NOT_STORED":
            self.absent(k, "%s answered NOT_STORED" % cmd.decode())
        else:
            self.fail(k, "%s answered %r" % (cmd.decode(), r))
        m.note(k, "%s %d B: %s" % (cmd.decode(), len(chunk), r.decode()))
        self.counts[cmd.decode()] += 1

    def op_delta(self, k):
        m, rng = self.m, self.rng
        cur = m.current(k)
        if cur is None and rng.random() < 0.5:
            v = b"%d" % rng.randrange(10 ** 9)
            fl = rand_flags(rng)
            r, t = self.storage(b"set", k, v, fl, [(v, fl, None)])
            if r != b"STORED":
                self.fail(k, "set of a counter answered %r" % r)
            m.write(k, v, fl)
            m.note(k, "set %s" % v.decode())
            self.counts["set counter"] += 1
            return
        cmd = b"incr" if rng.random() < 0.5 else b"decr"
        delta = rng.randint(1, 10 ** 6)
        new, want = [], None
        if cur:
            n = int(cur[0])
            want = n + delta if cmd == b"incr" else max(0, n - delta)
            new = [(b"%d" % want, cur[1], cur[2])]
        r, t = self.request(k, b"%s %s %d\r\n" % (cmd, k, delta), new)
        if r.isdigit():
            self.present(k, t, "%s answered %s" % (cmd.decode(), r.decode()))
            if int(r) != want:
                self.fail(k, "%s %d of %s answered %s, want %d" % (cmd.decode(), delta, cur[0].decode(), r.decode(),
                                                                   want))
            m.write(k, new[0][0], new[0][1], keep_ttl=True)
        elif r == b"NOT_FOUND":
            self.absent(k, "%s answered NOT_FOUND" % cmd.decode())
        else:
            self.fail(k, "%s answered %r" % (cmd.decode(), r))
        m.note(k, "%s %d: %s" % (cmd.decode(), delta, r.decode()))
        self.counts[cmd.decode()] += 1

    def op_touch(self, k):
        m, rng = self.m, self.rng
        ttl = rng.choice((1, 2))
        cur = m.current(k)
        # Out at a kill: it may have shortened the life or not.
        new = [(cur[0], cur[1], INF)] if cur else []
        r, t = self.request(k, b"touch %s %d\r\n" % (k, ttl), new)
        if r == b"TOUCHED":
            self.present(k, t, "touch answered TOUCHED")
            m.touch(k, time.time() + ttl + EXPIRY_SLACK)
        elif r == b"NOT_FOUND":
            self.absent(k, "touch answered NOT_FOUND")
        else:
            self.fail(k, "touch answered %r" % r)
        m.note(k, "touch %d: %s" % (ttl, r.decode()))
        self.counts["touch"] += 1

    def op_replace(self, k):
        m, rng = self.m, self.rng
        v = make_value(rng, k, m.opno, rng.randint(100, 4096))
        fl = rand_flags(rng)
        r, t = self.storage(b"replace", k, v, fl, [(v, fl, None)] if k in m.val else [])
        if r == b"STORED":
            self.present(k, t, "replace answered STORED")
            m.write(k, v, fl)
        elif r == b"NOT_STORED":
            self.absent(k, "replace answered NOT_STORED")
        else:
            self.fail(k, "replace answered %r" % r)
        m.note(k, "replace %d B: %s" % (len(v), r.decode()))
        self.counts["replace"] += 1

    def op_cas(self, k):
        m, rng = self.m, self.rng
        t = time.time()
        self.sock.sendall(b"gets %s\r\n" % k)
        hit = read_value(self.rd, k, m.seed)
        self.live_get(k, hit, t, "gets before cas")
        v = make_value(rng, k, m.opno, rng.randint(100, 4096))
        fl = rand_flags(rng)
        if hit is None:
            r, t = self.storage(b"cas", k, v, fl, [], cas=rng.randrange(1, 1 << 40))
            if r != b"NOT_FOUND":
                self.fail(k, "cas of a missing key answered %r" % r)
            m.note(k, "cas of a miss: NOT_FOUND")
            self.counts["cas"] += 1
            return
        bad = rng.random() < 0.2
        unique = hit[1] + 1 if bad else hit[1]
        r, t = self.storage(b"cas", k, v, fl, [] if bad else [(v, fl, None)], cas=unique)
        if r == b"STORED" and not bad:
            self.present(k, t, "cas answered STORED")
            m.write(k, v, fl)
        elif r == b"EXISTS" and bad:
            self.present(k, t, "cas with a wrong unique answered EXISTS")
        elif r == b"NOT_FOUND":
            self.absent(k, "cas answered NOT_FOUND")
        else:
            self.fail(k, "cas with %s unique answered %r" % ("a wrong" if bad else "the right", r))
        m.note(k, "cas%s %d B: %s" % (" (wrong unique)" if bad else "", len(v), r.decode()))
        self.counts["cas"] += 1

    def op_get(self, k):
        cmd = b"gets" if self.rng.random() < 0.5 else b"get"
        t = time.time()
        self.sock.sendall(b"%s %s\r\n" % (cmd, k))
        hit = read_value(self.rd, k, self.m.seed)
        self.live_get(k, hit, t, cmd.decode())
        self.counts["get"] += 1

    def op_flush(self):
        # Out at a kill it leaves every key as it was or absent: a miss is always allowed.
        self.m.flushes_sent += 1
        r, t = self.request(None, b"flush_all\r\n", [])
        if r != b"OK":
            self.fail(None, "flush_all answered %r" % r)
        self.m.flush()
        self.counts["flush_all"] += 1


def run_and_kill(srv, stream, plan, seed, it):
    """Runs the op stream, then SIGKILLs srv: after a planned number of ops with
    no request out, or from a timer while requests flow (the request whose
    answer never came is the one in flight).  Returns (mid_op, ops done)."""
    mid_op = plan.random() < 0.5
    delay = plan.uniform(0.2, 1.0)
    n_ops = plan.randint(1500, 8000)
    killed = []

    def kill():
        killed.append(time.time())
        srv.proc.kill()

    srv.expect_exit = True
    timer = threading.Timer(delay, kill) if mid_op else None
    done = 0
    try:
        if timer:
            timer.daemon = True
            timer.start()
        while mid_op or done < n_ops:
            try:
                stream.step()
            except OSError as e:
                if not killed:
                    raise AssertionError("iteration %d: the connection failed with no SIGKILL sent: %r "
                                         "(server rc=%s, %s)\n%s" % (it, e, srv.proc.poll(), tag(seed),
                                                                     srv.stderr_text())) from e
                break
            done += 1
            assert not killed or time.time() - killed[0] < KILL_GRACE, (
                "iteration %d: the server still answered %.0f s after SIGKILL (%s)" % (it, KILL_GRACE, tag(seed)))
    finally:
        if timer:
            timer.cancel()
            timer.join()
    if not mid_op:
        assert stream.m.pending is None, "iteration %d: a request out after the planned ops (%s)" % (it, tag(seed))
        kill()
    for c in srv.conns:
        c.close()
    srv.conns = []
    rc = srv.proc.wait(30)
    assert rc == -signal.SIGKILL, "iteration %d: the server exited with rc=%s, not by the SIGKILL (%s)\n%s" % (
        it, rc, tag(seed), srv.stderr_text())
    return mid_op, done


# ---------------------------------------------------------------- tests

def mixed_load_kills(server, tier_files, extra_o=""):
    """The mixed load, SIGKILLed N_ITER times (see the module's text); asserts
    zero stale and zero corrupt values.  Returns a list, per restart, of
    (keys whose last acknowledged state had no TTL, those that came back with
    it): the share -o dram_log=on must keep."""
    seed = crash_seed()
    rng = random.Random(seed)
    plan = random.Random(seed + 1)
    nvm, ssd = tier_files()
    args = tier_args(nvm, ssd, m=M_MB, extra_o=extra_o)

    main = [new_key(rng, 7, i) for i in range(N_MAIN)]
    nums = [new_key(rng, 8, i) for i in range(N_NUM)]
    hot = main[:N_HOT]
    m = Model(seed, set(nums))
    for k in main:
        m.add(k, make_value(rng, k, 0, rng.randint(100, 4096)), rand_flags(rng))
    for k in nums:
        m.add(k, b"%d" % rng.randrange(10 ** 9), rand_flags(rng))
    op_keys = list(m.keys)
    ds = DataSet(seed, N_LOADER, 1024, 3072)
    total = ds.value_bytes() + sum(len(m.val[k]) for k in op_keys)
    assert total >= 3 * M_MB * MB, "data set of %.1f MB is not 3x -m %d (%s)" % (total / MB, M_MB, tag(seed))

    # The op keys first, then the loader pushes them down into NVM and SSD.
    srv = server(args)
    c = srv.connect(timeout=IO_TIMEOUT)
    for b in chunks(op_keys, 500):
        r = replies(c, [b"set %s %d 0 %d\r\n%s\r\n" % (k, m.flags[k], len(m.val[k]), m.val[k]) for k in b])
        assert r == [b"STORED"] * len(b), "setting the op keys answered %s (%s)" % (sorted(set(r)), tag(seed))
    load(srv, ds, ds.keys)
    loader = set(ds.keys)
    for k in ds.keys:
        m.add(k, ds.val[k], ds.flags[k])
    found = gets_all(c, m.keys)
    bad = [k for k in m.keys if k not in found or not m.same(k, found[k][2], m.val[k])
           or found[k][0] != m.flags[k]]
    assert not bad, "before any kill %d of %d keys miss or differ (%s), e.g. %r" % (
        len(bad), len(m.keys), tag(seed), bad[:3])
    assert_spread(c, ds)

    problems = {"stale": [], "corrupt": []}
    kept = []
    shares = []     # (iteration, loader keys back, loader keys in NVM/SSD before) until the first flush_all
    totals = collections.Counter()
    t_run = time.time()
    for it in range(N_ITER):
        nvm_n, ssd_n = tier_counts(c.stats(b"tiers"))
        op_present = sum(1 for k in op_keys if k in m.val)
        loader_present = sum(1 for k in ds.keys if k in m.val)
        est = min(loader_present, max(0, (nvm_n or 0) + (ssd_n or 0) - op_present))

        stream = OpStream(m, c, random.Random(seed * 1000 + it), main, hot, nums, it, it >= N_ITER // 2)
        mid_op, nops = run_and_kill(srv, stream, plan, seed, it)
        inflight = m.pending
        # Acknowledged and with no TTL to end it: what a log of every write keeps.
        want = {k: (m.val[k], m.flags[k]) for k in m.val
                if k not in m.ttl and not (inflight and k == inflight[0])}
        srv = start_again(server, srv, args, seed, "iteration %d" % it)
        c, rs = wait_crash_recovered(srv, seed, "restart %d after SIGKILL" % (it + 1))
        res = m.verify(c, "restart %d" % (it + 1), problems, loader)
        kept.append((len(want), sum(1 for k, (v, fl) in want.items()
                                    if k in m.val and m.same(k, m.val[k], v) and m.flags[k] == fl)))
        if m.flushes_sent == 0:
            shares.append((it, res["loader"], est))
        totals.update(stream.counts)
        totals["mid-op kills" if mid_op else "idle kills"] += 1
        totals["evictions tolerated"] += stream.tolerated
        print("iteration %2d: SIGKILL %s after %d ops%s; recovery %s in %.2f s (items %d, dropped %d, stale %d); "
              "%d hits, %d lost, %d came back, %d wrong; loader keys: %d back of ~%d in NVM/SSD; "
              "tiers before: nvm %s ssd %s; acknowledged without TTL: %d of %d back" % (
                  it, "mid-op" if mid_op else "idle", nops,
                  (" (%r in flight)" % (inflight[0],)) if inflight else "",
                  rs["seen"], rs["seconds"], rs["items"], rs["dropped"], rs["stale"],
                  res["hit"], res["lost"], res["came back"], res["wrong"], res["loader"], est, nvm_n, ssd_n,
                  kept[-1][1], kept[-1][0]))
    print("%d restarts in %.1f s: %s" % (N_ITER, time.time() - t_run, dict(totals)))

    stale, corrupt = problems["stale"], problems["corrupt"]
    assert not stale and not corrupt, (
        "%d stale and %d corrupt values over %d SIGKILL restarts (%s)\nstale, e.g.:\n  %s\ncorrupt, e.g.:\n  %s" % (
            len(stale), len(corrupt), N_ITER, tag(seed), "\n  ".join(stale[:5]), "\n  ".join(corrupt[:5])))
    measured = [s for s in shares if s[2] >= 1000]
    assert measured, "no restart before the first flush_all had loader keys in NVM/SSD to count: %s (%s)" % (
        shares, tag(seed))
    best = max(measured, key=lambda s: s[1] / s[2])
    assert best[1] > 0.5 * best[2], (
        "no restart brought back more than half the loader keys that were in NVM/SSD: best %d of ~%d at "
        "restart %d; all (iteration, back, in NVM/SSD): %s (%s)" % (best[1], best[2], best[0] + 1, shares, tag(seed)))
    sigkill(srv, seed, "at the end")
    return seed, kept


@pytest.mark.tac_only
def test_kill9_mixed_load_never_stale(server, tier_files):
    mixed_load_kills(server, tier_files)


@pytest.mark.tac_only
def test_kill9_dram_log_keeps_acknowledged_items(server, tier_files):
    """With -o dram_log=on the same load and kills lose (nearly) nothing: at
    least 99.9% of the keys whose last acknowledged state had no TTL come back
    with it, over all restarts, and at least 99% at each; still zero stale."""
    seed, kept = mixed_load_kills(server, tier_files, extra_o=",dram_log=on")
    want = sum(w for w, _b in kept)
    back = sum(b for _w, b in kept)
    print("-o dram_log=on: %d of %d acknowledged states back over %d restarts (%.3f%%)" % (
        back, want, len(kept), 100.0 * back / want))
    # A restart may follow a flush_all with no acknowledged state to bring back.
    worst = min((wb for wb in kept if wb[0]), key=lambda wb: wb[1] / wb[0], default=(1, 1))
    assert back >= 0.999 * want and worst[1] >= 0.99 * worst[0], (
        "-o dram_log=on: %d of %d acknowledged states came back (want 99.9%%), worst restart %d of %d; "
        "per restart (acknowledged, back): %s (%s)" % (back, want, worst[1], worst[0], kept, tag(seed)))


def kill_idle_and_restart(server, srv, args, ds, n_lower, when):
    """SIGKILLs the idle srv holding ds (n_lower items in NVM and SSD) and
    restarts it on args: every hit exact, none dropped, and at least 99% of
    the lower tiers' items back.  Returns the new server and a connection."""
    seed = ds.seed
    sigkill(srv, seed, "SIGKILL of the idle server (%s)" % when)
    srv = start_again(server, srv, args, seed, "after SIGKILL of the idle server (%s)" % when)
    c, rs = wait_crash_recovered(srv, seed, "after SIGKILL of the idle server (%s)" % when)
    print("recovery: %s; %s" % (rs["seen"], rs))
    exact = check_loaded(c, ds, "after SIGKILL of the idle server (%s)" % when)
    assert rs["dropped"] == 0, "recovery dropped %d tuples after SIGKILL of an idle server (%s, %s): %s" % (
        rs["dropped"], when, tag(seed), rs)
    assert exact >= 0.99 * n_lower, (
        "only %d keys came back with their value, want at least 99%% of the %d in NVM/SSD before the kill "
        "(%s, %s): %s" % (exact, n_lower, when, tag(seed), rs))
    assert exact <= rs["items"], "%d keys hit, but recovery_items is %d (%s)" % (exact, rs["items"], tag(seed))
    return srv, c


@pytest.mark.tac_only
def test_kill9_after_idle_keeps_lower_tiers(server, tier_files):
    seed = crash_seed()
    args, ds, srv, n_lower, _files = loaded_and_idle(server, tier_files, seed, 30000)
    srv, _c = kill_idle_and_restart(server, srv, args, ds, n_lower, "one SSD file")
    sigkill(srv, seed, "at the end")


@pytest.mark.tac_only
def test_kill9_during_recovery_and_during_graceful_stop(server, tier_files):
    seed = crash_seed()
    rng = random.Random(seed + 1)
    args, ds, srv, n_lower, _files = loaded_and_idle(server, tier_files, seed, 30000)
    sigkill(srv, seed, "first SIGKILL")

    # SIGKILL again as soon as the port accepts, while it recovers if it still does.
    srv = start_again(server, srv, args, seed, "after the first SIGKILL", wait=False)
    c = connect_asap(srv, seed, "after the first SIGKILL")
    state = recovery_stats(c.stats(b"tac"))["state"]
    print("restarted server accepted; recovery_state %s; SIGKILL" % state)
    assert state in ("running", "done"), "after a crash recovery_state is %r, want running or done (%s)" % (
        state, tag(seed))
    sigkill(srv, seed, "SIGKILL as soon as the port accepted")

    when = "after a SIGKILL during recovery"
    srv = start_again(server, srv, args, seed, when)
    c, rs = wait_crash_recovered(srv, seed, when)
    print("recovery: %s; %s" % (rs["seen"], rs))
    exact = check_loaded(c, ds, when)
    assert exact >= 0.99 * n_lower, (
        "%s: only %d keys came back with their value, want at least 99%% of the %d in NVM/SSD before the first "
        "kill (%s): %s" % (when, exact, n_lower, tag(seed), rs))

    # SIGTERM, and SIGKILL within 50 ms, during the graceful stop.
    srv.expect_exit = True
    for cc in srv.conns:
        cc.close()
    srv.conns = []
    srv.proc.send_signal(signal.SIGTERM)
    time.sleep(rng.uniform(0.0, 0.05))
    srv.proc.kill()
    rc = srv.proc.wait(30)
    print("SIGTERM then SIGKILL: rc=%s" % rc)
    assert rc in (0, -signal.SIGKILL), "SIGTERM then SIGKILL: rc=%s, want 0 or killed (%s)\n%s" % (
        rc, tag(seed), srv.stderr_text())

    when = "after a SIGKILL during the graceful stop"
    srv = start_again(server, srv, args, seed, when)
    c, rs = wait_crash_recovered(srv, seed, when)
    print("recovery: %s; %s" % (rs["seen"], rs))
    check_loaded(c, ds, when)
    sigkill(srv, seed, "at the end")


@pytest.mark.tac_only
def test_damaged_tier_files(server, tier_files):
    seed = crash_seed()
    rng = random.Random(seed + 1)
    args, ds, srv, n_lower, (nvm, ssd) = loaded_and_idle(server, tier_files, seed, 25000)
    sigkill(srv, seed, "SIGKILL before damaging the tier files")
    damage(nvm, rng, 50, seed)
    damage(ssd, rng, 50, seed, torn=True)

    when = "after damaging the tier files"
    srv = start_again(server, srv, args, seed, when)
    c, rs = wait_crash_recovered(srv, seed, when, allow_failed=True)
    print("recovery: %s; %s" % (rs["seen"], rs))
    exact = check_loaded(c, ds, when)
    assert c.line(b"set after-damage 7 0 5\r\nhello\r\n") == b"STORED\r\n", \
        "%s: recovery %s, and a set does not work (%s)" % (when, rs["state"], tag(seed))
    assert c.get(b"get after-damage\r\n") == b"VALUE after-damage 7 5\r\nhello\r\nEND\r\n", \
        "%s: recovery %s, and a get does not work (%s)" % (when, rs["state"], tag(seed))
    assert rs["dropped"] > 0, "%s: recovery_dropped is 0 (%s): %s" % (when, tag(seed), rs)
    assert exact >= 0.8 * n_lower, (
        "%s: only %d keys came back with their value, want at least 80%% of the %d in NVM/SSD before the kill "
        "(%s): %s" % (when, exact, n_lower, tag(seed), rs))
    sigkill(srv, seed, "at the end")


def dram_log_loaded(server, tier_files, seed):
    """A -o dram_log=on server loaded with 30k keys and killed right after the
    load (DRAM full of items no lower tier holds, SSD bufs unwritten), then
    started again: at least 99.9% of the keys must come back, none wrong."""
    nvm, ssd = tier_files()
    args = tier_args(nvm, ssd, m=M_MB, extra_o=",dram_log=on")
    ds = DataSet(seed, 30000, 500, 3000)
    srv = server(args)
    fill(srv, ds, M_MB)
    sigkill(srv, seed, "SIGKILL right after the load")

    srv, exact = restart_and_count(server, srv, args, ds, seed, "after SIGKILL right after the load")
    return args, ds, srv, exact


def restart_and_count(server, old, args, ds, seed, when):
    """Starts again after a SIGKILL; at least 99.9% of ds's keys must come back
    with their value, none wrong.  Returns the server and the keys back."""
    srv = start_again(server, old, args, seed, when)
    c, rs = wait_crash_recovered(srv, seed, when)
    print("recovery: %s; %s" % (rs["seen"], rs))
    exact = check_loaded(c, ds, when)
    assert exact >= 0.999 * len(ds.keys), "%s: %d of %d keys back, want 99.9%% (%s): %s" % (
        when, exact, len(ds.keys), tag(seed), rs)
    return srv, exact


@pytest.mark.tac_only
def test_kill9_dram_log_right_after_load_and_after_graceful_restart(server, tier_files):
    """-o dram_log=on: a kill right after a load loses at most 0.1%; then a
    graceful stop (which starts the log afresh) and a kill after that restart
    lose nothing the server held (the log covers the DRAM items the restart
    brought back)."""
    seed = crash_seed()
    args, ds, srv, held = dram_log_loaded(server, tier_files, seed)
    graceful_stop(srv, "SIGTERM")
    for when in ("after SIGTERM", "after SIGKILL following a graceful restart"):
        srv = start_again(server, srv, args, seed, when)
        c, rs = wait_crash_recovered(srv, seed, when)
        exact = check_loaded(c, ds, when)
        # A later scan may find a key the restart before it missed.
        assert exact >= held, "%s: %d keys back, fewer than the %d held before (%s): %s" % (
            when, exact, held, tag(seed), rs)
        sigkill(srv, seed, "SIGKILL " + when)


@pytest.mark.tac_only
def test_kill9_dram_log_after_writes_during_recovery(server, tier_files):
    """-o dram_log=on: after a kill right after a load, a quarter of the keys is
    rewritten while the restart recovers, and the server is killed again: at
    least 99.9% of the keys must come back with their last value, none wrong."""
    seed = crash_seed()
    args, ds, srv, _held = dram_log_loaded(server, tier_files, seed)
    sigkill(srv, seed, "SIGKILL after the first check")
    srv = start_again(server, srv, args, seed, "after the second SIGKILL", wait=False)
    c = connect_asap(srv, seed, "after the second SIGKILL")
    state = recovery_stats(c.stats(b"tac"))["state"]
    rewrite = ds.keys[: len(ds.keys) // 4]
    for k in rewrite:
        ds.make(k, 2)
    load(srv, ds, rewrite)
    print("rewrote %d keys from recovery_state %s on" % (len(rewrite), state))
    wait_crash_recovered(srv, seed, "while rewriting")
    sigkill(srv, seed, "SIGKILL after the rewrite")

    srv, _exact = restart_and_count(server, srv, args, ds, seed,
                                    "after SIGKILL following writes made during recovery")
    sigkill(srv, seed, "at the end")


class LargeDataSet(DataSet):
    """Keys of 200 to 250 bytes (250 is memcached's limit) and values of 16 KB
    to 500 KB: an SSD tuple may span several bufs, and few keys fill -m."""

    def new_key(self):
        idx = self.next_idx
        self.next_idx += 1
        n = self.rng.randint(200, 250) - len(KEY_PREFIX) - 8
        return KEY_PREFIX + b"%08d" % idx + bytes(self.rng.choices(b"abcdefghijklmnopqrstuvwxyz0123456789", k=n))


@pytest.mark.tac_only
def test_kill9_dram_log_long_keys_and_large_values(server, tier_files):
    """-o dram_log=on with 200-250 B keys and 16-500 KB values over three tiers:
    a kill right after the load, then one right after a third is rewritten
    (other sizes) and a tenth deleted, bring back every acknowledged state with
    its value, flags and CAS, and no deleted key."""
    seed = crash_seed()
    nvm, ssd = tier_files()
    args = tier_args(nvm, ssd, m=M_MB, extra_o=",dram_log=on")
    ds = LargeDataSet(seed, 200, 16 << 10, 500 << 10)
    # 200 values average 258 KB; a seed that draws small ones gets a few more
    # keys, so that the set is always 3x -m.
    while ds.value_bytes() < 3 * M_MB * MB:
        k = ds.new_key()
        ds.make(k, 1)
        ds.keys.append(k)
    srv = server(args)
    load(srv, ds, ds.keys, batch=8)
    c = srv.connect(timeout=IO_TIMEOUT)
    ds.record(gets_all(c, ds.all_keys(), batch=10), "after loading, before the kill")
    assert_spread(c, ds)
    sigkill(srv, seed, "SIGKILL right after the load")

    srv = start_again(server, srv, args, seed, "after SIGKILL right after the load")
    c, rs = wait_crash_recovered(srv, seed, "after SIGKILL right after the load")
    ds.compare(gets_all(c, ds.all_keys(), batch=10), "after SIGKILL right after the load (%s, %s)" % (tag(seed), rs))

    keys = list(ds.val)
    ds.rng.shuffle(keys)
    rewrite, delete = keys[: len(keys) // 3], keys[len(keys) // 3: len(keys) // 3 + len(keys) // 10]
    for k in rewrite:
        ds.make(k, 2)
    load(srv, ds, rewrite, batch=8)
    r = replies(c, [b"delete %s\r\n" % k for k in delete])
    assert r == [b"DELETED"] * len(delete), "deletes answered %s (%s)" % (sorted(set(r)), tag(seed))
    for k in delete:
        ds.drop(k)
    sigkill(srv, seed, "SIGKILL right after the rewrite")

    srv = start_again(server, srv, args, seed, "after SIGKILL right after the rewrite")
    c, rs = wait_crash_recovered(srv, seed, "after SIGKILL right after the rewrite")
    ds.compare(gets_all(c, ds.all_keys(), batch=10), "after SIGKILL right after the rewrite (%s, %s)" % (tag(seed), rs))
    sigkill(srv, seed, "at the end")


def dram_log_server(server, tier_files, extra=""):
    """A -o dram_log=on server (more options in extra) over new tier files:
    (seed, its rng, the arguments, the server, a connection)."""
    seed = crash_seed()
    nvm, ssd = tier_files()
    args = tier_args(nvm, ssd, m=M_MB, extra_o=",dram_log=on" + extra)
    srv = server(args)
    return seed, random.Random(seed), args, srv, srv.connect(timeout=IO_TIMEOUT)


@pytest.mark.tac_only
def test_kill9_dram_log_expired_overwrite_stays_gone(server, tier_files):
    """-o dram_log=on: a key stored without a TTL and then overwritten (set,
    in-place incr, append) by a version that expires before a kill is a miss
    after the restart, never its first value; a key overwritten without a TTL
    comes back with its last value.  (An overwrite of a DRAM-only version
    writes no journal record: the log's later record, expired, takes the
    older one away at the replay.)"""
    seed, rng, args, srv, c = dram_log_server(server, tier_files)
    keys = [b"crash:expov:%04d:%s" % (i, b"k" * rng.randint(20, 40)) for i in range(300)]
    first = {k: make_value(rng, k, 1, rng.randint(100, 2000)) for k in keys}
    r = replies(c, [b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v) for k, v in first.items()])
    assert r == [b"STORED"] * len(keys), tag(seed)
    expiring, kept = keys[:200], keys[200:]
    last = {}
    reqs = []
    for i, k in enumerate(expiring):
        if i % 2 == 0:
            v = make_value(rng, k, 2, rng.randint(100, 2000))
            reqs.append(b"set %s 0 2 %d\r\n%s\r\n" % (k, len(v), v))
        else:
            # a TTL first (a shorter life: journal), then an append (a
            # replacement the log orders)
            reqs.append(b"touch %s 2\r\n" % k)
            reqs.append(b"append %s 0 0 3\r\nabc\r\n" % k)
    for k in kept:
        v = make_value(rng, k, 2, rng.randint(100, 2000))
        last[k] = v
        reqs.append(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v))
    r = replies(c, reqs)
    assert set(r) <= {b"STORED", b"TOUCHED"}, "answers %s (%s)" % (sorted(set(r)), tag(seed))
    time.sleep(3.2)
    # Half of the expired keys read (and so reaped) before the kill.
    r = replies(c, [b"mg %s v\r\n" % k for k in expiring[::2]])
    assert r == [b"EN"] * len(expiring[::2]), "expired keys answered %s (%s)" % (sorted(set(r)), tag(seed))
    sigkill(srv, seed, "SIGKILL after the expiring overwrites")

    srv = start_again(server, srv, args, seed, "after SIGKILL")
    c, rs = wait_crash_recovered(srv, seed, "after SIGKILL")
    r = replies(c, [b"mg %s v\r\n" % k for k in expiring])
    back = [k for k, a in zip(expiring, r) if a != b"EN"]
    assert not back, "%d of %d keys whose last version expired came back (%s, %s): %s" % (
        len(back), len(expiring), tag(seed), rs, back[:5])
    got = gets_all(c, kept)
    wrong = [k for k in kept if k in got and got[k][2] != last[k]]
    assert not wrong, "%d keys came back with a value other than their last (%s)" % (len(wrong), tag(seed))
    assert len(got) >= 0.999 * len(kept), "%d of %d kept keys back (%s, %s)" % (
        len(got), len(kept), tag(seed), rs)
    sigkill(srv, seed, "at the end")


@pytest.mark.tac_only
def test_kill9_dram_log_keeps_client_set_cas(server, tier_files):
    """-o dram_log=on: items stored by `ms ... E<cas>` (the client picks the
    CAS) stay in DRAM while other writes wrap the log's ring several times;
    after a kill each comes back with its value and the client's CAS.  (The
    log once held the CAS the server made before the E flag replaced it, so
    the copy came back with that CAS, or cleaning took it for a replaced
    version and dropped it.)"""
    seed, rng, args, srv, c = dram_log_server(server, tier_files, ",dram_log_size=16m")
    want = {}
    for i in range(60):
        k = b"crash:ecas:%04d:%s" % (i, b"x" * rng.randint(20, 40))
        v = make_value(rng, k, 1, rng.randint(100, 3000))
        cas = rng.randint(1 << 40, 1 << 50)
        want[k] = (v, cas)
    r = replies(c, [b"ms %s %d E%d\r\n%s\r\n" % (k, len(v), cas, v) for k, (v, cas) in want.items()])
    assert r == [b"HD"] * len(want), "ms with E answered %s (%s)" % (sorted(set(r)), tag(seed))
    # 200 keys of 1000 B rewritten 120 times: 24 MB through a 16 MB ring,
    # while DRAM holds everything.
    filler = [b"crash:ecas:fill:%03d" % i for i in range(200)]
    for rnd in range(120):
        reqs = []
        for k in filler:
            v = make_value(rng, k, rnd, 1000)
            reqs.append(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v))
        assert set(replies(c, reqs)) == {b"STORED"}, tag(seed)
    st = c.stats(b"tiers")
    assert int(st["dram_log_bytes"]) > 16 * MB and int(st["dram_log_cleaned"]) > 0, (
        "the ring did not wrap (%s): %s" % (tag(seed), {
            k: v for k, v in st.items() if k.startswith("dram_log")}))
    sigkill(srv, seed, "SIGKILL after the E stores")

    srv = start_again(server, srv, args, seed, "after SIGKILL")
    c, rs = wait_crash_recovered(srv, seed, "after SIGKILL")
    rd = Reader(c.sock)
    c.sock.sendall(b"".join(b"mg %s c v\r\n" % k for k in want))
    bad = []
    for k, (v, cas) in want.items():
        ln = rd.line()
        if not ln.startswith(b"VA "):
            bad.append((k, ln))
            continue
        data = rd.exact(int(ln.split(b" ")[1]) + 2)[:-2]
        got_cas = [int(p[1:]) for p in ln.split(b" ")[2:] if p.startswith(b"c")]
        if data != v or got_cas != [cas]:
            bad.append((k, "cas %s want %d, value %s" % (got_cas, cas, "ok" if data == v else "WRONG")))
    rd.drained()
    assert not bad, "%d of %d E-stored items came back wrong (%s, %s): %s" % (
        len(bad), len(want), tag(seed), rs, bad[:5])
    sigkill(srv, seed, "at the end")


@pytest.mark.tac_only
@pytest.mark.parametrize("opts, want", [
    ("dram_log=on", "needs a file-backed NVM tier"),
    ("nvm_path=numa:0:16m,dram_log=on", "needs a file-backed NVM tier"),
    ("nvm_path=/dev/shm/tac-dram-log-refused:16m,dram_log=on,recovery=off", "no use with -o recovery=off"),
    ("nvm_path=/dev/shm/tac-dram-log-refused:32m,dram_log=on,dram_log_size=16m", "too small for -I"),
])
def test_dram_log_refused_without_its_needs(opts, want):
    """-o dram_log=on without a file-backed NVM tier, with recovery=off, or a
    log too small for -I (4m here) stops the start with a message saying why."""
    try:
        p = subprocess.run([SERVER_BIN] + base_args() + ["-l", "127.0.0.1", "-p", str(free_port()), "-U", "0",
                                                        "-I", "4m", "-o", opts],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=START_TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail("-o %s: the server started" % opts)
    finally:
        for name in os.listdir("/dev/shm"):
            if name.startswith("tac-dram-log-refused"):
                os.unlink(os.path.join("/dev/shm", name))
    msg = (p.stdout + p.stderr).decode("utf-8", "replace")
    assert p.returncode not in (0, None), "-o %s: the server started: %s" % (opts, msg)
    assert want in msg, "-o %s: expected %r in: %s" % (opts, want, msg)
