"""The stats family, counters that move, and memcstat (libmemcached) parsing the output."""
import os
import re
import subprocess
import time

import pytest

from mcserver import REPO
from test_nvm import nvm_file  # noqa: F401 (fixture)
from test_ssd import ssd_dir, ssd_server  # noqa: F401 (ssd_dir: fixture)

GENERAL = ("pid uptime time version curr_connections total_connections cmd_get cmd_set cmd_flush cmd_touch "
           "get_hits get_misses get_expired get_flushed delete_hits delete_misses incr_hits incr_misses "
           "decr_hits decr_misses cas_hits cas_misses cas_badval touch_hits touch_misses bytes_read "
           "bytes_written limit_maxbytes threads curr_items total_items bytes evictions reclaimed").split()


def test_stats_general_names_and_counters(srv):
    c = srv.connect()
    st0 = c.stats()
    missing = [n for n in GENERAL if n not in st0]
    assert not missing, "missing stats: %s" % missing
    assert int(st0["pid"]) == srv.proc.pid
    assert abs(int(st0["time"]) - time.time()) < 5
    assert int(st0["curr_connections"]) >= 1
    assert st0["threads"] == "4"
    assert st0["limit_maxbytes"] == str(64 * 1024 * 1024)
    assert c.line(b"set a 0 0 1\r\n1\r\n") == b"STORED\r\n"
    assert c.line(b"set a 0 0 1\r\n2\r\n") == b"STORED\r\n"
    assert c.line(b"set n 0 0 1\r\n5\r\n") == b"STORED\r\n"
    c.get(b"get a b\r\n")
    c.get(b"get a\r\n")
    c.line(b"delete a\r\n")
    c.line(b"delete a\r\n")
    c.line(b"incr n 1\r\n")
    c.line(b"incr zz 1\r\n")
    c.line(b"decr n 1\r\n")
    c.line(b"decr zz 1\r\n")
    cas = int(c.get(b"gets n\r\n").split(b"\r\n")[0].split()[4])
    c.line(b"cas n 0 0 1 %d\r\n7\r\n" % cas)
    c.line(b"cas n 0 0 1 %d\r\n8\r\n" % cas)
    c.line(b"cas zz 0 0 1 1\r\n8\r\n")
    c.line(b"touch n 100\r\n")
    c.line(b"touch zz 100\r\n")
    c.line(b"flush_all\r\n")
    st = c.stats()
    d = {k: int(st[k]) - int(st0[k]) for k in GENERAL if st[k].lstrip("-").isdigit() and k != "time"}
    want = dict(cmd_get=4, get_hits=3, get_misses=1, cmd_set=6, delete_hits=1, delete_misses=1,
                incr_hits=1, incr_misses=1, decr_hits=1, decr_misses=1, cas_hits=1, cas_badval=1,
                cas_misses=1, cmd_touch=2, touch_hits=1, touch_misses=1, cmd_flush=1)
    got = {k: d[k] for k in want}
    assert got == want
    # 3 sets + 1 cas; an implementation may also count incr/decr that relink a new item
    assert 4 <= d["total_items"] <= 6, d["total_items"]
    assert d["bytes_read"] > 100 and d["bytes_written"] > 100
    assert int(st["curr_items"]) <= 1
    assert c.get(b"get n\r\n") == b"END\r\n"
    st2 = c.stats()
    assert int(st2["get_flushed"]) - int(st["get_flushed"]) == 1
    assert int(st2["uptime"]) >= int(st0["uptime"])


def test_curr_items_and_bytes(srv):
    c = srv.connect()
    for i in range(10):
        assert c.line(b"set k%d 0 0 100\r\n%s\r\n" % (i, b"x" * 100)) == b"STORED\r\n"
    st = c.stats()
    assert st["curr_items"] == "10" and st["total_items"] == "10"
    assert int(st["bytes"]) >= 1000
    c.line(b"delete k0\r\n")
    st = c.stats()
    assert st["curr_items"] == "9"


