"""SSD tier (cold tier): items that fit neither DRAM nor NVM move to an O_DIRECT
page store on a disk file instead of being evicted, and every command works on them.

The SSD file (`-o ssd_path=<file>:<size>`) lives in a fresh directory under
$TAC_SSD_DIR (default: the system temp dir, which must be a disk file system
such as ext4: the store is opened O_DIRECT).  Each test removes its files.
`me <key>` tells which tier a key lives in (`tier=dram` / `nvm` / `ssd`).

Values are b"key|version|crc32|pad": the pad is a slice of a fixed random hex
pool chosen by key and version, so two values never share long runs and a
block read from the wrong place shows up; the crc covers b"key|version|pad".
Every read is compared byte for byte with the value last stored, and a wrong
value is explained (whose key and version it carries, first differing byte).

Engines: the I/O engine (`ssd_io_engine=uring|threads`) is a parameter of the
tests whose data path goes through it.
"""
import mmap
import os
import random
import re
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import uuid
import zlib

import bmemcached
import pylibmc
import pytest
from pymemcache.client.base import Client as PyClient

from mcserver import SERVER_BIN, base_args, free_port, recv_exact, recv_for, recv_until
from test_binary import (APPEND, DELETE, EEXISTS, ENOENT, GAT, GET, GETK, GETKQ, INCR, NOOP, OK, PREPEND,
                         SET, TOUCH, Bin, frame)
from test_nvm import parse_get

pytestmark = pytest.mark.tac_only

MB = 1 << 20
OOM = b"SERVER_ERROR out of memory storing object"
ENGINES = ["uring", "threads"]
# How long the churn test may rewrite keys waiting for defrag to run 3 times.
CHURN_SECONDS = float(os.environ.get("TAC_SSD_CHURN_SECONDS", "120"))

SETTINGS_KEYS = ["ssd_path", "ssd_capacity", "ssd_page_size", "ssd_buf_size", "ssd_io_engine", "ssd_free_pages"]
TIERS_KEYS = ["ssd_capacity", "ssd_items", "ssd_live_bytes", "ssd_pages_used", "ssd_pages_free", "ssd_pages_total",
              "ssd_bufs_written", "ssd_bytes_written", "ssd_bytes_read", "ssd_reads", "ssd_reads_mem",
              "ssd_reads_inflight", "ssd_defrag_runs", "ssd_defrag_moved", "ssd_pages_reclaimed",
              "ssd_items_dropped", "ssd_io_errors", "get_hits_ssd", "evict_dram_to_ssd", "evict_nvm_to_ssd",
              "set_fallback_ssd"]


# ---------------------------------------------------------------- fixtures

def direct_io_problem(d):
    """None if a file in `d` can be created O_DIRECT and written with an aligned 4 KiB block."""
    p = os.path.join(d, ".odirect-probe-%s" % uuid.uuid4().hex[:8])
    try:
        fd = os.open(p, os.O_CREAT | os.O_RDWR | os.O_DIRECT, 0o600)
    except OSError as e:
        return "open O_DIRECT: %s" % e
    try:
        os.write(fd, mmap.mmap(-1, 4096))  # mmap memory is page aligned
    except OSError as e:
        return "O_DIRECT write: %s" % e
    finally:
        os.close(fd)
        os.unlink(p)
    return None


@pytest.fixture
def ssd_dir():
    """A fresh directory for SSD files on a file system that takes O_DIRECT; removed afterwards."""
    base = os.environ.get("TAC_SSD_DIR") or tempfile.gettempdir()
    d = tempfile.mkdtemp(prefix="tac-ssd-", dir=base)
    why = direct_io_problem(d)
    if why:
        shutil.rmtree(d, ignore_errors=True)
        pytest.fail("%s cannot hold the SSD file (%s); set TAC_SSD_DIR to a directory on a disk file system"
                    % (base, why))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def nvm_file(shm_file):
    """Factory of unique /dev/shm paths for the NVM tier; removed afterwards."""
    return lambda: shm_file("ssdnvm")


def ssd_server(server, ssd_dir, size, engine=None, mem=16, opts=(), nvm=None, extra=(), threads=2):
    """A server with `-m mem` and an SSD file <ssd_dir>/ssd of `size` (and an NVM spec "path:size")."""
    path = os.path.join(ssd_dir, "ssd")
    o = ["ssd_path=%s:%s" % (path, size)]
    if engine:
        o.append("ssd_io_engine=" + engine)
    if nvm:
        o.append("nvm_path=" + nvm)
    o += list(opts)
    s = server(["-m", str(mem), "-t", str(threads), "-o", ",".join(o)] + list(extra))
    s.ssd_file = path
    return s


# ---------------------------------------------------------------- values

POOL = random.Random(0x55D).randbytes(1 << 19).hex().encode()  # 1 MB of random lowercase hex


def vsize(key, ver, lo=2048, hi=8192):
    """Value size for (key, version): lo..hi bytes."""
    return lo + zlib.crc32(b"%s#%d" % (key, ver)) % (hi - lo + 1)


def make_value(key, ver, size=None):
    """b"key|ver|crc32|pad" of exactly `size` bytes (default vsize(key, ver))."""
    if size is None:
        size = vsize(key, ver)
    npad = size - len(key) - len(b"%d" % ver) - 11
    assert npad >= 0, (key, ver, size)
    off = zlib.crc32(b"%s|%d" % (key, ver)) % (len(POOL) - npad)
    pad = POOL[off:off + npad]
    return b"%s|%d|%08x|%s" % (key, ver, zlib.crc32(b"%s|%d|%s" % (key, ver, pad)), pad)


def decode_value(raw):
    """(key, version, problem or None) of something that should be a make_value() value."""
    parts = raw.split(b"|", 3)
    if len(parts) != 4:
        return None, None, "malformed"
    k, ver, crc, pad = parts
    if not re.fullmatch(rb"\d+", ver):
        return k, None, "malformed version"
    if not re.fullmatch(rb"[0-9a-f]{8}", crc) or int(crc, 16) != zlib.crc32(b"%s|%s|%s" % (k, ver, pad)):
        return k, int(ver), "checksum mismatch"
    return k, int(ver), None


def explain(key, got, want):
    """One line saying how `got` differs from `want` (for the value of `key`)."""
    k, ver, problem = decode_value(got)
    wk, wver, _ = decode_value(want)
    n = min(len(got), len(want))
    diff = next((i for i in range(n) if got[i] != want[i]), n)
    return ("%r: got %d bytes (carries key %r version %s%s), want %d bytes (version %s); first difference at "
            "byte %d (4 KiB block %d): got %r want %r"
            % (key, len(got), k, ver, ", " + problem if problem else "", len(want), wver, diff, diff // 4096,
               got[diff:diff + 24], want[diff:diff + 24]))


def short(b, n=300):
    return b if len(b) <= n else b[:n] + b"...(%d bytes)" % len(b)


def assert_same(got, want, what):
    """Byte-exact comparison of a whole response, with a readable failure message."""
    if got == want:
        return
    n = min(len(got), len(want))
    i = next((j for j in range(n) if got[j] != want[j]), n)
    raise AssertionError("%s: response differs at byte %d of %d (want %d bytes)\n got: ...%r\nwant: ...%r"
                         % (what, i, len(got), len(want), got[max(0, i - 80):i + 120], want[max(0, i - 80):i + 120]))


def exchange(c, data, want, what, timeout=30):
    """Send `data` in one write; the reply must be exactly `want` (nothing more)."""
    c.send(data)
    try:
        got = recv_exact(c.sock, len(want), timeout)
    except (TimeoutError, ConnectionError) as e:
        raise AssertionError("%s: %s\nwant: %r" % (what, e, short(want)))
    got += recv_for(c.sock, 0.02)
    assert_same(got, want, what)


def vresp(key, flags, value, cas=None):
    if cas is None:
        return b"VALUE %s %d %d\r\n%s\r\n" % (key, flags, len(value), value)
    return b"VALUE %s %d %d %d\r\n%s\r\n" % (key, flags, len(value), cas, value)


# ---------------------------------------------------------------- protocol helpers

def load(c, items, flags_of=lambda k: 0, batch=200, retries=40, retry_sleep=0.1, stop_after_refused_batches=0):
    """Pipeline `set`s (with replies) in batches of `batch`.  A set answered SERVER_ERROR out
    of memory is retried up to `retries` times (evictors may lag, most on sanitizer builds).
    With stop_after_refused_batches=N, stops once N batches in a row stored nothing.
    Returns (stored keys in order, {key: last reply} of the others, bytes stored)."""
    stored, failures, nbytes = [], {}, 0
    items = list(items)
    refused_run = 0
    for b0 in range(0, len(items), batch):
        chunk = items[b0:b0 + batch]
        c.send(b"".join(b"set %s %d 0 %d\r\n%s\r\n" % (k, flags_of(k), len(v), v) for k, v in chunk))
        buf = recv_until(c.sock, b"\r\n", timeout=120)
        while buf.count(b"\r\n") < len(chunk):
            buf += recv_until(c.sock, b"\r\n", timeout=120)
        replies = buf.split(b"\r\n")[:-1]
        assert len(replies) == len(chunk), "%d replies for %d sets: %r" % (len(replies), len(chunk), replies[:5])
        n_ok = 0
        for (k, v), r in zip(chunk, replies):
            tries = 0
            while r == OOM and tries < retries:
                tries += 1
                time.sleep(retry_sleep)
                r = c.line(b"set %s %d 0 %d\r\n%s\r\n" % (k, flags_of(k), len(v), v), timeout=60).rstrip(b"\r\n")
            if r == b"STORED":
                stored.append(k)
                nbytes += len(v)
                n_ok += 1
                failures.pop(k, None)
            else:
                failures[k] = r
        refused_run = 0 if n_ok else refused_run + 1
        if stop_after_refused_batches and refused_run >= stop_after_refused_batches:
            break
    return stored, failures, nbytes


def fmt_failures(failures, st):
    kinds = {}
    for r in failures.values():
        kinds[r] = kinds.get(r, 0) + 1
    return "%d sets not STORED; replies %r; first %r\nstats tiers: %r" % (
        len(failures), kinds, list(failures.items())[:5], st)


def read_check(c, keys, want_of, per=50, verbs=(b"get",)):
    """Multi-get `keys` `per` at a time (cycling through `verbs`); responses must be well formed,
    in request order, and every hit must equal want_of(key) = (flags, value) byte for byte
    (want_of(key) None: the key must miss).  Returns (hits, misses, wrong): misses are keys
    that should have hit, wrong holds explanations."""
    hits, misses, wrong = 0, [], []
    for i, b0 in enumerate(range(0, len(keys), per)):
        chunk = keys[b0:b0 + per]
        verb = verbs[i % len(verbs)]
        got = parse_get(c.get(verb + b" " + b" ".join(chunk) + b"\r\n", timeout=60))
        assert set(got) <= set(chunk), "unrequested keys returned: %r" % (set(got) - set(chunk))
        order = [k for k in chunk if k in got]
        assert list(got) == order, "multi-get answered out of request order: %r vs %r" % (list(got)[:10], order[:10])
        for k in chunk:
            want = want_of(k)
            if k not in got:
                if want is not None:
                    misses.append(k)
                continue
            hits += 1
            flags, v, cas = got[k]
            if want is None:
                wrong.append("%r readable after it was deleted: %r" % (k, short(v, 60)))
                continue
            wflags, wv = want
            if v != wv:
                wrong.append(explain(k, v, wv))
            elif flags != wflags:
                wrong.append("%r: flags %d, want %d" % (k, flags, wflags))
            elif verb == b"gets" and not cas:
                wrong.append("%r: gets gave cas %r" % (k, cas))
    return hits, misses, wrong


