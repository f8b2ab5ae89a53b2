"""Every name memcached 1.6.18 prints is printed here too, for `stats`, `stats settings`,
`stats items`, `stats slabs`, `stats conns` and `stats sizes`.

The reference is the Debian memcached binary, started by the test beside tac-memcached on
ports of its own, with extstore on (as tac-memcached runs its SSD tier) and the same data
loaded into both.  Plain `stats` prints exactly memcached's names, no other: this
server's own are in `stats tac` and `stats tiers` (test_stats.py checks them against
doc/stats.md).  In the other sub-commands tac-memcached's own names come on top.  Both run without TLS, so the `ssl_*`
names compared are those of `stats settings`.
"""
import os
import random
import re

import pytest

from mcserver import Server, free_port

STOCK = "/usr/bin/memcached"

pytestmark = pytest.mark.tac_only


def normalized(sub, raw):
    """The names of one `stats` answer; numbered parts (slab classes, fds) become N."""
    names = []
    for ln in raw.split(b"\r\n"):
        if not ln.startswith(b"STAT "):
            continue
        name = ln.split(b" ")[1].decode()
        if sub in ("items", "slabs", "conns"):
            name = ":".join("N" if p.isdigit() else p for p in name.split(":"))
        if sub == "sizes" and name[0].isdigit():
            name = "SIZE"
        names.append(name)
    return names


def load(c, rng):
    """The same keys (30-60 bytes) and values (100 B to 20 KB) into a server; some read."""
    keys = []
    for i in range(600):
        key = ("parity:%d:" % i).encode() + b"k" * rng.randint(20, 48)
        val = bytes([65 + i % 26]) * rng.choice((100, 700, 4000, 20000))
        assert c.line(b"set %s %d 0 %d\r\n%s\r\n" % (key, i, len(val), val)) == b"STORED\r\n"
        keys.append((key, val))
    for key, val in keys[::3]:
        got = c.get(b"get %s\r\n" % key)
        assert got.startswith(b"VALUE %s " % key) and val in got
    assert c.get(b"get parity:absent\r\n") == b"END\r\n"
    return keys


@pytest.fixture
def both(tmp_path, shm_file):
    if not os.path.exists(STOCK):
        pytest.fail("%s is missing: scripts/setup.sh installs the Debian memcached package" % STOCK)
    ext = str(tmp_path / "extstore")
    nvm = shm_file("parity")
    ssd = str(tmp_path / "ssd")
    servers = []
    stock = Server(["-t", "2", "-m", "64", "-o",
                    "ext_page_size=8,ext_wbuf_size=8,ext_path=%s:64m" % ext],
                   str(tmp_path), port=free_port(), binary=STOCK)
    servers.append(stock)
    # The SSD tier through memcached's own extstore options, with the same values.
    tac = Server(["-t", "2", "-m", "64", "-o", "nvm_path=%s:16m,ext_page_size=8,"
                  "ext_wbuf_size=8,ext_path=%s:64m" % (nvm, ssd)],
                 str(tmp_path), port=free_port())
    servers.append(tac)
    yield stock, tac
    for s in servers:
        s.stop()


def test_every_memcached_stats_name_is_present(both):
    stock, tac = both
    conns = {}
    for name, srv in (("stock", stock), ("tac", tac)):
        c = srv.connect()
        load(c, random.Random(7))
        idle = srv.connect()        # a second client for `stats conns`
        idle.line(b"version\r\n")
        conns[name] = (c, idle)
    missing = {}
    for sub in ("", "settings", "items", "slabs", "conns", "sizes"):
        cmd = b"stats" + (b" " + sub.encode() if sub else b"") + b"\r\n"
        ref = normalized(sub, conns["stock"][0].req(cmd, b"END\r\n"))
        ours = set(normalized(sub, conns["tac"][0].req(cmd, b"END\r\n")))
        assert ref, "stock memcached printed nothing for %r" % cmd
        gone = sorted({n for n in ref if n not in ours})
        if gone:
            missing["stats " + sub] = gone
        if sub == "":
            assert sorted(ours - set(ref)) == [], "plain `stats` prints names memcached 1.6.18 does not"
    assert not missing, "names memcached 1.6.18 prints and tac-memcached does not: %r" % missing


def test_shared_names_agree_on_the_same_data(both):
    """The same meaning: after the same commands, the counters that depend only on them are
    equal, and the settings both take from the command line are equal."""
    stock, tac = both
    snap = {}
    for name, srv in (("stock", stock), ("tac", tac)):
        c = srv.connect()
        keys = load(c, random.Random(11))
        assert c.line(b"delete %s\r\n" % keys[0][0]) == b"DELETED\r\n"
        assert c.line(b"delete parity:absent\r\n") == b"NOT_FOUND\r\n"
        assert c.line(b"touch %s 100\r\n" % keys[1][0]) == b"TOUCHED\r\n"
        assert c.line(b"incr parity:absent 1\r\n") == b"NOT_FOUND\r\n"
        snap[name] = (c.stats(), c.stats(b"settings"), c.stats(b"items"))
    same = ("curr_items", "total_items", "cmd_get", "cmd_set", "cmd_touch", "get_hits",
            "get_misses", "delete_hits", "delete_misses", "touch_hits", "incr_misses",
            "cas_misses", "limit_maxbytes", "threads", "max_connections", "evictions",
            "auth_cmds", "auth_errors")
    diff = {n: (snap["stock"][0][n], snap["tac"][0][n]) for n in same
            if snap["stock"][0][n] != snap["tac"][0][n]}
    assert not diff, "stats (stock, tac): %r" % diff
    same_settings = ("maxbytes", "maxconns", "udpport", "inter", "evictions", "umask",
                     "growth_factor", "num_threads", "num_threads_per_udp", "stat_key_prefix",
                     "detail_enabled", "reqs_per_event", "cas_enabled", "tcp_backlog",
                     "binding_protocol", "auth_enabled_sasl", "auth_enabled_ascii",
                     "item_size_max", "flush_enabled", "dump_enabled", "lru_crawler",
                     "lru_crawler_sleep", "lru_crawler_tocrawl", "idle_timeout",
                     "hot_lru_pct", "warm_lru_pct", "temporary_ttl", "watcher_logbuf_size",
                     "worker_logbuf_size", "ext_recache_rate", "ext_low_ttl",
                     "ext_drop_unread", "ext_wbuf_size", "track_sizes")
    diff = {n: (snap["stock"][1][n], snap["tac"][1][n]) for n in same_settings
            if snap["stock"][1][n] != snap["tac"][1][n]}
    assert not diff, "stats settings (stock, tac): %r" % diff
    # Per class: the numbers add up to curr_items's DRAM share; mem_requested is at least
    # the keys and values of the class's items.
    items = snap["tac"][2]
    per = {}
    for name, val in items.items():
        m = re.match(r"items:(\d+):(\w+)$", name)
        per.setdefault(int(m.group(1)), {})[m.group(2)] = int(val)
    assert per, "no class in stats items"
    for cls, v in per.items():
        assert v["number_cold"] == v["number"] and v["number_hot"] == v["number_warm"] == 0
        assert v["mem_requested"] >= v["number"] * 100, (cls, v)
    hits = sum(v["hits_to_cold"] for v in per.values())
    assert 0 < hits <= int(snap["tac"][0]["get_hits"])
