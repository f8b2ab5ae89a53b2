"""Command-line options and process behaviour."""
import os
import re
import signal
import socket
import stat
import struct
import subprocess
import tempfile
import time

import pytest

from mcserver import REPO, SERVER_BIN, base_args, free_port, is_closed, recv_for


def test_M_out_of_memory(server):
    s = server(["-M", "-m", "8"])
    c = s.connect()
    val = b"m" * 10000
    got_oom = False
    for i in range(3000):  # 30 MB into an 8 MB cache
        r = c.line(b"set k%d 0 0 %d\r\n%s\r\n" % (i, len(val), val))
        if r == b"SERVER_ERROR out of memory storing object\r\n":
            got_oom = True
            break
        assert r == b"STORED\r\n", (i, r)
    assert got_oom, "no SERVER_ERROR out of memory with -M"
    # nothing was evicted: the first key is still there
    assert c.get(b"get k0\r\n") == b"VALUE k0 0 %d\r\n%s\r\nEND\r\n" % (len(val), val)
    assert int(c.stats()["evictions"]) == 0


def test_eviction_without_M(server):
    s = server(["-m", "8"])
    c = s.connect()
    val = b"e" * 10000
    n = 3000
    c.send(b"".join(b"set k%d 0 0 %d noreply\r\n%s\r\n" % (i, len(val), val) for i in range(n)))
    assert c.line(b"set last 0 0 1\r\nx\r\n") == b"STORED\r\n"
    st = c.stats()
    assert int(st["evictions"]) > 0
    assert int(st["total_items"]) == n + 1
    assert int(st["curr_items"]) < n
    assert c.get(b"get k0\r\n") == b"END\r\n"  # the oldest was evicted
    assert c.get(b"get k%d\r\n" % (n - 1)) == b"VALUE k%d 0 %d\r\n%s\r\nEND\r\n" % (n - 1, len(val), val)


def test_max_connections(server):
    s = server(["-c", "32"])
    socks, refused = [], 0
    for _ in range(60):
        try:
            k = socket.create_connection((s.host, s.port), timeout=2)
        except OSError:
            refused += 1
            continue
        k.settimeout(2)
        try:
            k.sendall(b"version\r\n")
            # An accepted connection's whole answer is one line; a refused
            # one ends with the close, which recv_for returns at once.
            r = recv_for(k, 0.3, done=lambda b: b.startswith(b"VERSION ") and b.endswith(b"\r\n"))
        except OSError:
            r = b"<RESET>"
        if r.startswith(b"VERSION "):
            socks.append(k)
        else:
            # memcached answers "ERROR Too many open connections" and closes; closing at once is fine too
            assert re.fullmatch(rb"(ERROR Too many open connections\r\n)?(<EOF>|<RESET>)?", r), r
            refused += 1
            k.close()
    assert len(socks) <= 32
    assert refused > 0, "no connection was turned away with -c 32 and 60 clients"
    assert s.alive()
    for k in socks:
        k.close()
    time.sleep(0.3)
    c = s.connect()
    assert c.line(b"version\r\n").startswith(b"VERSION ")


def test_idle_timeout(server):
    s = server(["-o", "idle_timeout=2"])
    idle = s.connect()
    busy = s.connect()
    t0 = time.time()
    closed = False
    while time.time() - t0 < 8:
        assert busy.line(b"version\r\n").startswith(b"VERSION ")
        if is_closed(idle.sock, 0.5):
            closed = True
            break
    assert closed, "idle connection not closed within 8 s with idle_timeout=2"
    assert time.time() - t0 >= 1.5
    assert busy.line(b"version\r\n").startswith(b"VERSION ")


def test_unix_socket(server):
    d = tempfile.mkdtemp(prefix="tacsock-")
    path = os.path.join(d, "mc.sock")
    s = server(["-a", "700"], unix=path)
    mode = stat.S_IMODE(os.stat(path).st_mode)
    assert mode == 0o700, oct(mode)
    c = s.connect()
    assert c.line(b"set u 0 0 2\r\nhi\r\n") == b"STORED\r\n"
    assert c.get(b"get u\r\n") == b"VALUE u 0 2\r\nhi\r\nEND\r\n"