def tier_of(c, key):
    r = c.line(b"me " + key + b"\r\n")
    if r == b"EN\r\n":
        return None
    m = re.search(rb" tier=(\w+)", r)
    assert r.startswith(b"ME ") and m, "me %r: %r" % (key, r)
    return m.group(1).decode()


def me_cas(c, key):
    r = c.line(b"me " + key + b"\r\n")
    m = re.search(rb" cas=(\d+)", r)
    assert m, "me %r: %r" % (key, r)
    return int(m.group(1))


def stat_int(st, name):
    assert name in st, "stats lack %s; have %r" % (name, sorted(st))
    assert re.fullmatch(r"\d+", st[name]), "%s = %r is not a number" % (name, st[name])
    return int(st[name])


def check_space_stats(st):
    """Page and byte accounting of the SSD store stays within its size."""
    total, used, free = (stat_int(st, n) for n in ("ssd_pages_total", "ssd_pages_used", "ssd_pages_free"))
    assert used <= total and free <= total and used + free <= total, st
    assert stat_int(st, "ssd_live_bytes") <= stat_int(st, "ssd_capacity"), st
    assert stat_int(st, "ssd_io_errors") == 0, st


def keys_totalling(prefix, nbytes, ver=1):
    keys, acc = [], 0
    while acc < nbytes:
        k = b"%s%06d" % (prefix, len(keys))
        keys.append(k)
        acc += vsize(k, ver)
    return keys


def mixed_tier_reads(c, keys, want_of, tiers):
    """Find keys in each of `tiers` with `me`, then check that a multi-get and a pipeline of single
    gets mixing the tiers (and misses) answer exactly, in request order."""
    step = max(1, len(keys) // 400)
    sample = keys[::step] + keys[-40:]
    by = {t: [] for t in tiers}
    for k in sample:
        t = tier_of(c, k)
        if t in by and k not in by[t]:
            by[t].append(k)
    counts = {t: len(v) for t, v in by.items()}
    assert all(n >= 4 for n in counts.values()), "too few keys found per tier among %d sampled: %r\nstats tiers %r" % (
        len(sample), counts, c.stats(b"tiers"))
    # interleave: one key of each tier, then a miss, twice
    req = []
    for j in (0, 1):
        req += [by[t][j] for t in tiers] + [b"nosuch-mixed-%d" % j]
    want = b"".join(vresp(k, *want_of(k)) for k in req if not k.startswith(b"nosuch")) + b"END\r\n"
    exchange(c, b"get " + b" ".join(req) + b"\r\n", want, "multi-get across tiers %r" % (tiers,))
    # a pipeline of single gets in one send (fresh keys: the multi-get may have promoted its keys)
    req = []
    for j in (2, 3):
        req += [b"nosuch-pipe-%d" % j] + [by[t][j] for t in reversed(tiers)]
    want = b"".join((vresp(k, *want_of(k)) if not k.startswith(b"nosuch") else b"") + b"END\r\n" for k in req)
    exchange(c, b"".join(b"get %s\r\n" % k for k in req), want, "pipelined gets across tiers %r" % (tiers,))
    return counts


# ---------------------------------------------------------------- a. options and stats

@pytest.mark.parametrize("engine", ENGINES)
def test_ssd_settings_and_stats(server, ssd_dir, engine):
    s = ssd_server(server, ssd_dir, "64m", engine,
                   opts=["ssd_page_size=4m", "ssd_buf_size=128k", "ssd_free_pages=3"])
    c = s.connect()
    st = c.stats(b"settings")
    missing = [k for k in SETTINGS_KEYS if k not in st]
    assert not missing, "stats settings lacks %r: %r" % (missing, {k: v for k, v in st.items() if "ssd" in k})
    assert st["ssd_path"].startswith(s.ssd_file), st["ssd_path"]
    cap = stat_int(st, "ssd_capacity")  # its pages: SIZE, the header blocks come on top
    assert cap == 64 * MB, "ssd_capacity %d for a 64 MB file in 4 MB pages" % cap
    assert st["ssd_page_size"] == str(4 * MB), st
    assert st["ssd_buf_size"] == str(128 * 1024), st
    assert st["ssd_io_engine"] == engine, (
        "asked for ssd_io_engine=%s, stats settings says %r (did io_uring set-up fail and fall back?)\n%s"
        % (engine, st["ssd_io_engine"], s.stderr_text()))
    assert st["ssd_free_pages"] == "3", st

    t = c.stats(b"tiers")
    missing = [k for k in TIERS_KEYS if k not in t]
    assert not missing, "stats tiers lacks %r: %r" % (missing, t)
    assert all(re.fullmatch(r"\d+", t[k]) for k in TIERS_KEYS), t
    assert t.get("tiers") == "dram,ssd", t
    assert t["ssd_capacity"] == str(cap), "stats tiers ssd_capacity %s, stats settings %d" % (t["ssd_capacity"], cap)
    total = stat_int(t, "ssd_pages_total")
    assert 64 // 4 - 1 <= total <= 64 // 4, "64 MB in 4 MB pages (less a header) gives %d pages" % total
    assert cap in (64 * MB, total * 4 * MB), "ssd_capacity %d: neither the file size nor %d pages" % (cap, total)
    check_space_stats(t)
    assert stat_int(t, "ssd_items") == 0 and stat_int(t, "ssd_live_bytes") == 0, t
    plain = c.stats()
    assert "get_hits_ssd" not in plain and "get_hits_ssd" in c.stats(b"tac"), \
        "get_hits_ssd belongs to `stats tac`, not to plain `stats` (memcached's names)"
    if "tiers" in plain:
        assert plain["tiers"] == "dram,ssd", plain["tiers"]
    assert os.path.exists(s.ssd_file), "ssd_path file %s was not created" % s.ssd_file
    # SIZE is the pages' room; the two 4 KiB header copies come on top.
    assert os.path.getsize(s.ssd_file) == 64 * MB + 8192, "ssd file is %d bytes, want %d" % (
        os.path.getsize(s.ssd_file), 64 * MB + 8192)
    # and it is a working cache
    v = make_value(b"hello", 1)
    assert c.line(b"set hello 3 0 %d\r\n%s\r\n" % (len(v), v)) == b"STORED\r\n"
    assert c.get(b"get hello\r\n") == vresp(b"hello", 3, v) + b"END\r\n"


def test_ssd_defaults_and_repeated_o(server, ssd_dir):
    """Options given as repeated -o; unset ones take their defaults (8m pages, uring)."""
    path = os.path.join(ssd_dir, "ssd")
    s = server(["-m", "16", "-t", "2", "-o", "ssd_path=%s:128m" % path, "-o", "ssd_buf_size=64k"])
    c = s.connect()
    st = c.stats(b"settings")
    assert 120 * MB <= stat_int(st, "ssd_capacity") <= 128 * MB, st.get("ssd_capacity")
    assert st.get("ssd_page_size") == str(8 * MB), st
    assert st.get("ssd_buf_size") == str(64 * 1024), "second -o not applied: %r" % st.get("ssd_buf_size")
    assert st.get("ssd_io_engine") == "uring", st.get("ssd_io_engine")
    assert re.fullmatch(r"\d+", st.get("ssd_free_pages", "")), st.get("ssd_free_pages")
    t = c.stats(b"tiers")
    assert 15 <= stat_int(t, "ssd_pages_total") <= 16, t
    assert t.get("tiers") == "dram,ssd", t


def test_extstore_options_map_onto_the_ssd_tier(server, ssd_dir):
    """memcached's extstore command line starts the SSD tier: ext_path is its
    file, ext_page_size and ext_wbuf_size (megabytes) its page and buf,
    ext_item_size its smallest value, ext_max_frag and ext_recache_rate its
    defrag and recache settings, and the ext_* options with no meaning here
    start the server with a note naming each.  Four times -m of 2-8 KB values
    comes back byte-exact, much of it from SSD."""
    path = os.path.join(ssd_dir, "extstore")
    ignored = ["ext_max_sleep=1000", "ext_io_depth=2"]
    s = server(["-m", "16", "-t", "2", "-o", ",".join(
        ["ext_path=%s:256m" % path, "ext_page_size=4", "ext_wbuf_size=1",
         "ext_item_size=512", "ext_item_age=0", "ext_max_frag=0.8",
         "ext_recache_rate=100"] + ignored)])
    c = s.connect()
    st = c.stats(b"settings")
    assert st.get("ext_item_size") == "512", st
    assert st.get("ext_max_frag") == "0.80" and st.get("ext_recache_rate") == "100", st
    assert st.get("ssd_path") == path + ":256m", st
    assert st.get("ssd_page_size") == str(4 * MB) and st.get("ssd_buf_size") == str(1 * MB), st
    notes = set(ln for ln in s.stderr_text().splitlines() if "no effect" in ln)
    assert notes == set("tac-memcached: -o %s is accepted for compatibility and has no effect"
                        % o.split("=")[0] for o in ignored), s.stderr_text()
    keys = keys_totalling(b"ext:key:with:a:longer:name:", 64 * MB)
    want = {k: make_value(k, 1) for k in keys}
    stored, failures, _ = load(c, want.items())
    assert not failures, fmt_failures(failures, c.stats(b"tiers"))
    hits, misses, wrong = read_check(c, keys, lambda k: (0, want[k]))
    assert not wrong and not misses, (wrong[:3], misses[:3])
    assert stat_int(c.stats(b"tiers"), "ssd_items") > len(keys) // 2, c.stats(b"tiers")


@pytest.mark.parametrize("given,threads", [(None, 4), (3, 3)], ids=["default", "ext_threads=3"])
def test_ext_threads_sizes_the_io_thread_pool(server, ssd_dir, given, threads):
    """memcached's ext_threads is the size of the SSD's I/O thread pool (with
    ssd_io_engine=threads); values still round-trip through it."""
    opts = ["ssd_io_engine=threads"] + (["ext_threads=%d" % given] if given else [])
    s = ssd_server(server, ssd_dir, "256m", opts=opts)
    c = s.connect()
    # The port accepts before the tiers open: an answer means the server is up.
    assert c.line(b"version\r\n").startswith(b"VERSION ")

    def pool():
        names = []
        for t in os.listdir("/proc/%d/task" % s.proc.pid):
            try:
                with open("/proc/%d/task/%s/comm" % (s.proc.pid, t)) as f:
                    names.append(f.read().strip())
            except OSError:
                pass                    # a thread that ended meanwhile
        return names

    deadline = time.time() + 30
    while sum(n.startswith("tac-ssd-io") for n in pool()) != threads and time.time() < deadline:
        time.sleep(0.1)
    assert sum(n.startswith("tac-ssd-io") for n in pool()) == threads, pool()
    want = {k: make_value(k, 1) for k in keys_totalling(b"ext:threads:", 40 * MB)}
    stored, failures, _ = load(c, want.items())
    assert not failures, fmt_failures(failures, c.stats(b"tiers"))
    _, misses, wrong = read_check(c, list(want), lambda k: (0, want[k]))
    assert not wrong and not misses, (wrong[:3], misses[:3])
    assert stat_int(c.stats(b"tiers"), "ssd_reads") > 0


def test_ext_item_age_moves_unread_items_to_ssd(server, ssd_dir):
    """-o ext_item_age=N: as in memcached's extstore, items unread for N seconds move to the
    SSD tier although DRAM has room (values under ext_item_size stay); without it they stay
    in DRAM.  Every value reads back exact, from SSD."""
    seed = random.randrange(1 << 30)
    print("seed", seed)
    rng = random.Random(seed)
    keys = [b"age:%04d" % i for i in range(200)]
    want = {k: make_value(k, 1, rng.randrange(2048, 20000)) for k in keys}
    small = {b"age:small:%d" % i: b"s" * 100 for i in range(20)}
    for opts, moves in ((["ext_item_size=512", "ext_item_age=1"], True), ([], False)):
        d = os.path.join(ssd_dir, "age" if moves else "no-age")
        os.makedirs(d)
        s = ssd_server(server, d, "64m", mem=64, opts=opts)
        c = s.connect()
        stored, failures, _ = load(c, list(want.items()) + list(small.items()))
        assert not failures, fmt_failures(failures, c.stats(b"tiers"))
        deadline = time.time() + (20 if moves else 3)
        while time.time() < deadline and stat_int(c.stats(b"tiers"), "ssd_items") < len(keys):
            time.sleep(0.2)
        t = c.stats(b"tiers")
        if moves:
            assert stat_int(t, "ssd_items") == len(keys), t
            assert stat_int(t, "evict_dram_to_ssd") >= len(keys), t
        else:
            assert stat_int(t, "ssd_items") == 0, t
        _, misses, wrong = read_check(c, keys, lambda k: (0, want[k]))
        assert not wrong and not misses, (seed, wrong[:3], misses[:3])
        _, misses, wrong = read_check(c, list(small), lambda k: (0, small[k]))
        assert not wrong and not misses, (seed, wrong[:3], misses[:3])
        if moves:
            assert stat_int(c.stats(b"tiers"), "get_hits_ssd") >= len(keys) // 2


def test_get_aborted_extstore_counts_reads_a_refused_get_gave_up(server, ssd_dir):
    """memcached's get_aborted_extstore (its error-extstore.t): a multi-get whose SSD reads
    are under way and whose last key is too long answers only the CLIENT_ERROR; each read
    it gave up is counted, and the values still read back exact afterwards."""
    s = ssd_server(server, ssd_dir, "64m", mem=64, opts=["ext_item_size=512", "ext_item_age=1"])
    c = s.connect()
    want = {b"ab:%d" % i: make_value(b"ab:%d" % i, 1, 30000) for i in range(1, 4)}
    stored, failures, _ = load(c, want.items())
    assert not failures, fmt_failures(failures, c.stats(b"tiers"))
    deadline = time.time() + 20
    while time.time() < deadline and stat_int(c.stats(b"tiers"), "ssd_items") < len(want):
        time.sleep(0.2)
    assert stat_int(c.stats(b"tiers"), "ssd_items") == len(want), c.stats(b"tiers")
    assert stat_int(c.stats(), "get_aborted_extstore") == 0
    assert c.line(b"get " + b" ".join(want) + b" " + b"f" * 251 + b"\r\n") == \
        b"CLIENT_ERROR bad command line format\r\n"
    deadline = time.time() + 10
    while time.time() < deadline and stat_int(c.stats(), "get_aborted_extstore") < len(want):
        time.sleep(0.1)
    assert stat_int(c.stats(), "get_aborted_extstore") == len(want), c.stats()
    _, misses, wrong = read_check(c, list(want), lambda k: (0, want[k]))
    assert not wrong and not misses, (wrong[:3], misses[:3])
    assert stat_int(c.stats(), "get_aborted_extstore") == len(want)


def test_ext_item_size_keeps_small_values_off_the_ssd(server, ssd_dir):
    """-o ext_item_size=N: a value under N bytes is never written to SSD; when DRAM is full
    it is evicted instead, as memcached evicts what extstore will not take.  Larger values
    go to SSD and come back exact; every small value still found is exact.  No set is
    refused or waits for a tier that will not take it: once the evictors have made room,
    a small value goes to DRAM (it once waited 2 s and answered out of memory)."""
    s = ssd_server(server, ssd_dir, "256m", mem=8, opts=["ext_item_size=1000"])
    c = s.connect()
    small_keys = [b"ext:small:%06d:%s" % (i, b"s" * 24) for i in range(8000)]
    big_keys = [b"ext:big:%06d:%s" % (i, b"b" * 24) for i in range(2500)]
    small = {k: make_value(k, 1, 300) for k in small_keys}
    big = {k: make_value(k, 1) for k in big_keys}
    items = list(small.items()) + list(big.items())
    random.Random(3).shuffle(items)
    stored, failures, _ = load(c, items, retries=0)
    assert not failures, fmt_failures(failures, c.stats(b"tiers"))
    t = c.stats(b"tiers")
    assert stat_int(t, "ssd_items") > len(big) // 2, t
    assert stat_int(c.stats(), "evictions") > 0
    _, big_misses, wrong = read_check(c, list(big), lambda k: (0, big[k]))
    assert not wrong and not big_misses, (wrong[:3], big_misses[:3])
    _, small_misses, wrong = read_check(c, list(small), lambda k: (0, small[k]))
    assert not wrong and small_misses, "no small value was evicted"
    dump = c.req(b"lru_crawler metadump all\r\n", b"END\r\n")
    on_ssd = [ln for ln in dump.split(b"\n") if b" tier=ssd" in ln]
    assert on_ssd and not [ln for ln in on_ssd if b"key=ext%3Asmall" in ln or
                           b"key=ext:small" in ln], on_ssd[:3]


@pytest.mark.parametrize("opts,says", [
    ("ext_path={p}:64m,ext_path={p}:64m", "ext_path: the file %s is given twice"),
    ("ssd_path={p}:64m,ssd_path={p}:64m", "ssd_path: the file %s is given twice"),
    ("ext_path={p}:64m,ssd_path={p}2:64m", "give one"),
    ("ext_path={p}:64m,ext_wbuf_size=1,ssd_buf_size=1m", "give one of each"),
], ids=["ext_path-same-file-twice", "ssd_path-same-file-twice", "ext_path-and-ssd_path", "ext_wbuf_size-and-ssd_buf_size"])
def test_extstore_options_that_conflict_fail(ssd_dir, opts, says):
    o = opts.format(p=os.path.join(ssd_dir, "ext"))
    says = says.replace("%s", os.path.join(ssd_dir, "ext"))
    cmd = [SERVER_BIN] + base_args() + ["-l", "127.0.0.1", "-p", str(free_port()), "-U", "0", "-o", o]
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=15)
    except subprocess.TimeoutExpired:
        raise AssertionError("server started with -o %s" % o)
    msg = (p.stdout + p.stderr).decode("utf-8", "replace")
    assert p.returncode != 0 and says in msg, "-o %s: rc=%d, output %r" % (o, p.returncode, msg)
    assert not os.path.exists(os.path.join(ssd_dir, "ext")), "a refused start created the SSD file"


