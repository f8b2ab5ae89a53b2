"""Temperature thresholds set by the sampler (TaC 4.3).

With a lower tier the maintainer samples the access fields of random items
every -o temp_sample_interval seconds and sets THR_hot / THR_warm so that
about as many sampled items are hot as DRAM holds, and as many warm or hot
as DRAM and NVM hold.  `stats temperature` shows the thresholds and the
last samples; `stats tiers` shows the thresholds too.
"""
import os
import time

import pytest
from pymemcache.client.base import Client

from mcserver import IS_STOCK, remove_tier_file

pytestmark = [pytest.mark.tac_only,
              pytest.mark.skipif(IS_STOCK, reason="tac-only behaviour; TAC_SERVER is stock memcached")]


def stats(c, sub):
    return {k.decode(): (v.decode() if isinstance(v, bytes) else v) for k, v in c.stats(sub).items()}


def test_sampler_sets_thresholds(server):
    nvm = "/dev/shm/tac-temp-%d" % os.getpid()
    srv = server(["-m", "8", "-o", "nvm_path=%s:64m,temp_sample_interval=1,temp_sample_size=500" % nvm])
    try:
        c = Client(srv.addr, timeout=10)
        value = b"v" * 2000
        keys = [b"t%05d" % i for i in range(12000)]          # ~24 MB: 3x DRAM
        for k in keys:
            c.set(k, value)
        hot = keys[-300:]                                    # read again and again
        deadline = time.time() + 8
        st = {}
        while time.time() < deadline:
            for _ in range(5):
                got = c.get_many(hot)
                assert len(got) == len(hot)
            st = stats(c, b"temperature")
            if int(st["samples"]) >= 2:
                break
        assert int(st["samples"]) >= 2, st
        thr_hot, thr_warm = int(st["thr_hot"]), int(st["thr_warm"])
        assert 1 <= thr_hot <= 127 and 0 <= thr_warm < thr_hot, st
        tiers = stats(c, b"tiers")
        assert int(tiers["thr_hot"]) == thr_hot and int(tiers["thr_warm"]) == thr_warm
        # The newest sample: thresholds as set, and the shares they follow.
        s0 = {f: int(st["sample:0:" + f]) for f in
              ("time", "sampled", "hot", "warm", "dram_pct", "nvm_pct", "hot_pct", "warm_pct")}
        assert s0["sampled"] >= 100, s0
        assert (s0["hot"], s0["warm"]) == (thr_hot, thr_warm), (s0, st)
        assert 0 < s0["dram_pct"] < 100 and s0["nvm_pct"] > 0, s0   # the data spans two tiers
        # As many hot items as DRAM holds, as many warm or hot as DRAM+NVM.
        assert s0["hot_pct"] <= s0["dram_pct"] + 1, s0
        assert s0["warm_pct"] <= s0["dram_pct"] + s0["nvm_pct"] + 1, s0
        settings = stats(c, b"settings")
        assert str(settings["temp_sample_interval"]) == "1" and str(settings["temp_sample_size"]) == "500"
    finally:
        remove_tier_file(nvm)


def test_no_sampling_without_a_lower_tier(server):
    srv = server(["-m", "8", "-o", "temp_sample_interval=1"])
    c = Client(srv.addr, timeout=10)
    for i in range(100):
        c.set(b"d%d" % i, b"x")
    time.sleep(1.5)
    st = stats(c, b"temperature")
    assert int(st["samples"]) == 0, st
    assert (int(st["thr_hot"]), int(st["thr_warm"])) == (4, 1), st    # the defaults