def test_stats_reset(srv):
    c = srv.connect()
    c.line(b"set a 0 0 1\r\n1\r\n")
    c.get(b"get a\r\n")
    c.get(b"get b\r\n")
    assert c.line(b"stats reset\r\n") == b"RESET\r\n"
    st = c.stats()
    for k in ("cmd_get", "cmd_set", "get_hits", "get_misses", "total_items", "evictions", "delete_hits"):
        assert st[k] == "0", (k, st[k])
    assert st["curr_items"] == "1"  # gauges survive a reset
    c.get(b"get a\r\n")
    assert c.stats()["get_hits"] == "1"


def test_stats_settings(server):
    s = server(["-m", "32", "-c", "512", "-t", "2"])
    c = s.connect()
    st = c.stats(b"settings")
    assert st["maxbytes"] == str(32 << 20)
    assert st["maxconns"] == "512"
    assert st["tcpport"] == str(s.port)
    assert st["num_threads"] == "2"
    assert st["cas_enabled"] == "yes"
    assert st["evictions"] == "on"
    assert "item_size_max" in st and "idle_timeout" in st


def test_stats_items_and_slabs(srv):
    c = srv.connect()
    assert c.line(b"set a 0 0 10\r\n0123456789\r\n") == b"STORED\r\n"
    assert c.line(b"set b 0 0 5000\r\n%s\r\n" % (b"b" * 5000)) == b"STORED\r\n"
    items = c.stats(b"items")
    numbers = {k: int(v) for k, v in items.items() if k.startswith("items:") and k.endswith(":number")}
    assert sum(numbers.values()) == 2 and len(numbers) == 2
    slabs = c.stats(b"slabs")
    assert int(slabs["active_slabs"]) >= 2
    assert int(slabs["total_malloced"]) > 0
    for k in numbers:
        cls = k.split(":")[1]
        assert int(slabs["%s:chunk_size" % cls]) > 0
        assert int(slabs["%s:used_chunks" % cls]) >= 1


def test_stats_conns(srv):
    c = srv.connect()
    c2 = srv.connect()
    c2.line(b"version\r\n")
    st = c.stats(b"conns")
    addrs = [v for k, v in st.items() if k.endswith(":addr")]
    assert "tcp:127.0.0.1:%d" % srv.port in addrs
    assert sum(1 for a in addrs if a.startswith("tcp:127.0.0.1:") and a != "tcp:127.0.0.1:%d" % srv.port) >= 2
    assert any(k.endswith(":state") for k in st)


def test_stats_unknown_subcommand(srv):
    c = srv.connect()
    assert c.line(b"stats bogus\r\n") == b"ERROR\r\n"
    assert c.line(b"version\r\n").startswith(b"VERSION ")


def test_memcstat_parses(srv):
    c = srv.connect()
    c.line(b"set a 0 0 1\r\n1\r\n")
    p = subprocess.run(["memcstat", "--servers=127.0.0.1:%d" % srv.port], capture_output=True, timeout=20)
    assert p.returncode == 0, p.stderr
    out = p.stdout.decode()
    assert "Server: 127.0.0.1 (%d)" % srv.port in out
    assert "\tpid: %d\n" % srv.proc.pid in out
    assert "\tcurr_items: 1\n" in out
    assert "\tversion: " in out


def test_memccapable_ascii(srv):
    p = subprocess.run(["memccapable", "-h", "127.0.0.1", "-p", str(srv.port), "-a"],
                       capture_output=True, timeout=120, env=dict(os.environ))
    out = p.stdout.decode() + p.stderr.decode()
    assert "All tests passed" in out, out[-3000:]