@pytest.mark.parametrize("case", ["dev-shm", "no-size", "missing-dir", "nvm-and-bad-ssd"])
def test_bad_ssd_path_fails(ssd_dir, case):
    tag = "%d-%s" % (os.getpid(), uuid.uuid4().hex[:8])
    extra = []
    if case == "dev-shm":
        # Refused whether or not the kernel allows O_DIRECT on tmpfs (Linux
        # >= 6.6 does): tmpfs is memory, not a disk.
        if not os.path.isdir("/dev/shm"):
            pytest.skip("no /dev/shm here")
        path, spec = "/dev/shm/tac-test-ssd-%s" % tag, "/dev/shm/tac-test-ssd-%s:64m" % tag
    elif case == "no-size":
        path = spec = os.path.join(ssd_dir, "ssd-nosize")
    elif case == "missing-dir":
        path = "/nonexistent-dir-tac-%s/ssd" % tag
        spec = path + ":64m"
    else:  # a valid NVM tier does not rescue a bad SSD spec
        path = spec = os.path.join(ssd_dir, "ssd-nosize2")
        extra = ["nvm_path=/dev/shm/tac-test-ssdnvm-%s:16m" % tag]
    cmd = [SERVER_BIN] + base_args() + ["-l", "127.0.0.1", "-p", str(free_port()), "-U", "0",
                                        "-o", ",".join(extra + ["ssd_path=" + spec])]
    try:
        try:
            p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=15)
        except subprocess.TimeoutExpired as e:
            raise AssertionError("server accepted a bad ssd_path (%s: %r) and kept running; output %r"
                                 % (case, spec, (e.stdout or b"") + (e.stderr or b"")))
        msg = (p.stdout + p.stderr).decode("utf-8", "replace")
        assert p.returncode != 0, "server accepted a bad ssd_path (%s: %r): rc=0, output %r" % (case, spec, msg)
        assert path in msg, "stderr does not name the bad path %r (%s): %r" % (path, case, msg)
    finally:
        for f in (path, "/dev/shm/tac-test-ssdnvm-%s" % tag):
            if f.startswith("/dev/shm/") and os.path.exists(f):
                os.unlink(f)


@pytest.mark.parametrize("opts,why", [
    ("ssd_io_engine=bogus", "unknown engine"),
    ("ssd_buf_size=1000", "buf size not a multiple of 4 KiB"),
    ("ssd_page_size=300k", "page size not a multiple of the buf size"),
    (None, "file too small for a few pages"),
])
def test_bad_ssd_options_fail(ssd_dir, opts, why):
    path = os.path.join(ssd_dir, "ssd")
    o = "ssd_path=%s:%s" % (path, "64m" if opts else "8m") + ("," + opts if opts else "")
    cmd = [SERVER_BIN] + base_args() + ["-l", "127.0.0.1", "-p", str(free_port()), "-U", "0", "-o", o]
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=15)
    except subprocess.TimeoutExpired:
        raise AssertionError("server started with a bad SSD option (%s): -o %s" % (why, o))
    msg = (p.stdout + p.stderr).decode("utf-8", "replace")
    assert p.returncode != 0, "server accepted -o %s (%s): rc=0, output %r" % (o, why, msg)
    assert "ssd" in msg.lower() and len(msg.strip()) > 10, "unclear message for %s: %r" % (why, msg)


# ---------------------------------------------------------------- b, c. 16x DRAM

@pytest.mark.parametrize("engine,with_nvm", [("uring", False), ("threads", False), ("uring", True), ("threads", True)],
                         ids=["uring", "threads", "uring-nvm", "threads-nvm"])
