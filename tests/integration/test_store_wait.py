"""A store that finds no room waits for it, parked on its connection.

The set-up makes room scarce on purpose: 8 MB of DRAM and a 48 MB SSD tier
(5 pages of 8 MB, 2 of them defrag's reserve) take 900 KB values.  Every
few sets the SSD has no page for the writers until defrag drops its oldest
page (cache semantics), so stores must wait for room.  They wait parked:
the worker serves other connections, later requests on the same
connection are answered after it, in order, and nothing is refused.
"""
import os
import shutil
import socket
import struct
import tempfile
import threading
import time

import pytest

from mcserver import IS_STOCK, recv_until

pytestmark = [pytest.mark.tac_only, pytest.mark.skipif(IS_STOCK, reason="tac-only")]

KB = 1024
VLEN = 900 * KB


@pytest.fixture
def ssd_dir():
    d = tempfile.mkdtemp(prefix="tac-wait-", dir=os.environ.get("TAC_SSD_DIR"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def scarce(server, d, extra=""):
    return server(["-t", "1", "-m", "8", "-I", "1m", "-o",
                   "ssd_path=%s/ssd:48m%s" % (d, extra)])


def value(i):
    head = b"v%05d|" % i
    return head + bytes([65 + i % 26]) * (VLEN - len(head))


def ints(st, *names):
    return {n: int(st[n]) for n in names}


def pinger(port, stop, lat):
    """Round trips on a second connection to the same worker (-t 1)."""
    s = socket.create_connection(("127.0.0.1", port))
    while not stop.is_set():
        t = time.monotonic()
        s.sendall(b"version\r\n")
        recv_until(s, b"\r\n", timeout=30)
        lat.append(time.monotonic() - t)
        time.sleep(0.002)
    s.close()


def run_pipelined(srv, make_req, expect, n):
    """Sends n requests at once on one connection while another connection
    pings; returns the replies' lines and the pings' latencies."""
    c = srv.connect()
    stop, lat = threading.Event(), []
    th = threading.Thread(target=pinger, args=(srv.port, stop, lat))
    th.start()
    try:
        c.send(b"".join(make_req(i) for i in range(n)))
        replies = expect(c, n)
    finally:
        stop.set()
        th.join()
    return c, replies, lat


def text_expect(c, n):
    buf = recv_until(c.sock, b"END\r\n", timeout=120)
    lines = buf.split(b"\r\n")
    return lines[:n], lines[n:]


@pytest.mark.parametrize("proto", ["text", "meta"])
def test_stores_park_until_room_in_order(server, ssd_dir, proto):
    srv = scarce(server, ssd_dir)
    n = 120
    if proto == "text":
        def req(i):
            v = value(i)
            return b"set wait-%05d 0 0 %d\r\n%s\r\n" % (i, len(v), v)
        ok = b"STORED"
    else:
        def req(i):
            v = value(i)
            return b"ms wait-%05d %d O%d\r\n%s\r\n" % (i, len(v), i, v)
        ok = None
    # A get of the last key, after all the sets: it must see the last set.
    last = n - 1

    def make(i):
        r = req(i)
        if i == last:
            r += b"get wait-%05d\r\n" % last
        return r

    c, (lines, rest), lat = run_pipelined(srv, make, text_expect, n)
    for i, line in enumerate(lines):
        if ok is not None:
            assert line == ok, "reply %d: %r" % (i, line[:80])
        else:
            assert line == b"HD O%d" % i, "reply %d out of order or refused: %r" % (i, line[:80])
    assert rest[0] == b"VALUE wait-%05d 0 %d" % (last, VLEN)
    assert rest[1] == value(last)
    st = ints(c.stats_general(), "store_waits", "store_waits_done", "store_wait_timeouts",
              "stores_waiting", "store_no_memory")
    print(st, "max ping %.1f ms" % (1000 * max(lat)))
    assert st["store_waits"] > 0, "no store had to wait: the test proves nothing"
    assert st["store_waits_done"] == st["store_waits"]
    assert st["store_wait_timeouts"] == 0 and st["store_no_memory"] == 0
    assert st["stores_waiting"] == 0
    # The worker served the other connection while stores were parked.
    assert len(lat) > 10 and max(lat) < 1.0, "pings stalled: max %.3f s" % max(lat)
    assert int(c.stats(b"tiers")["ssd_items_dropped"]) > 0   # room came from drops


def test_binary_store_parks_until_room(server, ssd_dir):
    srv = scarce(server, ssd_dir)
    n = 100

    def req(i):
        key = b"bwait-%05d" % i
        v = value(i)
        extras = struct.pack(">II", 0, 0)
        hdr = struct.pack(">BBHBBHIIQ", 0x80, 0x01, len(key), len(extras), 0, 0,
                          len(extras) + len(key) + len(v), i, 0)
        return hdr + extras + key + v

    def expect(c, n):
        out = []
        for _ in range(n):
            h = c.sock.recv(24, socket.MSG_WAITALL)
            magic, op, klen, elen, dt, status, blen, opaque, cas = struct.unpack(">BBHBBHIIQ", h)
            if blen:
                c.sock.recv(blen, socket.MSG_WAITALL)
            out.append((status, opaque))
        return out

    c, replies, lat = run_pipelined(srv, req, expect, n)
    assert replies == [(0, i) for i in range(n)]
    st = ints(srv.connect().stats_general(), "store_waits", "store_waits_done", "store_wait_timeouts")
    assert st["store_waits"] > 0 and st["store_waits_done"] == st["store_waits"]
    assert st["store_wait_timeouts"] == 0


def test_wait_runs_out_counted_apart(server, ssd_dir):
    """store_wait_ms=1: room rarely comes within a millisecond.  Such a store
    is answered out of memory and counted in store_wait_timeouts, not in
    store_no_memory (which counts refusals because every tier is full)."""
    srv = scarce(server, ssd_dir, ",store_wait_ms=1")
    n = 150

    def req(i):
        v = value(i)
        return b"set short-%05d 0 0 %d\r\n%s\r\n" % (i, len(v), v)

    c, (lines, rest), lat = run_pipelined(srv, lambda i: req(i) + (b"get none\r\n" if i == n - 1 else b""),
                                          text_expect, n)
    refused = [l for l in lines if l != b"STORED"]
    assert all(l == b"SERVER_ERROR out of memory storing object" for l in refused), refused[:3]
    st = ints(c.stats_general(), "store_waits", "store_wait_timeouts", "store_no_memory", "store_waits_done")
    print(st, "refused", len(refused))
    assert st["store_wait_timeouts"] == len(refused) > 0
    assert st["store_no_memory"] == 0
    assert st["store_waits"] == st["store_waits_done"] + st["store_wait_timeouts"]
    assert c.stats(b"settings")["store_wait_ms"] == "1"


def test_store_wait_ms_zero_answers_at_once(server, ssd_dir):
    srv = scarce(server, ssd_dir, ",store_wait_ms=0")
    c = srv.connect()
    refused = 0
    for i in range(60):
        v = value(i)
        r = c.line(b"set zero-%05d 0 0 %d\r\n%s\r\n" % (i, len(v), v), timeout=30)
        if r != b"STORED\r\n":
            assert r == b"SERVER_ERROR out of memory storing object\r\n", r
            refused += 1
    st = ints(c.stats_general(), "store_waits", "store_no_memory")
    assert st["store_waits"] == 0
    assert st["store_no_memory"] == refused > 0


def test_M_full_tiers_refuse_without_waiting(server, ssd_dir):
    """-M: once every tier is full a store is refused at once (store_no_memory),
    not after store_wait_ms, and nothing stored is lost."""
    srv = server(["-M", "-t", "1", "-m", "8", "-I", "1m", "-o", "ssd_path=%s/ssd:48m" % ssd_dir])
    c = srv.connect()
    stored = []
    t = time.monotonic()
    for i in range(60):
        v = value(i)
        r = c.line(b"set full-%05d 0 0 %d\r\n%s\r\n" % (i, len(v), v), timeout=30)
        if r == b"STORED\r\n":
            stored.append(i)
        else:
            assert r == b"SERVER_ERROR out of memory storing object\r\n", r
    took = time.monotonic() - t
    st = ints(c.stats_general(), "store_no_memory", "store_wait_timeouts", "evictions")
    assert st["store_no_memory"] > 0 and st["store_wait_timeouts"] == 0
    assert took < 20, "refusals waited: %.1f s" % took
    assert st["evictions"] == 0
    for i in stored:
        assert c.get(b"get full-%05d\r\n" % i, timeout=30) == \
            b"VALUE full-%05d 0 %d\r\n%s\r\nEND\r\n" % (i, VLEN, value(i))
