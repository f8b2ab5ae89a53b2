"""With -M nothing stored is dropped, large items included.

A tuple larger than an SSD write buf (ssd_buf_size) cannot go to SSD.  When
NVM runs short and its cold tail moves down, such an item once was evicted
(counted in ssd_too_large) even under -M.  Now it stays in NVM, and a set
that needs its room is refused instead.
"""
import os
import tempfile
import shutil
import uuid
import zlib

import pytest

from mcserver import IS_STOCK

pytestmark = [pytest.mark.tac_only, pytest.mark.skipif(IS_STOCK, reason="tac-only")]

KB = 1024


def value_of(key, size):
    head = b"%s|" % key
    pad = (b"%08x" % zlib.crc32(head)) * (size // 8 + 1)
    pad = pad[:size - len(head) - 9]
    return head + pad + b"|%08x" % zlib.crc32(head + pad)


def test_M_keeps_items_larger_than_a_buf(server):
    d = tempfile.mkdtemp(prefix="tac-large-")
    nvm = "/dev/shm/tac-large-%s" % uuid.uuid4().hex[:10]
    try:
        srv = server(["-M", "-m", "16", "-I", "2m", "-o",
                      "nvm_path=%s:16m,ssd_path=%s/ssd:256m,ssd_buf_size=256k" % (nvm, d)])
        c = srv.connect()
        large = {}
        for i in range(12):
            k = b"large-%02d-%s" % (i, b"k" * 30)
            v = value_of(k, 600 * KB)
            assert c.line(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v)) == b"STORED\r\n"
            large[k] = v
        # Small items push the large ones down to NVM and NVM's tail toward
        # SSD; refusals are allowed (-M) once every tier that can take an
        # item is full, but nothing stored may go.
        small, refused = {}, 0
        for i in range(60000):
            k = b"small-%06d-%s" % (i, b"s" * 24)
            v = value_of(k, 1000)
            r = c.line(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v))
            if r == b"STORED\r\n":
                small[k] = v
            else:
                assert r.startswith(b"SERVER_ERROR out of memory"), r
                refused += 1
        st = c.stats(b"tiers")
        print("ssd_too_large %s, refused %d, nvm_items %s, ssd_items %s"
              % (st["ssd_too_large"], refused, st["nvm_items"], st["ssd_items"]))
        assert int(st["ssd_items"]) > 0, "nothing reached SSD: the test proves nothing"
        assert int(st["ssd_too_large"]) > 0, "no large item was at NVM's tail: the test proves nothing"
        for k, v in large.items():
            assert c.get(b"get %s\r\n" % k) == b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (k, len(v), v), \
                "large item %r lost under -M" % k
        for k, v in list(small.items())[::97]:
            assert c.get(b"get %s\r\n" % k) == b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (k, len(v), v)
        assert st["evictions"] == "0"
    finally:
        shutil.rmtree(d, ignore_errors=True)
        if os.path.exists(nvm):
            os.unlink(nvm)
