"""Operator commands beyond the data path: cache_memlimit and lru.

Tests without the tac_only marker pass against stock memcached too
(TAC_SERVER=/usr/bin/memcached)."""
import time
import zlib

import pytest

from mcserver import is_closed, recv_exact, recv_for, recv_until

MB = 1 << 20


def value_of(key, size):
    head = b"%s|%08x|" % (key, zlib.crc32(key))
    return (head * (size // len(head) + 1))[:size]


def load(c, keys, size):
    for i in range(0, len(keys), 200):
        c.send(b"".join(b"set %s 0 0 %d noreply\r\n%s\r\n" % (k, size, value_of(k, size))
                        for k in keys[i:i + 200]) + b"mn\r\n")
        assert recv_until(c.sock, b"MN\r\n", timeout=60) == b"MN\r\n"


def check_values(c, keys, size):
    """Every hit holds its own value; returns the number of hits."""
    hits = 0
    for i in range(0, len(keys), 100):
        raw = c.req(b"get " + b" ".join(keys[i:i + 100]) + b"\r\n", b"END\r\n", timeout=60)
        pos = 0
        while raw.startswith(b"VALUE ", pos):
            eol = raw.index(b"\r\n", pos)
            _, k, _, n = raw[pos:eol].split(b" ")
            n = int(n)
            assert raw[eol + 2:eol + 2 + n] == value_of(k, size), "%r: wrong value" % k
            pos = eol + 4 + n
            hits += 1
        assert raw[pos:] == b"END\r\n", raw[pos:pos + 100]
    return hits


def wait_malloced(c, most, timeout=30.0):
    deadline = time.time() + timeout
    while True:
        got = int(c.stats(b"slabs")["total_malloced"])
        if got <= most or time.time() > deadline:
            return got
        time.sleep(0.2)


def test_cache_memlimit_answers(server):
    c = server(["-m", "64"]).connect()
    for cmd, want in [
        (b"cache_memlimit 7", b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m"),
        (b"cache_memlimit 2000000000", b"MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes"),
        (b"cache_memlimit x", b"ERROR"),
        (b"cache_memlimit 128", b"OK"),
        (b"cache_memlimit 32", b"OK"),
    ]:
        assert c.line(cmd + b"\r\n") == want + b"\r\n", cmd
    assert c.line(b"cache_memlimit 48 noreply\r\nmn\r\n") == b"MN\r\n"


@pytest.mark.tac_only
def test_cache_memlimit_refused_with_preallocation(server):
    c = server(["-m", "64", "-L"]).connect()
    assert c.line(b"cache_memlimit 32\r\n") == \
        b"MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n"


@pytest.mark.tac_only
def test_cache_memlimit_shrinks_and_grows_dram(server):
    """DRAM only: a lower limit gives pages back (items evicted, every hit
    right); a higher one lets the cache grow past the old -m."""
    c = server(["-m", "64"]).connect(timeout=60)
    size = 2000
    keys = [b"memlimit-key-%030d" % i for i in range(40000)]       # ~80 MB
    load(c, keys, size)
    before = int(c.stats(b"slabs")["total_malloced"])
    assert before > 48 * MB, before
    assert c.line(b"cache_memlimit 24\r\n") == b"OK\r\n"
    got = wait_malloced(c, 26 * MB)
    assert got <= 26 * MB, "total_malloced %d MB 30 s after cache_memlimit 24" % (got >> 20)
    hits = check_values(c, keys, size)
    assert 0 < hits < len(keys) // 2, hits
    assert c.line(b"cache_memlimit 128\r\n") == b"OK\r\n"
    load(c, keys, size)
    grown = int(c.stats(b"slabs")["total_malloced"])
    assert grown > 66 * MB, "total_malloced %d MB after cache_memlimit 128 and 80 MB of sets" % (
        grown >> 20)
    assert check_values(c, keys, size) > len(keys) * 3 // 4


@pytest.mark.tac_only
def test_cache_memlimit_moves_items_down_a_tier(server, shm_file):
    """With an NVM tier, lowering DRAM's limit moves items down: none is lost."""
    nvm = shm_file("memlimit")
    c = server(["-t", "2", "-m", "64", "-o", "nvm_path=%s:128m" % nvm]).connect(timeout=60)
    size = 1500
    keys = [b"memlimit-tier-%030d" % i for i in range(20000)]   # ~30 MB
    load(c, keys, size)
    assert c.line(b"cache_memlimit 16\r\n") == b"OK\r\n"
    got = wait_malloced(c, 18 * MB)
    assert got <= 18 * MB, "total_malloced %d MB 30 s after cache_memlimit 16" % (got >> 20)
    assert check_values(c, keys, size) == len(keys)
    nvm_items = int(c.stats(b"tiers")["nvm_items"])
    assert nvm_items > len(keys) // 2, nvm_items


BIN_VERSION = bytes([0x80, 0x0b, 0, 0, 0, 0, 0, 0]) + bytes(16)     # binary "version"


def test_protocol_binary_only(server):
    srv = server(["-m", "64", "-B", "binary"])
    c = srv.connect()
    c.send(BIN_VERSION)
    head = c.exact(b"", 24)
    assert head[0] == 0x81 and head[1] == 0x0b, head
    c.exact(b"", int.from_bytes(head[8:12], "big"))
    # Text of a header's length or more: the connection is closed.
    t = srv.connect()
    t.send(b"get foo\r\nget bar\r\nget baz\r\n")
    assert is_closed(t.sock), "text to a -B binary server must close the connection"


@pytest.mark.tac_only
def test_protocol_binary_only_closes_on_short_text(server):
    """A short text command to -B binary is closed at once, not left waiting
    for a 24-byte header; `stats settings` says binary."""
    srv = server(["-m", "64", "-B", "binary"])
    t = srv.connect()
    t.send(b"get foo\r\n")
    assert is_closed(t.sock, timeout=3.0)
    a = server(["-m", "64", "-B", "ascii"]).connect()
    assert a.stats(b"settings")["binding_protocol"] == "ascii"


def test_protocol_ascii_only(server):
    srv = server(["-m", "64", "-B", "ascii"])
    c = srv.connect()
    assert c.line(b"set k 0 0 1\r\nv\r\n") == b"STORED\r\n"
    assert c.stats(b"settings")["binding_protocol"] == "ascii"
    b = srv.connect()
    b.send(BIN_VERSION)
    got = recv_for(b.sock, 0.5)
    assert not got.startswith(b"\x81"), "a -B ascii server answered binary: %r" % got[:30]


def detail_dump(c):
    raw = c.req(b"stats detail dump\r\n", b"END\r\n")
    out = {}
    for ln in raw.split(b"\r\n"):
        if ln.startswith(b"PREFIX "):
            w = ln.split(b" ")
            out[w[1]] = {w[i]: int(w[i + 1]) for i in range(2, len(w), 2)}
    return out


def test_stats_detail_counts_per_prefix(server):
    c = server(["-m", "64"]).connect()
    assert c.line(b"stats detail on\r\n") == b"OK\r\n"
    assert c.stats(b"settings")["detail_enabled"] == "yes"
    for i in range(5):
        assert c.line(b"set user:%d 0 0 1\r\nv\r\n" % i) == b"STORED\r\n"
    assert c.line(b"set sess:1 0 0 1\r\nv\r\n") == b"STORED\r\n"
    assert c.line(b"set nodelimiter 0 0 1\r\nv\r\n") == b"STORED\r\n"
    c.get(b"get user:1 user:2 user:99\r\n")
    c.get(b"get sess:1\r\n")
    assert c.line(b"delete user:3\r\n") == b"DELETED\r\n"
    assert c.line(b"delete sess:7\r\n") == b"NOT_FOUND\r\n"
    d = detail_dump(c)
    assert d[b"user"] == {b"get": 3, b"hit": 2, b"set": 5, b"del": 1}, d
    assert d[b"sess"] == {b"get": 1, b"hit": 1, b"set": 1, b"del": 1}, d
    assert set(d) == {b"user", b"sess"}, d
    assert c.line(b"stats detail off\r\n") == b"OK\r\n"
    c.get(b"get user:1\r\n")
    assert detail_dump(c)[b"user"][b"get"] == 3
    assert c.line(b"stats detail bogus\r\n") == b"CLIENT_ERROR usage: stats detail on|off|dump\r\n"
    # `stats reset` empties the dump, as in memcached; counting starts again from 0
    assert c.line(b"stats reset\r\n") == b"RESET\r\n"
    assert detail_dump(c) == {}
    assert c.line(b"stats detail on\r\n") == b"OK\r\n"
    c.get(b"get user:1\r\n")
    assert detail_dump(c) == {b"user": {b"get": 1, b"hit": 1, b"set": 0, b"del": 0}}


def test_stats_detail_delimiter_option(server):
    c = server(["-m", "64", "-D", "/"]).connect()
    assert c.line(b"stats detail on\r\n") == b"OK\r\n"
    assert c.line(b"set a/b 0 0 1\r\nv\r\n") == b"STORED\r\n"
    assert c.line(b"set a:b 0 0 1\r\nv\r\n") == b"STORED\r\n"
    assert set(detail_dump(c)) == {b"a"}


def bin_stat(c, key):
    """Sends a binary STAT request for `key`; returns [(key, value)] until the terminator."""
    c.send(bytes([0x80, 0x10]) + len(key).to_bytes(2, "big") + bytes(4) +
           len(key).to_bytes(4, "big") + bytes(12) + key)
    out = []
    while True:
        h = recv_exact(c.sock, 24)
        assert h[0] == 0x81 and h[1] == 0x10, h
        status = int.from_bytes(h[6:8], "big")
        klen, blen = int.from_bytes(h[2:4], "big"), int.from_bytes(h[8:12], "big")
        body = recv_exact(c.sock, blen) if blen else b""
        if status != 0:
            return status
        if klen == 0:
            return out
        out.append((body[:klen], body[klen:]))


def test_stats_detail_binary(server):
    srv = server(["-m", "64"])
    c, t = srv.connect(), srv.connect()      # a connection speaks one protocol
    assert bin_stat(c, b"detail on") == []
    assert t.line(b"set p:1 0 0 1\r\nv\r\n") == b"STORED\r\n"
    got = bin_stat(c, b"detail dump")
    assert got == [(b"detailed", b"PREFIX p get 0 hit 0 set 1 del 0\r\nEND\r\n")], got
    assert bin_stat(c, b"detail bogus") == 1        # key not found


EXTSTORE_NAMES = ["extstore_pages_used", "extstore_pages_free", "extstore_page_reclaims",
                  "extstore_objects_used", "extstore_objects_read", "extstore_bytes_used",
                  "extstore_bytes_written", "extstore_bytes_read", "extstore_bytes_fragmented",
                  "extstore_limit_maxbytes", "extstore_io_queue"]


def test_extstore_stats_names(server, tmp_path):
    """memcached's extstore command line works, and `stats` carries its
    extstore_* names (tac-memcached: the SSD tier's counters)."""
    path = str(tmp_path / "ext.dat")
    srv = server(["-m", "64", "-o", "ext_page_size=8,ext_wbuf_size=2,ext_path=%s:64m" % path])
    st = srv.connect().stats()
    missing = [n for n in EXTSTORE_NAMES if n not in st]
    assert not missing, missing
    # The pages' bytes: the whole file, or (tac-memcached) less its header.
    assert 48 * MB <= int(st["extstore_limit_maxbytes"]) <= 64 * MB, st["extstore_limit_maxbytes"]


@pytest.mark.tac_only
def test_extstore_stats_follow_the_ssd_tier(server, tmp_path):
    path = str(tmp_path / "ssd.dat")
    srv = server(["-m", "16", "-o", "ssd_path=%s:256m,ssd_page_size=8m" % path])
    c = srv.connect(timeout=60)
    keys = [b"ext-%06d" % i for i in range(20000)]          # 40 MB
    load(c, keys, 2000)
    deadline = time.time() + 20
    while int(c.stats()["extstore_objects_used"]) == 0 and time.time() < deadline:
        time.sleep(0.2)
    assert check_values(c, keys[:2000], 2000) == 2000
    st, t = c.stats(), c.stats(b"tiers")
    assert int(st["extstore_objects_used"]) > 0 and int(st["extstore_bytes_written"]) > 0
    assert int(st["extstore_objects_read"]) > 0, st
    pages = int(t["ssd_pages_total"])
    assert int(st["extstore_pages_used"]) + int(st["extstore_pages_free"]) == pages
    assert int(st["extstore_limit_maxbytes"]) == int(t["ssd_capacity"])
    ext = c.stats(b"extstore")
    assert len(ext) == 4 * pages, len(ext)
    used = [p for p in range(pages) if ext["%d:version" % p] != "0"]
    assert abs(len(used) - int(st["extstore_pages_used"])) <= 1, (used, st["extstore_pages_used"])
    live = sum(int(ext["%d:bytes" % p]) for p in range(pages))
    assert abs(live - int(t["ssd_live_bytes"])) <= 4 * MB, (live, t["ssd_live_bytes"])


def test_stats_conns_listen_addr(server, tmp_path):
    srv = server(["-m", "64"])
    c = srv.connect()
    port = c.sock.getsockname()[1]
    st = c.stats(b"conns")
    fd = [k.split(":")[0] for k, v in st.items() if k.endswith(":addr") and v.endswith(":%d" % port)]
    assert fd, st
    assert st[fd[0] + ":listen_addr"] == "tcp:127.0.0.1:%d" % srv.port, st
    path = str(tmp_path / "mc.sock")
    u = server(["-m", "64"], unix=path).connect()
    st = u.stats(b"conns")
    assert "unix:" + path in [v for k, v in st.items() if k.endswith(":listen_addr")], st