def udp_request(u, addr, req_id, payload, timeout=3.0):
    u.sendto(struct.pack("!HHHH", req_id, 0, 1, 0) + payload, addr)
    frames = {}
    total = None
    u.settimeout(timeout)
    while total is None or len(frames) < total:
        d, _ = u.recvfrom(65536)
        rid, seq, tot, res = struct.unpack("!HHHH", d[:8])
        assert rid == req_id and res == 0, (rid, seq, tot, res)
        assert total is None or tot == total
        total = tot
        frames[seq] = d[8:]
    assert sorted(frames) == list(range(total))
    return b"".join(frames[i] for i in range(total)), total


def test_udp(server):
    s = server(udp=True)
    addr = (s.host, s.udp_port)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    r, n = udp_request(u, addr, 7, b"set u 0 0 2\r\nhi\r\n")
    assert (r, n) == (b"STORED\r\n", 1)
    r, n = udp_request(u, addr, 8, b"get u\r\n")
    assert (r, n) == (b"VALUE u 0 2\r\nhi\r\nEND\r\n", 1)
    big = bytes((i * 7) % 251 for i in range(5000))
    c = s.connect()
    assert c.line(b"set big 0 0 5000\r\n" + big + b"\r\n") == b"STORED\r\n"
    r, n = udp_request(u, addr, 0x1234, b"get big\r\n")
    assert n >= 4
    assert r == b"VALUE big 0 5000\r\n" + big + b"\r\nEND\r\n"
    u.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_clean_exit(server, sig):
    s = server()
    c = s.connect()
    assert c.line(b"set a 0 0 1\r\nx\r\n") == b"STORED\r\n"
    rc = s.stop(sig)
    s.expect_exit = True
    assert rc == 0, "exit code %s after %s\n%s" % (rc, sig, s.stderr_text())


def test_sighup_is_ignored(server):
    """SIGHUP (a closed terminal, a log rotation's kill -HUP) neither stops
    the server nor loses what it holds, as in memcached."""
    s = server()
    c = s.connect()
    assert c.line(b"set hup:key 5 0 3\r\nabc\r\n") == b"STORED\r\n"
    for _ in range(3):
        s.proc.send_signal(signal.SIGHUP)
        time.sleep(0.2)
    assert s.alive(), "SIGHUP stopped the server\n%s" % s.stderr_text()
    assert c.get(b"get hup:key\r\n") == b"VALUE hup:key 5 3\r\nabc\r\nEND\r\n"
    c2 = s.connect()
    assert c2.line(b"version\r\n").startswith(b"VERSION ")


def test_daemon_pidfile():
    d = tempfile.mkdtemp(prefix="tacd-")
    pidfile = os.path.join(d, "mc.pid")
    port = free_port()
    p = subprocess.run([SERVER_BIN] + base_args() + ["-d", "-P", pidfile, "-l", "127.0.0.1", "-p", str(port),
                        "-U", "0"], stdin=subprocess.DEVNULL, capture_output=True, timeout=20)
    assert p.returncode == 0, p.stderr
    pid = None
    try:
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                pid = int(open(pidfile).read().strip())
                break
            except (OSError, ValueError):
                time.sleep(0.05)
        assert pid, "pid file not written"
        os.kill(pid, 0)
        assert os.path.realpath("/proc/%d/exe" % pid) == os.path.realpath(SERVER_BIN)
        k = socket.create_connection(("127.0.0.1", port), timeout=5)
        k.sendall(b"stats\r\n")
        st = b""
        while not st.endswith(b"END\r\n"):
            st += k.recv(65536)
        assert b"STAT pid %d\r\n" % pid in st
        k.close()
    finally:
        if pid:
            os.kill(pid, signal.SIGTERM)
            deadline = time.time() + 5
            while time.time() < deadline and os.path.exists("/proc/%d" % pid):
                time.sleep(0.05)
            assert not os.path.exists("/proc/%d" % pid) or \
                open("/proc/%d/stat" % pid).read().split()[2] == "Z", "daemon did not exit on SIGTERM"


