"""Regression tests for inputs chosen on purpose to break the request parsers.

Each test sends one exact hostile input and then checks that the server is
up and every value stored before it reads back byte-exact.
"""
import os
import socket
import struct
import time

import pytest

from mcserver import SANITIZED, is_closed, recv_exact

BIN_HDR = struct.Struct(">BBHBBHIIQ")
OP_SET, OP_ADD, OP_APPEND, OP_PREPEND = 0x01, 0x02, 0x0E, 0x0F
OP_APPENDQ, OP_PREPENDQ = 0x19, 0x1A
ST_E2BIG = 0x0003


def bin_req(op, key=b"", extras=b"", value=b"", bodylen=None, cas=0):
    if bodylen is None:
        bodylen = len(extras) + len(key) + len(value)
    return BIN_HDR.pack(0x80, op, len(key), len(extras), 0, 0, bodylen, 0xAABBCCDD, cas) + extras + key + value


def bin_resp(sock):
    hdr = recv_exact(sock, 24)
    magic, op, klen, elen, _dt, status, blen, opaque, cas = BIN_HDR.unpack(hdr)
    assert magic == 0x81
    body = recv_exact(sock, blen) if blen else b""
    return op, status, body


def store_canaries(srv, n=20):
    c = srv.connect()
    vals = {}
    for i in range(n):
        k = b"canary-%02d-%s" % (i, b"k" * 30)
        v = os.urandom(8).hex().encode() * (1 + 37 * i)
        assert c.line(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v)) == b"STORED\r\n"
        vals[k] = v
    return vals


def check_canaries(srv, vals):
    c = srv.connect()
    for k, v in vals.items():
        assert c.get(b"get %s\r\n" % k) == b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (k, len(v), v)


@pytest.mark.tac_only
@pytest.mark.parametrize("op", [OP_APPEND, OP_PREPEND, OP_APPENDQ, OP_PREPENDQ])
@pytest.mark.parametrize("bodylen", [0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFD])
def test_bin_append_bodylen_wrap(server, op, bodylen):
    """keylen=1, extlen=0, bodylen near 4 GB: the value length plus "\\r\\n"
    must not wrap in 32 bits (it once allocated an empty item and read up
    to 4 GB of client bytes into it)."""
    srv = server(["-m", "16"])
    vals = store_canaries(srv)
    s = socket.create_connection((srv.host, srv.port), timeout=5)
    # The key names an existing item: append then has something to append to.
    key = b"canary-00-" + b"k" * 30
    s.sendall(bin_req(op, key=key[:1], bodylen=bodylen) + key[:1])
    # A few MB of attacker bytes after the header: they must be discarded.
    junk = b"\x41" * (1 << 20)
    for _ in range(8):
        s.sendall(junk)
    _op, status, body = bin_resp(s)
    assert status == ST_E2BIG, (status, body)
    s.close()
    assert srv.alive()
    check_canaries(srv, vals)


@pytest.mark.tac_only
def test_bin_set_bodylen_huge(server):
    """A set whose body claims 4 GB is refused as too large, not allocated."""
    srv = server(["-m", "16"])
    vals = store_canaries(srv)
    s = socket.create_connection((srv.host, srv.port), timeout=5)
    extras = struct.pack(">II", 0, 0)
    s.sendall(bin_req(OP_SET, key=b"x", extras=extras, bodylen=0xFFFFFFFF) + extras + b"x" + b"B" * 4096)
    _op, status, _body = bin_resp(s)
    assert status == ST_E2BIG
    s.close()
    assert srv.alive()
    check_canaries(srv, vals)


@pytest.mark.parametrize("request_line", [b"POST / HTTP/1.1", b"GET /index.html HTTP/1.0", b"PUT /x HTTP/2"])
def test_http_request_closes_at_once(srv, request_line):
    """Cache commands in an HTTP body (a browser can be made to send one)
    never run: the request line closes the connection, as in memcached."""
    body = b"set http-evil 0 0 5\r\nEVIL!\r\ndelete canary-00-" + b"k" * 30 + b"\r\n"
    req = (request_line + b"\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n"
           b"Content-Length: %d\r\n\r\n" % len(body) + body)
    vals = store_canaries(srv, n=3)
    s = socket.create_connection((srv.host, srv.port), timeout=5)
    s.sendall(req)
    data = b""
    s.settimeout(5)
    while True:
        try:
            chunk = s.recv(4096)
        except ConnectionResetError:
            break
        if not chunk:
            break
        data += chunk
    # Nothing is answered: not even ERROR for the request line.
    assert data == b"", data
    c = srv.connect()
    assert c.get(b"get http-evil\r\n") == b"END\r\n"
    check_canaries(srv, vals)


