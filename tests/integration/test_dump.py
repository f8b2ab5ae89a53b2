"""Key dumps and the crawler commands: `lru_crawler metadump`, `stats cachedump`,
`lru_crawler crawl|enable|disable|sleep|tocrawl`, and the tools built on them
(memcached-tool dump and keys, memcdump), over every tier.

The answers are memcached 1.6's; tests without the tac_only marker pass
against stock memcached too (TAC_SERVER=/usr/bin/memcached)."""
import random
import subprocess
import threading
import time
import urllib.parse
import zlib

import pytest

from mcserver import IS_STOCK, recv_until
from test_restart import DataSet, gets_all, load, tier_counts

MEMCACHED_TOOL = "/usr/share/memcached/scripts/memcached-tool"
MB = 1 << 20


def metadump(c, what=b"all", timeout=60.0):
    """The lines of `lru_crawler metadump <what>` as dicts (key decoded)."""
    c.send(b"lru_crawler metadump " + what + b"\r\n")
    raw = recv_until(c.sock, b"END\r\n", timeout=timeout, limit=512 << 20)
    assert raw.endswith(b"END\r\n"), raw[-200:]
    out = []
    for ln in raw[:-5].split(b"\n"):
        if not ln:
            continue
        fields = dict(f.split(b"=", 1) for f in ln.split(b" "))
        fields[b"key"] = urllib.parse.unquote_to_bytes(fields[b"key"])
        out.append(fields)
    return out


@pytest.fixture
def three_tiers(server, tmp_path, shm_file):
    """A server with DRAM, NVM and SSD tiers (the NVM file under /dev/shm)."""
    ssd = str(tmp_path / "ssd.bin")
    return server(["-t", "2", "-m", "16", "-o",
                   "nvm_path=%s:8m,ssd_path=%s:256m" % (shm_file("dump"), ssd)])


def spread_dataset(srv, n=10000):
    seed = random.SystemRandom().randrange(1 << 31)
    print("dump seed %d" % seed)
    ds = DataSet(seed, n, 100, 9000, ttl_every=7)
    load(srv, ds, ds.keys)
    c = srv.connect(timeout=60)
    deadline = time.time() + 20     # the evictors may still be moving items down
    while True:
        nvm, ssd = tier_counts(c.stats(b"tiers"))
        if (nvm and ssd) or time.time() > deadline:
            break
        time.sleep(0.2)
    assert nvm and ssd, "the data set must lie in NVM and SSD too: nvm %s, ssd %s" % (nvm, ssd)
    return ds, c


