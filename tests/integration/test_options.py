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

from mcserver import SERVER_BIN, base_args, free_port, is_closed, recv_for


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
            r = recv_for(k, 0.3)
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
