"""The stats family, counters that move, and memcstat (libmemcached) parsing the output."""
import os
import subprocess
import time

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
