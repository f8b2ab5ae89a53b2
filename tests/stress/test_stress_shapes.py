"""Workload shapes against all three tiers: a store is never refused while a tier has
room, every read is verified, and stores keep completing.

Axes (DESIGN.md section 7, "back-pressure, never refusal"):
  key length   8, 33, 64, 250 B
  value size   100 B, 1.1 KB, 16 KB, 500 KB (each +-10%), or mixed (per write:
               45% ~100 B, 35% ~1.1 KB, 15% ~16 KB, 5% ~500 KB)
  DRAM:NVM:SSD 1:2:16, 1:8:32, 1:0:16 (no NVM), 1:8:0 (no SSD); DRAM is -m
               (STRESS_SHAPES_DRAM_MB: 12, 8 for a sanitizer build)
  updates      50% or 100% of the operations (the rest are reads), with bursts of
               16-128 pipelined updates from one thread
  busy         2 busy-loop processes at nice 0 share the cores with the server

Clients: 8 threads.  Threads 0-4 share one connection and 5-6 another, the way
spymemcached (YCSB's memcached binding) shares one: requests queue up, one write
sends whatever has queued (pipelining), one reader matches replies in FIFO order
(shapes_client.Mux).  Thread 7 has a connection to itself.  Keys are chosen
zipfian-ish (shapes_client.Skewed).

Data set: the threads first store every key once (16 sets in flight per thread),
then run updates and reads for STRESS_SECONDS (3 s; 8 s in long mode), then a
sweep reads every key back.  With an SSD the data set is 1.4x DRAM+NVM (at most
45% of the SSD), so it fills DRAM and NVM and spills into SSD; without an SSD it
is 0.7x DRAM+NVM in slab footprints, so it fits (with mixed sizes, also when the
number of ~500 KB values peaks 4.5 standard deviations above its mean).  Every key also holds a meta tuple in DRAM; the
data set is capped so that meta tuples need at most half of DRAM.  For small
values that cap binds first (DRAM runs out of room for meta tuples before NVM
fills: with 1.1 KB values and DRAM:NVM 1:8 no data set can fill NVM), and the
case prints where its data ended up.  Every case therefore has room in some tier
for everything it stores: no case may see a refusal, a dropped item or a stall.

Each case asserts
  * no SERVER_ERROR of any kind (and no other unexpected reply);
  * no wrong value: a value carries its key's hash, a version (seq*64 + writer)
    and a CRC32 over key, version and padding.  Key i is written only by thread
    i % 8, which knows its last acknowledged version and must read exactly that;
    another thread must read a version its owner sent that is no older than the
    last one acknowledged when the read was sent;
  * no lost key: an acknowledged key misses only after a refused set (memcached
    unlinks the old value when a set fails);
  * nothing dropped: evictions, nvm_evictions and ssd_items_dropped stay 0;
  * progress: no window of more than 1 s (5 s in a sanitizer build) in which no
    store completed while one was outstanding.
Per case it prints ops, stores, refusals, stall windows and the server's
store_no_memory, nvm_alloc_failures, meta_alloc_failures, evictions,
ssd_large_bufs and evictor_backlog (the largest seen by a 0.5 s sampler).

Modes (STRESS_SHAPES):
  short     the default; about 65 s, and 80 s against an ASan build, on 2 busy
            cores.  10 cases that cover every value of every axis at least twice
            (each value size with two different ratios, five cases busy) and the
            shapes most likely to break (500 KB without NVM and without SSD, DRAM
            straight to SSD, 250 B keys with 100 B values, the YCSB shape).  An
            all-pairs design needs 22 cases, more than scripts/test.sh can spend.
  pairwise  that all-pairs design.
  long      the full product, 320 cases (bench/shapes-long.sh).
STRESS_SHAPES_CASES=<substring>,... keeps the cases whose id contains one of them.

A sanitizer build (ASan/TSan runtime symbols in the binary, or TAC_SKIP_SLOW=1)
runs the same cases at 8 MB of DRAM (2/3 of the data) without the CPU hog:
the hog would measure the sanitizer's slowness, not the server's, and the 5 s
progress window is meant for the instrumented code alone.

Also test_large_items_M: -M (store semantics) with 256 KB - 1 MB values over all
three tiers: every acknowledged key reads back exactly, and a refusal comes only
when NVM and SSD are both full (checked against `stats tiers` taken at the
refusal).

Seed: STRESS_SEED (printed).  SSD file directory: $TAC_SSD_DIR (default: the
system temp dir; it must take O_DIRECT, so not tmpfs).
"""
import collections
import itertools
import os
import random
import shutil
import tempfile
import threading
import time
import uuid

import pytest

from mcserver import IS_STOCK, SERVER_BIN, remove_tier_file
from shapes_client import (CpuHog, Mux, Skewed, WrongValue, check_value, fmt_bytes, make_keys, make_value,
                           sanitizer_build, stall_windows)

pytestmark = [pytest.mark.tac_only,
              pytest.mark.skipif(IS_STOCK, reason="tac-only behaviour; TAC_SERVER is stock memcached")]

MODE = os.environ.get("STRESS_SHAPES", "short")
SANITIZER = sanitizer_build(SERVER_BIN) or os.environ.get("TAC_SKIP_SLOW") == "1"
STALL_LIMIT = 5.0 if SANITIZER else 1.0
THREADS = 8
# thread -> connection: 0-4 share "A", 5-6 share "B", 7 has "C" to itself
CONN_OF = ["A"] * 5 + ["B"] * 2 + ["C"]
PRELOAD_WINDOW = 16
BURST_WINDOW = 8