def test_help_lists_options():
    p = subprocess.run([SERVER_BIN, "-h"], capture_output=True, timeout=10)
    assert p.returncode == 0
    out = p.stdout.decode()
    for opt in ("-p", "-U", "-s", "-l", "-c", "-m", "-M", "-t", "-I", "-d", "-P", "-v", "-o"):
        assert re.search(r"(^|\s)%s[,\s]" % re.escape(opt), out, re.M), "%s missing from -h" % opt


def test_version_flag():
    p = subprocess.run([SERVER_BIN, "-V"], capture_output=True, timeout=10)
    assert p.returncode == 0
    assert re.fullmatch(r"\S*memcached \d+\.\d+\.\d+\S*\n", p.stdout.decode()), p.stdout


def test_bad_option_fails():
    p = subprocess.run([SERVER_BIN] + base_args() + ["-p", "0", "-U", "0", "--no-such-option"],
                       capture_output=True, timeout=10)
    assert p.returncode != 0


def test_threads_and_item_size_flags(server):
    s = server(["-t", "2", "-I", "2m", "-m", "32"])
    c = s.connect()
    st = c.stats()
    assert st["threads"] == "2"
    assert st["limit_maxbytes"] == str(32 * 1024 * 1024)
    sets = c.stats(b"settings")
    assert sets["item_size_max"] == str(2 * 1024 * 1024)
    val = b"v" * (1536 * 1024)
    assert c.line(b"set b 0 0 %d\r\n%s\r\n" % (len(val), val)) == b"STORED\r\n"
    assert c.get(b"get b\r\n") == b"VALUE b 0 %d\r\n%s\r\nEND\r\n" % (len(val), val)


# ---- the option table (base/options.c) against -h, README.md and `stats settings`

def _c_args(text):
    """Splits a C argument list at top-level commas; string literals stay whole."""
    args, cur, depth, i = [], "", 0, 0
    while i < len(text):
        ch = text[i]
        if ch == '"' or ch == "'":
            j = i + 1
            while text[j] != ch:
                j += 2 if text[j] == "\\" else 1
            cur += text[i:j + 1]
            i = j + 1
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
        else:
            cur += ch
        i += 1
    args.append(cur.strip())
    return args


def _c_string(arg):
    """The value of an expression of adjacent string literals, or None for NULL."""
    if arg == "NULL":
        return None
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', arg)
    assert parts, "not a string: %r" % arg
    return "".join(p.encode().decode("unicode_escape") for p in parts)


def option_table():
    """Rows of options.c's option table: flag, name, kind, stat name, arg, help and default."""
    src = open(os.path.join(REPO, "base", "options.c")).read()
    body = src[src.index("settings_options[] = {"):]
    body = body[:body.index("\n};")]
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    rows = []
    for m in re.finditer(r"\{ OPT\((.*?)\)((?:,\s*\.\w+ = [^}]*)?) \},", body, re.S):
        a = _c_args(m.group(1))
        assert len(a) == 10, a
        extra = dict(re.findall(r"\.(\w+) = (\"(?:[^\"\\]|\\.)*\"|\w+)", m.group(2)))
        rows.append({
            "flag": None if a[0] == "0" else a[0].strip("'"),
            "name": _c_string(a[1]), "kind": a[2], "stat": _c_string(a[7]),
            "arg": _c_string(a[8]), "help": _c_string(a[9]),
            "def": _c_string(extra["def"]) if "def" in extra else None,
            "unlisted": extra.get("unlisted") == "true",
        })
    # IGNORED("name"): an extended row of kind OPT_IGNORED with no help.
    for m in re.finditer(r'^\s*IGNORED\("(\w+)"\),', body, re.M):
        rows.append({"flag": None, "name": m.group(1), "kind": "OPT_IGNORED", "stat": None,
                     "arg": None, "help": None, "def": None})
    return rows


def help_entries(text):
    """-h text -> {"-p": "whole entry, lines joined", "port": ..., "o:partitions": ...}."""
    entries, key = {}, None
    for line in text.splitlines():
        m = re.match(r"-(\w), --([\w-]+)", line)
        e = re.match(r"   - (\w+)[=:]", line)
        if m:
            key = "-" + m.group(1)
        elif e:
            key = "o:" + e.group(1)
        elif not line.startswith(" " * 26):
            key = None
        if key:
            entries[key] = (entries.get(key, "") + " " + line.strip()).strip()
    return entries