def test_ssd_16x_dram(server, ssd_dir, nvm_file, engine, with_nvm):
    """-m 16 and 256 MB of 2-8 KB values: everything reads back, byte-exact."""
    nvm = "%s:64m" % nvm_file() if with_nvm else None
    s = ssd_server(server, ssd_dir, "1g", engine, mem=16, nvm=nvm)
    c = s.connect()
    keys = keys_totalling(b"x", 16 * 16 * MB)
    n = len(keys)
    flags_of = lambda k: zlib.crc32(k) & 0xFFFF  # noqa: E731
    want_of = lambda k: (flags_of(k), make_value(k, 1))  # noqa: E731
    t0 = time.time()
    stored, failures, nbytes = load(c, ((k, make_value(k, 1)) for k in keys), flags_of=flags_of)
    t_load = time.time() - t0
    st_load = c.stats(b"tiers")
    assert not failures, fmt_failures(failures, st_load)
    assert stat_int(st_load, "ssd_items") >= n // 2, (
        "%d keys, %d MB, -m 16, yet only %s on SSD after the load; stats tiers %r"
        % (n, nbytes >> 20, st_load.get("ssd_items"), st_load))

    tiers = ["dram", "nvm", "ssd"] if with_nvm else ["dram", "ssd"]
    counts = mixed_tier_reads(c, keys, want_of, tiers)

    st0 = c.stats(b"tiers")
    t0 = time.time()
    hits, misses, wrong = read_check(c, keys, want_of, per=50, verbs=(b"get", b"get", b"get", b"gets"))
    t_read = time.time() - t0
    st = c.stats(b"tiers")
    # A multi-get's device reads go to the kernel together: one system call
    # per event loop pass, not one per key (ssd_ring_defer_submits).
    def grew(name):
        return stat_int(st, name) - stat_int(st0, name)
    dev_reads = grew("ssd_reads") - grew("ssd_reads_mem")
    submits = grew("ssd_read_submits")
    print("%d device reads, %d read submissions" % (dev_reads, submits))
    if engine == "uring":
        assert dev_reads > 1000 and submits * 4 < dev_reads, \
            "%d device reads took %d submissions" % (dev_reads, submits)
    else:
        assert submits == 0, "the thread pool submits nothing to io_uring: %d" % submits
    plain = c.stats()
    print("%d keys, %d MB: load %.1fs, read %.1fs, tiers sampled %r; stats tiers %r"
          % (n, nbytes >> 20, t_load, t_read, counts, st))
    assert not wrong, "%d wrong values of %d hits:\n%s" % (len(wrong), hits, "\n".join(wrong[:8]))
    assert not misses, "hit rate %.3f%%: %d of %d keys missing (first %r)\nstats tiers %r" % (
        100.0 * hits / n, len(misses), n, misses[:5], st)
    assert int(plain["curr_items"]) == n, plain["curr_items"]
    assert stat_int(st, "get_hits_ssd") > 0, st
    assert stat_int(c.stats(b"tac"), "get_hits_ssd") > 0, "stats tac get_hits_ssd"
    if with_nvm:  # SSD tuples come from NVM then
        assert stat_int(st, "evict_nvm_to_ssd") > 0, st
        assert stat_int(st, "get_hits_nvm") > 0, st
    else:
        assert stat_int(st, "evict_dram_to_ssd") + stat_int(st, "set_fallback_ssd") > 0, st
    assert stat_int(st, "ssd_items") > 0 and stat_int(st, "ssd_bytes_written") > 0, st
    assert stat_int(st, "ssd_items_dropped") == 0 and int(plain["evictions"]) == 0, st
    assert st.get("tiers") == ",".join(tiers), st.get("tiers")
    check_space_stats(st)


# ---------------------------------------------------------------- d. every command on SSD items

SIZE = 4000  # test keys and filler share one slab class
FL = 4242


class SsdKeys:
    """Hands out keys that are SSD-resident right now, with their current value."""

    def __init__(self, c, keys, vals):
        self.c, self.keys, self.vals, self.i = c, list(keys), vals, 0

    def take(self):
        while self.i < len(self.keys):
            k = self.keys[self.i]
            self.i += 1
            if tier_of(self.c, k) == "ssd":
                return k, self.vals[k]
        raise AssertionError("ran out of SSD-resident keys (used %d); stats tiers %r"
                             % (self.i, self.c.stats(b"tiers")))


def push_to_ssd(c, want, max_bytes=120 * MB):
    """Load filler values of SIZE bytes until every key of `want` is SSD-resident."""
    n = 0
    deadline = None
    while True:
        tiers = [tier_of(c, k) for k in want]
        if all(t == "ssd" for t in tiers):
            return n
        if n * SIZE < max_bytes:
            items = [(b"fill%06d" % i, make_value(b"fill%06d" % i, 1, SIZE)) for i in range(n, n + 1000)]
            _, failures, _ = load(c, items)
            assert not failures, fmt_failures(failures, c.stats(b"tiers"))
            n += 1000
        else:
            deadline = deadline or time.time() + 10
            if time.time() > deadline:
                where = {}
                for t in tiers:
                    where[t] = where.get(t, 0) + 1
                raise AssertionError("after %d MB of filler the early keys are in tiers %r, not all on SSD; "
                                     "stats tiers %r" % (n * SIZE >> 20, where, c.stats(b"tiers")))
            time.sleep(0.2)


def expect_get(c, key, value, flags):
    exchange(c, b"get %s\r\n" % key, vresp(key, flags, value) + b"END\r\n", "get %r" % key)


def read_mg_value(c, key):
    c.send(b"mg %s v\r\n" % key)
    buf = recv_until(c.sock, b"\r\n")
    m = re.match(rb"VA (\d+)\r\n", buf)
    assert m, "mg %r v: %r" % (key, buf[:100])
    total = m.end() + int(m.group(1)) + 2
    while len(buf) < total:
        buf += recv_until(c.sock, b"\r\n")
    assert len(buf) == total, buf[-100:]
    return buf[m.end():-2]


