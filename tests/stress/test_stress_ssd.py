"""Concurrency stress across DRAM, NVM and SSD; every read is verified.

The workload, value format and checks are those of test_stress_tiers.py (whose
worker, preload and checkers are imported): THREADS client threads run
get/gets/set/delete/touch/gat/gats/incr/decr/append on ~38k keys (~48 MB)
with exact per-owner models.  Here the keys flow DRAM (-m 16) -> NVM (16 MB)
-> SSD (64 MB in 1 MB pages, defrag keeping 20 free, so it runs early), with either I/O engine.
The SSD holds the whole dataset, so nothing may be dropped: an acknowledged
key that misses is "lost".

The preload stores every key twice (in a different random order each time), so
SSD pages are left partly dead and defrag works while the clients run.

Seed: STRESS_SEED (printed).  Duration: STRESS_SECONDS per run (default 20; 10 against a
sanitizer build).
SSD file directory: $TAC_SSD_DIR (default: the system temp dir; must take O_DIRECT).
"""
import os
import random
import shutil
import tempfile
import threading
import time
import uuid

import pytest

import test_stress_tiers as tt
from mcserver import IS_STOCK, STRESS_DEFAULT_SECONDS, remove_tier_file
from test_stress_tiers import COUNTERS, OWNED, SHARED, THREADS, Raw, Shared, preload, worker

pytestmark = [pytest.mark.tac_only,
              pytest.mark.skipif(IS_STOCK, reason="tac-only behaviour; TAC_SERVER is stock memcached")]


@pytest.fixture
def ssd_dir():
    base = os.environ.get("TAC_SSD_DIR") or tempfile.gettempdir()
    d = tempfile.mkdtemp(prefix="tac-stress-ssd-", dir=base)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def nvm_path():
    p = "/dev/shm/tac-stress-ssd-%d-%s" % (os.getpid(), uuid.uuid4().hex[:10])
    yield p
    remove_tier_file(p)


# Every run has fetchers (STRESS_FETCH, default 2), the DRAM and NVM LRU
# threads and the evictors running alongside the 12 client threads.
_FETCH = int(os.environ.get("STRESS_FETCH", "2"))


@pytest.mark.parametrize("engine,fetch", [("uring", _FETCH), ("threads", _FETCH)],
                         ids=["uring", "threads"])
