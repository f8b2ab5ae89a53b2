"""With -M nothing stored is dropped, large items included.

Items of 256 KB to 1 MB are larger than an SSD write buf (256 KB); each
takes a buf of its own spanning several buf slots of one SSD page.  They
move through all three tiers like small ones: DRAM, then NVM, then SSD.
Under -M the server may refuse a set only once every tier is full, and
never loses an item it stored.
"""
import os
import random
import re
import shutil
import tempfile
import uuid
import zlib

import pytest

from mcserver import IS_STOCK

pytestmark = [pytest.mark.tac_only, pytest.mark.skipif(IS_STOCK, reason="tac-only")]

KB = 1024
MB = 1024 * KB


def value_of(key, ver, size):
    """A value naming its key and version, ending in a checksum."""
    head = b"%s|%d|" % (key, ver)
    pad = (b"%08x" % zlib.crc32(head)) * (size // 8 + 1)
    pad = pad[:size - len(head) - 9]
    return head + pad + b"|%08x" % zlib.crc32(head + pad)


def tier_of(c, key):
    r = c.line(b"me %s\r\n" % key)
    m = re.search(rb" tier=(\w+)\r\n$", r)
    assert m, "me %r: %r" % (key, r)
    return m.group(1).decode()


def test_M_large_items_reach_every_tier_and_are_never_lost(server):
    d = tempfile.mkdtemp(prefix="tac-large-")
    nvm = "/dev/shm/tac-large-%s" % uuid.uuid4().hex[:10]
    rnd = random.Random(1616)
    try:
        # 8 MB DRAM, 16 MB NVM, 48 MB SSD (6 pages of 8 MB): about 70 MB in
        # all, filled with 100 MB of 256 KB-1 MB items.
        srv = server(["-M", "-m", "8", "-I", "2m", "-o",
                      "nvm_path=%s:16m,ssd_path=%s/ssd:48m,ssd_free_pages=2" % (nvm, d)])
        c = srv.connect()
        stored, refused, first_refusal = {}, 0, None
        total = 0
        i = 0
        while total < 100 * MB:
            k = b"large-%05d-%s" % (i, b"k" * 30)
            size = rnd.randint(256 * KB, MB)
            v = value_of(k, i, size)
            r = c.line(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v), timeout=30)
            if r == b"STORED\r\n":
                stored[k] = v
            else:
                assert r.startswith(b"SERVER_ERROR out of memory"), r
                refused += 1
                if first_refusal is None:
                    first_refusal = c.stats(b"tiers")
            total += size
            i += 1
        st = c.stats(b"tiers")
        print("stored %d, refused %d, large bufs %s, ssd_items %s, nvm_items %s"
              % (len(stored), refused, st["ssd_large_bufs"], st["ssd_items"], st["nvm_items"]))
        # Every tier holds large items.
        tiers = {}
        for k in list(stored)[::5]:
            t = tier_of(c, k)
            tiers[t] = tiers.get(t, 0) + 1
        print("tiers of a sample:", tiers)
        assert tiers.get("ssd", 0) > 0 and tiers.get("nvm", 0) > 0 and tiers.get("dram", 0) > 0, tiers
        assert int(st["ssd_large_bufs"]) > 0
        # Refusals come only once all tiers are full: the SSD was nearly
        # all live data (defrag could win nothing) at the first one.
        assert refused > 0, "the tiers never filled: the test proves nothing"
        cap = int(first_refusal["ssd_capacity"])
        live = int(first_refusal["ssd_live_bytes"])
        assert live >= cap * 0.6, "refused with SSD %d of %d bytes live" % (live, cap)
        # Nothing stored is lost, and every value is exact.
        for k, v in stored.items():
            got = c.get(b"get %s\r\n" % k, timeout=30)
            assert got == b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (k, len(v), v), \
                "large item %r lost or wrong under -M" % k
        st = c.stats()
        assert st["evictions"] == "0"
        assert c.stats(b"tiers")["tuple_checksum_failures"] == "0"
    finally:
        shutil.rmtree(d, ignore_errors=True)
        if os.path.exists(nvm):
            os.unlink(nvm)


def test_large_items_reach_ssd_without_M(server):
    """A cache without -M moves large items down too, instead of dropping
    them: with room on SSD nothing is evicted or refused."""
    d = tempfile.mkdtemp(prefix="tac-large-")
    try:
        _large_without_m(server, d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _large_without_m(server, d):
    if True:
        srv = server(["-m", "8", "-I", "2m", "-o", "ssd_path=%s/ssd:128m" % d])
        c = srv.connect()
        rnd = random.Random(77)
        items = {}
        for i in range(60):
            k = b"big-%03d-%s" % (i, b"x" * 40)
            v = value_of(k, 1, rnd.randint(300 * KB, 1900 * KB))
            assert c.line(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v), timeout=30) == b"STORED\r\n"
            items[k] = v
        for k, v in items.items():
            assert c.get(b"get %s\r\n" % k, timeout=30) == \
                b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (k, len(v), v)
        st = c.stats()
        assert st["evictions"] == "0"
        assert int(c.stats(b"tiers")["ssd_large_bufs"]) > 0