@pytest.mark.parametrize("engine", ENGINES)
def test_commands_on_ssd_items(server, ssd_dir, engine):
    s = ssd_server(server, ssd_dir, "256m", engine, mem=16)
    c = s.connect()
    keys = [b"sk%03d" % i for i in range(130)]
    nums = [b"num%02d" % i for i in range(10)]
    cli = [b"cl%03d" % i for i in range(40)]
    vals = {k: make_value(k, 1, SIZE) for k in keys + cli}
    for k in nums:
        vals[k] = b"100" + b" " * (SIZE - 3)  # padded so it shares the filler's slab class
    flags = {k: (0 if k in cli else FL) for k in vals}
    _, failures, _ = load(c, [(k, vals[k]) for k in keys + nums + cli], flags_of=flags.get)
    assert not failures, fmt_failures(failures, c.stats(b"tiers"))
    push_to_ssd(c, keys + nums + cli)
    pool = SsdKeys(c, keys, vals)
    numpool = SsdKeys(c, nums, vals)
    clipool = SsdKeys(c, cli, vals)

    # -- get (twice: from SSD, then from wherever the first read left it), gets
    k, v = pool.take()
    expect_get(c, k, v, FL)
    expect_get(c, k, v, FL)
    k, v = pool.take()
    cas = me_cas(c, k)
    exchange(c, b"gets %s\r\n" % k, vresp(k, FL, v, cas) + b"END\r\n", "gets")
    # multi-get: SSD keys, a miss and a DRAM key, in request order
    k1, v1 = pool.take()
    k2, v2 = pool.take()
    k3, v3 = pool.take()
    assert c.line(b"set dramkey 1 0 2\r\nhi\r\n") == b"STORED\r\n"
    exchange(c, b"get %s missing dramkey %s %s\r\n" % (k1, k2, k3),
             vresp(k1, FL, v1) + b"VALUE dramkey 1 2\r\nhi\r\n" + vresp(k2, FL, v2) + vresp(k3, FL, v3) + b"END\r\n",
             "multi-get mixing SSD, DRAM and a miss")
    k1, v1 = pool.take()
    k2, v2 = pool.take()
    c1, c2 = me_cas(c, k1), me_cas(c, k2)
    exchange(c, b"gets dramkey %s %s\r\n" % (k1, k2),
             b"VALUE dramkey 1 2 %d\r\nhi\r\n" % me_cas(c, b"dramkey") + vresp(k1, FL, v1, c1) + vresp(k2, FL, v2, c2)
             + b"END\r\n", "gets mixing DRAM and SSD")

    # -- TTL changes on SSD items (expiry checked after one shared sleep at the end)
    expire, keep = [], []
    k1, v1 = pool.take()
    k2, v2 = pool.take()
    exchange(c, b"gat 0 %s %s\r\n" % (k1, k2), vresp(k1, FL, v1) + vresp(k2, FL, v2) + b"END\r\n", "gat 0, two keys")
    keep += [(k1, v1), (k2, v2)]
    k, v = pool.take()
    exchange(c, b"gat 1 %s\r\n" % k, vresp(k, FL, v) + b"END\r\n", "gat 1")
    expire.append(k)
    k, v = pool.take()
    cas = me_cas(c, k)
    exchange(c, b"gats 1 %s\r\n" % k, vresp(k, FL, v, cas) + b"END\r\n", "gats 1")
    expire.append(k)
    k, v = pool.take()
    assert c.line(b"touch %s 1\r\n" % k) == b"TOUCHED\r\n"
    expire.append(k)
    k, v = pool.take()
    assert c.line(b"mg %s T1 t\r\n" % k) == b"HD t1\r\n"
    expire.append(k)
    k, v = pool.take()
    assert c.line(b"touch %s 3600\r\n" % k) == b"TOUCHED\r\n"
    assert c.line(b"mg %s t\r\n" % k) in (b"HD t3600\r\n", b"HD t3599\r\n")
    keep.append((k, v))
    assert c.line(b"touch nosuchkey 1\r\n") == b"NOT_FOUND\r\n"

    # -- cas: a bad cas leaves the SSD value alone, the right one replaces it
    k, v = pool.take()
    cas = me_cas(c, k)
    nv = make_value(k, 2, 700)
    assert c.line(b"cas %s 5 0 %d %d\r\n%s\r\n" % (k, len(nv), cas + 1000, nv)) == b"EXISTS\r\n"
    expect_get(c, k, v, FL)
    assert c.line(b"cas %s 5 0 %d %d\r\n%s\r\n" % (k, len(nv), cas, nv)) == b"STORED\r\n"
    expect_get(c, k, nv, 5)
    assert me_cas(c, k) != cas
    assert c.line(b"cas nosuchkey 0 0 1 5\r\nx\r\n") == b"NOT_FOUND\r\n"

    # -- incr / decr on SSD-resident numbers
    k, v = numpool.take()
    assert c.line(b"incr %s 5\r\n" % k) == b"105\r\n"
    got = read_mg_value(c, k)
    assert got in (b"105", b"105" + b" " * (SIZE - 3)), got[:40]
    assert c.line(b"incr %s 1\r\n" % k) == b"106\r\n"
    k, v = numpool.take()
    assert c.line(b"decr %s 3\r\n" % k) == b"97\r\n"
    got = read_mg_value(c, k)
    assert got in (b"97", b"97" + b" " * (SIZE - 2)), got[:40]
    k, v = numpool.take()
    assert c.line(b"decr %s 1000\r\n" % k) == b"0\r\n"
    k, v = pool.take()
    assert c.line(b"incr %s 1\r\n" % k) == b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    expect_get(c, k, v, FL)

    # -- append / prepend keep the flags
    k, v = pool.take()
    assert c.line(b"append %s 99 0 6\r\n+tail+\r\n" % k) == b"STORED\r\n"
    expect_get(c, k, v + b"+tail+", FL)
    k, v = pool.take()
    assert c.line(b"prepend %s 99 0 6\r\n+head+\r\n" % k) == b"STORED\r\n"
    expect_get(c, k, b"+head+" + v, FL)

    # -- delete, then add
    k, v = pool.take()
    assert c.line(b"delete %s\r\n" % k) == b"DELETED\r\n"
    assert c.get(b"get %s\r\n" % k) == b"END\r\n"
    assert c.line(b"me %s\r\n" % k) == b"EN\r\n"
    assert c.line(b"delete %s\r\n" % k) == b"NOT_FOUND\r\n"
    assert c.line(b"add %s 2 0 5\r\nfresh\r\n" % k) == b"STORED\r\n"
    expect_get(c, k, b"fresh", 2)

    # -- add / replace / set
    k, v = pool.take()
    assert c.line(b"add %s 0 0 3\r\nnew\r\n" % k) == b"NOT_STORED\r\n"
    expect_get(c, k, v, FL)
    k, v = pool.take()
    nv = make_value(k, 3, 1500)
    assert c.line(b"replace %s 8 0 %d\r\n%s\r\n" % (k, len(nv), nv)) == b"STORED\r\n"
    expect_get(c, k, nv, 8)
    k, v = pool.take()
    nv = make_value(k, 4, 6000)
    assert c.line(b"set %s 9 0 %d\r\n%s\r\n" % (k, len(nv), nv)) == b"STORED\r\n"
    expect_get(c, k, nv, 9)

    # -- meta commands
    k, v = pool.take()
    assert tier_of(c, k) == "ssd"
    r = c.line(b"me %s\r\n" % k)
    assert r.startswith(b"ME %s " % k) and b" tier=ssd" in r, r
    k, v = pool.take()
    cas = me_cas(c, k)
    exchange(c, b"mg %s s v f t c k\r\n" % k, b"VA %d s%d f%d t-1 c%d k%s\r\n%s\r\n" % (SIZE, SIZE, FL, cas, k, v),
             "mg s v f t c k")
    k, v = pool.take()
    exchange(c, b"mg %s k v Oabc\r\n" % k, b"VA %d k%s Oabc\r\n%s\r\n" % (SIZE, k, v), "mg k v O")
    k, v = pool.take()
    assert c.line(b"mg %s s k\r\n" % k) == b"HD s%d k%s\r\n" % (SIZE, k)
    k1, v1 = pool.take()
    k2, v2 = pool.take()
    exchange(c, b"mg %s v q\r\nmg nosuch v q\r\nmg %s v q k\r\nmn\r\n" % (k1, k2),
             b"VA %d\r\n%s\r\nVA %d k%s\r\n%s\r\nMN\r\n" % (SIZE, v1, SIZE, k2, v2), "quiet mg pipeline + mn")
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
    assert c.line(b"ms %s 4 MP\r\n=ms=\r\n" % k) == b"HD\r\n"
    expect_get(c, k, b"=ms=" + v, FL)
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
    exchange(c, b"ma %s D11 v\r\n" % k, b"VA 3\r\n111\r\n", "ma D11 v")
    k, v = numpool.take()
    assert c.line(b"ma %s MD D1\r\n" % k) == b"HD\r\n"
    assert read_mg_value(c, k) in (b"99", b"99" + b" " * (SIZE - 2))

    # -- pipelines in ONE send: a read queued before a write to the same key sees the old value
    ks = [pool.take() for _ in range(3)]
    data, want = b"", b""
    for k, v in ks:
        nv = make_value(k, 6, 3000)
        data += b"get %s\r\nset %s 0 0 %d\r\n%s\r\nget %s\r\n" % (k, k, len(nv), nv, k)
        want += vresp(k, FL, v) + b"END\r\nSTORED\r\n" + vresp(k, 0, nv) + b"END\r\n"
    exchange(c, data, want, "pipelined get/set/get on SSD keys")
    k, v = pool.take()
    exchange(c, b"get %s\r\ndelete %s\r\nget %s\r\n" % (k, k, k), vresp(k, FL, v) + b"END\r\nDELETED\r\nEND\r\n",
             "pipelined get/delete/get")
    k, v = pool.take()
    cas = me_cas(c, k)
    nv = make_value(k, 7, 2500)
    exchange(c, b"gets %s\r\ncas %s 4 0 %d %d\r\n%s\r\nget %s\r\n" % (k, k, len(nv), cas, nv, k),
             vresp(k, FL, v, cas) + b"END\r\nSTORED\r\n" + vresp(k, 4, nv) + b"END\r\n", "pipelined gets/cas/get")
    k, v = pool.take()
    nv = make_value(k, 8, 5000)
    exchange(c, b"mg %s v\r\nms %s %d\r\n%s\r\nmg %s v\r\n" % (k, k, len(nv), nv, k),
             b"VA %d\r\n%s\r\nHD\r\nVA %d\r\n%s\r\n" % (SIZE, v, len(nv), nv), "pipelined mg/ms/mg")
    k1, v1 = pool.take()
    k2, v2 = pool.take()
    exchange(c, b"get %s %s\r\nappend %s 0 0 3\r\n+++\r\nget %s %s\r\n" % (k1, k2, k2, k2, k1),
             vresp(k1, FL, v1) + vresp(k2, FL, v2) + b"END\r\nSTORED\r\n" + vresp(k2, FL, v2 + b"+++")
             + vresp(k1, FL, v1) + b"END\r\n", "pipelined multi-get/append/multi-get")
    k, v = numpool.take()
    exchange(c, b"get %s\r\nincr %s 1\r\nincr %s 2\r\n" % (k, k, k), vresp(k, FL, v) + b"END\r\n101\r\n103\r\n",
             "pipelined get/incr/incr")
    assert read_mg_value(c, k) in (b"103", b"103" + b" " * (SIZE - 3))

    # -- binary protocol on SSD items (own connection: the protocol is chosen per connection)
    bs = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    b = Bin(bs)
    k, v = pool.take()
    cas = me_cas(c, k)
    g = b.call(GET, key=k, opaque=11)
    assert (g["status"], g["opaque"], g["key"], g["value"], g["cas"], g["extras"]) == \
        (OK, 11, b"", v, cas, struct.pack(">I", FL)), (g["status"], g["opaque"], g["cas"], cas, short(g["value"]))
    k, v = pool.take()
    g = b.call(GETK, key=k)
    assert (g["status"], g["key"], g["value"], g["extras"]) == (OK, k, v, struct.pack(">I", FL))
    # quiet multi-get: hits in request order, misses silent, then the NOOP
    got_keys = [pool.take() for _ in range(3)]
    b.send(frame(GETKQ, key=got_keys[0][0], opaque=1) + frame(GETKQ, key=b"nosuch", opaque=2)
           + frame(GETKQ, key=got_keys[1][0], opaque=3) + frame(GETKQ, key=got_keys[2][0], opaque=4)
           + frame(NOOP, opaque=5))
    for (k, v), op in zip(got_keys, (1, 3, 4)):
        r = b.recv()
        assert (r["op"], r["status"], r["opaque"], r["key"], r["value"]) == (GETKQ, OK, op, k, v), \
            (r["op"], r["status"], r["opaque"], r["key"], short(r["value"]))
    r = b.recv()
    assert r["op"] == NOOP and r["opaque"] == 5, r
    # pipelined GET / SET / GET of one key in one send
    k, v = pool.take()
    nv = make_value(k, 9, 2222)
    b.send(frame(GET, key=k, opaque=21) + frame(SET, key=k, value=nv, extras=struct.pack(">II", 7, 0), opaque=22)
           + frame(GET, key=k, opaque=23))
    r1, r2, r3 = b.recv(), b.recv(), b.recv()
    assert (r1["opaque"], r1["status"], r1["value"]) == (21, OK, v), (r1["opaque"], r1["status"], short(r1["value"]))
    assert (r2["opaque"], r2["status"]) == (22, OK), r2
    assert (r3["opaque"], r3["status"], r3["value"], r3["extras"]) == (23, OK, nv, struct.pack(">I", 7)), \
        (r3["opaque"], r3["status"], short(r3["value"]))
    k, v = pool.take()
    cas = me_cas(c, k)
    nv = make_value(k, 10, 1111)
    assert b.set(k, nv, flags=6, cas=cas + 1000)["status"] == EEXISTS
    assert b.set(k, nv, flags=6, cas=cas)["status"] == OK
    assert b.call(GET, key=k)["value"] == nv
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
    assert b.call(APPEND, key=k, value=b"+bin")["status"] == OK
    expect_get(c, k, v + b"+bin", FL)
    k, v = pool.take()
    assert b.call(PREPEND, key=k, value=b"bin+")["status"] == OK
    expect_get(c, k, b"bin+" + v, FL)
    k, v = numpool.take()
    r = b.call(INCR, key=k, extras=struct.pack(">QQI", 7, 0, 0))
    assert r["status"] == OK and struct.unpack(">Q", r["value"])[0] == 107, r
    bs.close()

    # -- client libraries reading SSD-resident keys
    pm = PyClient((s.host, s.port), connect_timeout=5, timeout=30, default_noreply=False)
    k, v = clipool.take()
    assert pm.get(k.decode()) == v, "pymemcache get of an SSD key"
    ks = [clipool.take() for _ in range(3)]
    got = pm.get_many([ks[0][0].decode(), "nosuch", ks[1][0].decode(), ks[2][0].decode()])
    assert got == {k.decode(): v for k, v in ks}, "pymemcache get_many: %r" % sorted(got)
    k, v = clipool.take()
    cas = me_cas(c, k)
    gv, gcas = pm.gets(k.decode())
    assert gv == v and int(gcas) == cas, (short(gv or b""), gcas, cas)
    pm.close()
    for binary in (False, True):
        lm = pylibmc.Client(["%s:%d" % (s.host, s.port)], binary=binary,
                            behaviors={"connect_timeout": 5000, "receive_timeout": 30000000,
                                       "send_timeout": 30000000})
        k, v = clipool.take()
        assert lm.get(k.decode()) == v, "pylibmc (binary=%s) get of an SSD key" % binary
        ks = [clipool.take() for _ in range(3)]
        got = lm.get_multi([ks[0][0].decode(), "nosuch", ks[1][0].decode(), ks[2][0].decode()])
        assert got == {k.decode(): v for k, v in ks}, "pylibmc (binary=%s) get_multi: %r" % (binary, sorted(got))
        lm.disconnect_all()
    bm = bmemcached.Client(("%s:%d" % (s.host, s.port),), socket_timeout=30, raw_data=True)
    k, v = clipool.take()
    assert bm.get(k.decode()) == v, "python-binary-memcached get of an SSD key"
    ks = [clipool.take() for _ in range(3)]
    got = bm.get_multi([ks[0][0].decode(), "nosuch", ks[1][0].decode(), ks[2][0].decode()])
    assert got == {k.decode(): v for k, v in ks}, "python-binary-memcached get_multi: %r" % sorted(got)
    bm.disconnect_all()

    # keys whose TTL was cleared or lengthened are still there, byte-exact
    for k, v in keep:
        expect_get(c, k, v, FL)
    # keys given a 1 s TTL while on SSD are gone after 2.5 s
    time.sleep(2.5)
    got = parse_get(c.get(b"get " + b" ".join(expire) + b"\r\n"))
    assert not got, "keys outlived a 1 s TTL set while they were on SSD: %r" % sorted(got)
    st = c.stats(b"tiers")
    assert stat_int(st, "get_hits_ssd") > 0, st
    assert stat_int(c.stats(b"tac"), "get_hits_ssd") > 0
    assert stat_int(st, "ssd_reads") + stat_int(st, "ssd_reads_mem") > 0, st
    assert stat_int(st, "ssd_reads_inflight") == 0, st
    check_space_stats(st)


# ---------------------------------------------------------------- e. churn and defrag

