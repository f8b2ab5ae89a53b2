"""NVM tier (anti-caching): items that do not fit in DRAM move to an emulated NVM
file instead of being dropped, and every command works on them.

The NVM tier is a plain file under /dev/shm (`-o nvm_path=<file>:<size>`); each
test uses its own file and removes it afterwards.  `me <key>` tells which tier a
key lives in (`tier=dram` / `tier=nvm`).

Values encode key, version and a checksum (make_value / check_value), and the
tests also compare them byte for byte with what was stored.
"""
import os
import re
import socket
import struct
import subprocess
import time
import zlib

import pytest

from mcserver import SERVER_BIN, base_args, free_port, recv_until
from test_binary import (APPEND, DELETE, ENOENT, GAT, GET, GETK, INCR, OK, PREPEND, TOUCH, Bin)

pytestmark = pytest.mark.tac_only

OOM = b"SERVER_ERROR out of memory storing object"
MB = 1 << 20


# ---------------------------------------------------------------- helpers

@pytest.fixture
def nvm_file(shm_file):
    """Factory of unique /dev/shm paths; every file handed out is removed afterwards."""
    return shm_file


def make_value(key, version, size):
    """`key|version|pad|crc32` of exactly `size` bytes (crc over key|version|pad)."""
    head = b"%s|%d|" % (key, version)
    npad = size - len(head) - 9
    assert npad >= 0, (key, size)
    seed = b"%08x" % zlib.crc32(head)
    pad = (seed * (npad // 8 + 1))[:npad]
    return head + pad + b"|%08x" % zlib.crc32(head + pad)


def check_value(key, raw):
    """Check key and checksum of a make_value() value; return its version."""
    parts = raw.split(b"|")
    assert len(parts) == 4, "malformed value for %r: %r" % (key, raw[:80])
    k, ver, pad, crc = parts
    assert k == key, "value of %r carries key %r" % (key, k)
    assert int(crc, 16) == zlib.crc32(b"%s|%s|%s" % (k, ver, pad)), "checksum mismatch for %r" % key
    return int(ver)


def parse_get(buf):
    """Parse a get/gets response into {key: (flags, value, cas_or_None)}; asserts well-formedness."""
    out = {}
    pos = 0
    while True:
        eol = buf.index(b"\r\n", pos)
        line = buf[pos:eol]
        if line == b"END":
            assert eol + 2 == len(buf), "trailing bytes after END: %r" % buf[eol:eol + 100]
            return out
        parts = line.split(b" ")
        assert parts[0] == b"VALUE" and len(parts) in (4, 5), "bad response line %r" % line[:200]
        key, flags, n = parts[1], int(parts[2]), int(parts[3])
        cas = int(parts[4]) if len(parts) == 5 else None
        data = buf[eol + 2:eol + 2 + n]
        assert buf[eol + 2 + n:eol + 4 + n] == b"\r\n", "value of %r not followed by CRLF" % key
        assert key not in out, "key %r returned twice" % key
        out[key] = (flags, data, cas)
        pos = eol + 4 + n


def multi_get(c, keys, cmd=b"get"):
    buf = c.get(cmd + b" " + b" ".join(keys) + b"\r\n", timeout=30)
    return parse_get(buf)


def tier_of(c, key):
    r = c.line(b"me " + key + b"\r\n")
    if r == b"EN\r\n":
        return None
    m = re.search(rb" tier=(\w+)\r\n$", r)
    assert m, "me %r: %r" % (key, r)
    return m.group(1).decode()


def me_cas(c, key):
    r = c.line(b"me " + key + b"\r\n")
    m = re.search(rb" cas=(\d+) ", r)
    assert m, r
    return int(m.group(1))


def load(c, items, flags_of=lambda k: 0, batch=500, retries=40, retry_sleep=0.1):
    """Pipeline `set`s (with replies) in batches.  A key answered SERVER_ERROR out of
    memory is retried for up to 4 s (the evictors and the page mover may lag,
    most on sanitizer builds).  Returns
    (stored_keys, failures) where failures maps key -> last reply."""
    stored, failures = [], {}
    items = list(items)
    for b0 in range(0, len(items), batch):
        chunk = items[b0:b0 + batch]
        c.send(b"".join(b"set %s %d 0 %d\r\n%s\r\n" % (k, flags_of(k), len(v), v) for k, v in chunk))
        buf = recv_until(c.sock, b"\r\n", timeout=60)
        while buf.count(b"\r\n") < len(chunk):
            buf += recv_until(c.sock, b"\r\n", timeout=60)
        replies = buf.split(b"\r\n")[:-1]
        assert len(replies) == len(chunk), "%d replies for %d sets: %r" % (len(replies), len(chunk), replies[:5])
        for (k, v), r in zip(chunk, replies):
            tries = 0
            while r == OOM and tries < retries:
                tries += 1
                time.sleep(retry_sleep)
                r = c.line(b"set %s %d 0 %d\r\n%s\r\n" % (k, flags_of(k), len(v), v)).rstrip(b"\r\n")
            if r == b"STORED":
                stored.append(k)
            else:
                failures[k] = r
    return stored, failures


def fmt_failures(failures, st):
    kinds = {}
    for r in failures.values():
        kinds[r] = kinds.get(r, 0) + 1
    first = list(failures.items())[:5]
    return "%d keys never STORED; replies: %r; first: %r\nstats tiers: %r" % (len(failures), kinds, first, st)


def tiers_int(st, name):
    assert name in st, "stats tiers lacks %s: %r" % (name, sorted(st))
    return int(st[name])


def nvm_server(server, nvm_file, mem=16, nvm="256m", extra=(), opts=()):
    o = ",".join(["nvm_path=%s:%s" % (nvm_file(), nvm)] + list(opts))
    return server(["-m", str(mem), "-t", "2", "-o", o] + list(extra))


# ---------------------------------------------------------------- 1

@pytest.mark.tac_only
def test_load_4x_dram_reads_back_exact(server, nvm_file):
    s = nvm_server(server, nvm_file, mem=16)
    c = s.connect()
    size = 1000
    n = 4 * 16 * MB // size  # ~67k keys, 4x the DRAM budget
    keys = [b"k%06d" % i for i in range(n)]
    vals = {k: make_value(k, 1, size) for k in keys}
    flags_of = lambda k: zlib.crc32(k) & 0xFFFF  # noqa: E731
    stored, failures = load(c, ((k, vals[k]) for k in keys), flags_of=flags_of)
    st_load = c.stats(b"tiers")

    misses, wrong = [], []
    for b0 in range(0, n, 100):
        chunk = keys[b0:b0 + 100]
        got = multi_get(c, chunk)
        for k in chunk:
            if k not in got:
                misses.append(k)
                continue
            flags, v, _ = got[k]
            if v != vals[k] or flags != flags_of(k):
                wrong.append((k, flags, v[:60]))
        assert set(got) <= set(chunk)
    st = c.stats(b"tiers")
    assert not wrong, "%d wrong values, first: %r" % (len(wrong), wrong[:5])
    missed = set(misses)
    lost = [k for k in stored if k in missed]
    assert not failures, fmt_failures(failures, st_load) + "\n(%d acknowledged keys missing on read-back)" % len(lost)
    assert not misses, "hit rate %.2f%%: %d of %d keys missing (first %r)\nstats tiers: %r" % (
        100.0 * (n - len(misses)) / n, len(misses), n, misses[:5], st)
    assert tiers_int(st, "get_hits_dram") > 0, st
    assert tiers_int(st, "get_hits_nvm") > 0, st
    assert tiers_int(st, "meta_tuples") > 0, st
    assert int(c.stats()["curr_items"]) == n


# ---------------------------------------------------------------- 2

class NvmKeys:
    """Hands out keys that are NVM-resident right now, with their current value."""

    def __init__(self, c, keys, vals):
        self.c, self.keys, self.vals, self.i = c, list(keys), vals, 0

    def take(self):
        while self.i < len(self.keys):
            k = self.keys[self.i]
            self.i += 1
            if tier_of(self.c, k) == "nvm":
                return k, self.vals[k]
        raise AssertionError("ran out of NVM-resident keys (used %d)" % self.i)


def fill_until_nvm(c, prefix_items, fill_size=1000, max_keys=24000, want=None):
    """Store `prefix_items` first, then filler keys until every prefix key is in NVM."""
    stored, failures = load(c, prefix_items)
    assert not failures, fmt_failures(failures, c.stats(b"tiers"))
    want = want or [k for k, _ in prefix_items]
    n = 0
    deadline = None
    while True:
        in_nvm = sum(1 for k in want if tier_of(c, k) == "nvm")
        if in_nvm == len(want):
            return n
        if n < max_keys:
            items = [(b"fill%06d" % i, make_value(b"fill%06d" % i, 1, fill_size)) for i in range(n, n + 2000)]
            _, failures = load(c, items)
            assert not failures, fmt_failures(failures, c.stats(b"tiers"))
            n += 2000
        else:
            deadline = deadline or time.time() + 5
            if time.time() > deadline:
                raise AssertionError("only %d of %d early keys reached NVM after %d filler keys; stats tiers %r"
                                     % (in_nvm, len(want), n, c.stats(b"tiers")))
            time.sleep(0.2)


def mg_value(c, key):
    """The value returned by `mg <key> v` (asserts a hit)."""
    c.send(b"mg %s v\r\n" % key)
    buf = recv_until(c.sock, b"\r\n")
    m = re.match(rb"VA (\d+)\r\n", buf)
    assert m, "mg %r v: %r" % (key, buf[:100])
    total = m.end() + int(m.group(1)) + 2
    while len(buf) < total:
        buf += recv_until(c.sock, b"\r\n")
    assert len(buf) == total and buf.endswith(b"\r\n"), buf[-100:]
    return buf[m.end():-2]


def expect_get(c, key, value, flags=None):
    got = multi_get(c, [key])
    assert key in got, "%r missing" % key
    assert got[key][1] == value, "%r: got %r..., want %r..." % (key, got[key][1][:60], value[:60])
    if flags is not None:
        assert got[key][0] == flags, (key, got[key][0], flags)


@pytest.mark.tac_only
def test_commands_on_nvm_items(server, nvm_file):
    s = nvm_server(server, nvm_file, mem=16)
    c = s.connect()
    size = 1000
    NK = 80
    keys = [b"nv%03d" % i for i in range(NK)]
    vals = {k: make_value(k, 1, size) for k in keys}
    # numeric values padded with spaces to the filler size, so they share its slab class and move to NVM
    nums = [b"num%02d" % i for i in range(8)]
    for k in nums:
        vals[k] = b"100" + b" " * (size - 3)
    FL = 4242
    items = [(k, vals[k]) for k in keys + nums]
    stored, failures = load(c, items, flags_of=lambda k: FL)
    assert not failures, fmt_failures(failures, c.stats(b"tiers"))
    fill_until_nvm(c, [], want=keys + nums)
    pool = NvmKeys(c, keys, vals)
    numpool = NvmKeys(c, nums, vals)

    # -- get / gets: value, flags and cas come from the NVM tuple + meta tuple
    k, v = pool.take()
    cas = me_cas(c, k)
    assert c.get(b"get %s\r\n" % k) == b"VALUE %s %d %d\r\n%s\r\nEND\r\n" % (k, FL, size, v)
    k, v = pool.take()
    cas = me_cas(c, k)
    assert c.get(b"gets %s\r\n" % k) == b"VALUE %s %d %d %d\r\n%s\r\nEND\r\n" % (k, FL, size, cas, v)
    # a multi-get mixing NVM keys, a DRAM key and a miss answers in request order
    k1, v1 = pool.take()
    k2, v2 = pool.take()
    assert c.line(b"set dramkey 1 0 2\r\nhi\r\n") == b"STORED\r\n"
    r = c.get(b"get %s missing dramkey %s\r\n" % (k1, k2))
    assert r == (b"VALUE %s %d %d\r\n%s\r\nVALUE dramkey 1 2\r\nhi\r\nVALUE %s %d %d\r\n%s\r\nEND\r\n"
                 % (k1, FL, size, v1, k2, FL, size, v2))

    # -- TTL changes on NVM items (all checked after one shared sleep)
    expire = []
    k, v = pool.take()  # gat 1
    assert c.get(b"gat 1 %s\r\n" % k) == b"VALUE %s %d %d\r\n%s\r\nEND\r\n" % (k, FL, size, v)
    expire.append(k)
    k, v = pool.take()  # gats 1
    cas = me_cas(c, k)
    assert c.get(b"gats 1 %s\r\n" % k) == b"VALUE %s %d %d %d\r\n%s\r\nEND\r\n" % (k, FL, size, cas, v)
    expire.append(k)
    k, v = pool.take()  # touch 1
    assert c.line(b"touch %s 1\r\n" % k) == b"TOUCHED\r\n"
    expire.append(k)
    k, v = pool.take()  # mg T1
    assert c.line(b"mg %s T1 t\r\n" % k) == b"HD t1\r\n"
    expire.append(k)
    keep = []
    k, v = pool.take()  # gat 0: clears the TTL, value intact
    assert c.get(b"gat 0 %s\r\n" % k) == b"VALUE %s %d %d\r\n%s\r\nEND\r\n" % (k, FL, size, v)
    keep.append((k, v))
    k, v = pool.take()  # touch with a long TTL
    assert c.line(b"touch %s 3600\r\n" % k) == b"TOUCHED\r\n"
    assert c.line(b"mg %s t\r\n" % k) in (b"HD t3600\r\n", b"HD t3599\r\n")
    keep.append((k, v))
    assert c.line(b"touch nosuchkey 1\r\n") == b"NOT_FOUND\r\n"

    # binary protocol on NVM items (own connection: the protocol is chosen per connection)
    bs = socket.create_connection(("127.0.0.1", s.port), timeout=10)
    b = Bin(bs)
    k, v = pool.take()
    cas = me_cas(c, k)
    g = b.call(GET, key=k, opaque=11)
    assert (g["status"], g["opaque"], g["key"], g["value"], g["cas"], g["extras"]) == \
        (OK, 11, b"", v, cas, struct.pack(">I", FL))
    k, v = pool.take()
    g = b.call(GETK, key=k)
    assert (g["status"], g["key"], g["value"], g["extras"]) == (OK, k, v, struct.pack(">I", FL))
    k, v = pool.take()
    r = b.call(TOUCH, key=k, extras=struct.pack(">I", 1))
    assert r["status"] == OK and r["value"] == b""
    expire.append(k)
    k, v = pool.take()
    r = b.call(GAT, key=k, extras=struct.pack(">I", 1))
    assert (r["status"], r["value"], r["extras"]) == (OK, v, struct.pack(">I", FL))
    expire.append(k)
    k, v = pool.take()
    assert b.call(DELETE, key=k)["status"] == OK
    assert b.call(GET, key=k)["status"] == ENOENT
    assert tier_of(c, k) is None
    k, v = pool.take()
    r = b.call(APPEND, key=k, value=b"+bin")
    assert r["status"] == OK, r
    assert b.call(GET, key=k)["value"] == v + b"+bin"
    expect_get(c, k, v + b"+bin", FL)
    k, v = pool.take()
    r = b.call(PREPEND, key=k, value=b"bin+")
    assert r["status"] == OK, r
    expect_get(c, k, b"bin+" + v, FL)
    k, v = numpool.take()
    r = b.call(INCR, key=k, extras=struct.pack(">QQI", 7, 0, 0))
    assert r["status"] == OK and struct.unpack(">Q", r["value"])[0] == 107, r
    got = multi_get(c, [k])[k][1]
    assert got in (b"107", b"107" + b" " * (size - 3)), got[:40]
    bs.close()

    # -- cas: a bad cas leaves the NVM value alone, the right one replaces it
    k, v = pool.take()
    cas = me_cas(c, k)
    nv = make_value(k, 2, 700)
    assert c.line(b"cas %s 5 0 %d %d\r\n%s\r\n" % (k, len(nv), cas + 1000, nv)) == b"EXISTS\r\n"
    expect_get(c, k, v, FL)
    assert c.line(b"cas %s 5 0 %d %d\r\n%s\r\n" % (k, len(nv), cas, nv)) == b"STORED\r\n"
    expect_get(c, k, nv, 5)
    r = multi_get(c, [k], b"gets")[k]
    assert r[2] != cas
    assert c.line(b"cas nosuchkey 0 0 1 5\r\nx\r\n") == b"NOT_FOUND\r\n"

    # -- incr / decr on NVM-resident numbers
    k, v = numpool.take()
    assert c.line(b"incr %s 5\r\n" % k) == b"105\r\n"
    got = multi_get(c, [k])[k][1]
    assert got in (b"105", b"105" + b" " * (size - 3)), got[:40]
    assert c.line(b"incr %s 1\r\n" % k) == b"106\r\n"
    k, v = numpool.take()
    assert c.line(b"decr %s 3\r\n" % k) == b"97\r\n"
    got = multi_get(c, [k])[k][1]
    assert got in (b"97", b"97" + b" " * (size - 2)), got[:40]
    k, v = numpool.take()
    assert c.line(b"decr %s 1000\r\n" % k) == b"0\r\n"
    k, v = pool.take()
    assert c.line(b"incr %s 1\r\n" % k) == b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    expect_get(c, k, v, FL)

    # -- append / prepend
    k, v = pool.take()
    assert c.line(b"append %s 99 0 6\r\n+tail+\r\n" % k) == b"STORED\r\n"
    expect_get(c, k, v + b"+tail+", FL)  # append keeps the flags
    k, v = pool.take()
    assert c.line(b"prepend %s 99 0 6\r\n+head+\r\n" % k) == b"STORED\r\n"
    expect_get(c, k, b"+head+" + v, FL)

    # -- delete
    k, v = pool.take()
    assert c.line(b"delete %s\r\n" % k) == b"DELETED\r\n"
    assert c.get(b"get %s\r\n" % k) == b"END\r\n"
    assert c.line(b"me %s\r\n" % k) == b"EN\r\n"
    assert c.line(b"delete %s\r\n" % k) == b"NOT_FOUND\r\n"

    # -- add / replace
    k, v = pool.take()
    assert c.line(b"add %s 0 0 3\r\nnew\r\n" % k) == b"NOT_STORED\r\n"
    expect_get(c, k, v, FL)
    k, v = pool.take()
    nv = make_value(k, 3, 1500)
    assert c.line(b"replace %s 8 0 %d\r\n%s\r\n" % (k, len(nv), nv)) == b"STORED\r\n"
    expect_get(c, k, nv, 8)
    k, v = pool.take()
    nv = make_value(k, 4, 1000)
    assert c.line(b"set %s 9 0 %d\r\n%s\r\n" % (k, len(nv), nv)) == b"STORED\r\n"
    expect_get(c, k, nv, 9)

    # -- meta commands
    k, v = pool.take()
    cas = me_cas(c, k)
    r = c.req(b"mg %s s v f t c k\r\n" % k, v + b"\r\n")
    assert r == b"VA %d s%d f%d t-1 c%d k%s\r\n%s\r\n" % (size, size, FL, cas, k, v)
    k, v = pool.take()
    assert c.line(b"mg %s s k\r\n" % k) == b"HD s%d k%s\r\n" % (size, k)
    k, v = pool.take()
    cas = me_cas(c, k)
    nv = make_value(k, 5, 900)
    assert c.line(b"ms %s %d C%d\r\n%s\r\n" % (k, len(nv), cas + 1000, nv)) == b"EX\r\n"
    expect_get(c, k, v, FL)
    assert c.line(b"ms %s %d C%d F3\r\n%s\r\n" % (k, len(nv), cas, nv)) == b"HD\r\n"
    expect_get(c, k, nv, 3)
    k, v = pool.take()
    assert c.line(b"ms %s 4 MA\r\n=ms=\r\n" % k) == b"HD\r\n"
    expect_get(c, k, v + b"=ms=", FL)
    k, v = pool.take()
    assert c.line(b"ms %s 3 ME\r\nnew\r\n" % k) == b"NS\r\n"
    expect_get(c, k, v, FL)
    k, v = pool.take()
    cas = me_cas(c, k)
    assert c.line(b"md %s C%d\r\n" % (k, cas + 1000)) == b"EX\r\n"
    expect_get(c, k, v, FL)
    assert c.line(b"md %s\r\n" % k) == b"HD\r\n"
    assert c.line(b"mg %s v\r\n" % k) == b"EN\r\n"
    k, v = numpool.take()
    r = c.req(b"ma %s D11 v\r\n" % k, b"111\r\n")
    assert r == b"VA 3\r\n111\r\n", r
    k, v = numpool.take()
    assert c.line(b"ma %s MD D1\r\n" % k) == b"HD\r\n"
    assert mg_value(c, k) in (b"99", b"99" + b" " * (size - 2))

    # keys whose TTL was cleared or lengthened are still there, byte-exact
    for k, v in keep:
        expect_get(c, k, v, FL)
    # keys given a 1 s TTL while in NVM are gone after 2.5 s
    time.sleep(2.5)
    got = multi_get(c, expire)
    assert not got, "keys outlived a 1 s TTL set while they were in NVM: %r" % sorted(got)
    st = c.stats(b"tiers")
    assert tiers_int(st, "get_hits_nvm") > 0, st


# ---------------------------------------------------------------- 3, 4

def write_over_capacity(c, total_bytes, size=1000, rewrite_every=10, retry=True):
    """Write distinct keys (plus rewrites of a few recent keys with a new version).
    Returns (latest, order, oom_keys): latest acknowledged value per key, write order, and keys
    that ended in SERVER_ERROR out of memory (with their last reply)."""
    n = total_bytes // size
    latest, order, refused = {}, [], {}
    other = {}
    batch = 500
    for b0 in range(0, n, batch):
        items = []
        for i in range(b0, min(n, b0 + batch)):
            k = b"f%07d" % i
            items.append((k, make_value(k, 1, size)))
            if rewrite_every and i % rewrite_every == 0 and i >= 200:
                k2 = b"f%07d" % (i - 100)  # a second version of a slightly older key
                items.append((k2, make_value(k2, 2, size)))
        stored, failures = load(c, items, retries=5 if retry else 0, retry_sleep=0.05)
        vals = dict(items)  # a later item wins (the version-2 rewrite)
        for k in stored:
            if k not in latest:
                order.append(k)
            latest[k] = vals[k]
        for k, r in failures.items():
            if r == OOM:
                refused[k] = r
            else:
                other[k] = r
    return latest, order, refused, other


def read_all(c, keys):
    got = {}
    for b0 in range(0, len(keys), 100):
        chunk = keys[b0:b0 + 100]
        r = multi_get(c, chunk)
        assert set(r) <= set(chunk), "unrequested keys returned"
        got.update(r)
    return got


@pytest.mark.tac_only
def test_nvm_full_drops_coldest(server, nvm_file):
    s = nvm_server(server, nvm_file, mem=8, nvm="16m")
    c = s.connect()
    latest, order, refused, other = write_over_capacity(c, 4 * (8 + 16) * MB)
    st = c.stats(b"tiers")
    assert not other, fmt_failures(other, st)
    assert not refused, "cache mode (no -M) must make room, not refuse: " + fmt_failures(refused, st)
    assert s.alive()
    got = read_all(c, order)
    wrong = [(k, v[1][:60]) for k, v in got.items() if v[1] != latest[k]]
    # no wrong value, ever: a hit is exactly the last acknowledged version
    assert not wrong, "%d wrong values (stale or corrupt), first: %r" % (len(wrong), wrong[:5])
    recent = order[-2000:]  # ~2 MB: well inside DRAM
    missing_recent = [k for k in recent if k not in got]
    assert not missing_recent, "%d of the %d most recent keys miss (first %r); stats tiers %r" % (
        len(missing_recent), len(recent), missing_recent[:5], c.stats(b"tiers"))
    old_missing = sum(1 for k in order[:len(order) // 4] if k not in got)
    assert old_missing > 0, "4x (DRAM+NVM) of data and no old key was dropped?"
    st = c.stats(b"tiers")
    stall = c.stats()
    assert tiers_int(st, "nvm_evictions") > 0 or int(stall["evictions"]) > 0, (st, stall["evictions"])
    # NVM held a real share of the data before dropping
    assert tiers_int(st, "nvm_items") > 0 and tiers_int(st, "evict_dram_to_nvm") > 0, st
    print("hits %d of %d keys; stats tiers %r" % (len(got), len(order), st))


@pytest.mark.tac_only
def test_nvm_full_with_M_refuses(server, nvm_file):
    s = nvm_server(server, nvm_file, mem=8, nvm="16m", extra=["-M"])
    c = s.connect()
    # No client retries: with -M a full server keeps refusing, and each retry
    # would only wait.
    latest, order, refused, other = write_over_capacity(c, 2 * (8 + 16) * MB, rewrite_every=0,
                                                        retry=False)
    st = c.stats(b"tiers")
    assert not other, fmt_failures(other, st)
    assert refused, "-M and 3x (DRAM+NVM) of data, yet no SERVER_ERROR out of memory; stats tiers %r" % st
    assert s.alive()
    got = read_all(c, order)
    missing = [k for k in order if k not in got]
    wrong = [k for k, v in got.items() if v[1] != latest[k]]
    assert not wrong, "%d wrong values, first %r" % (len(wrong), wrong[:5])
    assert not missing, "-M dropped %d acknowledged keys (first %r); stats tiers %r" % (
        len(missing), missing[:5], st)
    # the refusals came only once NVM was used too: more was stored than DRAM alone holds
    assert len(order) * 1000 > 8 * MB, "only %d keys stored before OOM; stats tiers %r" % (len(order), st)
    assert tiers_int(st, "nvm_items") > 0, st
    assert tiers_int(st, "nvm_evictions") == 0 and int(c.stats()["evictions"]) == 0, st
    print("stored %d keys, %d refused; stats tiers %r" % (len(order), len(refused), st))


def test_nvm_page_mover_frees_a_page_for_large_values(server, nvm_file):
    """NVM pages keep their slot class while they hold a live tuple.  Fill NVM with
    4 KB values, delete 3 keys of every 4 (every page is left a quarter used, none is
    wholly free), then store values of 300 KB, a class with no page of its own.  With
    -M nothing may be dropped, so only the page mover (which moves a page's live
    tuples into free slots of their class) can make room: every store succeeds,
    nothing is lost, and every value reads back exactly."""
    s = nvm_server(server, nvm_file, mem=8, nvm="32m", extra=["-M"])
    c = s.connect()
    small = []
    i = 0
    while True:
        chunk = [b"usertable-user%016d-small" % j for j in range(i, i + 500)]
        i += 500
        stored, failures = load(c, [(k, make_value(k, 1, 4000)) for k in chunk], retries=0)
        small += stored
        st = c.stats(b"tiers")
        if failures or tiers_int(st, "nvm_pages_used") >= tiers_int(st, "nvm_pages_total") or i > 40000:
            break
    assert tiers_int(st, "nvm_pages_used") == tiers_int(st, "nvm_pages_total"), st
    kept = []
    for n, k in enumerate(small):
        if n % 4:
            assert c.line(b"delete " + k + b"\r\n") == b"DELETED\r\n"
        else:
            kept.append(k)
    big = [b"usertable-user%016d-large" % j for j in range(40)]  # 12 MB: more than DRAM holds
    stored, failures = load(c, [(k, make_value(k, 1, 300 << 10)) for k in big], batch=10)
    st = c.stats(b"tiers")
    assert not failures, fmt_failures(failures, st)
    assert tiers_int(st, "nvm_pages_drained") > 0 and tiers_int(st, "nvm_tuples_moved") > 0, st
    assert tiers_int(st, "nvm_evictions") == 0 and int(c.stats()["evictions"]) == 0, st
    got = read_all(c, kept)
    assert sorted(got) == sorted(kept), "%d of %d kept keys missing" % (len(set(kept) - set(got)), len(kept))
    assert all(v[1] == make_value(k, 1, 4000) for k, v in got.items())
    for k in big:
        assert multi_get(c, [k])[k][1] == make_value(k, 1, 300 << 10), k
    print("%d small keys, %d kept; stats tiers %r" % (len(small), len(kept), st))


# ---------------------------------------------------------------- 5, 6

TIERS_KEYS = ["tiers", "dram_capacity", "dram_items", "get_hits_dram", "nvm_capacity", "nvm_bytes", "nvm_items",
              "meta_tuples", "get_hits_nvm", "evict_dram_to_nvm", "set_fallback_nvm", "nvm_evictions",
              "meta_alloc_failures", "evictor_backlog"]


@pytest.mark.tac_only
def test_stats_tiers_and_settings(server, nvm_file):
    s = nvm_server(server, nvm_file, mem=16, nvm="64m", opts=["dram_free_watermark=3m"])
    c = s.connect()
    st = c.stats(b"settings")
    assert st.get("nvm_backing") == "tmpfs-file", st
    assert st.get("nvm_is_pmem") == "no", st
    assert st.get("nvm_capacity") == str(64 * MB), st
    assert st.get("dram_free_watermark_bytes") == str(3 * MB), st
    t = c.stats(b"tiers")
    missing = [k for k in TIERS_KEYS if k not in t]
    assert not missing, "stats tiers lacks %r: %r" % (missing, t)
    assert t["tiers"] == "dram,nvm"
    assert t["dram_capacity"] == str(16 * MB) and t["nvm_capacity"] == str(64 * MB)
    assert all(re.fullmatch(r"\d+", t[k]) for k in TIERS_KEYS if k != "tiers"), t
    # default watermark: 2% of -m, at least 2 MB
    s2 = nvm_server(server, nvm_file, mem=16, nvm="16m")
    assert s2.connect().stats(b"settings")["dram_free_watermark_bytes"] == str(2 * MB)


def test_meta_tuples_move_and_nvm_values_stay_readable(server, nvm_file):
    """The slab page mover empties a DRAM page of NVM meta tuples (`slabs reassign`):
    each one moves to another chunk (meta_rehomed) while its tuple stays where it is on
    NVM, untouched, and every value reads back exactly from NVM afterwards."""
    s = nvm_server(server, nvm_file, mem=8, nvm="64m", extra=["-o", "slab_automove=0"])
    c = s.connect()
    keys = [b"usertable-user%016d" % j for j in range(30000)]
    stored, failures = load(c, [(k, make_value(k, 1, 1000)) for k in keys])
    assert not failures, fmt_failures(failures, c.stats(b"tiers"))
    assert tiers_int(c.stats(b"tiers"), "meta_tuples") > 10000
    # Free chunks all over the meta tuples' pages: a moved meta tuple needs one.
    for k in keys[::4]:
        assert c.line(b"delete %s\r\n" % k) == b"DELETED\r\n"
    keys = [k for n, k in enumerate(keys) if n % 4]
    slabs = c.stats(b"slabs")
    cls = sorted({int(k.split(":")[0]) for k in slabs if k.split(":")[0].isdigit()})
    size = {k: int(slabs["%d:chunk_size" % k]) for k in cls}
    pages = {k: int(slabs["%d:total_pages" % k]) for k in cls}
    meta_cls = max((k for k in cls if size[k] < 200), key=lambda k: pages[k])  # 33 B keys: ~110 B chunks
    dst = max(cls, key=lambda k: size[k])
    assert pages[meta_cls] >= 2, slabs
    moved = 0
    for _ in range(3):
        r = c.line(b"slabs reassign %d %d\r\n" % (meta_cls, dst))
        assert r in (b"OK\r\n", b"BUSY currently processing reassign request\r\n"), r
        deadline = time.time() + 10
        while time.time() < deadline:
            moved = tiers_int(c.stats(b"tiers"), "meta_rehomed")
            if moved and int(c.stats(b"slabs").get("%d:total_pages" % meta_cls, 0)) < pages[meta_cls]:
                break
            time.sleep(0.1)
        if moved:
            break
    st = c.stats(b"tiers")
    assert moved > 0, st
    on_nvm = [k for k in keys[:3000] if tier_of(c, k) == "nvm"]
    assert len(on_nvm) > 100, len(on_nvm)
    for b0 in range(0, len(keys), 100):
        chunk = keys[b0:b0 + 100]
        got = multi_get(c, chunk)
        assert sorted(got) == sorted(chunk), "%d keys missing after the move" % (len(chunk) - len(got))
        for k in chunk:
            assert got[k][1] == make_value(k, 1, 1000), k
    st = c.stats(b"tiers")
    assert tiers_int(st, "nvm_read_errors") == 0 and int(c.stats(b"tac")["tuple_checksum_failures"]) == 0, st


def test_meta_tuple_reserve_refills_without_automove(server, nvm_file):
    """With -o slab_automove=0 the DRAM reserve for meta tuples is still
    refilled by the page mover: 40000 values of 1000 B (5x DRAM) all move down to
    NVM, each store answered, none waiting out store_wait_ms.  Without the refill
    DRAM fills with data pages, every demotion fails for want of a meta tuple
    chunk (meta_alloc_failures) and stores time out."""
    s = nvm_server(server, nvm_file, mem=8, nvm="128m", extra=["-o", "slab_automove=0,store_wait_ms=200"])
    c = s.connect()
    keys = [b"usertable-user%016d" % j for j in range(40000)]
    for b0 in range(0, len(keys), 50):   # small batches: a stall fails fast
        stored, failures = load(c, [(k, make_value(k, 1, 1000)) for k in keys[b0:b0 + 50]], retries=0)
        if failures:
            break
    st = c.stats(b"tiers")
    assert not failures, "after %d keys: %s" % (b0, fmt_failures(failures, st))
    assert int(c.stats(b"tac")["store_wait_timeouts"]) == 0
    assert tiers_int(st, "nvm_items") > 30000, st
    got = multi_get(c, keys[:200] + keys[-200:])
    assert all(got[k][1] == make_value(k, 1, 1000) for k in keys[:200] + keys[-200:])


def test_stats_nvm_per_class(server, nvm_file):
    """`stats nvm` has one group of lines per NVM slot class in use; its counts add up
    to the totals of `stats tiers`, and a 300 KB value takes a class of its own."""
    s = nvm_server(server, nvm_file, mem=8, nvm="64m")
    c = s.connect()
    items = [(b"usertable-user%016d-s" % j, 4000) for j in range(3000)]
    items += [(b"usertable-user%016d-l" % j, 300 << 10) for j in range(30)]
    stored, failures = load(c, [(k, make_value(k, 1, n)) for k, n in items], batch=50)
    assert not failures, fmt_failures(failures, c.stats(b"tiers"))
    deadline = time.time() + 10
    while True:  # the evictors settle: stats tiers and stats nvm are taken back to back
        t = c.stats(b"tiers")
        nv = c.stats(b"nvm")
        if c.stats(b"tiers") == t or time.time() > deadline:
            break
    classes = sorted({int(k.split(":")[0]) for k in nv if ":" in k})
    assert classes and int(nv["active_classes"]) == len(classes), nv
    sizes = [int(nv["%d:slot_size" % k]) for k in classes]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes), nv
    for k in classes:
        f = {n: int(nv["%d:%s" % (k, n)]) for n in
             ("slot_size", "slots_per_page", "pages", "slots_used", "slots_free", "steals", "alloc_fails")}
        assert f["slots_per_page"] >= 1 and f["slot_size"] * f["slots_per_page"] <= MB, (k, f)
        assert f["slots_used"] + f["slots_free"] <= f["pages"] * f["slots_per_page"], (k, f)
    used = sum(int(nv["%d:slots_used" % k]) for k in classes)
    assert used == tiers_int(t, "nvm_items"), (nv, t)
    assert sum(int(nv["%d:pages" % k]) for k in classes) + int(nv["free_pages"]) == tiers_int(t, "nvm_pages_total"), (nv, t)
    large = [k for k in classes if int(nv["%d:slot_size" % k]) >= 300 << 10]
    assert len(large) == 1 and int(nv["%d:slots_used" % large[0]]) > 0, nv
    # without an NVM tier the group is empty
    c2 = server(["-m", "8"]).connect()
    assert c2.stats(b"nvm") == {}


@pytest.mark.parametrize("spec,why", [
    ("/dev/shm/tac-test-nosize-%d", "no size"),
    ("/nonexistent-dir-tac/x-%d:16m", "missing directory"),
])
@pytest.mark.tac_only
def test_bad_nvm_path_fails(spec, why):
    path = spec % os.getpid()
    p = subprocess.run([SERVER_BIN] + base_args() + ["-l", "127.0.0.1", "-p", str(free_port()), "-U", "0",
                                                     "-o", "nvm_path=" + path],
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=20)
    try:
        msg = (p.stdout + p.stderr).decode("utf-8", "replace")
        assert p.returncode not in (0, None), "server accepted a bad nvm_path (%s): rc=%s" % (why, p.returncode)
        assert "nvm" in msg.lower() and len(msg.strip()) > 10, "unclear message for %s: %r" % (why, msg)
    finally:
        for f in (path, path.split(":")[0]):
            if f.startswith("/dev/shm/") and os.path.exists(f):
                os.unlink(f)


@pytest.mark.tac_only
def test_nvm_latency_option(server, nvm_file):
    s = nvm_server(server, nvm_file, mem=8, nvm="64m", opts=["nvm_latency=300:1000"])
    c = s.connect()
    st = c.stats(b"settings")
    assert st.get("nvm_read_ns") == "300" and st.get("nvm_write_ns") == "1000", st
    n = 16000  # 2x DRAM
    keys = [b"lat%05d" % i for i in range(n)]
    vals = {k: make_value(k, 7, 1000) for k in keys}
    stored, failures = load(c, ((k, vals[k]) for k in keys))
    assert not failures, fmt_failures(failures, c.stats(b"tiers"))
    got = read_all(c, keys)
    wrong = [k for k in keys if k in got and got[k][1] != vals[k]]
    assert not wrong, wrong[:5]
    assert len(got) == n, "%d misses; stats tiers %r" % (n - len(got), c.stats(b"tiers"))
    for k in keys[:50]:
        check_value(k, got[k][1])
    t = c.stats(b"tiers")
    assert tiers_int(t, "get_hits_nvm") > 0 and tiers_int(t, "get_hits_dram") > 0, t
