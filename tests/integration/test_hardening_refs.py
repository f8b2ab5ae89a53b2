"""A key repeated in one request, and replies a client does not read.

An item's reference count is 16 bits.  A `get` line naming one key 65,600
times once took a reference per hit and wrapped it (an abort, or a use after
free without asserts).  Replies not yet sent also held memory that no bound
counted: two clients that sent 8 MB multigets and read nothing took the
server from 11 MB to 2 GB.  Each test here checks the server stays up, every
reply is exact and every stored value intact; the memory test reads the
server's RSS.
"""
import os
import shutil
import socket
import tempfile
import time

import pytest

from mcserver import IS_STOCK, SANITIZED, remove_tier_file
from test_hardening import check_canaries, store_canaries


def read_reply(sock, end=b"END\r\n", timeout=120.0):
    """Everything up to and including the final `end` line."""
    sock.settimeout(timeout)
    buf = bytearray()
    while not buf.endswith(end):
        d = sock.recv(1 << 20)
        assert d, "connection closed after %d bytes" % len(buf)
        buf += d
    return bytes(buf)


def stat(c, name, sub=b""):
    return int(c.stats(sub)[name])


def rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.parametrize("cmd,repeats", [(b"get", 65600), (b"gets", 1000000), (b"gat 0", 70000)])
def test_one_key_repeated_in_one_line(server, cmd, repeats):
    """One line naming the same key again and again is answered whole, and
    the value and its neighbours are intact after it."""
    srv = server(["-m", "64"])
    vals = store_canaries(srv)
    c = srv.connect()
    assert c.line(b"set k 5 0 5\r\nhello\r\n") == b"STORED\r\n"
    cas = c.get(b"gets k\r\n").split(b"\r\n")[0].split()[-1]
    s = socket.create_connection((srv.host, srv.port))
    s.sendall(cmd + b" k" * repeats + b"\r\n")
    one = b"VALUE k 5 5 %s\r\nhello\r\n" % cas if cmd == b"gets" else b"VALUE k 5 5\r\nhello\r\n"
    reply = read_reply(s)
    assert len(reply) == len(one) * repeats + 5, (len(reply), len(one) * repeats + 5)
    assert reply == one * repeats + b"END\r\n"
    # The same connection goes on serving.
    s.sendall(b"get k\r\n")
    assert read_reply(s) == b"VALUE k 5 5\r\nhello\r\nEND\r\n"
    assert srv.alive()
    check_canaries(srv, vals)
    assert c.get(b"get k\r\n") == b"VALUE k 5 5\r\nhello\r\nEND\r\n"


def test_repeated_key_line_with_a_bad_key_is_refused_whole(server):
    """A key over 250 bytes far down a long line is refused before anything is
    sent, as memcached checks every key first."""
    srv = server(["-m", "64"])
    c = srv.connect()
    assert c.line(b"set k 0 0 2\r\nhi\r\n") == b"STORED\r\n"
    s = socket.create_connection((srv.host, srv.port))
    s.sendall(b"get" + b" k" * 200000 + b" " + b"x" * 251 + b" k\r\nget k\r\n")
    assert read_reply(s) == \
        b"CLIENT_ERROR bad command line format\r\nVALUE k 0 2\r\nhi\r\nEND\r\n"


@pytest.mark.tac_only
@pytest.mark.skipif(IS_STOCK, reason="counts tac-memcached's copies")
def test_many_clients_pinning_one_item_get_copies(server, tmp_path):
    """400 clients each ask for one key 12,000 times in one line and do not
    read: past 61,440 held references the replies carry copies (a unix
    socket, whose fixed kernel buffers leave most replies queued in the
    server), and every client then gets exactly its answer."""
    path = str(tmp_path / "mc.sock")
    srv = server(["-c", "1024", "-o", "conn_mem_limit=1g"], unix=path)
    vals = store_canaries(srv)
    c = srv.connect()
    assert c.line(b"set hot 1 0 1\r\nv\r\n") == b"STORED\r\n"
    socks = []
    repeats = 12000
    line = b"get" + b" hot" * repeats + b"\r\n"
    for _ in range(400):
        s = socket.socket(socket.AF_UNIX)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(path)
        s.sendall(line)
        socks.append(s)
    deadline = time.time() + 30
    while stat(c, "reply_item_copies", b"tac") == 0 and time.time() < deadline:
        time.sleep(0.1)
    assert stat(c, "reply_item_copies", b"tac") > 0
    one = b"VALUE hot 1 1\r\nv\r\n"
    for s in socks:
        assert read_reply(s) == one * repeats + b"END\r\n"
        s.close()
    assert srv.alive()
    check_canaries(srv, vals)
    assert c.get(b"get hot\r\n") == one + b"END\r\n"