@pytest.mark.parametrize("engine,free_pages", [("uring", None), ("threads", 5)], ids=["uring", "threads-free5"])
def test_ssd_update_churn_defrag(server, ssd_dir, engine, free_pages):
    """A 96 MB SSD in 4 MB pages under ~44 MB of keys rewritten (and some deleted) at random
    until at least 4x the SSD was rewritten and defrag ran three times: every key reads back
    as its latest version, deleted keys stay gone."""
    opts = ["ssd_page_size=4m", "ssd_buf_size=256k"] + (["ssd_free_pages=%d" % free_pages] if free_pages else [])
    s = ssd_server(server, ssd_dir, "96m", engine, mem=16, opts=opts)
    c = s.connect()
    keys = keys_totalling(b"u", 44 * MB)
    ver = {k: 1 for k in keys}
    deleted = set()

    def want_of(k):
        return None if k in deleted else (0, make_value(k, ver[k]))

    _, failures, _ = load(c, [(k, make_value(k, 1)) for k in keys])
    assert not failures, fmt_failures(failures, c.stats(b"tiers"))
    seed = int(os.environ.get("TAC_SSD_SEED", random.randrange(1 << 30)))
    print("TAC_SSD_SEED=%d" % seed)
    rnd = random.Random(seed)
    t0 = time.time()
    passes, written, ndel = 0, 0, 0
    while True:
        st = c.stats(b"tiers")
        check_space_stats(st)
        runs = stat_int(st, "ssd_defrag_runs")
        if (runs >= 3 and written >= 4 * 96 * MB) or time.time() - t0 > CHURN_SECONDS:
            break
        # rewrite a random half of the keys, in random order: SSD pages die partly, so
        # free pages come back only through defrag
        subset = rnd.sample(keys, len(keys) // 2)
        for k in subset:
            ver[k] += 1
            deleted.discard(k)
        _, failures, nbytes = load(c, [(k, make_value(k, ver[k])) for k in subset])
        assert not failures, "pass %d: %s" % (passes, fmt_failures(failures, c.stats(b"tiers")))
        written += nbytes
        passes += 1
        # delete 2% of the keys (most of them SSD-resident), pipelined
        dels = [k for k in rnd.sample(keys, len(keys) // 50) if k not in deleted]
        c.send(b"".join(b"delete %s\r\n" % k for k in dels))
        buf = b""
        while buf.count(b"\r\n") < len(dels):
            buf += recv_until(c.sock, b"\r\n", timeout=60)
        replies = buf.split(b"\r\n")[:-1]
        assert len(replies) == len(dels), "%d replies to %d deletes" % (len(replies), len(dels))
        deleted.update(dels)
        bad = [(k, r) for k, r in zip(dels, replies) if r != b"DELETED"]
        if bad:
            st = c.stats(b"tiers")
            raise AssertionError("pass %d: %d deletes of stored keys did not answer DELETED: %r; "
                                 "ssd_items_dropped=%s ssd_full=%s; stats tiers %r"
                                 % (passes, len(bad), bad[:5], st["ssd_items_dropped"], st.get("ssd_full"), st))
        ndel += len(dels)
        # spot check while defrag may be moving tuples
        _, misses, wrong = read_check(c, rnd.sample(keys, 300), want_of)
        assert not wrong, "pass %d: %d wrong values:\n%s\nstats tiers %r" % (
            passes, len(wrong), "\n".join(wrong[:8]), c.stats(b"tiers"))
        if misses:
            st = c.stats(b"tiers")
            raise AssertionError("pass %d: %d of 300 sampled keys lost (first %r): ssd_items_dropped=%s ssd_full=%s "
                                 "ssd_live_bytes=%s of %s, pages used %s free %s; stats tiers %r"
                                 % (passes, len(misses), misses[:5], st["ssd_items_dropped"], st.get("ssd_full"),
                                    st["ssd_live_bytes"], st["ssd_capacity"], st["ssd_pages_used"],
                                    st["ssd_pages_free"], st))
    elapsed = time.time() - t0
    hits, misses, wrong = read_check(c, keys, want_of, per=50)
    st = c.stats(b"tiers")
    print("%d keys, %d passes, %d MB rewritten, %d deletes in %.1fs; stats tiers %r"
          % (len(keys), passes, written >> 20, ndel, elapsed, st))
    assert not wrong, "%d wrong values (stale or corrupt):\n%s\nstats tiers %r" % (
        len(wrong), "\n".join(wrong[:8]), st)
    assert not misses, "%d of %d keys lost (first %r): ssd_items_dropped=%s ssd_full=%s; stats tiers %r" % (
        len(misses), len(keys), misses[:5], st["ssd_items_dropped"], st.get("ssd_full"), st)
    assert hits == len(keys) - len(deleted)
    assert stat_int(st, "ssd_defrag_runs") >= 3, (
        "only %s defrag runs after %d passes (%d MB rewritten, %.0fs); stats tiers %r"
        % (st["ssd_defrag_runs"], passes, written >> 20, elapsed, st))
    assert stat_int(st, "ssd_defrag_moved") > 0, st
    assert stat_int(st, "ssd_items_dropped") == 0, st
    assert int(c.stats()["curr_items"]) == len(keys) - len(deleted)
    check_space_stats(st)


# ---------------------------------------------------------------- f. SSD full

def test_ssd_full_drops_oldest(server, ssd_dir):
    """Cache mode: 160 MB into -m 16 + a 48 MB SSD.  Sets never fail; the oldest keys go;
    every hit is exact."""
    s = ssd_server(server, ssd_dir, "48m", "threads", mem=16, opts=["ssd_page_size=4m"])
    c = s.connect()
    keys = keys_totalling(b"z", 160 * MB)
    stored, failures, _ = load(c, ((k, make_value(k, 1)) for k in keys))
    st = c.stats(b"tiers")
    assert not failures, "cache mode (no -M) must make room, not refuse: " + fmt_failures(failures, st)
    # the newest keys first: reads may promote SSD items and so push others out of a full SSD
    recent = keys[-400:]  # ~2 MB: well inside DRAM
    _, lost_recent, wrong = read_check(c, recent, lambda k: (0, make_value(k, 1)))
    assert not wrong, "%d wrong values:\n%s" % (len(wrong), "\n".join(wrong[:8]))
    assert not lost_recent, "%d of the %d most recent keys miss (first %r); stats tiers %r" % (
        len(lost_recent), len(recent), lost_recent[:5], st)
    hits, misses, wrong = read_check(c, keys, lambda k: (0, make_value(k, 1)))
    st = c.stats(b"tiers")
    plain = c.stats()
    print("hits %d of %d; stats tiers %r" % (hits, len(keys), st))
    assert not wrong, "%d wrong values:\n%s" % (len(wrong), "\n".join(wrong[:8]))
    missed = set(misses)
    assert missed, "160 MB in 64 MB of DRAM+SSD and every key hits?"
    assert any(k in missed for k in keys[:len(keys) // 4]), "no old key dropped"
    assert stat_int(st, "ssd_items_dropped") > 0, st
    # memcached's meaning: `evictions` counts items lost from memory that went to no lower
    # tier; the SSD's drops count in extstore_objects_evicted (ssd_items_dropped) alone.
    # Every item here goes down to the SSD, so nearly all losses are the SSD's.
    assert stat_int(plain, "extstore_objects_evicted") >= stat_int(st, "ssd_items_dropped"), plain
    assert int(plain["evictions"]) < stat_int(st, "ssd_items_dropped"), \
        "evictions = %s counts the SSD's drops too; stats tiers %r" % (plain["evictions"], st)
    assert stat_int(st, "ssd_items") > 0, st
    check_space_stats(st)


def test_ssd_full_with_M_refuses(server, ssd_dir):
    """-M: once DRAM and a 48 MB SSD are full, sets answer SERVER_ERROR; nothing stored is dropped."""
    s = ssd_server(server, ssd_dir, "48m", "uring", mem=16, opts=["ssd_page_size=4m"], extra=["-M"])
    c = s.connect()
    keys = keys_totalling(b"m", 128 * MB)
    # no client retries: a full -M server keeps refusing; stop after 5 batches refused whole
    stored, failures, nbytes = load(c, ((k, make_value(k, 1)) for k in keys), retries=0,
                                    stop_after_refused_batches=5)
    st = c.stats(b"tiers")
    other = {k: r for k, r in failures.items() if not r.startswith(b"SERVER_ERROR")}
    assert not other, fmt_failures(other, st)
    assert failures, "-M and 128 MB of data for 64 MB of DRAM+SSD, yet no SERVER_ERROR; stats tiers %r" % st
    assert s.alive()
    stored_set = set(stored)
    hits, misses, wrong = read_check(c, stored, lambda k: (0, make_value(k, 1)))
    st = c.stats(b"tiers")
    plain = c.stats()
    print("stored %d keys (%d MB), %d refused; stats tiers %r" % (len(stored), nbytes >> 20, len(failures), st))
    assert not wrong, "%d wrong values:\n%s" % (len(wrong), "\n".join(wrong[:8]))
    assert not misses, "-M dropped %d of %d acknowledged keys (first %r); stats tiers %r" % (
        len(misses), len(stored_set), misses[:5], st)
    assert stat_int(st, "ssd_items_dropped") == 0, st
    assert int(plain["evictions"]) == 0, "evictions = %s with -M" % plain["evictions"]
    # the refusals came once the SSD held a real share of the data
    assert nbytes > 32 * MB, "only %d MB stored before SERVER_ERROR; stats tiers %r" % (nbytes >> 20, st)
    assert stat_int(st, "ssd_items") > 0, st
    check_space_stats(st)


# ---------------------------------------------------------------- UDP

@pytest.mark.parametrize("engine", ENGINES)
def test_udp_reads_of_ssd_items_park(server, ssd_dir, engine):
    """UDP gets of items whose value is on SSD are answered from a parked read, as on
    TCP: the worker never waits for the SSD (ssd_reads_unparked stays 0).  Single-key and
    multi-key datagrams mix DRAM and SSD items, values span several datagrams, and an
    append over UDP to an SSD item (a write that needs the old value) is stored."""
    from test_options import udp_request
    from test_nvm import make_value as mkval, tier_of
    path = os.path.join(ssd_dir, "ssd")
    s = server(["-m", "8", "-t", "1", "-o", "ssd_path=%s:256m,ssd_io_engine=%s" % (path, engine)], udp=True)
    c = s.connect()
    keys = [b"usertable-user%016d" % j for j in range(5000)]  # 5000 x 4 KB: most go to SSD
    for b0 in range(0, len(keys), 250):
        chunk = keys[b0:b0 + 250]
        c.send(b"".join(b"set %s 0 0 4000\r\n%s\r\n" % (k, mkval(k, 1, 4000)) for k in chunk))
        replies = recv_exact(c.sock, len(chunk) * len(b"STORED\r\n"), timeout=30)
        assert replies == b"STORED\r\n" * len(chunk), replies[:200]
    on_ssd = [k for k in keys[:1500] if tier_of(c, k) == "ssd"][:60]
    in_dram = [k for k in keys[-300:] if tier_of(c, k) == "dram"][:20]
    assert len(on_ssd) >= 40 and len(in_dram) >= 5, (len(on_ssd), len(in_dram), c.stats(b"tiers"))
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    addr = (s.host, s.udp_port)
    try:
        for n, k in enumerate(on_ssd[:30]):
            r, frames = udp_request(u, addr, n + 1, b"get %s\r\n" % k, timeout=10)
            assert frames >= 3 and parse_get(r) == {k: (0, mkval(k, 1, 4000), None)}, (k, r[:100])
        mixed = [on_ssd[30], in_dram[0], on_ssd[31], on_ssd[32], in_dram[1]]
        r, _ = udp_request(u, addr, 100, b"get " + b" ".join(mixed) + b"\r\n", timeout=10)
        got = parse_get(r)
        assert list(got) == mixed, list(got)                    # in request order
        assert all(got[k][1] == mkval(k, 1, 4000) for k in mixed)
        k = on_ssd[40]
        r, _ = udp_request(u, addr, 200, b"append %s 0 0 3\r\nabc\r\n" % k, timeout=10)
        assert r == b"STORED\r\n", r
        r, _ = udp_request(u, addr, 201, b"get %s\r\n" % k, timeout=10)
        assert parse_get(r)[k][1] == mkval(k, 1, 4000) + b"abc"
    finally:
        u.close()
    st = c.stats(b"tiers")
    assert int(st["ssd_reads_unparked"]) == 0, st
    assert int(c.stats(b"tac")["get_hits_ssd"]) >= 30


@pytest.mark.parametrize("engine", ENGINES)
def test_workers_never_wait_for_the_ssd(server, ssd_dir, engine, monkeypatch):
    """With every SSD read completion held back 2 s (TAC_DEBUG_SSD_DELAY_MS, a hook of
    debug and sanitizer builds), one worker (-t 1) has reads pending for a multi-get
    over TCP, a UDP get and an append that needs its old value, all of SSD items.
    Meanwhile gets of DRAM items on that same worker are each answered within 50 ms;
    the pending requests are answered after the delay, with the right values."""
    from test_options import udp_request
    from test_nvm import make_value as mkval, tier_of
    monkeypatch.setenv("TAC_DEBUG_SSD_DELAY_MS", "2000")
    path = os.path.join(ssd_dir, "ssd")
    s = server(["-m", "8", "-t", "1", "-o", "ssd_path=%s:256m,ssd_io_engine=%s" % (path, engine)], udp=True)
    if "debug hook" not in s.stderr_text():
        pytest.skip("needs the test hooks: ./configure --enable-debug-hooks (sanitizer builds have them)")
    c = s.connect()
    keys = [b"usertable-user%016d" % j for j in range(5000)]
    for b0 in range(0, len(keys), 250):
        chunk = keys[b0:b0 + 250]
        c.send(b"".join(b"set %s 0 0 4000\r\n%s\r\n" % (k, mkval(k, 1, 4000)) for k in chunk))
        assert recv_exact(c.sock, len(chunk) * 8, timeout=30) == b"STORED\r\n" * len(chunk)
    on_ssd = [k for k in keys[:1500] if tier_of(c, k) == "ssd"][:30]
    # The DRAM keys get small values, a slab class of their own: the 4000 B
    # class's newest page is the one the page mover may still be draining
    # after the load (to refill the meta tuples' reserve), demoting its items.
    hot = [b"hot-key-%02d" % j for j in range(10)]
    c.send(b"".join(b"set %s 0 0 100\r\n%s\r\n" % (k, mkval(k, 1, 100)) for k in hot))
    assert recv_exact(c.sock, len(hot) * 8, timeout=30) == b"STORED\r\n" * len(hot)
    in_dram = [k for k in hot if tier_of(c, k) == "dram"]
    assert len(on_ssd) >= 25 and len(in_dram) >= 5, (len(on_ssd), len(in_dram))
    slow_get, slow_append = s.connect(timeout=30), s.connect(timeout=30)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    t0 = time.monotonic()
    slow_get.send(b"get " + b" ".join(on_ssd[:20]) + b"\r\n")
    slow_append.send(b"append %s 0 0 3\r\nxyz\r\n" % on_ssd[20])
    u.sendto(struct.pack("!HHHH", 9, 0, 1, 0) + b"get %s\r\n" % on_ssd[21], (s.host, s.udp_port))
    time.sleep(0.2)                                     # the reads are in flight now
    lat = []
    for i in range(40):
        k = in_dram[i % len(in_dram)]
        t = time.monotonic()
        r = c.get(b"get %s\r\n" % k, timeout=10)
        lat.append(time.monotonic() - t)
        assert parse_get(r)[k][1] == mkval(k, 1, 100)
    dram_done = time.monotonic() - t0
    moved = [k for k in in_dram if tier_of(c, k) != "dram"]
    assert dram_done < 1.5, "the DRAM gets took %.2fs: they waited for the SSD (%d of the keys left DRAM)" % (
        dram_done, len(moved))
    assert max(lat) < 0.050, "slowest DRAM get %.1f ms (median %.1f ms)" % (max(lat) * 1e3, sorted(lat)[20] * 1e3)
    r = recv_until(slow_get.sock, b"END\r\n", timeout=30)
    waited = time.monotonic() - t0
    got = parse_get(r)
    assert list(got) == on_ssd[:20] and all(got[k][1] == mkval(k, 1, 4000) for k in got)
    assert waited >= 1.5, "the SSD reads came back after %.2fs: the delay hook did not hold them" % waited
    assert recv_until(slow_append.sock, b"\r\n", timeout=30) == b"STORED\r\n"
    u.settimeout(30)
    d, _ = u.recvfrom(65536)
    frames = {struct.unpack("!HHHH", d[:8])[1]: d[8:]}
    total = struct.unpack("!HHHH", d[:8])[2]
    while len(frames) < total:
        d, _ = u.recvfrom(65536)
        frames[struct.unpack("!HHHH", d[:8])[1]] = d[8:]
    u.close()
    r = b"".join(frames[i] for i in range(total))
    assert parse_get(r) == {on_ssd[21]: (0, mkval(on_ssd[21], 1, 4000), None)}
    assert parse_get(c.get(b"get %s\r\n" % on_ssd[20], timeout=30))[on_ssd[20]][1] == mkval(on_ssd[20], 1, 4000) + b"xyz"
    print("DRAM gets while SSD reads pending: median %.2f ms, max %.2f ms; SSD multi-get after %.2fs"
          % (sorted(lat)[20] * 1e3, max(lat) * 1e3, waited))


@pytest.mark.parametrize("op", ["append", "incr"])
def test_retried_write_never_uses_a_replaced_value_without_cas(server, ssd_dir, op, monkeypatch):
    """With -C every CAS is 0, so a CAS cannot tell two versions of one length apart.
    An append (or incr) whose old value is on SSD waits 4 s for its read (the debug hook);
    meanwhile another connection replaces the value with one of the same length, which is
    then pushed down to SSD too.  The write must apply to the new version, never to the
    value its first read got: new+xyz (or new+1), not old+xyz (a lost update)."""
    from test_nvm import make_value as mkval, tier_of
    monkeypatch.setenv("TAC_DEBUG_SSD_DELAY_MS", "4000")
    path = os.path.join(ssd_dir, "ssd")
    s = server(["-C", "-m", "8", "-t", "1", "-o", "ssd_path=%s:256m" % path])
    if "debug hook" not in s.stderr_text():
        pytest.skip("needs the test hooks: ./configure --enable-debug-hooks (sanitizer builds have them)")
    c = s.connect()

    def fill(keys, version):
        for b0 in range(0, len(keys), 250):
            chunk = keys[b0:b0 + 250]
            c.send(b"".join(b"set %s 0 0 4000\r\n%s\r\n" % (k, mkval(k, version, 4000)) for k in chunk))
            assert recv_exact(c.sock, len(chunk) * 8, timeout=30) == b"STORED\r\n" * len(chunk)

    fill([b"usertable-user%016d" % j for j in range(4000)], 1)
    k = b"usertable-user%016d" % 7
    assert tier_of(c, k) == "ssd"
    old, new = mkval(k, 1, 4000), mkval(k, 2, 4000)
    if op == "incr":                    # numbers after leading blanks, as incr reads them
        old, new = b" " * 3980 + b"%020d" % 1000, b" " * 3980 + b"%020d" % 5000
        c.send(b"set %s 0 0 4000\r\n%s\r\n" % (k, old))
        assert c.line(b"") == b"STORED\r\n"
        fill([b"usertable-fill%016d" % j for j in range(3000)], 1)
        assert tier_of(c, k) == "ssd"
    writer = s.connect(timeout=30)
    t0 = time.monotonic()
    if op == "append":
        writer.send(b"append %s 0 0 3\r\nxyz\r\n" % k)
    else:
        writer.send(b"incr %s 1\r\n" % k)
    time.sleep(0.3)                     # its read of the old value is in flight
    c.send(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(new), new))
    assert c.line(b"") == b"STORED\r\n"
    fill([b"usertable-more%016d" % j for j in range(3000)], 1)
    pushed = time.monotonic() - t0
    assert tier_of(c, k) == "ssd", "the new version did not reach the SSD"
    assert pushed < 3.5, "the new version reached the SSD after %.1fs, past the read's delay" % pushed
    reply = recv_until(writer.sock, b"\r\n", timeout=30)
    assert time.monotonic() - t0 >= 3.5, "the write did not wait for its read"
    r = c.get(b"get %s\r\n" % k, timeout=30)
    got = parse_get(r)[k][1]
    if op == "append":
        assert reply == b"STORED\r\n"
        assert got == new + b"xyz", "append used %s" % ("the replaced value" if got == old + b"xyz" else repr(got[:40]))
    else:
        assert reply == b"5001\r\n", reply
        assert got.rstrip() == b"5001", got


@pytest.mark.tac_only
def test_ssd_tier_larger_than_the_page_ids_takes_larger_pages(server, ssd_dir):
    """Page ids have 16 bits: a file of more than 65,536 pages gets larger
    pages, said at start, instead of a silent cap that leaves it unused."""
    s = ssd_server(server, ssd_dir, "512m", mem=16, opts=("ssd_buf_size=4k", "ssd_page_size=4k"),
                   extra=("-I", "1k"))
    c = s.connect()
    st, t = c.stats(b"settings"), c.stats(b"tiers")
    assert int(st["ssd_page_size"]) == 8192, st["ssd_page_size"]
    assert int(t["ssd_pages_total"]) * 8192 >= 512 * (1 << 20) - 2 * 8192, t["ssd_pages_total"]
    assert "pages of 8192 bytes instead of 4096" in s.stderr_text(), s.stderr_text()
    keys = [b"big-tier-%05d" % i for i in range(40000)]     # 24 MB: past -m into SSD
    want = {k: make_value(k, 1, size=600) for k in keys}
    stored, failures, _ = load(c, list(want.items()))
    assert not failures, fmt_failures(failures, c.stats(b"tiers"))
    assert int(c.stats(b"tiers")["ssd_items"]) > 0
    hits, misses, wrong = read_check(c, keys, lambda k: (0, want[k]))
    assert not wrong and not misses, (wrong[:3], misses[:3])


# ------------------------------------------- memcached's extstore tuning

def get_value(c, key):
    """The value of a plain get of key, or None on a miss."""
    r = c.req(b"get " + key + b"\r\n", end=b"END\r\n")
    if r == b"END\r\n":
        return None
    m = re.match(rb"VALUE \S+ \d+ (\d+)\r\n", r)
    assert m, r[:80]
    n = int(m.group(1))
    body = r[m.end():]
    assert len(body) == n + 7 and body[n:] == b"\r\nEND\r\n", r[:80]
    return body[:n]


def test_ext_path_keeps_memcacheds_slab_classes(server, ssd_dir):
    """Named by memcached's ext_path the SSD tier keeps memcached's slab classes (class 1
    holds 96-byte chunks, as with -n 48), so a small item sits where memcached puts it;
    named by ssd_path the first classes step by 8 bytes from 56 for meta tuples, and the
    same item sits in class 3 (56, 64, 72)."""
    for opt, cls, chunk in (("ext_path=%s/ext:64m", 1, 96), ("ssd_path=%s/ssd:64m", 3, 72)):
        c = server(["-m", "16", "-o", opt % ssd_dir]).connect()
        assert c.line(b"set foo 0 0 2\r\nhi\r\n") == b"STORED\r\n"
        sl = c.stats(b"slabs")
        assert stat_int(sl, "%d:chunk_size" % cls) == chunk, sl
        assert stat_int(sl, "%d:used_chunks" % cls) == 1, sl


def test_extstore_command_tunes_the_ssd_tier(server, ssd_dir):
    """`extstore <name> <value>` sets the SSD tier's settings that mean something here and
    `stats settings` shows them; those without a meaning, bad values and unknown names
    answer ERROR; noreply is honoured; without an SSD tier there is no such command."""
    s = ssd_server(server, ssd_dir, "128m", opts=["ssd_page_size=4m", "ssd_buf_size=1m"])
    c = s.connect()
    for cmd, name, want in ((b"recache_rate 7", "ext_recache_rate", "7"),
                            (b"max_frag 0.5", "ext_max_frag", "0.50"),
                            (b"drop_unread 1", "ext_drop_unread", "yes"),
                            (b"item_size 1000", "ext_item_size", "1000"),
                            (b"item_age 5", "ext_item_age", "5"),
                            (b"compact_under 5", "ssd_free_pages", "6"),
                            (b"drop_under 3", "ext_drop_under", "3"),
                            (b"low_ttl 60", "ext_low_ttl", "60")):
        assert c.line(b"extstore " + cmd + b"\r\n") == b"OK\r\n", cmd
        assert c.stats(b"settings").get(name) == want, (cmd, c.stats(b"settings").get(name))
    assert c.stats(b"settings").get("ext_compact_under") == "5"
    for bad in (b"max_sleep 10", b"free_memchunks 1"):
        r = c.line(b"extstore " + bad + b"\r\n")
        assert r.startswith(b"ERROR ") and b"no meaning here" in r, (bad, r)
    for bad in (b"max_frag 1.5", b"max_frag x", b"recache_rate -1", b"recache_rate 1x",
                b"nothing 1", b"recache_rate"):
        assert c.line(b"extstore " + bad + b"\r\n") == b"ERROR\r\n", bad
    assert c.stats(b"settings").get("ext_recache_rate") == "7"
    c.sock.sendall(b"extstore recache_rate 3 noreply\r\n")
    assert c.line(b"version\r\n").startswith(b"VERSION ")
    assert c.stats(b"settings").get("ext_recache_rate") == "3"
    d = server(["-m", "16"]).connect()
    assert d.line(b"extstore recache_rate 1\r\n") == b"ERROR\r\n"


def fill_past_ssd(c, prefix, ssd_bytes, times=3):
    """Sets keys of 2-8 KB values totalling `times` SSD sizes; returns {key: value} stored."""
    keys = keys_totalling(prefix, times * ssd_bytes)
    want = {k: make_value(k, 1) for k in keys}
    stored, failures, _ = load(c, want.items())
    assert not failures, failures
    return want


def test_miss_from_extstore_counts_keys_the_ssd_dropped(server, ssd_dir):
    """A full SSD drops its oldest pages; a get of a key dropped so counts in
    miss_from_extstore (ssd_dropped_misses) once, a miss of a key never stored or stored
    again and deleted does not, and every hit is byte-exact."""
    s = ssd_server(server, ssd_dir, "32m", mem=8, opts=["ssd_page_size=2m", "ssd_buf_size=256k"])
    c = s.connect()
    want = fill_past_ssd(c, b"drop:", 32 * MB)
    t = c.stats(b"tiers")
    assert stat_int(t, "ssd_items_dropped") > 0, t
    before = stat_int(c.stats(), "miss_from_extstore")
    t0 = c.stats(b"tiers")
    hits, misses, wrong = read_check(c, list(want), lambda k: (0, want[k]))
    assert not wrong, wrong[:3]
    assert hits > 0 and len(misses) > 0, (hits, len(misses))
    st = c.stats()
    counted = stat_int(st, "miss_from_extstore") - before
    # Every miss here is a dropped key; the table may forget a few (a newer drop in
    # the same slot), never invent one.
    assert len(misses) * 0.8 <= counted <= len(misses), (counted, len(misses))
    # The sum of its two causes: keys dropped before the get, and reads whose tuple a
    # drop took while they ran.
    t1 = c.stats(b"tiers")
    assert counted == sum(stat_int(t1, n) - stat_int(t0, n)
                          for n in ("ssd_dropped_misses", "ssd_read_misses")), (t0, t1)
    assert stat_int(t1, "ssd_dropped_misses") > stat_int(t0, "ssd_dropped_misses")
    # Counted once: the same misses again count nothing.
    hits2, misses2, _ = read_check(c, misses, lambda k: (0, want[k]))
    assert stat_int(c.stats(), "miss_from_extstore") - before == counted
    # Stored again, then deleted: its miss is the delete's, not the SSD's.
    k = misses[0]
    assert c.line(b"set %s 0 0 1\r\nx\r\n" % k) == b"STORED\r\n"
    assert c.line(b"delete %s\r\n" % k) == b"DELETED\r\n"
    assert get_value(c, k) is None
    assert get_value(c, b"drop:never-stored") is None
    assert stat_int(c.stats(), "miss_from_extstore") - before == counted


def test_drop_unread_keeps_the_items_read_again(server, ssd_dir):
    """With ext_drop_unread (and ext_max_frag 0: a full SSD always drops), a full SSD's
    oldest page moves on the items read again after their first read and drops the
    others: extstore_compact_skipped and extstore_compact_rescues count them, the items
    read twice outlive the unread ones written with them, and every hit is byte-exact."""
    s = ssd_server(server, ssd_dir, "32m", mem=8,
                   opts=["ssd_page_size=2m", "ssd_buf_size=256k", "ext_drop_unread",
                         "ext_max_frag=0"])
    c = s.connect()
    first = fill_past_ssd(c, b"early:", 32 * MB, times=0.5)
    early = list(first)
    kept = early[::4]
    for _ in range(2):
        hits, misses, wrong = read_check(c, kept, lambda k: (0, first[k]))
        assert not wrong and not misses, (wrong[:3], misses[:3])
    fill_past_ssd(c, b"late:", 32 * MB, times=0.9)
    st = c.stats()
    assert stat_int(st, "extstore_compact_skipped") > 0, st
    assert stat_int(st, "extstore_compact_rescues") > 0, st
    kh, km, kw = read_check(c, kept, lambda k: (0, first[k]))
    unread = [k for k in early if k not in set(kept)]
    uh, um, uw = read_check(c, unread, lambda k: (0, first[k]))
    assert not kw and not uw, (kw[:3], uw[:3])
    assert kh / len(kept) > uh / len(unread) + 0.3, (kh, len(kept), uh, len(unread))


def test_full_ssd_keeps_no_spare_page_and_low_ttl_pages_empty_whole(server, ssd_dir):
    """Cache mode with every SSD page all live (ext_max_frag=0, nothing to re-pack): the
    writers take every free page, as memcached's extstore, so a 56 MB SSD of 8 MB pages
    (7 pages) holds 6 pages of items with none dropped and shows at most 1 free page.  With
    ext_low_ttl, items that expire within it go to pages of their own; once they expired,
    the crawler finds them (SSD items are on no LRU: it sweeps the index; `lru_crawler
    crawl all` hurries it) and their pages are reclaimed whole, while every long-lived item reads back
    exact.  `evictions` stays 0 throughout."""
    seed = random.randrange(1 << 30)
    print("seed", seed)
    rng = random.Random(seed)
    s = ssd_server(server, ssd_dir, "56m", mem=256,
                   opts=["ssd_page_size=8m", "ssd_buf_size=2m", "ext_item_age=1",
                         "ext_max_frag=0", "ext_low_ttl=60"])
    c = s.connect()
    n = 1000
    long_keys = [b"keep:%05d" % i for i in range(n)]
    short_keys = [b"brief:%05d" % i for i in range(n)]
    want = {k: make_value(k, 1, 20000 - rng.randrange(200)) for k in long_keys + short_keys}
    t_set = time.time()
    for lk, sk in zip(long_keys, short_keys):     # interleaved, as memcached's buckets test
        c.send(b"set %s 0 0 %d noreply\r\n%s\r\nset %s 0 4 %d noreply\r\n%s\r\n" % (
            lk, len(want[lk]), want[lk], sk, len(want[sk]), want[sk]))
    assert c.line(b"version\r\n").startswith(b"VERSION ")
    deadline = time.time() + 20
    while time.time() < deadline and stat_int(c.stats(b"tiers"), "ssd_items") < 2 * n:
        time.sleep(0.2)
    st, t = c.stats(), c.stats(b"tiers")
    assert time.time() - t_set < 4, "the short-lived items expired before all reached the SSD"
    assert stat_int(t, "ssd_items") == 2 * n, t
    assert stat_int(t, "ssd_items_dropped") == 0, t
    assert stat_int(st, "extstore_pages_used") >= 6 and stat_int(st, "extstore_pages_free") <= 1, st
    assert int(st["evictions"]) == 0, st["evictions"]
    time.sleep(max(0.0, t_set + 5 - time.time()))     # every short-lived item expired
    assert c.line(b"lru_crawler crawl all\r\n") == b"OK\r\n"
    deadline = time.time() + 15
    while time.time() < deadline and stat_int(c.stats(b"tiers"), "ssd_items") > n:
        time.sleep(0.2)
    st, t = c.stats(), c.stats(b"tiers")
    assert stat_int(t, "ssd_items") == n, t
    assert stat_int(st, "crawler_reclaimed") >= n, st     # nothing else expired or was read
    assert stat_int(st, "extstore_page_reclaims") >= 2, st
    assert stat_int(st, "extstore_pages_free") >= 3, st
    _, misses, wrong = read_check(c, long_keys, lambda k: (0, want[k]))
    assert not wrong and not misses, (seed, wrong[:3], misses[:3])
    hits, _, wrong = read_check(c, short_keys, lambda k: None)
    assert not wrong and hits == 0, (seed, wrong[:3])
    assert int(c.stats()["evictions"]) == 0


def test_recache_rate_moves_items_read_before_to_dram(server, ssd_dir):
    """ext_recache_rate 1: an SSD read of an item read before moves it to DRAM
    (recache_from_extstore), whatever its temperature; the value stays exact."""
    s = ssd_server(server, ssd_dir, "64m", mem=8, opts=["ext_recache_rate=1"])
    c = s.connect()
    want = fill_past_ssd(c, b"rc:", 64 * MB, times=0.5)
    on_ssd = [k for k in list(want)[:200] if tier_of(c, k) == "ssd"][:20]
    assert len(on_ssd) >= 10, on_ssd
    before = stat_int(c.stats(), "recache_from_extstore")
    # Right after the fill DRAM may still be at its limit (fetch_no_room): read again
    # until the evictors have made room.
    deadline = time.time() + 10
    while time.time() < deadline and stat_int(c.stats(), "recache_from_extstore") == before:
        for k in on_ssd:
            assert get_value(c, k) == want[k]
            assert get_value(c, k) == want[k]
        time.sleep(0.2)
    assert stat_int(c.stats(), "recache_from_extstore") > before, {k: v for k, v in c.stats(b"tiers").items() if k.startswith("fetch")}
    assert any(tier_of(c, k) == "dram" for k in on_ssd)
    hits, misses, wrong = read_check(c, on_ssd, lambda k: (0, want[k]))
    assert not wrong and not misses, (wrong[:3], misses[:3])