@pytest.mark.tac_only
def test_memcached_tool_dump_lists_every_tier(three_tiers):
    """memcached-tool dump (metadump, then a get per key) gives back one
    `add` per key, with its value and flags, from DRAM, NVM and SSD alike."""
    ds, c = spread_dataset(three_tiers)
    out = subprocess.run(["perl", MEMCACHED_TOOL, three_tiers.addr, "dump"],
                         capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    data = out.stdout
    got, pos = {}, 0
    while pos < len(data):
        eol = data.index(b"\r\n", pos)
        cmd, key, flags, exp, n = data[pos:eol].split(b" ")
        assert cmd == b"add", data[pos:eol]
        n = int(n)
        got[key] = (int(flags), int(exp), data[eol + 2:eol + 2 + n])
        assert data[eol + 2 + n:eol + 4 + n] == b"\r\n"
        pos = eol + 4 + n
    assert len(got) == len(ds.val), "memcached-tool dumped %d of %d keys (seed %d)" % (
        len(got), len(ds.val), ds.seed)
    now = time.time()
    for k, v in ds.val.items():
        flags, exp, val = got[k]
        assert val == v, "%r: wrong value dumped (seed %d)" % (k, ds.seed)
        assert flags == ds.flags[k], "%r: flags %d, want %d" % (k, flags, ds.flags[k])
        if ds.exp[k]:
            assert now < exp <= now + ds.exp[k] + 2, (k, exp, now)
        else:
            assert exp == 0, (k, exp)


@pytest.mark.tac_only
def test_metadump_fields_and_tiers(three_tiers):
    ds, c = spread_dataset(three_tiers, n=6000)
    fetched = ds.keys[:50]
    gets_all(c, fetched)
    lines = metadump(c)
    by_key = {}
    for f in lines:
        assert f[b"key"] not in by_key, "%r dumped twice" % f[b"key"]
        by_key[f[b"key"]] = f
    assert set(by_key) == set(ds.val), "metadump: %d lines for %d keys, %d missing" % (
        len(by_key), len(ds.val), len(set(ds.val) - set(by_key)))
    tiers = {}
    now = time.time()
    for k, f in by_key.items():
        tiers[f[b"tier"]] = tiers.get(f[b"tier"], 0) + 1
        assert int(f[b"size"]) > len(ds.val[k]), (k, f)
        assert 1 <= int(f[b"cls"]) < 64, f
        assert abs(int(f[b"la"]) - now) < 120, f
        exp = int(f[b"exp"])
        assert (exp == -1) if not ds.exp[k] else (now < exp <= now + ds.exp[k] + 2), (k, f)
    assert all(by_key[k][b"fetch"] == b"yes" for k in fetched)
    st = c.stats(b"tiers")
    nvm, ssd = tier_counts(st)
    # The dump's view of the tiers is the server's own (items may move
    # down between the two reads, not up: nothing reads them meanwhile).
    assert tiers.get(b"nvm", 0) > 0 and tiers.get(b"ssd", 0) > 0, tiers
    assert tiers.get(b"ssd", 0) <= ssd + 100 and tiers.get(b"dram", 0) > 0, (tiers, nvm, ssd)


def test_metadump_encodes_keys_and_ends_with_end(server):
    srv = server(["-m", "64"])
    c = srv.connect()
    keys = [b"plain", b"with%percent", b"comma,colon:", b"slash/and+plus", b"\xc3\xa9t\xc3\xa9"]
    for i, k in enumerate(keys):
        assert c.line(b"set %s %d %d 3\r\nabc\r\n" % (k, i, 100 if i == 2 else 0)) == b"STORED\r\n"
    assert c.get(b"get plain\r\n").startswith(b"VALUE plain")
    lines = {f[b"key"]: f for f in metadump(c)}
    assert set(lines) == set(keys), lines
    assert lines[b"plain"][b"fetch"] == b"yes" and lines[b"slash/and+plus"][b"fetch"] == b"no"
    assert lines[b"plain"][b"exp"] == b"-1"
    assert abs(int(lines[b"comma,colon:"][b"exp"]) - (time.time() + 100)) < 5
    raw = c.req(b"lru_crawler metadump all\r\n", b"END\r\n")
    assert b"key=with%25percent " in raw and b"key=comma%2Ccolon%3A " in raw, raw


@pytest.mark.tac_only
def test_requests_pipelined_behind_a_metadump_are_answered_after_it(server):
    """(memcached answers them only once more bytes arrive.)"""
    c = server(["-m", "64"]).connect()
    keys = [b"pipelined-%05d" % i for i in range(20000)]
    c.send(b"".join(b"set %s 0 0 3 noreply\r\nabc\r\n" % k for k in keys) + b"mn\r\n")
    assert recv_until(c.sock, b"MN\r\n") == b"MN\r\n"
    raw = c.req(b"lru_crawler metadump all\r\nget pipelined-00007\r\n",
                b"END\r\nVALUE pipelined-00007 0 3\r\nabc\r\nEND\r\n")
    assert raw.count(b"key=") == len(keys)
    assert raw.index(b"VALUE") > raw.index(b"END\r\n")


def test_crawler_command_answers(server):
    """Each lru_crawler subcommand answers as memcached 1.6 does."""
    c = server(["-m", "64"]).connect()
    want = [
        (b"lru_crawler sleep 50", b"OK"),
        (b"lru_crawler sleep 2000000", b"CLIENT_ERROR sleep must be one second or less"),
        (b"lru_crawler sleep x", b"CLIENT_ERROR bad command line format"),
        (b"lru_crawler tocrawl 1000", b"OK"),
        (b"lru_crawler tocrawl -1", b"CLIENT_ERROR bad command line format"),
        (b"lru_crawler crawl all", b"OK"),
        (b"lru_crawler metadump 999", b"BADCLASS invalid class id"),
        (b"lru_crawler bogus", b"ERROR"),
        (b"lru_crawler", b"ERROR"),
        (b"lru_crawler enable", b"ERROR failed to start lru crawler thread"),
        (b"lru_crawler disable", b"OK"),
        (b"lru_crawler metadump all", b"CLIENT_ERROR lru crawler disabled"),
        (b"lru_crawler crawl all", b"CLIENT_ERROR lru crawler disabled"),
        (b"lru_crawler enable", b"OK"),
        (b"stats cachedump 1", b"CLIENT_ERROR bad command line"),
        (b"stats cachedump 1 x", b"CLIENT_ERROR bad command line format"),
        (b"stats cachedump 200 0", b"CLIENT_ERROR Illegal slab id"),
    ]
    for cmd, answer in want:
        # "crawl all" may report a busy crawler on memcached right after another.
        got = c.line(cmd + b"\r\n").rstrip(b"\r\n")
        if cmd.endswith(b"crawl all") and got.startswith(b"BUSY"):
            continue
        assert got == answer, "%r: %r, memcached answers %r" % (cmd, got, answer)
        if cmd == b"lru_crawler disable":
            time.sleep(0.5)     # memcached stops its thread asynchronously
    st = c.stats(b"settings")
    assert st["lru_crawler_sleep"] == "50" and st["lru_crawler_tocrawl"] == "1000", st
    assert st["lru_crawler"] == "yes" and st["dump_enabled"] == "yes"


def test_disable_dumping_refuses_dumps(server):
    c = server(["-m", "64", "-X"]).connect()
    assert c.line(b"set k 0 0 1\r\nv\r\n") == b"STORED\r\n"
    assert c.line(b"lru_crawler metadump all\r\n") == b"ERROR metadump not allowed\r\n"
    assert c.line(b"stats cachedump 1 0\r\n") == b"CLIENT_ERROR stats cachedump not allowed\r\n"
    assert c.stats(b"settings")["dump_enabled"] == "no"


@pytest.mark.tac_only
def test_memcdump_and_cachedump_list_every_key(three_tiers):
    ds, c = spread_dataset(three_tiers, n=3000)
    out = subprocess.run(["memcdump", "--servers=" + three_tiers.addr],
                         capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr
    listed = out.stdout.split(b"\n")[:-1]
    assert sorted(listed) == sorted(ds.val), "memcdump listed %d keys of %d (%d distinct)" % (
        len(listed), len(ds.val), len(set(listed)))
    # stats cachedump: one class, its lines' sizes and a limit.
    cls = {}
    for f in metadump(c):
        cls.setdefault(int(f[b"cls"]), []).append(f[b"key"])
    big = max(cls, key=lambda k: len(cls[k]))
    raw = c.get(b"stats cachedump %d 0\r\n" % big)
    items = [ln for ln in raw.split(b"\r\n") if ln.startswith(b"ITEM ")]
    assert sorted(ln.split(b" ")[1] for ln in items) == sorted(cls[big])
    for ln in items:
        key, size = ln.split(b" ")[1], int(ln.split(b" ")[2][1:])
        assert size == len(ds.val[key]), ln
    raw = c.get(b"stats cachedump %d 5\r\n" % big)
    assert raw.count(b"ITEM ") == 5 and raw.endswith(b"END\r\n")


@pytest.mark.tac_only
def test_metadump_reads_sealed_keys_with_tier_key(server, tmp_path, shm_file):
    """With -o tier_key a tuple's key is sealed with its value, and its nonce
    lies after the value: a listing reads such an SSD tuple whole, where it
    reads only the first blocks of a clear one.  Every key comes out right."""
    key = tmp_path / "tier.key"
    key.write_bytes(random.SystemRandom().randbytes(32))
    key.chmod(0o600)
    srv = server(["-t", "2", "-m", "16", "-o", "nvm_path=%s:8m,ssd_path=%s:256m,tier_key=%s" % (
        shm_file("dump-sealed"), tmp_path / "ssd.bin", key)])
    ds, c = spread_dataset(srv, n=3000)
    listed = [f[b"key"] for f in metadump(c)]
    assert sorted(listed) == sorted(ds.val), "metadump listed %d keys of %d (%d distinct)" % (
        len(listed), len(ds.val), len(set(listed)))
    out = subprocess.run(["memcdump", "--servers=" + srv.addr], capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split(b"\n")[:-1]) == sorted(ds.val)


@pytest.mark.tac_only
def test_metadump_during_writes_and_resizes(server):
    """The stripe walk under load: keys present through the whole dump are
    listed exactly once, while writers add keys and the hash index grows."""
    srv = server(["-t", "2", "-m", "256", "-o", "hashpower=13"])
    c = srv.connect(timeout=60)
    stable = [b"stable-%032d" % i for i in range(30000)]
    batch = b"".join(b"set %s 0 0 8 noreply\r\n%08x\r\n" % (k, zlib.crc32(k)) for k in stable)
    c.send(batch + b"mn\r\n")
    assert recv_until(c.sock, b"MN\r\n", timeout=60) == b"MN\r\n"
    stop = threading.Event()
    errors = []

    def writer(tag):
        w = srv.connect(timeout=60)
        i = 0
        try:
            while not stop.is_set() and i < 200000:
                chunk = b"".join(b"set churn-%s-%09d 0 0 4 noreply\r\nabcd\r\n" % (tag, i + j)
                                 for j in range(500))
                w.send(chunk + b"mn\r\n")
                if recv_until(w.sock, b"MN\r\n", timeout=60) != b"MN\r\n":
                    errors.append("writer %s: bad answer" % tag)
                    return
                i += 500
        except Exception as e:      # reported below
            errors.append("writer %s: %r" % (tag, e))

    threads = [threading.Thread(target=writer, args=(t,)) for t in (b"a", b"b")]
    for t in threads:
        t.start()
    try:
        # Dumps back to back for as long as the writers grow the table: the
        # table's growth over that span happens while some dump walks it.
        dumps, deadline = 0, time.time() + 30
        first = int(c.stats()["hash_power_level"])
        while dumps < 3 or (any(t.is_alive() for t in threads) and time.time() < deadline):
            dumps += 1
            lines = metadump(c)
            seen = {}
            for f in lines:
                seen[f[b"key"]] = seen.get(f[b"key"], 0) + 1
            twice = [k for k, n in seen.items() if n > 1]
            missing = [k for k in stable if k not in seen]
            assert not twice, "%d keys dumped twice, e.g. %r" % (len(twice), twice[:3])
            assert not missing, "%d stable keys missing, e.g. %r" % (len(missing), missing[:3])
        resizes = int(c.stats()["hash_power_level"]) - first
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors, errors
    print("hash power grew by %d during %d dumps" % (resizes, dumps))
    assert resizes > 0 or IS_STOCK, "no resize happened during the dumps: the test proved little"
