"""DRAM that holds nothing but meta tuples: the index is full.

Each SSD item keeps a 56-byte meta tuple in DRAM, so small values on a
large SSD fill -m with meta tuples long before the SSD fills.  Then no
item can move down (its meta tuple finds no chunk) and a set has nowhere
to go.  A cache drops its oldest data: the SSD tier drops its oldest page
(`ssd_index_drops`), whose items' meta tuples make room, as when the SSD
is full.  Before, every store waited out `store_wait_ms` and was answered
SERVER_ERROR out of memory, a few sets a second.  With -M nothing is
dropped and a store that finds no room is refused.
"""
import os
import zlib

import pytest

from mcserver import recv_until

pytestmark = pytest.mark.tac_only

M_MB = 8
N_KEYS = 360000         # about 2.5 times what 8 MB of 56-byte meta tuples index


def key_of(i):
    return b"index-full:%08d:%s" % (i, b"k" * (i % 29))     # 28-56 B


def value_of(key):
    body = (b"%s|" % key) * 4
    body = body[:90]
    return body + b"|%08x" % zlib.crc32(body)


def load(c, keys, batch=500):
    """Pipelined sets; {reply: count} of the replies."""
    replies = {}
    for b0 in range(0, len(keys), batch):
        chunk = keys[b0:b0 + batch]
        c.send(b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(value_of(k)), value_of(k)) for k in chunk))
        got = b""
        while got.count(b"\r\n") < len(chunk):
            got += recv_until(c.sock, b"\r\n", timeout=60)
        for ln in got.split(b"\r\n")[:len(chunk)]:
            replies[ln] = replies.get(ln, 0) + 1
    return replies


def hits(c, keys, batch=100):
    """{key: value} of the keys that hit."""
    out = {}
    for b0 in range(0, len(keys), batch):
        raw = c.get(b"get %s\r\n" % b" ".join(keys[b0:b0 + batch]), timeout=60)
        pos = 0
        while not raw.startswith(b"END\r\n", pos):
            eol = raw.index(b"\r\n", pos)
            _v, key, _f, n = raw[pos:eol].split(b" ")
            out[key] = raw[eol + 2:eol + 2 + int(n)]
            pos = eol + 4 + int(n)
    return out


def index_server(server, tmp_path, extra=()):
    ssd = os.path.join(str(tmp_path), "ssd.bin")
    # 1.25 MB pages: a drop frees about 10,000 meta tuples of -m's 150,000.
    return server(["-m", str(M_MB), "-t", "2"] + list(extra) +
                  ["-o", "ssd_path=%s:256m,ssd_page_size=%d,store_wait_ms=300" % (ssd, 5 << 18)])


def test_full_index_drops_the_oldest_ssd_page(server, tmp_path):
    srv = index_server(server, tmp_path)
    c = srv.connect()
    keys = [key_of(i) for i in range(N_KEYS)]
    replies = load(c, keys)
    assert replies == {b"STORED": N_KEYS}, {k: v for k, v in replies.items()}
    st = {**c.stats(b"tiers"), **c.stats(b"tac"), **c.stats()}
    print({k: st[k] for k in ("ssd_index_drops", "ssd_pages_dropped", "ssd_items", "curr_items",
                              "store_wait_timeouts", "ssd_pages_used", "ssd_pages_total")})
    assert int(st["ssd_index_drops"]) > 0, st
    assert int(st["store_wait_timeouts"]) == 0 and int(st["store_no_memory"]) == 0
    # The SSD itself never filled: the drops were for the index alone.
    assert int(st["ssd_pages_used"]) < int(st["ssd_pages_total"]) // 2, st
    # The newest keys are all there and exact; the oldest were dropped.
    newest = keys[-40000:]
    got = hits(c, newest)
    wrong = [k for k, v in got.items() if v != value_of(k)]
    assert not wrong, wrong[:3]
    assert len(got) == len(newest), "%d of the newest %d keys miss" % (len(newest) - len(got), len(newest))
    assert not hits(c, keys[:5000]), "the oldest keys should have been dropped with their pages"
    # Bounded by what -m indexes (with the slab slack past -m), not by the SSD.
    assert int(st["curr_items"]) < 2 * (M_MB << 20) // 56, st["curr_items"]
    log = srv.stderr_text()
    assert log.count("meta tuples fill -m") == 1, log[-2000:]


def test_full_index_with_dash_M_refuses_and_drops_nothing(server, tmp_path):
    srv = index_server(server, tmp_path, extra=["-M"])
    c = srv.connect()
    keys = [key_of(i) for i in range(N_KEYS)]
    replies = load(c, keys)
    stored = replies.get(b"STORED", 0)
    assert stored > 100000, replies
    assert set(replies) <= {b"STORED", b"SERVER_ERROR out of memory storing object"}, replies
    assert replies.get(b"SERVER_ERROR out of memory storing object", 0) > 0, replies
    st = c.stats(b"tiers")
    assert int(st["ssd_index_drops"]) == 0 and int(st["ssd_pages_dropped"]) == 0, st
    # Every stored key is kept.
    got = hits(c, keys[:20000])
    assert len(got) == 20000 and all(v == value_of(k) for k, v in got.items())