@pytest.mark.tac_only
def test_stress_ssd(server, ssd_dir, nvm_path, engine, fetch):
    ssd = os.path.join(ssd_dir, "ssd")
    # After the preload ~30 of the 63 pages are in use (~28 MB live); keeping 20 free makes defrag
    # start a few MB into the run, while the clients are busy.
    opts = ("nvm_path=%s:16m,ssd_path=%s:64m,ssd_page_size=1m,ssd_buf_size=128k,ssd_free_pages=20,"
            "ssd_io_engine=%s,fetch_threads=%d" % (nvm_path, ssd, engine, fetch))
    srv = server(["-m", "16", "-t", "4", "-o", opts])
    seconds = float(os.environ.get("STRESS_SECONDS", STRESS_DEFAULT_SECONDS))
    seed = int(os.environ.get("STRESS_SEED", random.randrange(1 << 30)))
    print("STRESS_SEED=%d (threads=%d keys=%d seconds=%s opts=%s)"
          % (seed, THREADS, OWNED + SHARED, seconds, opts))
    sh = Shared()
    t0 = time.time()
    preload(srv.port, sh, random.Random(seed ^ 0x5A5A))
    stored = preload(srv.port, sh, random.Random(seed))  # the second version of every key is the model
    c = Raw(srv.port)
    st0 = c.stats(b"tiers")
    c.close()
    print("preload x2: %.1fs; ssd: defrag runs %s, items %s, live bytes %s, pages used %s of %s"
          % (time.time() - t0, st0.get("ssd_defrag_runs"), st0.get("ssd_items"), st0.get("ssd_live_bytes"),
             st0.get("ssd_pages_used"), st0.get("ssd_pages_total")))
    tt.model_ctr.clear()
    for t in range(THREADS):
        sh.models[t] = {b"o%05d" % k: stored[b"o%05d" % k] for k in range(t, OWNED, THREADS)}
        for j in range(COUNTERS):
            key = b"c%d_%d" % (t, j)
            if stored[key] is None:
                pytest.fail("preload could not store counter %r: %s" % (key, sh.bad_replies[:10]))
            tt.model_ctr[key] = 0

    stop = threading.Event()
    ts = [threading.Thread(target=worker, args=(t, srv.port, seed, stop, sh)) for t in range(THREADS)]
    for t in ts:
        t.start()
    deadline = time.time() + seconds
    while time.time() < deadline and srv.alive() and any(t.is_alive() for t in ts):
        time.sleep(0.2)
    stop.set()
    for t in ts:
        t.join(120)
    hung = [i for i, t in enumerate(ts) if t.is_alive()]
    total = sum(sh.ops.values())
    print("ops=%d (%.0f/s) %r refused=%d" % (total, total / seconds, sh.ops, sh.refused))
    assert srv.alive(), "server died (STRESS_SEED=%d)\n%s" % (seed, srv.stderr_text())
    assert not hung, "client threads %r hung (STRESS_SEED=%d)" % (hung, seed)

    st, evictions = tt.final_sweep(srv.port, sh)
    print("stats tiers: %r" % st)
    print("ssd: defrag runs %s (%s after the preload), moved %s, items %s, live %s of %s bytes, get_hits_ssd %s"
          % (st.get("ssd_defrag_runs"), st0.get("ssd_defrag_runs"), st.get("ssd_defrag_moved"), st.get("ssd_items"),
             st.get("ssd_live_bytes"), st.get("ssd_capacity"), st.get("get_hits_ssd")))
    tag = "(STRESS_SEED=%d, opts %s)" % (seed, opts)
    err = srv.stderr_text()
    if err.strip():
        print("---- server stderr ----\n" + err)
    for marker in ("WARNING: ThreadSanitizer", "ERROR: AddressSanitizer", "runtime error:"):
        assert marker not in err, "sanitizer report on the server's stderr %s:\n%s" % (tag, err[:8000])

    def count(lst):
        return sum(sh.kinds.get(id(lst), {}).values())

    assert not sh.errors, "%d WRONG VALUES %s:\n%s\nstats tiers: %r" % (
        count(sh.errors), tag, "\n".join(sh.errors[:20]), st)
    assert not sh.bad_replies, "%d unexpected replies %s, by kind %r; first:\n%s\nstats tiers: %r" % (
        count(sh.bad_replies), tag, sh.kinds.get(id(sh.bad_replies)), "\n".join(sh.bad_replies[:10]), st)
    assert not sh.lost, ("%d acknowledged items lost (the SSD has room for all) %s, by kind %r; first:\n%s\n"
                         "evictions=%s stats tiers: %r") % (
        count(sh.lost), tag, sh.kinds.get(id(sh.lost)), "\n".join(sh.lost[:10]), evictions, st)
    assert total > 1000, "only %d operations in %ss" % (total, seconds)
    assert int(st["ssd_items_dropped"]) == 0 and int(evictions) == 0, (
        "items dropped though the SSD has room for all %s: ssd_items_dropped=%s evictions=%s; stats tiers %r"
        % (tag, st["ssd_items_dropped"], evictions, st))
    assert int(st["ssd_io_errors"]) == 0, st
    assert int(st["evict_nvm_to_ssd"]) > 0, st
    assert int(st["get_hits_ssd"]) > 0, st
    assert int(st["ssd_defrag_runs"]) > 0, "defrag never ran %s; stats tiers %r" % (tag, st)
    assert int(st["ssd_pages_used"]) <= int(st["ssd_pages_total"]), st
    assert int(st["ssd_live_bytes"]) <= int(st["ssd_capacity"]), st