def rss_anon_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise AssertionError("no RssAnon")


@pytest.mark.tac_only
def test_conn_mem_limit_bounds_long_get_lines(server):
    """40 connections each sending 15 MB of one `get` line: memcached grows
    to ~750 MB.  Here conn_mem_limit (64 MB) bounds what they hold: the
    biggest holders are closed and counted, stored data stays intact and
    new connections are served."""
    import threading
    srv = server(["-m", "64", "-t", "2"])
    vals = store_canaries(srv)
    base_kb = rss_anon_kb(srv.proc.pid)
    line = b"get " + b" ".join(b"key-%010d" % i for i in range(15 * 1024 * 1024 // 15))
    assert len(line) > 15 << 20
    peak = [0]
    peak_held = [0]
    stop = threading.Event()
    watcher = srv.connect()

    def watch():
        while not stop.is_set():
            try:
                peak[0] = max(peak[0], rss_anon_kb(srv.proc.pid))
                held = int(watcher.stats_general().get("conn_mem_bytes", 0))
                peak_held[0] = max(peak_held[0], held)
            except (OSError, AssertionError):
                return
            time.sleep(0.01)

    def flood():
        try:
            s = socket.create_connection((srv.host, srv.port), timeout=20)
            s.sendall(line)          # no end of line: the request stays incomplete
            time.sleep(2)
            s.close()
        except OSError:
            pass                     # closed by the server: expected for most

    w = threading.Thread(target=watch)
    w.start()
    threads = [threading.Thread(target=flood) for _ in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    stop.set()
    w.join()
    st = srv.connect().stats_general()
    grown_mb = (peak[0] - base_kb) / 1024
    print("RssAnon base %d KB, peak %d KB (+%.0f MB); conn_mem_bytes peak %d MB; conn_mem_closed %s" %
          (base_kb, peak[0], grown_mb, peak_held[0] >> 20, st.get("conn_mem_closed")))
    # The bound, plus one 16 MB read buffer per worker still growing, plus
    # allocator slack.
    if not SANITIZED:
        assert grown_mb < 64 + 2 * 16 + 48, grown_mb
    # Marked connections still count until their worker closes them.
    assert peak_held[0] <= (64 + 64) << 20, peak_held[0]
    assert int(st["conn_mem_closed"]) > 0
    assert srv.connect().stats(b"settings")["conn_mem_limit"] == str(64 << 20)
    assert srv.alive()
    check_canaries(srv, vals)
    deadline = time.time() + 10
    while int(srv.connect().stats_general()["conn_mem_bytes"]) != 0:
        assert time.time() < deadline, "connection memory not given back"
        time.sleep(0.1)


@pytest.mark.tac_only
def test_conn_mem_counts_values_past_the_allowance(server):
    """A value still being read counts in conn_mem_bytes once it is past the
    16 KB the connection is allowed, like its read buffer; a smaller one does
    not.  Both are given back when the value is complete or the connection
    closes, and the stored values read back whole."""
    srv = server(["-m", "64", "-I", "2m"])
    watcher = srv.connect()

    def held():
        return int(watcher.stats_general()["conn_mem_bytes"])

    def wait_held(pred, what):
        deadline = time.time() + 5
        while not pred(held()):
            assert time.time() < deadline, "%s: conn_mem_bytes %d" % (what, held())
            time.sleep(0.05)

    for size, counted in ((1_000_000, True), (8_000, False)):
        key = b"partial-value-%d" % size
        value = os.urandom(size // 2).hex().encode()
        s = socket.create_connection((srv.host, srv.port), timeout=10)
        s.sendall(b"set %s 0 0 %d\r\n" % (key, size) + value[:100])
        if counted:
            wait_held(lambda n: n >= size, "1 MB value being read")
        else:
            time.sleep(0.3)
            assert held() == 0
        s.sendall(value[100:] + b"\r\n")
        assert recv_exact(s, 8) == b"STORED\r\n"
        wait_held(lambda n: n == 0, "value complete")
        assert watcher.get(b"get %s\r\n" % key) == \
            b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (key, size, value)
        # An incomplete one given up by its client is given back too.
        s.sendall(b"set %s-2 0 0 %d\r\n" % (key, size) + value[:100])
        if counted:
            wait_held(lambda n: n >= size, "second value being read")
        s.close()
        wait_held(lambda n: n == 0, "connection closed")
    assert srv.alive()
