"""Named crash points: the server _exits at one step that changes durable state,
restarts, and every key is checked against a model of acknowledged results.

A build with the debug hooks (configure --enable-debug-hooks; the sanitizer
builds of scripts/test.sh have them) names every such step (crashpoint.h):
TAC_CRASH_LIST=1 prints the names; TAC_CRASH_AT=name:N at start, or the text
command `debug_crash_at name:N` later, makes the server _exit(86) at the Nth
pass of that point.  Without the hooks this file is skipped.

One run of a point (run_point): a server with three tiers (-m 8, NVM 8m, SSD
32m in 2m pages of 64k bufs; in some configurations -o dram_log=on or -o
tier_key) is loaded with 30-60 B keys (values of 100 B-20 KB that encode key,
version and a checksum, as in test_crash), armed at a pass N drawn from the
seed, and runs test_crash's mixed load plus add, gat, `md` with and without
I, until the point exits it.  Points of a graceful stop are reached by
a SIGTERM after the load; points of a recovery by a restart, armed, after a
SIGTERM (a graceful restore) or a SIGKILL (a crash scan and DRAM log replay).
Half the runs of the other points are then killed again in the recovery that
follows, at a scan or replay point.  Then the server starts unarmed, recovers,
and every key is read:

- wrong:       a value never stored for the key, or flags not its own;
- stale:       a value older than the newest one acknowledged;
- resurrected: a value of a key whose delete (or `md ... I`) was acknowledged;
- lost (dram_log=on only): a key whose last acknowledged state had no TTL,
  missing or older.

The request out at the exit may have taken effect or not.  A point that the
run does not reach (N past its passes) ends with a SIGKILL instead and is
checked the same way; the run is then repeated with a smaller N (half the
passes it counted) until the point is reached, up to RETRIES times
(run_until_reached), and the result lists the Ns tried.

The suite runs CP_POINTS (6) points drawn from TAC_CP_SEED (printed), each in
one configuration drawn from it.  bench/crashpoints.sh runs every point with
3 seeds in each configuration through TAC_CP_RUNS and TAC_CP_OUT (below).
"""
import collections
import json
import os
import random
import signal
import subprocess
import time
import zlib

import pytest

from mcserver import SERVER_BIN, START_TIMEOUT, Server
from test_crash import (
    INF,
    Model,
    OpStream,
    make_value,
    new_key,
    rand_flags,
    read_value,
    show,
)
from test_restart import IO_TIMEOUT, Reader, RECOVERY_TIMEOUT, chunks, gets_all, recovery_stats, replies, tier_files  # noqa: F401

SEED_ENV = "TAC_CP_SEED"
CP_POINTS = int(os.environ.get("TAC_CP_POINTS", "6"))
CRASH_EXIT = 86
CONFIGS = ("plain", "dram_log", "tier_key")
N_MAIN, N_NUM, N_FILL = 400, 60, 7000
MAX_OPS = 6000          # mixed-load ops before a point not reached is given up
MAX_LOAD_S = 6.0        # ... or seconds
SAVE = ("restart_save_lower", "restart_save_dram", "restart_save_synced", "restart_state_rename")
GRACEFUL_RECOVERY = ("restart_state_unlink", "restart_restore_chunk")
CRASH_RECOVERY = ("restart_scan_nvm_page", "restart_scan_ssd_buf", "restart_scan_done",
                  "restart_replay_record")
# Passes a run sees of a point, about (counted with TAC_CP_N=1000000000 and
# dram_log=on, debug_crash_passes after the mixed load; the recovery points
# from the recoveries' sizes): N is drawn log-uniformly up to it.  The
# journal points, move_stage, ssd_defrag_tuple and move_nvm_slot are passed
# only by their own shapes (SHAPES, JOURNAL_POINTS, ARM_AT_START,
# THIN_FILL); their figures are the lowest of the configurations.
PASSES = collections.defaultdict(lambda: 200, {
    "journal_record": 1000, "dramlog_append": 5000, "dramlog_wrap": 1, "dramlog_clean": 5000,
    "move_dram_to_nvm": 200, "move_dram_to_ssd": 20, "move_nvm_to_ssd": 300, "move_nvm_slot": 500,
    "journal_floor": 2, "journal_reuse": 6, "move_stage": 60, "ssd_defrag_tuple": 500,
    "ssd_buf_written": 8, "restart_state_unlink": 1, "restart_save_lower": 1, "restart_save_dram": 1,
    "restart_save_synced": 1, "restart_state_rename": 1, "restart_restore_chunk": 4,
    "restart_scan_nvm_page": 8, "restart_scan_ssd_buf": 50, "restart_scan_done": 1,
    "restart_replay_record": 3000,
})
# The tiers of a run (-o parts; %(nvm)s and %(ssd)s are the files), by point.
SHAPES = {
    None: "nvm_path=%(nvm)s:8m,ssd_path=%(ssd)s:32m,ssd_page_size=2m,ssd_buf_size=64k",
    # The NVM page mover moves a tuple to a free slot of its class when
    # another class needs the page: NVM alone, smaller than the data.
    "move_nvm_slot": "nvm_path=%(nvm)s:24m",
    # Defrag runs once SSD's free pages fall to the watermark.
    "ssd_defrag_tuple": "nvm_path=%(nvm)s:4m,ssd_path=%(ssd)s:16m,ssd_page_size=1m,ssd_buf_size=64k",
}
# Points whose load deletes half the fill keys before it is armed, then
# sets them again with values of these sizes: the same classes for defrag,
# others for the NVM page mover (which then empties a half-used page).
THIN_FILL = {"ssd_defrag_tuple": (1000, 3000), "move_nvm_slot": (5000, 9000)}
# Points armed from the start, passed while loading (a store that finds
# DRAM full goes straight down).
ARM_AT_START = ("move_stage",)
# Points passed only with the DRAM log on: every configuration adds it.
NEEDS_LOG = ("dramlog_append", "dramlog_wrap", "dramlog_clean", "restart_replay_record")


