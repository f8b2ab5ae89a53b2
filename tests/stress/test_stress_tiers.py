"""Concurrency stress across the DRAM and NVM tiers; every read is verified.

A small DRAM (-m 16) in front of a large NVM file holds a dataset of ~3x DRAM
(~38k keys, ~48 MB), so keys keep moving between the tiers (demotion by the
evictor, set fallback into NVM, rewrites back into DRAM) while THREADS client
threads run get/set/delete/touch/gat/incr/decr/append on it.

Values: b"key|version|crc32|pad" + appended records, crc32 over b"key|version|pad";
pad is lowercase hex, every appended record is REC(key) (b"~" + 8 hex digits
derived from the key), so any thread can verify any value it reads.
Versions are seq * 64 + tid: the writer is part of the version.

Ownership: key o<k> belongs to thread k % THREADS, which alone writes it and so
knows its exact value; the owner's reads must return exactly that value (or a
miss iff the owner deleted it).  Counters c<tid>_<j> likewise.  Shared keys
s<k> are written by everybody; a read must return a version somebody wrote
(written[key]).  Shared counters sc<j>: final value == acknowledged increments.
The NVM tier is big enough for everything, so nothing may be dropped: an
acknowledged key that misses is "lost".

Seed: STRESS_SEED (printed).  Duration: STRESS_SECONDS per run (default 20; 10 against a
sanitizer build).
"""
import os
import random
import re
import socket
import threading
import time
import uuid
import zlib

import pytest

from mcserver import IS_STOCK, STRESS_DEFAULT_SECONDS, remove_tier_file

pytestmark = [pytest.mark.tac_only,
              pytest.mark.skipif(IS_STOCK, reason="tac-only behaviour; TAC_SERVER is stock memcached")]

THREADS = 12
OWNED = 36000  # o00000..o35999, owner = k % THREADS
SHARED = 2000  # s0000..s1999
COUNTERS = 4  # per thread, plus COUNTERS shared ones
CTR_WIDTH = 600  # counters are space-padded so they live in a big slab class and get demoted too
PRELOAD_VER = 63  # version written by the preload (tid 63)
OOM = b"SERVER_ERROR out of memory storing object"


def REC(key):
    return b"~%08x" % zlib.crc32(key + b"#app")