def test_memccapable_both_protocols(srv):
    # No -a/-b filter: the ascii and the binary protocol tests in one run.
    p = subprocess.run(["memccapable", "-h", "127.0.0.1", "-p", str(srv.port)],
                       capture_output=True, timeout=180, env=dict(os.environ))
    out = p.stdout.decode() + p.stderr.decode()
    assert "All tests passed" in out, out[-3000:]
    assert "binary stat" in out and "ascii stat" in out, out[-3000:]


# ---- doc/stats.md follows stats.c's table of plain `stats`

STATS_C = os.path.join(REPO, "base", "stats.c")
STATS_MD = os.path.join(REPO, "doc", "stats.md")
KINDS = {"COUNTER": "counter", "GAUGE": "gauge", "CONST": "constant", "STRING": "string"}
# A doc meaning with this says the line is printed only with some tier.
CONDITIONAL = "only with"
KEPT = "not cleared by `stats reset`"


def table_rows(table="general_stats"):
    """stats.c's general_stats[] rows (plain `stats`), or tac_stats[] rows (`stats tac`),
    as (name, kind, meaning), in order."""
    with open(STATS_C) as f:
        src = f.read()
    body = src[src.index("%s[] = {" % table):]
    body = body[:body.index("\n};")]
    rows = []
    for m in re.finditer(r'ROW\(\s*"(\w+)",\s*(\w+),\s*[^"]*?,\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\)', body):
        meaning = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(3)))
        rows.append((m.group(1), KINDS[m.group(2)], meaning))
    assert rows and len(rows) == body.count("ROW("), "a row of %s[] was not understood" % table
    return rows


def doc_rows(heading):
    """The cells of each row of the table under `heading` in doc/stats.md (header row left out)."""
    with open(STATS_MD) as f:
        md = f.read()
    start = md.index("\n%s\n" % heading) + 1
    end = md.find("\n## ", start)
    rows = []
    for ln in md[start:end if end >= 0 else len(md)].splitlines():
        if ln.startswith("|") and set(ln) - set("|-: "):
            rows.append([c.strip() for c in ln.strip().strip("|").split("|")])
    assert rows, "no table under %s" % heading
    return rows[1:]


def doc_names(rows):
    """name -> meaning; a row may name several stats ("a, b")."""
    return {n.strip(): r[-1] for r in rows for n in r[0].split(",")}


def stat_names(c, sub=b""):
    """The names `stats [sub]` prints, in order."""
    raw = c.req(b"stats" + (b" " + sub if sub else b"") + b"\r\n", b"END\r\n")
    return [ln.split(b" ")[1].decode() for ln in raw.split(b"\r\n") if ln.startswith(b"STAT ")]


@pytest.mark.parametrize("table,heading", [("general_stats", "## `stats`"), ("tac_stats", "## `stats tac`")])
def test_stats_doc_is_the_table(table, heading):
    """doc/stats.md's `stats` and `stats tac` tables are stats.c's tables: same names,
    order, kinds and meanings; no name is in both."""
    rows = table_rows(table)
    doc = [tuple(r) for r in doc_rows(heading)]
    assert all(len(r) == 3 for r in doc), [r for r in doc if len(r) != 3]
    assert [r[0] for r in doc] == [r[0] for r in rows], "names or order differ"
    wrong = ["%s: doc says %r, stats.c says %r" % (t[0], d[1:], t[1:]) for d, t in zip(doc, rows) if d != t]
    assert not wrong, "\n".join(wrong)
    assert not {r[0] for r in table_rows("general_stats")} & {r[0] for r in table_rows("tac_stats")}