@pytest.mark.tac_only
@pytest.mark.skipif(IS_STOCK, reason="tac-memcached's tiers")
def test_repeated_ssd_key_in_one_line(server):
    """The same SSD-resident key 65,600 times in one line: the reads are
    parked at most CONN_PARK_MAX at a time, and each hit is the value."""
    d = tempfile.mkdtemp(prefix="tac-refs-", dir=os.environ.get("TAC_SSD_DIR") or None)
    try:
        srv = server(["-m", "16", "-o", "ssd_path=%s/ssd:64m,fetch_threads=0,"
                                        "temp_sample_interval=0" % d])
        c = srv.connect()
        s = socket.create_connection((srv.host, srv.port))
        n = 24000
        for i in range(n):
            v = b"%06d" % i * 166
            c.send(b"set k%05d 3 0 %d noreply\r\n%s\r\n" % (i, len(v), v))
        assert c.line(b"mn\r\n") == b"MN\r\n"
        key = None
        for i in range(0, n, 101):
            s.sendall(b"me k%05d\r\n" % i)
            ln = read_reply(s, b"\r\n")
            if b"tier=ssd" in ln:
                key = b"k%05d" % i
                break
        assert key is not None, "no key reached the SSD tier"
        v = b"%06d" % int(key[1:]) * 166
        repeats = 65600
        s.sendall(b"get" + (b" " + key) * repeats + b"\r\n")
        reply = read_reply(s)
        one = b"VALUE %s 3 %d\r\n%s\r\n" % (key, len(v), v)
        assert reply == one * repeats + b"END\r\n"
        assert srv.alive()
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.mark.tac_only
@pytest.mark.skipif(IS_STOCK, reason="tac-memcached's conn_mem_limit")
def test_unread_multigets_stay_within_conn_mem_limit(server):
    """Two clients each send an 8 MB multiget (1.68M hits) and read nothing:
    the server's memory grows by less than conn_mem_limit plus 64 MB, and
    reads the clients' answers out once they do read."""
    srv = server(["-m", "64"])
    vals = store_canaries(srv)
    c = srv.connect()
    limit = stat(c, "conn_mem_limit", b"settings")
    for i in range(10):
        assert c.line(b"set k%d 0 0 1\r\n%d\r\n" % (i, i)) == b"STORED\r\n"
    before = rss_bytes(srv.proc.pid)
    keys = b"".join(b" k%d" % (i % 10) for i in range(1680000))
    socks = []
    for _ in range(2):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect((srv.host, srv.port))
        s.sendall(b"get" + keys + b"\r\n")
        socks.append(s)
    # Until the lookups stop: the clients read nothing, so their streams wait.
    last, still = -1, 0
    deadline = time.time() + 30
    while still < 2 and time.time() < deadline:
        time.sleep(0.2)
        now = stat(c, "get_hits")
        still = still + 1 if now == last else 0
        last = now
    grown = rss_bytes(srv.proc.pid) - before
    # A sanitizer keeps freed memory in quarantine (256 MB by default).
    slack = (64 << 20) + (256 << 20 if SANITIZED else 0)
    assert grown < limit + slack, "RSS grew by %d MB (conn_mem_limit %d MB)" % (grown >> 20, limit >> 20)
    c2 = srv.connect()
    assert c2.get(b"get k3\r\n") == b"VALUE k3 0 1\r\n3\r\nEND\r\n"
    # Whoever was not closed for memory gets its whole answer.
    expect = b"".join(b"VALUE k%d 0 1\r\n%d\r\n" % (i % 10, i % 10) for i in range(1680000)) + b"END\r\n"
    answered = 0
    for s in socks:
        s.settimeout(120)
        buf = bytearray()
        while True:
            d = s.recv(1 << 20)
            if not d:
                break
            buf += d
            if buf.endswith(b"END\r\n") and len(buf) >= len(expect):
                break
        if bytes(buf) == expect:
            answered += 1
        else:
            assert expect.startswith(bytes(buf)), "a reply that is not a prefix of the answer"
        s.close()
    closed = stat(c2, "conn_mem_closed", b"tac")
    assert answered + closed == 2, (answered, closed)
    check_canaries(srv, vals)