KEY_LENS = [8, 33, 64, 250]
VALUE_SIZES = ["100", "1.1k", "16k", "500k", "mixed"]
RATIOS = ["1:2:16", "1:8:32", "1:0:16", "1:8:0"]
UPDATES = [50, 100]
BUSY = [False, True]
SIZE_OF = {"100": 100, "1.1k": 1100, "16k": 16 << 10, "500k": 500 << 10}
MIXED = [(0.45, 100), (0.35, 1100), (0.15, 16 << 10), (0.05, 500 << 10)]

Case = collections.namedtuple("Case", "key_len value ratio updates busy")

SHORT = [
    Case(33, "1.1k", "1:2:16", 50, True),  # the YCSB shape, scaled down
    Case(8, "100", "1:8:32", 100, False),  # meta tuples fill DRAM before NVM fills
    Case(250, "100", "1:8:0", 50, True),  # meta tuples nearly as big as the items
    Case(64, "16k", "1:0:16", 100, True),  # DRAM straight to SSD
    Case(250, "16k", "1:2:16", 100, False),
    Case(8, "500k", "1:0:16", 100, True),  # larger than an SSD buf, and no NVM to hold it
    Case(64, "500k", "1:8:0", 50, False),
    Case(33, "mixed", "1:8:32", 50, False),
    Case(8, "mixed", "1:2:16", 100, False),
    Case(250, "1.1k", "1:8:32", 50, True),
]


def case_id(c):
    return "k%d-v%s-r%s-u%d-%s" % (c.key_len, c.value, c.ratio.replace(":", "_"), c.updates,
                                   "busy" if c.busy else "quiet")


def pairwise(axes, seed=1):
    """A greedy all-pairs design (every pair of values of every two axes in some case)."""
    rnd = random.Random(seed)
    uncovered = set()
    for (i, a), (j, b) in itertools.combinations(enumerate(axes), 2):
        for x in a:
            for y in b:
                uncovered.add((i, x, j, y))
    cases = []
    while uncovered:
        best, best_n = None, -1
        for _ in range(200):
            i, x, j, y = rnd.choice(sorted(uncovered, key=repr))
            cand = [rnd.choice(ax) for ax in axes]
            cand[i], cand[j] = x, y
            for k in rnd.sample(range(len(axes)), len(axes)):  # improve one axis at a time
                if k in (i, j):
                    continue
                scores = []
                for v in axes[k]:
                    cand[k] = v
                    scores.append((sum((p, cand[p], q, cand[q]) in uncovered
                                       for p, q in itertools.combinations(range(len(axes)), 2)), v))
                cand[k] = max(scores, key=lambda s: s[0])[1]
            n = sum((p, cand[p], q, cand[q]) in uncovered for p, q in itertools.combinations(range(len(axes)), 2))
            if n > best_n:
                best, best_n = list(cand), n
        for p, q in itertools.combinations(range(len(axes)), 2):
            uncovered.discard((p, best[p], q, best[q]))
        cases.append(Case(*best))
    return cases


AXES = [KEY_LENS, VALUE_SIZES, RATIOS, UPDATES, BUSY]
if MODE == "long":
    CASES = [Case(*c) for c in itertools.product(*AXES)]
elif MODE == "pairwise":
    CASES = pairwise(AXES)
else:
    CASES = SHORT
if os.environ.get("STRESS_SHAPES_CASES"):
    _want = os.environ["STRESS_SHAPES_CASES"].split(",")
    CASES = [c for c in CASES if any(w in case_id(c) for w in _want)]

DRAM_MB = int(os.environ.get("STRESS_SHAPES_DRAM_MB") or (8 if SANITIZER else 12))
SECONDS = float(os.environ.get("STRESS_SECONDS") or (8 if MODE == "long" else 3))
SNAPSHOT_STATS = ["dram_bytes", "dram_items", "meta_tuples", "nvm_bytes", "nvm_items", "nvm_pages_used",
                  "nvm_pages_total", "ssd_items", "ssd_live_bytes", "ssd_pages_free", "ssd_pages_total"]
REPORT_STATS = ["store_no_memory", "nvm_alloc_failures", "meta_alloc_failures", "evictions", "ssd_large_bufs",
                "evictor_backlog", "store_waits_done", "store_wait_timeouts", "nvm_evictions", "ssd_items_dropped",
                "ssd_full", "set_fallback_nvm", "set_fallback_ssd", "nvm_pages_reused", "nvm_pages_drained",
                "nvm_tuples_moved", "nvm_drains_abandoned"]


def value_size(spec, rnd):
    if spec == "mixed":
        x = rnd.random()
        for p, s in MIXED:
            if x < p:
                break
            x -= p
    else:
        s = SIZE_OF[spec]
    return max(40, int(s * rnd.uniform(0.9, 1.1)))


def mean_value(spec):
    return sum(p * s for p, s in MIXED) if spec == "mixed" else SIZE_OF[spec]