def readme_options():
    text = open(os.path.join(REPO, "README.md")).read()
    text = text[text.index("\n## Options\n"):]
    text = text[text.index("```\n") + 4:]
    return text[:text.index("```\n")]


@pytest.mark.tac_only
def test_help_and_readme_list_every_table_option():
    rows = option_table()
    assert len(rows) > 50 and any(r["name"] == "nvm_path" for r in rows), rows
    out = subprocess.run([SERVER_BIN, "-h"], capture_output=True, timeout=10).stdout.decode()
    readme = readme_options()
    # The README's list is the -h text (its version line aside).
    assert readme.splitlines()[1:] == out.splitlines()[1:], \
        "README.md's option list differs from `tac-memcached -h`; paste the -h output into it"
    for where, text in (("-h", out), ("README.md", readme)):
        entries = help_entries(text)
        tuning = re.search(r"memcached tuning options, accepted and ignored: ([\w,\s]+)", text)
        assert tuning, "%s lacks the list of ignored memcached tuning options" % where
        ignored = set(re.split(r"[,\s]+", tuning.group(1).strip()))
        for r in rows:
            if r.get("unlisted"):     # accepted, deliberately not named (options.c says why)
                assert r["name"] not in ignored and "o:" + r["name"] not in entries, r["name"]
                continue
            if r["flag"]:
                key, what = "-" + r["flag"], "-%s (--%s)" % (r["flag"], r["name"])
                assert key in entries, "%s missing from %s" % (what, where)
                assert "--" + r["name"] in entries[key], "%s: long name missing in %s" % (what, where)
            elif r["help"] is None:
                assert r["name"] in ignored, "-o %s missing from %s" % (r["name"], where)
                continue
            else:
                key, what = "o:" + r["name"], "-o " + r["name"]
                assert key in entries, "%s missing from %s" % (what, where)
            if r["kind"] == "OPT_IGNORED" or r["name"] == "maxconns_fast":
                assert "(ignored)" in entries[key], "%s is not marked ignored in %s" % (what, where)
            if r["def"] is not None and (r["arg"] or not r["flag"]):
                shown = "'%s'" % r["def"] if r["kind"] == "OPT_CHAR" else r["def"]
                assert "(default: %s)" % shown in entries[key], \
                    "%s: %s does not state the default %s: %r" % (what, where, shown, entries[key])


def _stat_of_default(r):
    d = r["def"]
    if r["kind"] == "OPT_MEGABYTES":
        return str(int(d) << 20)
    if r["kind"] == "OPT_SIZE":
        n, unit = re.fullmatch(r"(\d+)([kmg]?)", d).groups()
        return str(int(n) << {"": 0, "k": 10, "m": 20, "g": 30}[unit])
    if r["kind"] in ("OPT_SET", "OPT_CLEAR"):
        if r["stat"] == "evictions":
            return d
        return {"on": "yes", "off": "no"}[d]
    return d


@pytest.mark.tac_only
def test_stats_settings_show_the_table_defaults(server):
    # The harness gives -p and -U.
    rows = [r for r in option_table() if r["stat"] and r["def"] is not None
            and r["name"] not in ("port", "udp-port")]
    assert len(rows) > 15, rows
    st = server().connect().stats(b"settings")
    for r in rows:
        assert r["stat"] in st, "stats settings lacks %s (option %s)" % (r["stat"], r["name"])
        want = _stat_of_default(r)
        if r["kind"] == "OPT_DOUBLE":
            assert float(st[r["stat"]]) == float(want), (r, st[r["stat"]])
        else:
            assert st[r["stat"]] == want, "stats settings %s is %r, the table's default %r" % (
                r["stat"], st[r["stat"]], want)