M64 = (1 << 64) - 1
JOURNAL_POINTS = ("journal_reuse", "journal_floor")
N_COLLIDE = 40          # keys sharing one journal bucket (two with a tier key): 5x its ways
BUCKET_BITS = 13        # the journal's buckets at these tier sizes: 2^13


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def key_hash(key):
    """The server's key hash (hash.c), whose low bits pick the item lock
    stripe and the journal bucket."""
    mul1, mul2 = 0x9fb21c651e98df25, 0xc2b2ae3d27d4eb4f
    h = 0x2545f4914f6cdd1d ^ ((len(key) * mul2) & M64)
    i = 0
    while len(key) - i >= 8:
        w = (int.from_bytes(key[i:i + 8], "little") * mul1) & M64
        w = (_rotl(w, 27) * mul2) & M64
        h = (_rotl(h ^ w, 31) * 5 + 0x52dce729) & M64
        i += 8
    n = len(key) - i
    if n:
        w = ((int.from_bytes(key[i:], "little") ^ (n << 56)) * mul2) & M64
        h ^= (_rotl(w, 33) * mul1) & M64
    h ^= h >> 31
    h = (h * mul1) & M64
    h ^= h >> 29
    h = (h * mul2) & M64
    h ^= h >> 32
    return (h ^ (h >> 32)) & 0xffffffff


def colliding_keys(rng, n):
    """n keys of 30-60 bytes whose hashes agree in the journal's bucket bits:
    one bucket (two with a tier key, whose hash keeps only the stripe's 12
    bits) gets more invalidations than its ways hold."""
    first = new_key(rng, 9, 0)
    want = key_hash(first) & ((1 << BUCKET_BITS) - 1)
    out, i = [first], 1
    while len(out) < n:
        k = new_key(rng, 9, i)
        if key_hash(k) & ((1 << BUCKET_BITS) - 1) == want:
            out.append(k)
        i += 1
    return out


def crash_points():
    """The point names of SERVER_BIN, or [] when it has no debug hooks (it
    then ignores TAC_CRASH_LIST and prints -h)."""
    env = dict(os.environ, TAC_CRASH_LIST="1")
    try:
        out = subprocess.run([SERVER_BIN, "-h"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, timeout=30).stdout.decode()
    except (OSError, subprocess.TimeoutExpired):
        return []
    names = out.split()
    if "journal_record" not in names or not all(n.replace("_", "").isalnum() for n in names):
        return []
    return names


def cp_seed():
    seed = int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(1 << 31))
    print("%s=%d" % (SEED_ENV, seed))
    return seed


def start(server, args, port, env_at, wait=True):
    """A server on port (None: a free one) with TAC_CRASH_AT=env_at (None: unarmed)."""
    old = os.environ.pop("TAC_CRASH_AT", None)
    try:
        if env_at:
            os.environ["TAC_CRASH_AT"] = env_at
        if port is None:
            srv = server(args, wait=wait)
        else:
            srv = Server(args, server.tmpdir, port=port, wait=wait)
            server.servers.append(srv)
    finally:
        os.environ.pop("TAC_CRASH_AT", None)
        if old is not None:
            os.environ["TAC_CRASH_AT"] = old
    srv.expect_exit = True
    return srv


def ended(srv, timeout):
    """srv's exit status once it exits within timeout, else None."""
    try:
        return srv.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None


def sigterm(srv, timeout=60):
    """Closes the test's connections, sends SIGTERM and returns the exit status
    (None if it did not exit within timeout)."""
    for c in srv.conns:
        c.close()
    srv.conns = []
    srv.proc.send_signal(signal.SIGTERM)
    return ended(srv, timeout)


def kill(srv):
    for c in srv.conns:
        c.close()
    srv.conns = []
    if srv.proc.poll() is None:
        srv.proc.kill()
    return srv.proc.wait(30)