def footprint(key_len, spec):
    """Mean DRAM/NVM bytes an item takes: slab classes grow by 1.25, so an item larger
    than 1/2.5 of a 1 MB slab page may land in a class with one chunk per page."""
    def one(size):  # averaged over the +-10% jitter of value_size()
        bs = [key_len + size * (0.9 + 0.01 * (j + 0.5)) + 64 for j in range(20)]
        return sum(1 << 20 if b > (1 << 20) / 2.5 else 1.25 * b for b in bs) / len(bs)
    return sum(p * one(s) for p, s in MIXED) if spec == "mixed" else one(SIZE_OF[spec])


def meta_estimate(key_len):
    """DRAM a meta tuple takes: item header, key, reference, rounded up to its slab class."""
    return int(1.25 * (64 + key_len + 10))


def plan(case, dram_mb):
    """(DRAM, NVM, SSD in MB, number of keys, which bound set that number).
    With an SSD: 1.4x DRAM+NVM in value bytes, at most 45% of the SSD, so the data
    fills DRAM and NVM and spills into SSD.  Without: 70% of DRAM+NVM counted in slab
    footprints, so it fits.  Either way the meta tuples need at most half of DRAM."""
    r_dram, r_nvm, r_ssd = (int(x) for x in case.ratio.split(":"))
    dram = dram_mb
    nvm = dram_mb * r_nvm // r_dram
    ssd = dram_mb * r_ssd // r_dram
    mb = 1 << 20
    if ssd:
        n_bytes = int(min(1.4 * (dram + nvm), 0.45 * ssd) * mb / (case.key_len + mean_value(case.value) + 64))
    else:
        n_bytes = int(0.7 * (dram + nvm) * mb / footprint(case.key_len, case.value))
        if case.value == "mixed":
            # Which keys hold a ~500 KB value (a whole 1 MB page each) changes with every
            # write; their number wanders about its mean by sqrt(n p (1-p)).  Its peaks
            # must fit too.  Keys are rewritten thousands of times in a run, so the peak
            # over the run is the maximum of many nearly independent draws: about
            # sqrt(2 ln N) standard deviations for N draws, 3.7 for N = 1000.  The count
            # seen by `stats slabs` and `stats nvm` (Sampler) tracks the keys' own count
            # within the stores in flight, and reached 4 standard deviations.  4.5 of
            # them must fit within 80% of DRAM+NVM.
            p = MIXED[-1][0]
            while n_bytes > 0 and (n_bytes * footprint(case.key_len, "mixed")
                                   + 4.5 * (n_bytes * p * (1 - p)) ** 0.5 * mb > 0.8 * (dram + nvm) * mb):
                n_bytes -= max(1, n_bytes // 100)
    n_meta = int(0.5 * dram * mb / meta_estimate(case.key_len))
    n = min(n_bytes, n_meta)
    why = "bytes" if n_bytes <= n_meta else "meta tuples"
    if ssd and n < THREADS * 8:  # the SSD has room for a few more keys per thread
        n, why = THREADS * 8, "at least 8 keys per thread"
    return dram, nvm, ssd, n, why


class Run:
    """Shared state of one case: the model of every key and the counters."""

    def __init__(self, n, keys):
        self.n = n
        self.keys = keys
        self.index = {k: i for i, k in enumerate(keys)}
        self.acked_ver = [0] * n  # last acknowledged version (0: none / known absent)
        self.acked_crc = [0] * n
        self.acked_len = [0] * n
        self.sent_max = [0] * n  # highest version ever sent
        self.uncertain = bytearray(n)  # last set refused: the old value or a miss
        self.refused_vers = {}  # key index -> versions whose set was refused
        self.lock = threading.Lock()
        self.errors = []  # wrong values
        self.lost = []  # one message per miss seen
        self.lost_keys = set()
        self.bad_replies = []
        self.refusals = collections.Counter()
        self.ops = collections.Counter()  # summed from the workers at the end
        self.first_refusal = None  # (time, reply, stats tiers)
        self.phase = "preload"

    def note(self, lst, msg):
        with self.lock:
            if len(lst) < 200:
                lst.append(msg)
            else:
                lst.append(None)  # counted, not kept


def verify_read(run, tid, i, raw, snap_acked, snap_sent):
    """Check one get result for key index i (raw None: a miss)."""
    key = run.keys[i]
    owner = i % THREADS
    if raw is None:
        if run.uncertain[i] or run.acked_ver[i] == 0:
            return
        if owner == tid or (snap_acked == snap_sent and run.sent_max[i] == snap_sent):
            run.lost_keys.add(i)
            run.note(run.lost, "%s: thread %d: key %d (%r...) missing, version %x (len %d) acknowledged"
                     % (run.phase, tid, i, key[:40], run.acked_ver[i], run.acked_len[i]))
        return
    try:
        ver, crc = check_value(key, raw)
    except WrongValue as e:
        run.note(run.errors, "%s: thread %d: %s" % (run.phase, tid, e))
        return
    if ver in run.refused_vers.get(i, ()):
        run.note(run.errors, "%s: key %d: version %x was refused yet is readable" % (run.phase, i, ver))
    elif ver & 63 != owner:
        run.note(run.errors, "%s: key %d: version %x written by thread %d, not its owner %d"
                 % (run.phase, i, ver, ver & 63, owner))
    elif owner == tid:
        if (ver, crc, len(raw)) != (run.acked_ver[i], run.acked_crc[i], run.acked_len[i]) and not (
                run.uncertain[i] and ver == run.acked_ver[i]):
            run.note(run.errors, "%s: key %d (own): read version %x (len %d), last acknowledged %x (len %d)"
                     % (run.phase, i, ver, len(raw), run.acked_ver[i], run.acked_len[i]))
    elif ver > run.sent_max[i]:
        run.note(run.errors, "%s: key %d: version %x was never sent (highest %x)" % (run.phase, i, ver, run.sent_max[i]))
    elif ver < snap_acked and not run.uncertain[i]:
        run.note(run.errors, "%s: key %d: read stale version %x; %x was acknowledged before the read was sent"
                 % (run.phase, i, ver, snap_acked))


class Worker:
    def __init__(self, run, tid, mux, case, seed, stats_mux):
        self.run = run
        self.tid = tid
        self.mux = mux
        self.case = case
        self.rnd = random.Random(seed * 1000 + tid)
        self.seq = 0
        self.pairs = []
        self.ops = collections.Counter()
        self.stats_mux = stats_mux
        self.skew = Skewed(run.n)
        self.own = list(range(tid, run.n, THREADS))

    def submit_set(self, i):
        run = self.run
        self.seq += 1
        ver = self.seq * 64 + self.tid
        key = run.keys[i]
        val = make_value(key, ver, value_size(self.case.value, self.rnd), self.rnd.getrandbits(64))
        if ver > run.sent_max[i]:
            run.sent_max[i] = ver
        return i, ver, val, self.mux.store(b"set", key, val)

    def finish_set(self, pending, timeout=120):
        i, ver, val, r = pending
        r.wait(timeout)
        run = self.run
        self.ops["set"] += 1
        if r.line == b"STORED":
            run.acked_ver[i] = ver
            run.acked_crc[i] = check_value(run.keys[i], val)[1]
            run.acked_len[i] = len(val)
            run.uncertain[i] = 0
            self.pairs.append((r.t_send, r.t_done))
            self.ops["stored"] += 1
        elif r.line.startswith(b"SERVER_ERROR"):
            run.uncertain[i] = 1
            with run.lock:
                run.refused_vers.setdefault(i, set()).add(ver)
                run.refusals[r.line.decode("utf-8", "replace")] += 1
                first = run.first_refusal is None
                if first:
                    run.first_refusal = (time.monotonic(), r.line, None)
            if first:
                try:
                    st = self.stats_mux.stats(b"tiers", timeout=30)
                    st.update(self.stats_mux.stats(timeout=30))
                    st = {k: st[k] for k in REPORT_STATS + SNAPSHOT_STATS if k in st}
                except (ConnectionError, TimeoutError) as e:
                    st = {"error": str(e)}
                run.first_refusal = (run.first_refusal[0], r.line, st)
        else:
            run.note(run.bad_replies, "%s: set of key %d (len %d) -> %r" % (run.phase, i, len(val), r.line[:200]))

    def sets(self, idxs, window):
        win = collections.deque()
        for i in idxs:
            win.append(self.submit_set(i))
            if len(win) >= window:
                self.finish_set(win.popleft())
        while win:
            self.finish_set(win.popleft())

    def preload(self):
        order = list(self.own)
        self.rnd.shuffle(order)
        self.sets(order, PRELOAD_WINDOW)

    def own_key(self):
        i = self.skew(self.rnd)
        i = i - i % THREADS + self.tid
        return i if i < self.run.n else i - THREADS

    def read(self):
        run = self.run
        if self.rnd.random() < 0.8:
            idx = [self.skew(self.rnd)]
        else:
            idx = list({self.skew(self.rnd) for _ in range(self.rnd.randrange(2, 7))})
        snaps = [(run.acked_ver[i], run.sent_max[i]) for i in idx]
        r = self.mux.get([run.keys[i] for i in idx]).wait(120)
        self.ops["get"] += 1
        if r.line is not None:
            run.note(run.bad_replies, "%s: get of %d keys -> %r" % (run.phase, len(idx), r.line[:200]))
            return
        for i, (sa, ss) in zip(idx, snaps):
            verify_read(run, self.tid, i, r.values.get(run.keys[i]), sa, ss)
        if len(r.values) > len(idx) or any(k not in run.index for k in r.values):
            run.note(run.errors, "%s: get returned keys that were not asked for" % run.phase)

    def loop(self, stop):
        upd = self.case.updates / 100.0
        while not stop.is_set():
            if self.rnd.random() < upd:
                if self.rnd.random() < 0.01:
                    self.sets([self.own_key() for _ in range(self.rnd.randrange(16, 129))], BURST_WINDOW)
                else:
                    self.finish_set(self.submit_set(self.own_key()))
            else:
                self.read()


def sweep(run, mux, value_spec):
    """All clients stopped: read every key back and compare with the model."""
    run.phase = "final sweep"
    per = {"500k": 2, "mixed": 8, "16k": 32}.get(value_spec, 100)
    per = max(1, min(per, 4000 // (len(run.keys[0]) + 1)))
    pending = collections.deque()
    n = run.n

    def check(p):
        idx, r = p
        r.wait(300)
        if r.line is not None:
            run.note(run.bad_replies, "final sweep: get -> %r" % r.line[:200])
        for i in idx:
            raw = r.values.get(run.keys[i])
            owner = i % THREADS
            verify_read(run, owner, i, raw, run.acked_ver[i], run.sent_max[i])

    for b in range(0, n, per):
        idx = list(range(b, min(n, b + per)))
        pending.append((idx, mux.get([run.keys[i] for i in idx])))
        if len(pending) >= 8:
            check(pending.popleft())
    while pending:
        check(pending.popleft())


class Sampler:
    """Polls `stats tiers` every 0.5 s; keeps the largest gauges seen.  With run given
    (mixed sizes with NVM), it also counts the items that take a whole page, in DRAM
    (`stats slabs`) and in NVM (`stats nvm`), beside the keys whose last acknowledged
    value is that large: the most each was seen at, and the largest excess."""

    GAUGES = ("evictor_backlog", "nvm_pages_used", "ssd_pages_used", "meta_tuples")

    def __init__(self, mux, run=None):
        self.mux = mux
        self.run = run
        self.max = collections.Counter()
        self.min_ssd_free = None
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def loop(self):
        while not self.stop.wait(0.5):
            try:
                st = self.mux.stats(b"tiers", timeout=30)
            except (ConnectionError, TimeoutError):
                return
            for g in self.GAUGES:
                if g in st:
                    self.max[g] = max(self.max[g], int(st[g]))
            if "ssd_pages_free" in st:
                f = int(st["ssd_pages_free"])
                self.min_ssd_free = f if self.min_ssd_free is None else min(self.min_ssd_free, f)
            if self.run is not None:
                try:
                    self.count_whole_page_items()
                except (ConnectionError, TimeoutError):
                    return

    def count_whole_page_items(self):
        held = 0
        for group, per_page, used in ((b"slabs", "chunks_per_page", "used_chunks"),
                                      (b"nvm", "slots_per_page", "slots_used")):
            st = self.mux.stats(group, timeout=30)
            for k, v in st.items():
                cls, _, name = k.partition(":")
                if name == per_page and v == "1":
                    held += int(st.get(cls + ":" + used, 0))
        acked = sum(x > 256 << 10 for x in self.run.acked_len)
        self.max["whole_page_items"] = max(self.max["whole_page_items"], held)
        self.max["keys_large"] = max(self.max["keys_large"], acked)
        self.max["whole_page_excess"] = max(self.max["whole_page_excess"], held - acked)

    def close(self):
        self.stop.set()
        self.t.join(60)


@pytest.fixture
def tier_paths():
    base = os.environ.get("TAC_SSD_DIR") or tempfile.gettempdir()
    d = tempfile.mkdtemp(prefix="tac-shapes-", dir=base)
    nvm = "/dev/shm/tac-shapes-%d-%s" % (os.getpid(), uuid.uuid4().hex[:10])
    yield nvm, os.path.join(d, "ssd")
    shutil.rmtree(d, ignore_errors=True)
    remove_tier_file(nvm)


def sanitizer_reports(srv):
    err = srv.stderr_text()
    return [m for m in ("WARNING: ThreadSanitizer", "ERROR: AddressSanitizer", "runtime error:") if m in err], err


def collect_stats(mux):
    st = mux.stats(b"tiers")
    st.update(mux.stats())
    st.update(mux.stats(b"tac"))
    return st


def join_all(ts, timeout):
    deadline = time.monotonic() + timeout
    for t in ts:
        t.join(max(0.1, deadline - time.monotonic()))
    return [i for i, t in enumerate(ts) if t.is_alive()]


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_shapes(server, tier_paths, case):
    seed = int(os.environ.get("STRESS_SEED", random.randrange(1 << 30)))
    dram, nvm, ssd, n, why = plan(case, DRAM_MB)
    nvm_path, ssd_path = tier_paths
    opts = []
    if nvm:
        opts.append("nvm_path=%s:%dm" % (nvm_path, nvm))
    if ssd:
        opts.append("ssd_path=%s:%dm" % (ssd_path, ssd))
    args = ["-t", "2", "-m", str(dram)] + (["-o", ",".join(opts)] if opts else [])
    busy = case.busy and not SANITIZER
    print("\nSTRESS_SEED=%d case %s: %s; %d keys (%s bound, ~%s), %d threads on 3 connections, %ss%s%s"
          % (seed, case_id(case), " ".join(args), n, why,
             fmt_bytes(n * (case.key_len + mean_value(case.value))), THREADS, SECONDS,
             ", CPU hog" if busy else "", " (hog skipped: sanitizer build)" if case.busy and not busy else ""))
    srv = server(args)
    rnd = random.Random(seed)
    keys = make_keys(n, case.key_len)
    run = Run(n, keys)
    muxes = {name: Mux(srv.port, "conn-" + name) for name in sorted(set(CONN_OF))}
    stats_mux = Mux(srv.port, "stats")
    workers = [Worker(run, t, muxes[CONN_OF[t]], case, seed ^ rnd.getrandbits(30), stats_mux)
               for t in range(THREADS)]
    failures = []
    errors_in_threads = []

    def guarded(fn):
        def body():
            try:
                fn()
            except Exception as e:  # noqa: BLE001
                errors_in_threads.append("%s: %s" % (type(e).__name__, e))
        return body

    sampler = Sampler(stats_mux, run if case.value == "mixed" and nvm else None)
    hog = CpuHog(2 if busy else 0)
    t_pre = t_run = 0.0
    with hog:
        t0 = time.monotonic()
        ts = [threading.Thread(target=guarded(w.preload)) for w in workers]
        for t in ts:
            t.start()
        hung = join_all(ts, 600)
        t_pre = time.monotonic() - t0
        st_pre = stats_mux.stats(b"tiers") if not hung and srv.alive() else {}
        print("preload: %.1fs; items dram %s nvm %s ssd %s; nvm pages %s/%s; ssd pages free %s/%s"
              % (t_pre, st_pre.get("dram_items"), st_pre.get("nvm_items", "-"), st_pre.get("ssd_items", "-"),
                 st_pre.get("nvm_pages_used", "-"), st_pre.get("nvm_pages_total", "-"),
                 st_pre.get("ssd_pages_free", "-"), st_pre.get("ssd_pages_total", "-")))
        if not hung:
            run.phase = "run"
            stop = threading.Event()
            t1 = time.monotonic()
            ts = [threading.Thread(target=guarded(lambda w=w: w.loop(stop))) for w in workers]
            for t in ts:
                t.start()
            while time.monotonic() - t1 < SECONDS and srv.alive() and any(t.is_alive() for t in ts):
                time.sleep(0.1)
            stop.set()
            hung = join_all(ts, 300)
            t_run = time.monotonic() - t1
    sampler.close()
    alive = srv.alive()
    st = {}
    if alive and not hung:
        sweep(run, stats_mux, case.value)
        st = collect_stats(stats_mux)
    pairs = [p for w in workers for p in w.pairs]
    for w in workers:
        run.ops.update(w.ops)
    stalls = stall_windows(pairs, STALL_LIMIT)
    ops = run.ops["set"] + run.ops["get"]
    refused = sum(run.refusals.values())
    print("ops %d (%d sets, %d gets; %.0f/s in the run), stores %d, refusals %d %s, stall windows > %gs: %d%s, "
          "wrong %d, lost keys %d, bad replies %d; max in flight per connection %s"
          % (ops, run.ops["set"], run.ops["get"], (ops - n) / max(t_run, 0.001), run.ops["stored"], refused,
             dict(run.refusals) or "", STALL_LIMIT, len(stalls),
             " (longest %.2fs)" % stalls[0][1] if stalls else "", len(run.errors), len(run.lost_keys),
             len(run.bad_replies), {m.name: m.max_in_flight for m in muxes.values()}))
    if case.value == "mixed":
        print("values over 256 KB acknowledged last: %d of %d keys (most seen %s); whole-page items in DRAM and NVM: "
              "most seen %s, largest excess over those keys %s"
              % (sum(x > 256 << 10 for x in run.acked_len), n, sampler.max["keys_large"] if nvm else "-",
                 sampler.max["whole_page_items"] if nvm else "-", sampler.max["whole_page_excess"] if nvm else "-"))
    if st:
        print("stats: %s; max evictor_backlog %d; items dram %s nvm %s ssd %s; nvm pages %s/%s (max %d); "
              "ssd pages free %s/%s (min %s)"
              % (" ".join("%s=%s" % (k, st.get(k, "-")) for k in REPORT_STATS), sampler.max["evictor_backlog"],
                 st.get("dram_items"), st.get("nvm_items", "-"), st.get("ssd_items", "-"), st.get("nvm_pages_used", "-"),
                 st.get("nvm_pages_total", "-"), sampler.max["nvm_pages_used"], st.get("ssd_pages_free", "-"),
                 st.get("ssd_pages_total", "-"), sampler.min_ssd_free))
    if run.first_refusal:
        fr = run.first_refusal
        print("first refusal %r after %.1fs; stats then: %s" % (fr[1], fr[0] - t0, fr[2]))
    for m in list(muxes.values()) + [stats_mux]:
        m.close()

    tag = "(STRESS_SEED=%d, case %s)" % (seed, case_id(case))
    if not alive:
        failures.append("the server died: %s" % srv.stderr_text()[-4000:])
    if hung:
        failures.append("client threads %r hung (no reply within minutes)" % hung)
    if errors_in_threads:
        failures.append("client threads failed: %s" % errors_in_threads[:5])
    found, err = sanitizer_reports(srv)
    if found:
        failures.append("sanitizer report on the server's stderr:\n%s" % err[:8000])
    if run.errors:
        failures.append("%d WRONG VALUES, first: %s" % (len(run.errors), [e for e in run.errors if e][:10]))
    if refused:
        failures.append("%d stores refused though a tier had room: %s; first refusal's stats %s"
                        % (refused, dict(run.refusals), run.first_refusal and run.first_refusal[2]))
    if run.bad_replies:
        failures.append("%d unexpected replies, first: %s" % (len(run.bad_replies), [e for e in run.bad_replies if e][:10]))
    if run.lost:
        failures.append("%d acknowledged keys lost (%d misses seen), first: %s"
                        % (len(run.lost_keys), len(run.lost), [e for e in run.lost if e][:10]))
    dropped = {k: st.get(k) for k in ("evictions", "nvm_evictions", "ssd_items_dropped") if int(st.get(k, 0) or 0)}
    if dropped:
        failures.append("items dropped though the data set fits: %s (ssd_large_bufs=%s)" % (dropped, st.get("ssd_large_bufs")))
    if stalls:
        failures.append("%d windows > %gs with a store outstanding and none completing; longest %s"
                        % (len(stalls), STALL_LIMIT, ["%.2fs at +%.1fs" % (d, s - t0) for s, d in stalls[:5]]))
    if failures:
        pytest.fail("%s\n%s\nstats: %s" % (tag, "\n".join(failures), {k: st.get(k) for k in REPORT_STATS}),
                    pytrace=False)
    assert run.ops["stored"] >= n // 2, "only %d stores %s" % (run.ops["stored"], tag)


# ---- -M with large items ----------------------------------------------------

M_THREADS = 4  # two connections, two threads each


def tiers_full(st, settings, item_max):
    """NVM and SSD have no room for another item: every NVM page is in use and its live
    bytes leave less than two items free, and SSD has no free page beyond defrag's
    reserve with its live bytes above capacity minus one page per reserved page
    (what defrag cannot compact away)."""
    nvm_cap = int(st.get("nvm_capacity", 0))
    nvm_full = (int(st.get("nvm_pages_used", 0)) >= int(st.get("nvm_pages_total", 1))
                or nvm_cap - int(st.get("nvm_bytes", 0)) < 2 * item_max)
    ssd_cap = int(st.get("ssd_capacity", 0))
    page = int(settings.get("ssd_page_size", 8 << 20))
    reserve = int(settings.get("ssd_free_pages", 3))
    ssd_full = (int(st.get("ssd_pages_free", 0)) <= reserve + 1
                and int(st.get("ssd_live_bytes", 0)) >= ssd_cap - (reserve + 2) * page)
    return nvm_full and ssd_full, nvm_full, ssd_full


def test_large_items_M(server, tier_paths):
    seed = int(os.environ.get("STRESS_SEED", random.randrange(1 << 30)))
    nvm_path, ssd_path = tier_paths
    dram, nvm, ssd = (8, 16, 64) if SANITIZER else (16, 32, 128)
    vmin, vmax = 256 << 10, 1 << 20
    args = ["-M", "-I", "2m", "-t", "2", "-m", str(dram), "-o",
            "nvm_path=%s:%dm,ssd_path=%s:%dm" % (nvm_path, nvm, ssd_path, ssd)]
    total = (dram + nvm + ssd) << 20
    print("\nSTRESS_SEED=%d large items, -M: %s; values %s-%s until refusals; %d threads on 2 connections"
          % (seed, " ".join(args), fmt_bytes(vmin), fmt_bytes(vmax), M_THREADS))
    srv = server(args)
    ctl = Mux(srv.port, "ctl")
    settings = ctl.stats(b"settings")
    muxes = [Mux(srv.port, "conn-%d" % j) for j in range(2)]
    lock = threading.Lock()
    model = {}  # key -> (value crc, len) of the last acknowledged set
    uncertain = set()  # keys whose last set was refused
    refused_vals = {}  # key -> crcs of refused sets
    state = {"acked_bytes": 0, "refusals": 0, "bad_refusals": [], "refusal_checks": 0, "stored": 0,
             "errors": [], "bad": []}
    pairs = []
    stop = threading.Event()
    keys_per_thread = int(1.5 * total / ((vmin + vmax) / 2) / M_THREADS) + 8

    def check_refusal(line):
        with lock:
            state["refusals"] += 1
            nref = state["refusals"]
            if nref > 3 and nref % 10:
                return  # check the first few, then every tenth
            state["refusal_checks"] += 1
        st = ctl.stats(b"tiers", timeout=60)
        full, nf, sf = tiers_full(st, settings, vmax + 4096)
        with lock:
            if not full:
                state["bad_refusals"].append(
                    "%r with nvm %s (pages %s/%s, %s live of %s) ssd %s (pages free %s/%s, %s live of %s); "
                    "acknowledged live %s of %s total; ssd_large_bufs=%s nvm_alloc_failures=%s"
                    % (line, "full" if nf else "NOT full", st.get("nvm_pages_used"), st.get("nvm_pages_total"),
                       st.get("nvm_bytes"), st.get("nvm_capacity"), "full" if sf else "NOT full",
                       st.get("ssd_pages_free"), st.get("ssd_pages_total"), st.get("ssd_live_bytes"),
                       st.get("ssd_capacity"), fmt_bytes(state["acked_bytes"]), fmt_bytes(total),
                       st.get("ssd_large_bufs"), st.get("nvm_alloc_failures")))

    def worker(tid):
        rnd = random.Random(seed * 100 + tid)
        mux = muxes[tid % 2]
        mine = [b"big-%d-%06d" % (tid, j) for j in range(keys_per_thread)]
        nxt = 0
        seq = 0
        refused_here = 0
        try:
            while not stop.is_set() and refused_here < 12:
                x = rnd.random()
                if x < 0.2 and nxt:
                    k = mine[rnd.randrange(nxt)]
                    r = mux.get([k]).wait(120)
                    raw = r.values.get(k) if r.values is not None else None
                    with lock:
                        want = model.get(k)
                        unc = k in uncertain
                    if r.line is not None:
                        state["bad"].append("get -> %r" % r.line[:100])
                    elif raw is None:
                        if want is not None and not unc:
                            state["errors"].append("%r missing (acknowledged, len %d)" % (k, want[1]))
                    else:
                        try:
                            ver, crc = check_value(k, raw)
                            if want is None or (crc, len(raw)) != want:
                                state["errors"].append("%r: read len %d, last acknowledged %r" % (k, len(raw), want))
                        except WrongValue as e:
                            state["errors"].append(str(e))
                    continue
                if x < 0.35 and nxt:
                    k = mine[rnd.randrange(nxt)]  # overwrite
                elif nxt < len(mine):
                    k = mine[nxt]
                    nxt += 1
                else:
                    break
                seq += 1
                val = make_value(k, seq * 64 + tid, rnd.randrange(vmin, vmax + 1), rnd.getrandbits(64))
                crc = check_value(k, val)[1]
                r = mux.store(b"set", k, val).wait(300)
                if r.line == b"STORED":
                    with lock:
                        old = model.get(k)
                        state["acked_bytes"] += len(val) - (old[1] if old else 0)
                        model[k] = (crc, len(val))
                        uncertain.discard(k)
                        state["stored"] += 1
                    pairs.append((r.t_send, r.t_done))
                elif r.line == b"SERVER_ERROR out of memory storing object":
                    refused_here += 1
                    pairs.append((r.t_send, r.t_done))  # a refusal when full is a completed answer
                    with lock:
                        if k in model:
                            state["acked_bytes"] -= model[k][1]
                        uncertain.add(k)
                        refused_vals.setdefault(k, set()).add(crc)
                    check_refusal(r.line)
                else:
                    with lock:
                        state["bad"].append("set %r (len %d) -> %r" % (k, len(val), r.line[:200]))
        except Exception as e:  # noqa: BLE001
            with lock:
                state["errors"].append("thread %d: %s: %s" % (tid, type(e).__name__, e))

    t0 = time.monotonic()
    ts = [threading.Thread(target=worker, args=(t,)) for t in range(M_THREADS)]
    for t in ts:
        t.start()
    deadline = t0 + (120 if SANITIZER else 60)
    while any(t.is_alive() for t in ts) and time.monotonic() < deadline and srv.alive():
        time.sleep(0.1)
    stop.set()
    hung = join_all(ts, 300)
    elapsed = time.monotonic() - t0
    alive = srv.alive()
    lost, wrong = [], []
    st = {}
    if alive and not hung:
        items = sorted(model.items())
        for b in range(0, len(items), 2):
            chunk = items[b:b + 2]
            r = ctl.get([k for k, _ in chunk]).wait(300)
            for k, want in chunk:
                raw = r.values.get(k)
                if raw is None:
                    if k not in uncertain:
                        lost.append(k)
                    continue
                try:
                    _, crc = check_value(k, raw)
                except WrongValue as e:
                    wrong.append(str(e))
                    continue
                if crc in refused_vals.get(k, ()):
                    wrong.append("%r: a refused value is readable" % k)
                elif (crc, len(raw)) != want and not (k in uncertain):
                    wrong.append("%r: len %d, last acknowledged len %d" % (k, len(raw), want[1]))
        st = collect_stats(ctl)
    stalls = stall_windows(pairs, STALL_LIMIT)
    print("%.1fs: stores %d, refusals %d (%d checked against stats tiers, %d with a tier not full), "
          "acknowledged live %s of %s total capacity, lost %d, wrong %d, stall windows %d%s"
          % (elapsed, state["stored"], state["refusals"], state["refusal_checks"], len(state["bad_refusals"]),
             fmt_bytes(state["acked_bytes"]), fmt_bytes(total), len(lost), len(wrong) + len(state["errors"]),
             len(stalls), " (longest %.2fs)" % stalls[0][1] if stalls else ""))
    if st:
        print("stats: %s; items dram %s nvm %s ssd %s; nvm pages %s/%s; ssd pages free %s/%s, live %s"
              % (" ".join("%s=%s" % (k, st.get(k, "-")) for k in REPORT_STATS), st.get("dram_items"),
                 st.get("nvm_items"), st.get("ssd_items"), st.get("nvm_pages_used"), st.get("nvm_pages_total"),
                 st.get("ssd_pages_free"), st.get("ssd_pages_total"), st.get("ssd_live_bytes")))
    for m in muxes + [ctl]:
        m.close()
    tag = "(STRESS_SEED=%d)" % seed
    failures = []
    if not alive:
        failures.append("the server died: %s" % srv.stderr_text()[-4000:])
    if hung:
        failures.append("client threads %r hung" % hung)
    found, err = sanitizer_reports(srv)
    if found:
        failures.append("sanitizer report on the server's stderr:\n%s" % err[:8000])
    if wrong or state["errors"]:
        failures.append("%d WRONG VALUES / errors: %s" % (len(wrong) + len(state["errors"]),
                                                         (state["errors"] + wrong)[:10]))
    if lost:
        failures.append("%d acknowledged keys lost under -M (nothing stored may be dropped): %s"
                        % (len(lost), lost[:10]))
    if state["bad"]:
        failures.append("unexpected replies: %s" % state["bad"][:10])
    if state["bad_refusals"]:
        failures.append("%d of %d checked refusals came while NVM or SSD had room: %s"
                        % (len(state["bad_refusals"]), state["refusal_checks"], state["bad_refusals"][:5]))
    if stalls:
        failures.append("%d windows > %gs without a store answered; longest %.2fs" % (len(stalls), STALL_LIMIT, stalls[0][1]))
    if failures:
        pytest.fail("%s\n%s\nstats: %s" % (tag, "\n".join(failures), {k: st.get(k) for k in REPORT_STATS}),
                    pytrace=False)
    assert state["refusals"] > 0, "the data set (1.5x capacity) never filled the tiers %s" % tag