@pytest.mark.tac_only
def test_stats_names_are_documented(server, ssd_dir, nvm_file):  # noqa: F811
    """With DRAM, NVM and SSD every line of `stats` and `stats tac` is printed in its
    table's order, and every line of `stats`, `stats tac` and `stats tiers` is
    documented; with DRAM only, exactly the lines the doc marks "only with" are left out."""
    tiers_doc = doc_names(doc_rows("## `stats tiers`"))
    full = ssd_server(server, ssd_dir, "64m", nvm="%s:32m" % nvm_file()).connect()
    assert full.stats(b"tiers")["tiers"] == "dram,nvm,ssd"
    dram = server(["-m", "16", "-t", "2"]).connect()
    for table_name, heading, sub in (("general_stats", "## `stats`", b""),
                                     ("tac_stats", "## `stats tac`", b"tac")):
        table = [r[0] for r in table_rows(table_name)]
        documented = doc_names(doc_rows(heading))
        printed = stat_names(full, sub)
        assert len(printed) == len(set(printed)), "a name is printed twice"
        assert [n for n in printed if n not in documented] == [], "printed, not in doc/stats.md"
        missing = [n for n, m in documented.items() if n not in printed and CONDITIONAL not in m]
        assert missing == [], "documented as always printed, not printed"
        assert printed == [n for n in table if n in printed], "not in the table's order"
        # TLS's lines: test_tls.py; an option's (idle_kicks): test_stats_flags_as_memcached
        assert printed == [n for n in table if "only with -" not in documented[n]], \
            "with every tier, every line of the table is printed"
        left_out = [n for n in table if n not in stat_names(dram, sub)]
        marked = [n for n in table if CONDITIONAL in documented[n]]
        assert left_out == marked, "left out without a tier (left) vs marked %r in the doc (right)" % CONDITIONAL

    tiers = stat_names(full, b"tiers")
    assert [n for n in tiers if n not in tiers_doc] == [], "printed by `stats tiers`, not in its doc table"
    missing = [n for n, m in tiers_doc.items() if n not in tiers and CONDITIONAL not in m]
    assert missing == [], "in the `stats tiers` doc table, not printed with every tier"


# memcached 1.6.18's plain `stats` with its default flags (no TLS, no extstore,
# no proxy), in its order: 83 names, as memcached's t/stats.t counts them less
# the 6 -o no_lru_maintainer leaves out plus the 3 it and no_lru_crawler leave out.
MEMCACHED_STATS = """pid uptime time version libevent pointer_size rusage_user rusage_system
max_connections curr_connections total_connections rejected_connections connection_structures
response_obj_oom response_obj_count response_obj_bytes read_buf_count read_buf_bytes
read_buf_bytes_free read_buf_oom reserved_fds cmd_get cmd_set cmd_flush cmd_touch cmd_meta
get_hits get_misses get_expired get_flushed delete_misses delete_hits incr_misses incr_hits
decr_misses decr_hits cas_misses cas_hits cas_badval touch_hits touch_misses store_too_large
store_no_memory auth_cmds auth_errors bytes_read bytes_written limit_maxbytes accepting_conns
listen_disabled_num time_in_listen_disabled_us threads conn_yields hash_power_level hash_bytes
hash_is_expanding slab_reassign_rescues slab_reassign_chunk_rescues
slab_reassign_evictions_nomem slab_reassign_inline_reclaim slab_reassign_busy_items
slab_reassign_busy_deletes slab_reassign_running slabs_moved lru_crawler_running
lru_crawler_starts lru_maintainer_juggles malloc_fails log_worker_dropped log_worker_written
log_watcher_skipped log_watcher_sent log_watchers unexpected_napi_ids round_robin_fallback
bytes curr_items total_items slab_global_page_pool expired_unfetched evicted_unfetched
evicted_active evictions reclaimed crawler_reclaimed crawler_items_checked lrutail_reflocked
moves_to_cold moves_to_warm moves_within_lru direct_reclaims lru_bumps_dropped""".split()
MAINTAINER_ONLY = {"lru_maintainer_juggles", "evicted_active", "moves_to_cold", "moves_to_warm",
                   "moves_within_lru", "direct_reclaims", "lru_bumps_dropped"}
REASSIGN_ONLY = {"slab_reassign_rescues", "slab_reassign_chunk_rescues", "slab_reassign_evictions_nomem",
                 "slab_reassign_inline_reclaim", "slab_reassign_busy_items", "slab_reassign_busy_deletes",
                 "slab_reassign_running", "slabs_moved"}