@pytest.mark.tac_only
def test_ignored_options_say_so_at_start(server):
    s = server(["-o", "lru_crawler_sleep=100,idle_timeout=0", "-t", "2", "-o", "track_sizes"])
    c = s.connect()
    assert c.line(b"version\r\n").startswith(b"VERSION ")
    assert c.line(b"set k 0 0 1\r\nx\r\n") == b"STORED\r\n"
    notes = [ln for ln in s.stderr_text().splitlines() if "no effect" in ln]
    assert sorted(notes) == [
        "tac-memcached: -o lru_crawler_sleep is accepted for compatibility and has no effect",
        "tac-memcached: -o track_sizes is accepted for compatibility and has no effect",
    ], s.stderr_text()


# memcached 1.6.18's tuning options (its -h, and those its parser takes
# beyond -h) that have no meaning here, in the forms memcached takes: each
# starts the server with one line naming it.
MEMCACHED_TUNING = ["no_maxconns_fast", "lru_crawler_sleep=100", "lru_crawler_tocrawl=0",
                    "watcher_logbuf_size=256",
                    "worker_logbuf_size=64", "track_sizes", "no_hashexpand",
                    "sock_cookie_id=7", "slab_automove_ratio=0.8", "slab_automove_window=30",
                    "slab_automove_freeratio=0.01", "inline_ascii_resp",
                    "no_inline_ascii_resp", "no_chunked_items", "slab_sizes=96-192-384",
                    "resp_obj_mem_limit=32", "no_drop_privileges"]


@pytest.mark.tac_only
def test_no_slab_automove_turns_automove_off(server):
    c = server(["-o", "no_slab_automove"]).connect()
    assert c.stats(b"settings")["slab_automove"] == "0"


@pytest.mark.tac_only
def test_memcached_tuning_options_start_with_a_note(server):
    s = server(["-o", ",".join(MEMCACHED_TUNING + ["maxconns_fast"])])
    c = s.connect()
    assert c.line(b"set k 0 0 1\r\nx\r\n") == b"STORED\r\n"
    notes = set(ln for ln in s.stderr_text().splitlines() if "no effect" in ln)
    want = set("tac-memcached: -o %s is accepted for compatibility and has no effect"
               % o.split("=")[0] for o in MEMCACHED_TUNING + ["maxconns_fast"])
    assert notes == want, "missing: %s; extra: %s" % (sorted(want - notes), sorted(notes - want))


@pytest.mark.tac_only
@pytest.mark.parametrize("args,names", [
    (["-o", "drop_privileges"], "-o drop_privileges"),
], ids=["drop_privileges"])
def test_security_options_refused_clearly(args, names):
    """Until the syscall sandbox exists, asking for
    one stops the start with a message naming it: never a server without it."""
    cmd = [SERVER_BIN] + base_args() + ["-p", str(free_port()), "-U", "0"] + args
    try:
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
    except subprocess.TimeoutExpired:
        raise AssertionError("the server started with %s" % " ".join(args))
    msg = (p.stdout + p.stderr).decode("utf-8", "replace")
    assert p.returncode != 0 and names in msg and "not supported yet" in msg, (p.returncode, msg)


@pytest.mark.tac_only
def test_read_buf_mem_limit_sets_conn_mem_limit(server):
    """memcached's read_buf_mem_limit (megabytes) is the connection memory
    bound here: it sets conn_mem_limit, raised to that option's floor with a
    note; 0 leaves the default; conn_mem_limit given wins."""
    MB = 1 << 20
    st = server(["-o", "read_buf_mem_limit=100"]).connect().stats(b"settings")
    assert st["read_buf_mem_limit"] == str(100 * MB) and st["conn_mem_limit"] == str(100 * MB), st
    s = server(["-o", "read_buf_mem_limit=1"])
    st = s.connect().stats(b"settings")
    assert int(st["conn_mem_limit"]) >= 2 * (1 * MB + 16 * MB), st
    assert "read_buf_mem_limit raised to" in s.stderr_text(), s.stderr_text()
    default = server().connect().stats(b"settings")["conn_mem_limit"]
    assert server(["-o", "read_buf_mem_limit=0"]).connect().stats(b"settings")[
        "conn_mem_limit"] == default
    st = server(["-o", "read_buf_mem_limit=100,conn_mem_limit=200m"]).connect().stats(b"settings")
    assert st["conn_mem_limit"] == str(200 * MB), st


