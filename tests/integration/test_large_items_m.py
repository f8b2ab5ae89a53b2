"""Items larger than an SSD write buf (256 KB) reach SSD.

Each takes a buf of its own spanning several buf slots of one SSD page.
The -M case (nothing stored is lost, refusals only when every tier is full)
is tests/stress/test_stress_shapes.py::test_large_items_M.
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