@pytest.mark.tac_only
def test_stats_flags_as_memcached(server):
    """Plain `stats` prints memcached 1.6.18's names, no other, under memcached's flags;
    `stats tac` holds this server's own, and no name is in both."""
    c = server(["-m", "16", "-t", "2"]).connect()
    assert set(stat_names(c)) == set(MEMCACHED_STATS)
    own = stat_names(c, b"tac")
    assert own and not set(own) & set(MEMCACHED_STATS)
    assert {"store_waits", "conn_mem_bytes", "lru_second_chances", "recovery_state"} <= set(own)
    c = server(["-m", "16", "-o", "idle_timeout=30"]).connect()
    assert set(stat_names(c)) == set(MEMCACHED_STATS) | {"idle_kicks"}
    assert c.stats()["idle_kicks"] == "0"
    c = server(["-m", "16", "-o", "no_lru_crawler,no_lru_maintainer,no_slab_reassign"]).connect()
    left = set(MEMCACHED_STATS) - MAINTAINER_ONLY - REASSIGN_ONLY - {"lru_crawler_running", "lru_crawler_starts"}
    assert set(stat_names(c)) == left


@pytest.mark.tac_only
def test_stats_kinds_hold(server):
    """What the kind column claims: after `stats reset` every counter is back near 0 (below
    its value before, unless its meaning says it is kept), gauges that were non-zero still
    are, and constants and strings do not change."""
    kinds = {n: (k, m) for n, k, m in table_rows() + table_rows("tac_stats")}
    s = server(["-m", "8", "-t", "2", "-o", "slab_automove=0"])
    c = s.connect()
    big = b"v" * 100000
    for i in range(150):  # 15 MB into 8 MB: evictions
        assert c.line(b"set big%d 0 0 %d\r\n%s\r\n" % (i, len(big), big)) == b"STORED\r\n"
    for i in range(20):
        c.line(b"set k%d 0 0 1\r\n%d\r\n" % (i, i % 10))
        c.get(b"get k%d nope%d\r\n" % (i, i))
        c.line(b"incr k%d 1\r\n" % i)
        c.line(b"decr k%d 1\r\n" % i)
        c.line(b"touch k%d 100\r\n" % i)
        c.line(b"delete k%d\r\n" % i)
        c.line(b"delete k%d\r\n" % i)
    c.line(b"flush_all\r\n")
    c.line(b"set left 0 0 1\r\n1\r\n")
    while int(c.stats()["uptime"]) < 1:
        time.sleep(0.1)
    counters = [n for n, (k, m) in kinds.items() if k == "counter" and KEPT not in m]
    def stats():  # plain `stats` and `stats tac`
        return {**c.stats(), **c.stats(b"tac")}

    moved = [n for n, v in stats().items() if n in counters and int(v) >= 10]
    assert len(moved) >= 8, "too few counters moved to test the reset: %s" % moved
    # The expiry crawler counts in the background: a step that lands between the
    # reset and the read can make crawler_items_checked grow; once more then.
    for _ in range(2):
        before = stats()
        assert c.line(b"stats reset\r\n") == b"RESET\r\n"
        after = stats()
        assert set(before) == set(after) <= set(kinds)
        grew = [(n, before[n], after[n]) for n in before if n in counters and
                (int(after[n]) > int(before[n]) or (int(before[n]) >= 10 and int(after[n]) >= int(before[n])))]
        if not grew:
            break
    assert grew == [], "counters `stats reset` did not clear"
    zeroed = [n for n in before if kinds[n][0] == "gauge" and before[n] != "0" and after[n] == "0"]
    assert zeroed == [], "gauges `stats reset` cleared"
    changed = [n for n in before if kinds[n][0] in ("constant", "string") and before[n] != after[n]]
    assert changed == [], "constants that changed"