def test_read_buf_mem_limit_bounds_responses(server):
    """As in memcached, read_buf_mem_limit split over the workers bounds the responses a
    worker queues: a 500-key get is answered SERVER_ERROR out of memory (counted in
    response_obj_oom) while a 10-key one is not, and 500 pipelined mg close the connection.
    Without the option the same requests are answered in full."""
    keys = b" ".join(b"k%d" % i for i in range(500))
    s = server(["-o", "read_buf_mem_limit=1", "-t", "32", "-R", "500"])
    c = s.connect()
    assert c.line(b"set k1 0 0 2\r\nv1\r\n") == b"STORED\r\n"
    assert c.line(b"get " + keys + b"\r\n") == b"SERVER_ERROR out of memory writing get response\r\n"
    assert int(c.stats()["response_obj_oom"]) > 0
    assert c.get(b"get k1 k2 k3 k4 k5 k6 k7 k8 k9 k10\r\n") == b"VALUE k1 0 2\r\nv1\r\nEND\r\n"
    flood = s.connect()
    flood.sock.sendall(b"mg foo v\r\n" * 500)
    got = b""
    flood.sock.settimeout(10)
    while True:
        chunk = flood.sock.recv(65536)
        if not chunk:
            break
        got += chunk
    assert len(got) < 500 * 4, "the connection was not closed"
    c2 = server(["-t", "32", "-R", "500"]).connect()
    assert c2.get(b"get " + keys + b"\r\n") == b"END\r\n"


@pytest.mark.tac_only
@pytest.mark.parametrize("opt,why", [
    ("nvm_path=/dev/shm/tac-test-x:12q", "a size with a bad unit"),
    ("nvm_path=/dev/shm/tac-test-x:99999999999999999999", "a size past 64 bits"),
    ("ssd_path=/tmp/tac-test-x:0", "an SSD of no size"),
    ("nvm_latency=300", "no write latency"),
    ("nvm_admission=obp", "no percentage"),
    ("tier_policy=lru2", "an unknown policy"),
    ("ssd_io_engine=aio", "an unknown engine"),
    ("ssd_buf_size=6k", "not a multiple of 4k"),
    ("dram_free_watermark=1.5", "half a byte"),
])
def test_bad_values_are_refused_at_start(opt, why):
    name = opt.split("=")[0]
    p = subprocess.run([SERVER_BIN] + base_args() + ["-l", "127.0.0.1", "-p", str(free_port()), "-U", "0",
                                                     "-o", opt],
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=20)
    msg = (p.stdout + p.stderr).decode("utf-8", "replace")
    assert p.returncode not in (0, None), "server accepted -o %s (%s)" % (opt, why)
    assert name in msg, "the error for %s does not name %s: %r" % (why, name, msg)
    assert not os.path.exists("/dev/shm/tac-test-x"), "a refused nvm_path left its file"


@pytest.mark.tac_only
def test_ephemeral_ports_and_port_file(tmp_path):
    """memcached's -p -1 / -U -1 (any free port) and MEMCACHED_PORT_FILENAME: the bound
    ports are written as "TCP INET: N" / "UDP INET: N" lines; -U alone sets -p too."""
    for args in (["-p", "-1", "-U", "-1"], ["-U", "-1"]):
        pf = tmp_path / ("ports%d" % len(args))
        env = dict(os.environ, MEMCACHED_PORT_FILENAME=str(pf))
        proc = subprocess.Popen([SERVER_BIN] + base_args() + ["-l", "127.0.0.1", "-m", "8"] + args,
                                env=env, stderr=subprocess.PIPE)
        try:
            deadline = time.time() + 10
            while not pf.exists() and time.time() < deadline:
                time.sleep(0.05)
            ports = dict(ln.split(": ") for ln in pf.read_text().splitlines())
            assert set(ports) == {"TCP INET", "UDP INET"}, ports
            tcp, udp = int(ports["TCP INET"]), int(ports["UDP INET"])
            assert tcp not in (0, 11211) and udp != 0, ports
            s = socket.create_connection(("127.0.0.1", tcp), timeout=5)
            s.sendall(b"version\r\n")
            assert s.recv(100).startswith(b"VERSION "), ports
            s.close()
        finally:
            proc.terminate()
            proc.wait(10)