def make_value(key, ver, npad, rnd):
    pad = (b"%08x" % rnd.getrandbits(32)) * (npad // 8 + 1)
    pad = pad[:npad]
    return b"%s|%d|%08x|%s" % (key, ver, zlib.crc32(b"%s|%d|%s" % (key, ver, pad)), pad)


class WrongValue(AssertionError):
    pass


def check_value(key, raw):
    """Verify key, crc and appended records; return (version, appended records)."""
    parts = raw.split(b"|", 3)
    if len(parts) != 4:
        raise WrongValue("malformed value for %r: %r" % (key, raw[:100]))
    k, ver, crc, rest = parts
    if k != key:
        raise WrongValue("value of %r carries key %r" % (key, k))
    i = rest.find(b"~")
    pad, tail = (rest, b"") if i < 0 else (rest[:i], rest[i:])
    if not re.fullmatch(rb"[0-9a-f]*", pad) or not re.fullmatch(rb"[0-9a-f]{8}", crc) or \
            int(crc, 16) != zlib.crc32(b"%s|%s|%s" % (k, ver, pad)):
        raise WrongValue("checksum mismatch for %r: %r" % (key, raw[:100]))
    rec = REC(key)
    if len(tail) % len(rec) or tail != rec * (len(tail) // len(rec)):
        raise WrongValue("bad appended records for %r: %r" % (key, tail[:100]))
    return int(ver), len(tail) // len(rec)


def ctr_value(n):
    s = b"%d" % n
    return s + b" " * (CTR_WIDTH - len(s))


def ctr_read(key, raw):
    s = raw.rstrip(b" ")
    if not re.fullmatch(rb"\d+", s):
        raise WrongValue("counter %r holds %r" % (key, raw[:60]))
    return int(s)


class Raw:
    """A minimal text-protocol client that parses replies exactly."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.buf = b""

    def _fill(self):
        chunk = self.sock.recv(1 << 18)
        if not chunk:
            raise ConnectionError("server closed the connection")
        self.buf += chunk

    def line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                ln, self.buf = self.buf[:i], self.buf[i + 2:]
                return ln
            self._fill()

    def exact(self, n):
        while len(self.buf) < n:
            self._fill()
        d, self.buf = self.buf[:n], self.buf[n:]
        return d

    def cmd(self, data):
        self.sock.sendall(data)
        return self.line()

    def store(self, verb, key, val, flags=0, exp=0):
        return self.cmd(b"%s %s %d %d %d\r\n%s\r\n" % (verb, key, flags, exp, len(val), val))

    def get(self, keys, verb=b"get"):
        self.sock.sendall(verb + b" " + b" ".join(keys) + b"\r\n")
        out = {}
        while True:
            ln = self.line()
            if ln == b"END":
                return out
            p = ln.split(b" ")
            if p[0] != b"VALUE" or len(p) not in (4, 5):
                raise WrongValue("bad get response line %r" % ln[:200])
            n = int(p[3])
            data = self.exact(n + 2)
            if data[-2:] != b"\r\n":
                raise WrongValue("value of %r not followed by CRLF" % p[1])
            if p[1] not in keys or p[1] in out:
                raise WrongValue("unrequested or repeated key %r (asked %r)" % (p[1], keys))
            out[p[1]] = data[:-2]

    def stats(self, sub=b""):
        self.sock.sendall(b"stats" + (b" " + sub if sub else b"") + b"\r\n")
        out = {}
        while True:
            ln = self.line()
            if ln == b"END":
                return out
            _, k, v = ln.decode().split(" ", 2)
            out[k] = v

    def close(self):
        self.sock.close()


class Shared:
    def __init__(self):
        self.lock = threading.Lock()
        self.written = {}  # shared key -> set of versions ever sent
        self.sc_done = [0] * COUNTERS
        self.errors = []  # wrong values: fatal
        self.bad_replies = []  # replies a memcached server never gives for that state
        self.lost = []  # acknowledged data that vanished
        self.refused = 0  # SERVER_ERROR out of memory after retries
        self.ops = {}
        self.models = {}
        self.unacked_preload = {}
        self.unacked = {}
        self.kinds = {}  # id(list) -> {message kind: count}
        self.maybe_gone = set()  # owned keys whose last set was refused


def store_retry(c, verb, key, val, sh, exp=0):
    r = c.store(verb, key, val, exp=exp)
    tries = 0
    while r == OOM and tries < 3:
        tries += 1
        time.sleep(0.05)
        r = c.store(verb, key, val, exp=exp)
    if r == OOM:
        with sh.lock:
            sh.refused += 1
    return r


def note(sh, lst, msg):
    kind = re.sub(r"b'[a-z]+\d+(_\d+)?'", "<key>", re.sub(r"^thread \d+: ", "", msg))
    kind = re.sub(r";? *(history|last acknowledged) .*", "", kind)
    with sh.lock:
        if len(lst) < 1000:
            lst.append(msg)
        kinds = sh.kinds.setdefault(id(lst), {})
        kinds[kind] = kinds.get(kind, 0) + 1


def owner_of(key):
    return int(key[1:]) % THREADS


def verify_foreign(sh, key, raw):
    """Check a value this thread does not own."""
    if key.startswith(b"sc") or key.startswith(b"c"):
        ctr_read(key, raw)
        return
    ver, _ = check_value(key, raw)
    if key.startswith(b"o"):
        if ver % 64 not in (owner_of(key), PRELOAD_VER):
            raise WrongValue("%r: version %d was written by thread %d, not its owner %d"
                             % (key, ver, ver % 64, owner_of(key)))
    else:
        with sh.lock:
            ok = ver in sh.written.get(key, ())
        if not ok:
            raise WrongValue("%r: version %d was never written" % (key, ver))


def worker(tid, port, seed, stop, sh):
    rnd = random.Random(seed * 1000 + tid)
    c = Raw(port)
    model = sh.models[tid]  # own key -> exact bytes, or None when deleted / never stored
    mine = sorted(model)
    myctr = [b"c%d_%d" % (tid, j) for j in range(COUNTERS)]
    seq = 0
    ops = {}
    unacked = dict(sh.unacked_preload.get(tid, {}))  # own key -> {value: (verb, reply)} of refused writes
    maybe_gone = set()  # own keys whose last set was refused: the old value may or may not be there
    hist = {k: ["preload set -> %s" % list(d.values())[0][1].decode()] for k, d in unacked.items()}

    def log(key, what):
        h = hist.setdefault(key, [])
        h.append(what)
        del h[:-6]

    def own_check(key, raw):
        want = model[key]
        if raw is None:
            if want is not None and key in maybe_gone:
                # memcached unlinks the old value when a set fails for lack of memory
                model[key] = None
                log(key, "read -> MISS (allowed after a refused set)")
            elif want is not None:
                note(sh, sh.lost, "thread %d: %r missing, last acknowledged %r; history %r"
                     % (tid, key, want[:40], hist.get(key)))
                log(key, "read -> MISS (acknowledged %s)" % want[:24].decode())
                model[key] = None
        elif raw in unacked.get(key, {}):
            raise WrongValue("%r: a %s answered %r became visible (value %r...)"
                             % ((key,) + unacked[key][raw] + (raw[:50],)))
        elif want is None:
            raise WrongValue("%r readable though its owner deleted it (or it was never stored): %r; history %r"
                             % (key, raw[:60], hist.get(key)))
        elif raw != want:
            raise WrongValue("%r: got %r... (len %d), owner's last acknowledged value %r... (len %d); history %r"
                             % (key, raw[:50], len(raw), want[:50], len(want), hist.get(key)))

    def own_store_reply(key, r, newval, verb):
        log(key, "%s %s -> %s" % (verb.decode(), newval[:24].decode(), r.decode()))
        if r == b"STORED":
            model[key] = newval
            unacked.pop(key, None)
            maybe_gone.discard(key)
            return
        unacked.setdefault(key, {})[newval] = (verb.decode(), r)
        if verb == b"set":
            maybe_gone.add(key)
        if r == OOM:
            pass
        elif r == OOM:
            pass
        elif verb in (b"append",) and r == b"NOT_STORED" and model[key] is None:
            pass
        else:
            note(sh, sh.bad_replies, "thread %d: %s %r -> %r (model: %s)"
                 % (tid, verb.decode(), key, r, "absent" if model[key] is None else "present"))

    try:
        while not stop.is_set():
            x = rnd.random()
            if x < 0.30:
                op = "mget"
                keys = set()
                for _ in range(rnd.randrange(1, 9)):
                    y = rnd.random()
                    if y < 0.4:
                        keys.add(rnd.choice(mine))
                    elif y < 0.8:
                        keys.add(b"o%05d" % rnd.randrange(OWNED))
                    elif y < 0.95:
                        keys.add(b"s%04d" % rnd.randrange(SHARED))
                    else:
                        keys.add(rnd.choice(myctr) if rnd.random() < 0.5 else b"sc%d" % rnd.randrange(COUNTERS))
                keys = list(keys)
                got = c.get(keys, b"gets" if rnd.random() < 0.2 else b"get")
                for k in keys:
                    if k in model:
                        own_check(k, got.get(k))
                    elif k in got:
                        if k in myctr:
                            if ctr_read(k, got[k]) != model_ctr[k]:
                                raise WrongValue("%r = %r, expected %d" % (k, got[k][:30], model_ctr[k]))
                        else:
                            verify_foreign(sh, k, got[k])
                    elif k in myctr or k.startswith(b"sc"):
                        note(sh, sh.lost, "thread %d: counter %r missing" % (tid, k))
            elif x < 0.50:
                op = "set"
                k = rnd.choice(mine)
                seq += 1
                v = make_value(k, seq * 64 + tid, rnd.randrange(200, 2200), rnd)
                own_store_reply(k, store_retry(c, b"set", k, v, sh), v, b"set")
            elif x < 0.56:
                op = "set_shared"
                k = b"s%04d" % rnd.randrange(SHARED)
                seq += 1
                ver = seq * 64 + tid
                with sh.lock:
                    sh.written.setdefault(k, set()).add(ver)
                r = store_retry(c, b"set", k, make_value(k, ver, rnd.randrange(200, 2200), rnd), sh)
                if r not in (b"STORED", OOM):
                    note(sh, sh.bad_replies, "thread %d: set %r -> %r" % (tid, k, r))
            elif x < 0.61:
                op = "delete"
                k = rnd.choice(mine)
                r = c.cmd(b"delete %s\r\n" % k)
                want = b"NOT_FOUND" if model[k] is None else b"DELETED"
                log(k, "delete -> %s" % r.decode())
                if r == b"NOT_FOUND" and k in maybe_gone:
                    pass
                elif r != want:
                    if r == b"NOT_FOUND":
                        note(sh, sh.lost, "thread %d: delete %r -> NOT_FOUND, but it was stored" % (tid, k))
                    else:
                        note(sh, sh.bad_replies, "thread %d: delete %r -> %r, expected %r" % (tid, k, r, want))
                model[k] = None
                maybe_gone.discard(k)
                if c.get([k]):
                    raise WrongValue("%r readable right after its owner deleted it" % k)
            elif x < 0.62:
                op = "delete_shared"
                k = b"s%04d" % rnd.randrange(SHARED)
                r = c.cmd(b"delete %s\r\n" % k)
                if r not in (b"DELETED", b"NOT_FOUND"):
                    note(sh, sh.bad_replies, "thread %d: delete %r -> %r" % (tid, k, r))
            elif x < 0.68:
                op = "touch"
                k = rnd.choice(mine) if rnd.random() < 0.8 else b"s%04d" % rnd.randrange(SHARED)
                r = c.cmd(b"touch %s 0\r\n" % k)
                if k in model:
                    want = b"NOT_FOUND" if model[k] is None else b"TOUCHED"
                    log(k, "touch -> %s" % r.decode())
                    if r == b"NOT_FOUND" and k in maybe_gone:
                        model[k] = None
                        maybe_gone.discard(k)
                    elif r == b"TOUCHED":
                        maybe_gone.discard(k)
                    elif r != want:
                        if r == b"NOT_FOUND":
                            note(sh, sh.lost, "thread %d: touch %r -> NOT_FOUND, but it was stored" % (tid, k))
                            model[k] = None
                        else:
                            note(sh, sh.bad_replies, "thread %d: touch %r -> %r, expected %r" % (tid, k, r, want))
                elif r not in (b"TOUCHED", b"NOT_FOUND"):
                    note(sh, sh.bad_replies, "thread %d: touch %r -> %r" % (tid, k, r))
            elif x < 0.72:
                op = "gat"
                k = rnd.choice(mine)
                got = c.get([k], b"gat 0" if rnd.random() < 0.5 else b"gats 0")
                own_check(k, got.get(k))
            elif x < 0.80:
                op = "incr"
                if rnd.random() < 0.6:
                    k = rnd.choice(myctr)
                    if rnd.random() < 0.7 or model_ctr[k] < 5:
                        d = rnd.randrange(1, 100)
                        r = c.cmd(b"incr %s %d\r\n" % (k, d))
                        want = model_ctr[k] + d
                    else:
                        d = rnd.randrange(1, 5)
                        r = c.cmd(b"decr %s %d\r\n" % (k, d))
                        want = model_ctr[k] - d
                    if r == b"SERVER_ERROR out of memory":  # memcached too, when incr needs a new item
                        with sh.lock:
                            sh.refused += 1
                        want = model_ctr[k]
                    elif r != b"%d" % want:
                        if r == b"NOT_FOUND":
                            note(sh, sh.lost, "thread %d: counter %r missing" % (tid, k))
                        else:
                            raise WrongValue("%r: incr/decr gave %r, expected %d" % (k, r, want))
                    model_ctr[k] = want
                else:
                    j = rnd.randrange(COUNTERS)
                    r = c.cmd(b"incr sc%d 1\r\n" % j)
                    if re.fullmatch(rb"\d+", r):
                        with sh.lock:
                            sh.sc_done[j] += 1
                    elif r == b"SERVER_ERROR out of memory":
                        with sh.lock:
                            sh.refused += 1
                    elif r == b"NOT_FOUND":
                        note(sh, sh.lost, "thread %d: shared counter sc%d missing" % (tid, j))
                    else:
                        note(sh, sh.bad_replies, "thread %d: incr sc%d -> %r" % (tid, j, r))
            elif x < 0.88:
                op = "append"
                if rnd.random() < 0.85:
                    k = rnd.choice(mine)
                    if model[k] is not None and len(model[k]) > 4000:
                        continue
                    rec = REC(k) * rnd.randrange(1, 4)
                    r = store_retry(c, b"append", k, rec, sh)
                    want = b"NOT_STORED" if model[k] is None else b"STORED"
                    log(k, "append -> %s" % r.decode())
                    if r == b"NOT_STORED" and k in maybe_gone:
                        pass  # still either the old value or nothing
                    elif r == want:
                        if want == b"STORED":
                            model[k] = model[k] + rec
                            maybe_gone.discard(k)
                    elif r == b"NOT_STORED":
                        # the key is there (a later read checks it): an append that could not be done must say
                        # SERVER_ERROR out of memory, and must leave the value unchanged
                        note(sh, sh.bad_replies, "thread %d: append on present key %r -> NOT_STORED" % (tid, k))
                    elif r != OOM:
                        note(sh, sh.bad_replies, "thread %d: append %r -> %r, expected %r" % (tid, k, r, want))
                else:
                    k = b"s%04d" % rnd.randrange(SHARED)
                    r = store_retry(c, b"append", k, REC(k), sh)
                    if r not in (b"STORED", b"NOT_STORED", OOM):
                        note(sh, sh.bad_replies, "thread %d: append %r -> %r" % (tid, k, r))
            else:
                op = "get_own"
                k = rnd.choice(mine)
                own_check(k, c.get([k]).get(k))
            ops[op] = ops.get(op, 0) + 1
    except Exception as e:  # noqa: BLE001
        note(sh, sh.errors, "thread %d: %s: %s" % (tid, type(e).__name__, e))
    finally:
        with sh.lock:
            sh.unacked[tid] = unacked
            sh.maybe_gone |= maybe_gone
            for op, n in ops.items():
                sh.ops[op] = sh.ops.get(op, 0) + n
        c.close()


model_ctr = {}  # own counters; each thread touches only its own entries


def preload(port, sh, rnd):
    """Store every key once (pipelined, with replies).  Returns {key: value or None}."""
    c = Raw(port)
    items = []
    for k in range(OWNED):
        key = b"o%05d" % k
        items.append((key, make_value(key, PRELOAD_VER, rnd.randrange(200, 2200), rnd)))
    for k in range(SHARED):
        key = b"s%04d" % k
        sh.written[key] = {PRELOAD_VER}
        items.append((key, make_value(key, PRELOAD_VER, rnd.randrange(200, 2200), rnd)))
    rnd.shuffle(items)
    ctrs = [(b"c%d_%d" % (t, j), ctr_value(0)) for t in range(THREADS) for j in range(COUNTERS)]
    items = ctrs + [(b"sc%d" % j, ctr_value(0)) for j in range(COUNTERS)] + items
    stored = {}
    for b0 in range(0, len(items), 400):
        chunk = items[b0:b0 + 400]
        c.sock.sendall(b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v) for k, v in chunk))
        replies = [c.line() for _ in chunk]
        for (k, v), r in zip(chunk, replies):
            tries = 0
            while r == OOM and tries < 10:
                tries += 1
                time.sleep(0.05)
                r = c.store(b"set", k, v)
            if r == b"STORED":
                stored[k] = v
            else:
                stored[k] = None
                if k.startswith(b"o"):
                    sh.unacked_preload.setdefault(owner_of(k), {})[k] = {v: ("preload set", r)}
                note(sh, sh.bad_replies, "preload: set %r -> %r" % (k, r))
    c.close()
    return stored


def final_sweep(port, sh, check=True):
    """All clients stopped: every owned key exact, every shared key plausible, counters exact.
    Returns `stats tiers` and `evictions`; with check=False only those."""
    c = Raw(port)
    try:
        if not check:
            return c.stats(b"tiers"), c.stats()["evictions"]
        allkeys = [b"o%05d" % k for k in range(OWNED)] + [b"s%04d" % k for k in range(SHARED)]
        for b0 in range(0, len(allkeys), 100):
            chunk = allkeys[b0:b0 + 100]
            got = c.get(chunk)
            for k in chunk:
                if k.startswith(b"o"):
                    want = sh.models[owner_of(k)][k]
                    raw = got.get(k)
                    if raw is None and want is not None and k not in sh.maybe_gone:
                        note(sh, sh.lost, "final sweep: %r missing" % k)
                    elif raw is not None and raw != want:
                        refused = sh.unacked.get(owner_of(k), {}).get(k, {}).get(raw)
                        note(sh, sh.errors, "final sweep: %r = %r..., want %r...%s"
                             % (k, raw[:50], None if want is None else want[:50],
                                " (from a %s answered %r)" % refused if refused else ""))
                elif k in got:
                    try:
                        verify_foreign(sh, k, got[k])
                    except WrongValue as e:
                        note(sh, sh.errors, "final sweep: %s" % e)
        ctrs = c.get(list(model_ctr) + [b"sc%d" % j for j in range(COUNTERS)])
        for k, n in list(model_ctr.items()) + [(b"sc%d" % j, sh.sc_done[j]) for j in range(COUNTERS)]:
            if k not in ctrs:
                note(sh, sh.lost, "final sweep: counter %r missing" % k)
            elif ctr_read(k, ctrs[k]) != n:
                note(sh, sh.errors, "final sweep: counter %r = %r, expected %d" % (k, ctrs[k][:30], n))
        return c.stats(b"tiers"), c.stats()["evictions"]
    finally:
        c.close()


@pytest.fixture
def nvm_path():
    p = "/dev/shm/tac-stress-%d-%s" % (os.getpid(), uuid.uuid4().hex[:10])
    yield p
    remove_tier_file(p)


@pytest.mark.tac_only
@pytest.mark.parametrize("extra_opts", ["", "dram_free_watermark=4m", "tier_policy=anti2"],
                         ids=["default", "watermark4m", "anti2"])
def test_stress_tiers(server, nvm_path, extra_opts):
    opts = "nvm_path=%s:128m,evict_threads=1" % nvm_path + ("," + extra_opts if extra_opts else "")
    # -m 16: with 1 MB slab pages, mixed value sizes spread over a dozen slab
    # classes; -m 8 leaves the page mover no class with a page to spare.
    srv = server(["-m", "16", "-t", "4", "-o", opts])
    seconds = float(os.environ.get("STRESS_SECONDS", STRESS_DEFAULT_SECONDS))
    seed = int(os.environ.get("STRESS_SEED", random.randrange(1 << 30)))
    print("STRESS_SEED=%d (threads=%d keys=%d seconds=%s opts=%s)"
          % (seed, THREADS, OWNED + SHARED, seconds, opts))
    sh = Shared()
    t0 = time.time()
    stored = preload(srv.port, sh, random.Random(seed))
    print("preload: %.1fs" % (time.time() - t0))
    model_ctr.clear()
    for t in range(THREADS):
        sh.models[t] = {b"o%05d" % k: stored[b"o%05d" % k] for k in range(t, OWNED, THREADS)}
        for j in range(COUNTERS):
            key = b"c%d_%d" % (t, j)
            if stored[key] is None:
                pytest.fail("preload could not store counter %r: %s" % (key, sh.bad_replies[:10]))
            model_ctr[key] = 0

    stop = threading.Event()
    ts = [threading.Thread(target=worker, args=(t, srv.port, seed, stop, sh)) for t in range(THREADS)]
    for t in ts:
        t.start()
    deadline = time.time() + seconds
    while time.time() < deadline and srv.alive() and any(t.is_alive() for t in ts):
        time.sleep(0.2)
    stop.set()
    for t in ts:
        t.join(120)
    hung = [i for i, t in enumerate(ts) if t.is_alive()]
    total = sum(sh.ops.values())
    print("ops=%d (%.0f/s) %r refused=%d" % (total, total / seconds, sh.ops, sh.refused))
    assert srv.alive(), "server died (STRESS_SEED=%d)" % seed
    assert not hung, "client threads %r hung (STRESS_SEED=%d)" % (hung, seed)

    # final sweep (skipped once errors are known): every owned key exact, every shared key plausible
    st, evictions = final_sweep(srv.port, sh, check=not sh.errors)
    print("stats tiers: %r" % st)
    tag = "(STRESS_SEED=%d, opts %s)" % (seed, opts)
    # sanitizer builds: a report on the server's stderr fails the run even if the server survived it
    # (TSan with halt_on_error=0); the stress conftest does not print server stderr itself
    err = srv.stderr_text()
    if err.strip():
        print("---- server stderr ----\n" + err)
    for marker in ("WARNING: ThreadSanitizer", "ERROR: AddressSanitizer", "runtime error:"):
        assert marker not in err, "sanitizer report on the server's stderr %s:\n%s" % (tag, err[:8000])
    assert not sh.errors, "%d WRONG VALUES %s:\n%s\nstats tiers: %r" % (len(sh.errors), tag, "\n".join(sh.errors[:20]), st)
    def count(lst):
        return sum(sh.kinds.get(id(lst), {}).values())

    assert not sh.bad_replies, "%d unexpected replies %s, by kind %r; first:\n%s\nstats tiers: %r" % (
        count(sh.bad_replies), tag, sh.kinds.get(id(sh.bad_replies)), "\n".join(sh.bad_replies[:10]), st)
    assert not sh.lost, ("%d acknowledged items lost (NVM has room for all) %s, by kind %r; first:\n%s\n"
                         "evictions=%s stats tiers: %r") % (
        count(sh.lost), tag, sh.kinds.get(id(sh.lost)), "\n".join(sh.lost[:10]), evictions, st)
    assert total > 1000, "only %d operations in %ss" % (total, seconds)
    assert int(st["evict_dram_to_nvm"]) > 0, st
    assert int(st["get_hits_nvm"]) > 0, st
