"""SSD write failures: an acknowledged set is never lost.

A file-size limit put on the running server (prlimit --fsize) makes every
SSD buf write beyond the first page fail with EFBIG, as a failing device
would.  The server must keep those bufs in memory, serve their tuples from
there, retry the writes, and (with -M) refuse new sets with SERVER_ERROR
once the failed bufs reach their bound, rather than lose anything.  When the limit is lifted the
retried writes succeed and every acknowledged value still reads back byte
for byte.  Runs on both I/O engines.
"""
import os
import shutil
import subprocess
import tempfile
import time
import zlib

import pytest
from pymemcache.client.base import Client

from mcserver import IS_STOCK

pytestmark = [pytest.mark.tac_only,
              pytest.mark.skipif(IS_STOCK, reason="tac-only behaviour; TAC_SERVER is stock memcached"),
              pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")]

MB = 1 << 20
HEADER = 8192           # the SSD file's two header blocks; pages follow them
PAGE = 1 * MB


def value_of(key, ver):
    pad = (b"%08x" % zlib.crc32(key)) * 500            # 4000 bytes
    return b"%s|%d|%08x|%s" % (key, ver, zlib.crc32(key + b"|%d|" % ver + pad), pad)


def tiers(c):
    return {k.decode(): v for k, v in c.stats(b"tiers").items() if isinstance(v, int)}


def set_limit(pid, spec):
    subprocess.run(["prlimit", "--pid", str(pid), "--fsize=" + spec], check=True)


@pytest.fixture
def ssd_dir():
    d = tempfile.mkdtemp(prefix="tac-ssd-fault-", dir=os.environ.get("TAC_SSD_DIR") or None)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.parametrize("engine", ["uring", "threads"])
def test_failed_writes_lose_nothing(server, ssd_dir, engine):
    # -M: a full SSD refuses sets instead of dropping its oldest page, so
    # every acknowledged key must stay readable.
    srv = server(["-m", "16", "-M", "-o", "ssd_path=%s/ssd:32m,ssd_page_size=1m,ssd_buf_size=128k,"
                                    "ssd_io_engine=%s" % (ssd_dir, engine)])
    # Page 0 stays writable, every later offset fails.
    set_limit(srv.proc.pid, "%d:" % (HEADER + PAGE))
    c = Client(srv.addr, timeout=10)
    acked = {}
    refused = 0
    for i in range(12000):
        key = b"f%05d" % i
        v = value_of(key, 1)
        for _ in range(10):
            try:
                c.set(key, v, noreply=False)
                acked[key] = v
                break
            except Exception as e:        # SERVER_ERROR out of memory: SSD full
                assert b"out of memory" in str(e).encode(), e
                time.sleep(0.005)
        else:
            refused += 1
        if refused > 20:
            break
    st = tiers(c)
    assert st["ssd_io_errors"] > 0, st
    assert refused > 0, "the SSD never filled: the test proves nothing"
    assert st["ssd_items_dropped"] == 0 and st["evictions"] == 0, st
    # The refusals come from an SSD that cannot be written, holding as many
    # failed bufs as it may (-M: nothing dropped), after items reached it.
    assert st["ssd_write_failing"] == 1, st
    # (one buf may be out for its retry when the stats are read)
    assert st["ssd_failed_bytes"] + 128 * 1024 >= st["ssd_failed_bytes_max"], st
    assert st["evict_dram_to_ssd"] + st["set_fallback_ssd"] > 0, st
    # Every acknowledged value is there, served from DRAM or from unwritten bufs.
    keys = list(acked)
    for j in range(0, len(keys), 50):
        got = c.get_many(keys[j:j + 50])
        for k in keys[j:j + 50]:
            assert got.get(k) == acked[k], "key %r lost or wrong while SSD writes fail" % k
    time.sleep(0.3)
    assert tiers(c)["ssd_write_retries"] > 0

    # Lift the limit: the retried writes now succeed.
    set_limit(srv.proc.pid, "unlimited:")
    written = st["ssd_bufs_written"]
    deadline = time.time() + 20
    while time.time() < deadline:
        st = tiers(c)
        if st["ssd_bufs_written"] > written + 10 and st["ssd_writes_inflight"] == 0:
            break
        time.sleep(0.2)
    assert st["ssd_bufs_written"] > written, st
    # The SSD is still full (-M keeps everything): deleting half the keys
    # frees pages, after which sets are accepted again.
    for k in list(acked)[::2]:
        assert c.delete(k, noreply=False)
        del acked[k]
    for i in range(300):
        key = b"g%05d" % i
        v = value_of(key, 2)
        for _ in range(400):
            try:
                c.set(key, v, noreply=False)
                break
            except Exception as e:
                assert b"out of memory" in str(e).encode(), e
                time.sleep(0.01)
        else:
            raise AssertionError("sets still refused after half the keys were deleted: %r" % tiers(c))
        acked[key] = v
    keys = list(acked)
    for j in range(0, len(keys), 50):
        got = c.get_many(keys[j:j + 50])
        for k in keys[j:j + 50]:
            assert got.get(k) == acked[k], "key %r lost or wrong after the writes recovered" % k
    assert tiers(c)["get_hits_ssd"] > 0
