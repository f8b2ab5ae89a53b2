"""Block packing on the SSD tier: a tuple of at most 4 KiB that would cross a
4 KiB block boundary with less than 1 KiB left before it starts at the next
block instead (ssd/ssd.h, SSD_PAD_MAX), so a read of it reads one block.

Small values (100-500 B, 30-60 B keys) pushed down past NVM into SSD, then
read back: every device read must be exactly one block, every value
byte-exact, and `ssd_pad_bytes` must show the padding, within its 1/8
bound.  A SIGKILL then makes the restart walk the padded bufs (crash
recovery reads them tuple by tuple): every hit exact and nearly all lower
items back, as test_crash's idle kill expects (with io_uring; the walk is
the same with the thread pool).
"""
import time

import pytest

from test_crash import IDLE_WAIT, crash_seed, kill_idle_and_restart, lower_count
from test_restart import DataSet, gets_all, graceful_stop, load, tier_files  # noqa: F401 (fixture)

pytestmark = pytest.mark.tac_only

M_MB = 6
BLOCK = 4096


def tier_ints(c, *names):
    st = c.stats(b"tiers")
    return [int(st[n]) for n in names]


@pytest.mark.parametrize("engine", ["uring", "threads"])
def test_small_values_read_one_block_each(server, tier_files, engine):
    seed = crash_seed()
    nvm, ssd = tier_files()
    args = ["-t", "2", "-m", str(M_MB), "-o",
            "nvm_path=%s:4m,ssd_path=%s:128m,ssd_io_engine=%s" % (nvm, ssd, engine)]
    ds = DataSet(seed, 64000, 100, 500)
    srv = server(args)
    load(srv, ds, ds.keys)
    c = srv.connect()
    time.sleep(IDLE_WAIT)           # the open bufs are written out

    names = ("ssd_reads", "ssd_reads_mem", "ssd_bytes_read", "ssd_pad_bytes", "ssd_bytes_written")
    reads0, mem0, bytes0, _pad, _w = tier_ints(c, *names)
    ds.record(gets_all(c, ds.all_keys()), "reading every key back (%s, seed %d)" % (engine, seed))
    reads1, mem1, bytes1, pad, written = tier_ints(c, *names)
    device = (reads1 - reads0) - (mem1 - mem0)
    print("%s: %d device reads, %d bytes read (%.3f blocks per read); %d B of padding in %d B written (%.1f%%)"
          % (engine, device, bytes1 - bytes0, (bytes1 - bytes0) / max(device, 1) / BLOCK, pad, written,
             100.0 * pad / max(written, 1)))
    assert device >= 10000, "only %d device reads: the data set must sit mostly on SSD (seed %d)" % (device, seed)
    # Tuples of 170-640 B: packed, each lies in one block.  Without packing
    # about one in ten crossed a boundary and read two.
    assert bytes1 - bytes0 == device * BLOCK, (
        "%d device reads read %d bytes, want one 4 KiB block each (seed %d)" % (device, bytes1 - bytes0, seed))
    assert 0 < pad <= written // 8, "ssd_pad_bytes %d of %d written (seed %d)" % (pad, written, seed)

    if engine == "uring":           # the walk does not depend on the engine
        n_lower = lower_count(c, seed, "before the SIGKILL")
        srv, c = kill_idle_and_restart(server, srv, args, ds, n_lower, "bufs with padding")
    graceful_stop(srv, "SIGTERM")


def test_full_ssd_of_padded_pages_drops_instead_of_repacking(server, tier_files):
    """1 KB values pad up to the 1/8 bound, so a page of live tuples holds
    about 87% live bytes, under ext_max_frag's 0.9.  Defrag must count the
    padding as live: it drops the oldest page when the SSD fills, as for
    unpadded pages, instead of re-packing live pages that a re-pack pads
    just as much (a loop that wins no room)."""
    seed = crash_seed()
    _nvm, ssd = tier_files()
    # 12 pages of 1.25 MB; the data set is about 3x that.
    args = ["-t", "2", "-m", "4", "-o", "ssd_path=%s:15m,ssd_page_size=%d" % (ssd, 5 << 18)]
    ds = DataSet(seed, 42000, 1000, 1100)
    srv = server(args)
    load(srv, ds, ds.keys)
    time.sleep(IDLE_WAIT)
    c = srv.connect()
    st = c.stats(b"tiers")
    print({k: st[k] for k in ("ssd_pad_bytes", "ssd_bytes_written", "ssd_pages_dropped", "ssd_defrag_runs",
                              "ssd_defrag_moved", "ssd_items", "ssd_pages_free")})
    pad, written = int(st["ssd_pad_bytes"]), int(st["ssd_bytes_written"])
    assert pad > written // 10, "1 KB values should pad near the 1/8 bound: %d of %d (seed %d)" % (pad, written, seed)
    assert int(st["ssd_pages_dropped"]) >= 12, st
    # Nothing was overwritten or deleted: room comes from dropped pages.  A
    # re-pack or two of a page that an idle write or an eviction left short
    # happens without padding too; counting padding as dead instead made
    # defrag re-pack live pages without end, and this load stalled.
    runs, dropped = int(st["ssd_defrag_runs"]), int(st["ssd_pages_dropped"])
    assert runs <= dropped // 4, "defrag re-packed %d pages while %d were dropped (seed %d): %s" % (
        runs, dropped, seed, st)
    # Every key still on SSD or above reads back exact.
    found = gets_all(c, ds.all_keys())
    wrong = [k for k, v in found.items() if v[2] != ds.val[k]]
    assert not wrong and len(found) > 10000, "%d hits, %d wrong, e.g. %r (seed %d)" % (
        len(found), len(wrong), wrong[:3], seed)