def wait_recovered(srv, what):
    """Polls stats until recovery_state is done or failed, or srv exits.
    Returns (exit status or None, recovery stats or None)."""
    deadline = time.time() + RECOVERY_TIMEOUT
    c = None
    while time.time() < deadline:
        rc = srv.proc.poll()
        if rc is not None:
            return rc, None
        try:
            if c is None:
                c = srv.connect(timeout=IO_TIMEOUT)
            rs = recovery_stats(c.stats(b"tac"))
        except (OSError, ConnectionError, AssertionError, ValueError):
            c = None
            time.sleep(0.02)
            continue
        if rs["state"] in ("done", "failed", "none", "off"):
            return None, rs
        time.sleep(0.03)
    raise AssertionError("%s: recovery not over within %ss\n%s" % (what, RECOVERY_TIMEOUT, srv.stderr_text()))


class Stream(OpStream):
    """test_crash's op stream plus add, gat, `md` with and without I, and values
    up to 20 KB.  A key marked stale by `md ... I` is only set again (the
    live server still serves it, marked)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.marked = set()
        self.cas_seen = {}          # CAS a client saw -> (key, value)

    def live_get(self, k, hit, t, what):
        if hit is not None and hit[1] is not None:
            self.cas_seen[hit[1]] = (k, hit[2])
        super().live_get(k, hit, t, what)

    def step(self):
        m, rng = self.m, self.rng
        if rng.random() < 0.12:
            m.opno += 1
            k = self.main_key()
            r = rng.random()
            if r < 0.35:
                return self.op_add(k)
            if r < 0.55:
                return self.op_gat(k)
            return self.op_md(k, rng.random() < 0.5)
        super().step()

    def main_key(self):
        """A key not marked stale (a marked one is set again first)."""
        k = super().main_key()
        if k in self.marked:
            self.m.opno += 1
            self.op_set(k)
        return k

    def op_set(self, k):
        m, rng = self.m, self.rng
        size = rng.randint(100, 20000) if rng.random() < 0.2 else rng.randint(100, 4096)
        v = make_value(rng, k, m.opno, size)
        fl = rand_flags(rng)
        r, _t = self.storage(b"set", k, v, fl, [(v, fl, None)])
        if r != b"STORED":
            self.fail(k, "set answered %r" % r)
        m.write(k, v, fl)
        self.marked.discard(k)
        m.note(k, "set %d B" % len(v))
        self.counts["set"] += 1

    def op_add(self, k):
        m, rng = self.m, self.rng
        v = make_value(rng, k, m.opno, rng.randint(100, 4096))
        fl = rand_flags(rng)
        r, t = self.storage(b"add", k, v, fl, [] if k in m.val else [(v, fl, None)])
        if r == b"STORED":
            self.absent(k, "add answered STORED")
            m.write(k, v, fl)
        elif r == b"NOT_STORED":
            self.present(k, t, "add answered NOT_STORED")
        else:
            self.fail(k, "add answered %r" % r)
        m.note(k, "add %d B: %s" % (len(v), r.decode()))
        self.counts["add"] += 1

    def op_gat(self, k):
        m, rng = self.m, self.rng
        ttl = rng.choice((1, 2, 3600))
        cur = m.current(k)
        m.pending = (k, [(cur[0], cur[1], INF)] if cur else [])
        t = time.time()
        self.sock.sendall(b"gat %d %s\r\n" % (ttl, k))
        hit = read_value(self.rd, k, m.seed)
        m.pending = None
        self.live_get(k, hit, t, "gat %d" % ttl)
        if hit is not None:
            # A longer TTL may also be lost at a crash (the item keeps no
            # deadline the model knows); a shorter one must hold.
            m.touch(k, time.time() + ttl + 3.0 if ttl < 10 else INF)
        self.counts["gat"] += 1

    def op_md(self, k, stale):
        m = self.m
        r, t = self.request(k, b"md %s%s\r\n" % (k, b" I" if stale else b""), [])
        if r == b"HD":
            self.present(k, t, "md answered HD")
        elif r == b"NF":
            self.absent(k, "md answered NF")
        else:
            self.fail(k, "md answered %r" % r)
        m.remove(k)
        if stale and r == b"HD":
            self.marked.add(k)
        m.note(k, "md%s: %s" % (" I" if stale else "", r.decode()))
        self.counts["md I" if stale else "md"] += 1


def marked_as_stale(c, keys):
    """(the keys among `keys` that `mg <key> v` answers with the X (stale)
    flag, those it answers as a miss: expired since the gets)."""
    out, gone = set(), set()
    for b in chunks(list(keys), 50):
        c.sock.sendall(b"".join(b"mg %s v\r\n" % k for k in b))
        rd = Reader(c.sock)
        for k in b:
            ln = rd.line()
            if ln.startswith(b"VA "):
                rd.exact(int(ln.split()[1]) + 2)
                if b"X" in ln.split()[2:]:
                    out.add(k)
            elif ln == b"EN":
                gone.add(k)
        rd.drained()
    return out, gone


def verify(m, c, marked, deleted, want, cas_seen=None):
    """Every key after the restart, judged against the model (test_crash's
    Model.judge), and no CAS a client saw before the crash on another
    version (cas_seen: CAS -> (key, value)).  Returns a Counter of outcomes
    and a list of examples."""
    t0 = time.time()
    found = gets_all(c, m.keys)
    served_stale, expired = marked_as_stale(c, [k for k in marked if k in found])
    for k in expired:
        del found[k]
    pk, pstates = m.pending if m.pending else (None, [])
    m.pending = None
    out = collections.Counter()
    bad = []
    for k in m.keys:
        extra = pstates if k == pk else []
        hit = found.get(k)
        if k in want and (hit is None or not m.same(k, hit[2], want[k][0]) or hit[0] != want[k][1]):
            out["lost"] += 1
            bad.append("lost: %r: %s, want %s (last ops: %s)" % (
                k, "a miss" if hit is None else show(hit[2]), show(want[k][0]), m.history(k)))
        if hit is None:
            m.gone(k, extra)
            out["miss"] += 1
            continue
        flags, cas, value = hit
        seen = (cas_seen or {}).get(cas)
        if seen is not None and (seen[0] != k or m.norm(k, value) != m.norm(k, seen[1])):
            out["wrong"] += 1
            bad.append("wrong: %r: CAS %d, which a client saw before the crash on %r %s, now on %s" % (
                k, cas, seen[0], show(seen[1]), show(value)))
            continue
        if k in served_stale:
            # A graceful restart keeps the stale mark (RS_KEEP_FLAGS): the
            # value is served marked X, as before the stop.
            out["served stale"] += 1
            continue
        states = m.acceptable(k) + list(extra)
        ok, why = m.judge(k, states, flags, value, t0)
        if ok:
            m.adopt(k, ok)
            out["hit"] += 1
            continue
        kind = "wrong" if why[0] == "corrupt" else "stale"
        if kind == "stale" and k in marked:
            kind = "stale-marked fresh"
        elif kind == "stale" and k in deleted:
            kind = "resurrected"
        out[kind] += 1
        bad.append("%s: %r: %s; it may hold %s; last ops: %s" % (
            kind, k, why[1], ", ".join(show(st[0]) for st in states) or "nothing", m.history(k)))
    return out, bad


def store_batch(c, m, vals, what):
    """Pipelined sets of [(key, value, flags)], each STORED.  A batch whose
    answers did not all come back at an exit may have left each key either
    way (m.lost)."""
    for k, v, fl in vals:
        m.lost[k] = [(v, fl, None)]
    r = replies(c, [b"set %s %d 0 %d\r\n%s\r\n" % (k, fl, len(v), v) for k, v, fl in vals])
    assert r == [b"STORED"] * len(vals), "%s answered %s" % (what, sorted(set(r)))
    for k, v, fl in vals:
        m.lost.pop(k, None)
        m.write(k, v, fl)


def run_point(server, tier_files, point, seed, config, n_at=None, max_ops=MAX_OPS, variant=0):
    """One run (see the module's text).  Returns a dict of counts.  n_at
    overrides the pass drawn from the seed, max_ops the mixed load's length,
    and a variant above 0 draws another load from the same seed (a retry's,
    run_until_reached)."""
    rng = random.Random("%d/%s/%s" % (seed, point, config) + ("/%d" % variant if variant else ""))
    drawn = max(1, int(round(PASSES[point] ** rng.random())))
    n_at = n_at or drawn
    if os.environ.get("TAC_CP_N"):
        n_at = int(os.environ["TAC_CP_N"])      # e.g. 10**9: count the passes
    at = "%s:%d" % (point, n_at)
    nvm, ssd = tier_files()
    shape = os.environ.get("TAC_CP_SHAPE") or SHAPES.get(point, SHAPES[None])
    o = [t % {"nvm": nvm, "ssd": ssd} for t in shape.split(",")]
    if config == "dram_log" or point in NEEDS_LOG:
        o.append("dram_log=on")
    if config == "tier_key":
        kp = os.path.join(server.tmpdir, "cp-%d.key" % rng.randrange(1 << 30))
        with open(kp, "wb") as f:
            f.write(rng.randbytes(32))
        os.chmod(kp, 0o600)
        o.append("tier_key=" + kp)
    args = ["-t", "2", "-m", "8", "-o", ",".join(o)]
    res = collections.Counter()
    res["before evictions"] = 0
    res["n"] = n_at
    when = "%s %s seed %d (%s)" % (point, config, seed, at)

    main = [new_key(rng, 7, i) for i in range(N_MAIN)]
    if point in JOURNAL_POINTS:
        main[:N_COLLIDE] = colliding_keys(rng, N_COLLIDE)
    nums = [new_key(rng, 8, i) for i in range(N_NUM)]
    fill_keys = [new_key(rng, 6, i) for i in range(N_FILL)]
    m = Model(seed, set(nums))
    for k in main + nums + fill_keys:
        m.keys.append(k)

    arm_at_start = point in ARM_AT_START
    srv = start(server, args, None, at if arm_at_start else None)
    port = srv.port
    c = srv.connect(timeout=IO_TIMEOUT)
    rc = None
    marked, deleted = set(), set()
    stream = None
    # Loading: op keys first, then the fill pushes them down.  A batch whose
    # answers did not all come back at an exit may have left each key either way.
    try:
        for b in chunks(main + nums + fill_keys, 200):
            vals = []
            for k in b:
                if k in nums:
                    v = b"%d" % rng.randrange(10 ** 9)
                elif k in fill_keys:
                    v = make_value(rng, k, 0, rng.randint(1000, 3000))
                else:
                    v = make_value(rng, k, 0, rng.randint(100, 20000) if rng.random() < 0.2
                                   else rng.randint(100, 4096))
                vals.append((k, v, rand_flags(rng)))
            store_batch(c, m, vals, when + ": loading")
        if point in THIN_FILL:
            # Half the fill deleted: its SSD pages stay half live, which
            # defrag packs once free pages run short.
            gone = fill_keys[::2]
            for b in chunks(gone, 200):
                r = replies(c, [b"delete %s\r\n" % k for k in b])
                # NOT_FOUND: a full SSD dropped it meanwhile.
                assert set(r) <= {b"DELETED", b"NOT_FOUND"}, "%s: deleting answered %s" % (when, sorted(set(r)))
                for k in b:
                    m.remove(k)
        if point not in GRACEFUL_RECOVERY + CRASH_RECOVERY and not arm_at_start:
            r = replies(c, [b"debug_crash_at %s\r\n" % at.encode()])
            assert r == [b"OK"], "%s: debug_crash_at answered %r" % (when, r)
        if point in THIN_FILL:
            # Armed, the deleted half comes back: the writes push the
            # half-live pages' data down until free pages run short.
            for b in chunks(fill_keys[::2], 200):
                lo, hi = THIN_FILL[point]
                vals = [(k, make_value(rng, k, 1, rng.randint(lo, hi)), rand_flags(rng)) for k in b]
                store_batch(c, m, vals, when + ": refilling")
        stream = Stream(m, c, random.Random(rng.random()), main, main[:60], nums, 0, False)
        t_end = time.time() + MAX_LOAD_S * max_ops / MAX_OPS
        done = 0
        while done < max_ops and time.time() < t_end:
            stream.step()
            done += 1
        res["ops"] = done
        if point not in GRACEFUL_RECOVERY + CRASH_RECOVERY:
            r = replies(c, [b"debug_crash_passes\r\n"])[0]
            res["passes"] = int(r.split()[1])
        # What the tiers gave up before the kill: a key dropped there is not
        # a loss of the crash.
        st = c.stats_general()
        for n in ("evictions", "nvm_evictions", "ssd_items_dropped", "dram_log_lost"):
            if n in st:
                res["before " + n] = int(st[n])
    except (OSError, ConnectionError, TimeoutError):
        rc = ended(srv, 30)
        assert rc is not None, "%s: the connection failed, the server runs on\n%s" % (when, srv.stderr_text())
    if stream is not None:
        marked = set(stream.marked)
        res["cas seen"] = len(stream.cas_seen)
        res.update({"op " + k: v for k, v in stream.counts.items()})
    deleted = {k for k in m.keys if k not in m.val and k not in m.lost}
    if rc is None and point in SAVE:
        rc = sigterm(srv)
        assert rc is not None, "%s: no exit within 60 s of SIGTERM" % when
        if rc == 0:
            rc = None           # stopped without reaching the point: checked as a clean stop
            res["graceful"] = 1
    elif rc is None and point in GRACEFUL_RECOVERY + CRASH_RECOVERY:
        if point in GRACEFUL_RECOVERY:
            assert sigterm(srv) == 0, "%s: SIGTERM did not stop the server cleanly\n%s" % (
                when, srv.stderr_text())
        else:
            kill(srv)
        srv = start(server, args, port, at, wait=False)
        rc, _rs = wait_recovered(srv, when + ", the armed recovery")
        if rc is None:
            kill(srv)
    elif rc is None:
        kill(srv)
    if rc is not None:
        assert rc == CRASH_EXIT, "%s: the server exited with %s, not at the point\n%s" % (
            when, rc, srv.stderr_text())
        res["reached"] = 1
    else:
        res["not reached"] = 1
    # Acknowledged, with no TTL: what the DRAM log keeps.  A point of a
    # graceful stop exits with everything acknowledged long before.
    want = {}
    if "dram_log=on" in o and not res["before evictions"]:
        pk = m.pending[0] if m.pending else None
        want = {k: (m.val[k], m.flags[k]) for k in m.val if k not in m.ttl and k != pk}
        if point in JOURNAL_POINTS:
            # An overflow gives up the bucket's keys up to its floor: the
            # colliding keys', and any other key of that bucket (its
            # stripe's bits match).
            stripe = key_hash(main[0]) & 0xfff
            want = {k: v for k, v in want.items() if key_hash(k) & 0xfff != stripe}

    # Half the runs that ended by a crash are killed again in the recovery
    # that follows, at a point of the scan or the replay.
    if rng.random() < 0.5 and point not in SAVE + GRACEFUL_RECOVERY:
        second = rng.choice(CRASH_RECOVERY)
        at2 = "%s:%d" % (second, max(1, int(round(PASSES[second] ** rng.random()))))
        srv = start(server, args, port, at2, wait=False)
        rc2, _rs = wait_recovered(srv, when + ", the recovery armed at " + at2)
        if rc2 is None:
            kill(srv)
            res["second kill not reached"] = 1
        else:
            assert rc2 == CRASH_EXIT, "%s: the recovery armed at %s exited with %s\n%s" % (
                when, at2, rc2, srv.stderr_text())
            res["second kill"] = 1
        res["second at"] = at2
    srv = start(server, args, port, None, wait=False)
    rc2, rs = wait_recovered(srv, when + ", the unarmed restart")
    assert rc2 is None, "%s: the unarmed restart exited (rc=%s)\n%s" % (when, rc2, srv.stderr_text())
    c = srv.connect(timeout=IO_TIMEOUT)
    out, bad = verify(m, c, marked, deleted, want, stream.cas_seen if stream is not None else None)
    st = c.stats_general()
    res.update(out)
    res["recovery_items"] = int(rs["items"])
    res["evictions"] = int(st.get("evictions", 0))
    if "dram_log_lost" in st:
        res["dram_log_lost"] = int(st["dram_log_lost"])
    kill(srv)
    res["examples"] = bad[:5]
    print("%s: %s" % (when, json.dumps({k: v for k, v in res.items() if k != "examples"}, sort_keys=True)))
    for b in bad[:5]:
        print("   ", b)
    return dict(res)


HOOKS = crash_points()
pytestmark = pytest.mark.tac_only


@pytest.mark.parametrize("dram_mb,log,graceful", [(64, True, True), (8, True, True), (8, False, False)],
                         ids=["m64-log-graceful", "m8-log-graceful", "m8-nolog-live"])
def test_stale_mark_never_fresh_after_crash(server, tier_files, dram_mb, log, graceful):
    """Found by the crash points (restart_restore_chunk, dram_log=on): a
    stale-marked item (`md <key> I`) must never be written to the log or a
    lower tier as a fresh version: after a SIGKILL, each such key is a miss or
    still marked stale (X), never plain.  A graceful restart brings marked
    items back marked, which logged them (-m 64: 1,334 of 1,334 came back
    fresh before the fix); at -m 8 the restore and the evictors move what
    DRAM cannot hold down, which wrote them as fresh tuples (675 of 1,334).
    Without a restart and without the log, the evictors alone did it."""
    seed = cp_seed()
    rng = random.Random(seed)
    nvm, ssd = tier_files()
    args = ["-t", "2", "-m", str(dram_mb), "-o",
            "nvm_path=%s:8m,ssd_path=%s:32m,ssd_page_size=2m,ssd_buf_size=64k%s" % (
                nvm, ssd, ",dram_log=on" if log else "")]
    keys = [new_key(rng, 7, i) for i in range(4000)]
    vals = {k: make_value(rng, k, 1, rng.randint(1000, 5000)) for k in keys}
    srv = start(server, args, None, None)
    c = srv.connect(timeout=IO_TIMEOUT)
    for b in chunks(keys, 200):
        assert replies(c, [b"set %s 3 0 %d\r\n%s\r\n" % (k, len(vals[k]), vals[k]) for k in b]) == [b"STORED"] * len(b)
    marked = keys[::3]
    got = replies(c, [b"md %s I\r\n" % k for k in marked])
    if got != [b"HD"] * len(marked):
        lost = [k for k, g in zip(marked, got) if g != b"HD"]
        st = "\n".join("%s %s" % kv for kv in c.stats(b"tiers").items() if kv[1] != "0")
        raise AssertionError("md I of loaded keys: %d not HD, e.g. %r (seed %d)\n%s" % (len(lost), lost[:3], seed, st))
    if graceful:
        assert sigterm(srv) == 0, "SIGTERM did not stop the server cleanly (seed %d)\n%s" % (
            seed, srv.stderr_text())
        srv = start(server, args, srv.port, None)
        rc, rs = wait_recovered(srv, "the graceful restart")
        assert rc is None and rs["state"] == "done", "graceful restore: rc %s, %s (seed %d)" % (rc, rs, seed)
        c = srv.connect(timeout=IO_TIMEOUT)
    else:
        # More keys push the marked ones down (3x -m in all).
        more = [new_key(rng, 6, i) for i in range(6000)]
        for b in chunks(more, 200):
            assert replies(c, [b"set %s 0 0 2000\r\n%s\r\n" % (k, bytes(2000)) for k in b]) == [b"STORED"] * len(b)
    # A write after the restore makes the log move (and its replay run).
    assert replies(c, [b"set %s 3 0 2\r\nzz\r\n" % keys[1]]) == [b"STORED"]
    time.sleep(1.5)     # the SSD writer's idle flush
    kill(srv)
    srv = start(server, args, srv.port, None)
    rc, rs = wait_recovered(srv, "the restart after SIGKILL")
    assert rc is None, "the restart after SIGKILL exited (rc %s, seed %d)" % (rc, seed)
    c = srv.connect(timeout=IO_TIMEOUT)
    found = gets_all(c, marked)
    served_stale, _expired = marked_as_stale(c, [k for k in marked if k in found])
    fresh = [k for k in marked if k in found and k not in served_stale]
    print("-m %d%s%s: %d keys marked stale; after the SIGKILL %d hit, %d marked X, "
          "%d served fresh; recovery %s" % (dram_mb, " dram_log" if log else "", " graceful" if graceful else "",
                                            len(marked), len(found), len(served_stale), len(fresh), rs))
    assert not fresh, "%d of %d stale-marked keys came back fresh after a graceful restart and a SIGKILL, " \
        "e.g. %r (seed %d)" % (len(fresh), len(marked), fresh[:3], seed)
    kill(srv)


BAD_KINDS = ("wrong", "stale", "resurrected", "stale-marked fresh", "lost")
RETRIES = 4


def run_until_reached(server, tier_files, point, seed, config):
    """run_point, and while the point was not reached, again (up to RETRIES
    more times) with a smaller N: half the passes the last run counted,
    or, at a recovery point or with none counted, a quarter of its N, a
    mixed load twice as long, and where a load passed the point not at all
    another load drawn from the seed.  Every run's keys are checked; the
    result is the last run's, with the bad keys of all of them and the Ns
    tried."""
    if os.environ.get("TAC_CP_N"):
        return run_point(server, tier_files, point, seed, config)
    r = run_point(server, tier_files, point, seed, config)
    tried, bad, ops, variant = [r["n"]], collections.Counter(), MAX_OPS, 0
    while r.get("not reached") and len(tried) <= RETRIES:
        for k in BAD_KINDS:
            bad[k] += r.get(k, 0)
        passes = r.get("passes", 0)
        if passes > 0:
            n = max(1, min(passes, r["n"]) // 2)
        else:
            n, ops = max(1, r["n"] // 4), ops * 2
            if "passes" in r:
                variant += 1
        r = run_point(server, tier_files, point, seed, config, n_at=n, max_ops=ops, variant=variant)
        tried.append(r["n"])
    for k in BAD_KINDS:
        r[k] = r.get(k, 0) + bad[k]
    if len(tried) > 1:
        r["ns tried"] = tried
    return r


@pytest.mark.skipif(not HOOKS, reason="the server has no debug hooks (TAC_CRASH_LIST)")
def test_crash_points_sample(server, tier_files):
    """CP_POINTS points drawn from the seed, each in a configuration drawn
    from it: zero wrong, stale, resurrected and stale-marked-fresh values,
    and with dram_log=on nothing acknowledged without a TTL lost.
    TAC_CP_RUNS=point:seed:config;... runs exactly those instead, and with
    TAC_CP_OUT=FILE every result goes to FILE as a JSON line, unchecked
    (bench/crashpoints.sh)."""
    runs = os.environ.get("TAC_CP_RUNS")
    if runs:
        plan = [(p, int(s), cfg) for p, s, cfg in (r.split(":") for r in runs.split(";") if r)]
    else:
        seed = cp_seed()
        rng = random.Random(seed)
        plan = [(p, seed, rng.choice(CONFIGS)) for p in rng.sample(
            HOOKS, CP_POINTS)]
        print("points: %s" % ", ".join("%s (%s)" % (p, cfg) for p, _s, cfg in plan))
    out_path = os.environ.get("TAC_CP_OUT")
    failures = []
    for point, seed, cfg in plan:
        t0 = time.time()
        try:
            r = run_until_reached(server, tier_files, point, seed, cfg)
        except AssertionError as e:
            if not out_path:
                raise
            r = {"error": str(e)[:2000]}
        r.update(point=point, seed=seed, config=cfg, seconds=round(time.time() - t0, 2))
        if out_path:
            with open(out_path, "a") as f:
                f.write(json.dumps(r, sort_keys=True) + "\n")
            continue
        n = sum(r.get(k, 0) for k in BAD_KINDS)
        if n:
            failures.append("%s (%s, TAC_CP_RUNS=%s:%d:%s): %s" % (
                point, cfg, point, seed, cfg, "; ".join(r["examples"][:3])))
    assert not failures, "%d of %d crash points failed:\n%s" % (len(failures), len(plan), "\n".join(failures))


@pytest.mark.skipif(not HOOKS, reason="the server has no debug hooks (TAC_CRASH_LIST)")
def test_journal_overflow_costs_only_its_bucket(server, tier_files):
    """40 keys in one journal bucket (5x its ways) overflow it under the mixed
    load; the kill comes as the overflow is recorded.  With dram_log=on every
    acknowledged write without a TTL comes back but the bucket's own keys.
    Before the floor was per bucket, it was the whole cache's: 7,190 of 7,335
    such keys were lost at the next crash."""
    seed = cp_seed()
    r = run_point(server, tier_files, "journal_floor", seed, "dram_log")
    assert r.get("reached"), "the overflow never happened (seed %d): %r" % (seed, r)
    bad = {k: r.get(k, 0) for k in ("wrong", "stale", "resurrected", "stale-marked fresh", "lost") if r.get(k, 0)}
    assert not bad, "seed %d: %r; %s" % (seed, bad, "; ".join(r["examples"][:3]))
    assert r.get("hit", 0) > 0.9 * (N_MAIN + N_NUM + N_FILL) - r.get("op delete", 0) - r.get("op md", 0) \
        - r.get("op md I", 0), "seed %d: %r" % (seed, r)


@pytest.mark.skipif(not HOOKS, reason="the server has no debug hooks (TAC_CRASH_LIST)")
@pytest.mark.parametrize("at", ["restart_state_unlink:1", "restart_restore_chunk:2"])
def test_kill_during_graceful_restore_keeps_dram_log_items(server, tier_files, at):
    """Issue 37 item 3, found again by the crash points: with -o dram_log=on a
    kill during a graceful restore (the state file already unlinked, the restore
    not over) lost every DRAM item not linked yet (3,346 of 6,400 keys here at
    restart_state_unlink:1, 2,260 at restart_restore_chunk:2, before main's
    8a5ab81 kept the state as FILE.restoring): every key comes back with its
    value and flags, no deleted one."""
    seed = cp_seed()
    rng = random.Random(seed)
    nvm, ssd = tier_files()
    args = ["-t", "2", "-m", "16", "-o",
            "nvm_path=%s:8m,ssd_path=%s:32m,ssd_page_size=2m,ssd_buf_size=64k,dram_log=on" % (nvm, ssd)]
    keys = [new_key(rng, 7, i) for i in range(8000)]
    vals = {k: (make_value(rng, k, 1, rng.randint(100, 4000)), rand_flags(rng)) for k in keys}
    srv = start(server, args, None, None)
    c = srv.connect(timeout=IO_TIMEOUT)
    for b in chunks(keys, 200):
        r = replies(c, [b"set %s %d 0 %d\r\n%s\r\n" % (k, vals[k][1], len(vals[k][0]), vals[k][0]) for k in b])
        assert r == [b"STORED"] * len(b), "loading (seed %d): %s" % (seed, sorted(set(r)))
    deleted = keys[::5]
    assert replies(c, [b"delete %s\r\n" % k for k in deleted]) == [b"DELETED"] * len(deleted)
    assert sigterm(srv) == 0, "SIGTERM did not stop the server cleanly (seed %d)\n%s" % (seed, srv.stderr_text())
    srv = start(server, args, srv.port, at, wait=False)
    rc, _rs = wait_recovered(srv, "the restart armed at " + at)
    assert rc == CRASH_EXIT, "the restart armed at %s: rc %s, want %d (seed %d)\n%s" % (
        at, rc, CRASH_EXIT, seed, srv.stderr_text())
    srv = start(server, args, srv.port, None, wait=False)
    rc, rs = wait_recovered(srv, "the restart after the kill at " + at)
    assert rc is None, "the restart after the kill exited (rc %s, seed %d)" % (rc, seed)
    c = srv.connect(timeout=IO_TIMEOUT)
    found = gets_all(c, keys)
    dead = set(deleted)
    missing = [k for k in keys if k not in dead and k not in found]
    wrong = [k for k in keys if k not in dead and k in found and (found[k][2], found[k][0]) != vals[k]]
    back = [k for k in deleted if k in found]
    print("killed at %s: %d of %d live keys back, %d missing, %d wrong, %d deleted keys back; recovery %s" % (
        at, len(keys) - len(dead) - len(missing), len(keys) - len(dead), len(missing), len(wrong), len(back), rs))
    assert not missing and not wrong and not back, (
        "after a kill at %s during a graceful restore with dram_log=on: %d keys missing, %d wrong, %d deleted "
        "keys back, e.g. %r (seed %d)" % (at, len(missing), len(wrong), len(back), (missing + wrong + back)[:3], seed))
    kill(srv)
