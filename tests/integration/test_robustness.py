"""Pipelining, huge multi-gets, and hostile input that must never crash the server."""
import os
import random
import socket
import time

from mcserver import recv_for, recv_until


def test_pipelining_in_order(conn):
    n = 500
    req = b""
    want = b""
    for i in range(n):
        req += b"set p%d 0 0 %d\r\n%d\r\n" % (i, len(b"%d" % i), i)
        want += b"STORED\r\n"
        req += b"get p%d\r\n" % i
        want += b"VALUE p%d 0 %d\r\n%d\r\nEND\r\n" % (i, len(b"%d" % i), i)
        if i % 3 == 0:
            req += b"incr p%d 1\r\n" % i
            want += b"%d\r\n" % (i + 1)
        if i % 5 == 0:
            req += b"delete p%d\r\nget p%d\r\n" % (i, i)
            want += b"DELETED\r\nEND\r\n"
    req += b"version\r\n"
    r = conn.req(req, b"\r\n", timeout=30)
    while not r.startswith(want) or not r[len(want):].endswith(b"\r\n"):
        r += conn.sock.recv(1 << 20)
        assert len(r) <= len(want) + 100
    assert r[:len(want)] == want
    assert r[len(want):].startswith(b"VERSION ")


def test_get_10000_keys_one_line(conn):
    keys = [b"key%05d" % i for i in range(10000)]
    req = b"".join(b"set %s 0 0 %d noreply\r\n%s\r\n" % (k, len(k), k) for k in keys[::2])
    conn.send(req)
    assert conn.line(b"mn\r\n") == b"MN\r\n"
    line = b"get " + b" ".join(keys) + b"\r\n"
    assert len(line) > 80000
    r = conn.get(line, timeout=30)
    want = b"".join(b"VALUE %s 0 %d\r\n%s\r\n" % (k, len(k), k) for k in keys[::2]) + b"END\r\n"
    assert r == want


def _check_intact(srv, keys):
    c = srv.connect()
    for k, v in keys.items():
        assert c.get(b"get %s\r\n" % k) == b"VALUE %s 0 %d\r\n%s\r\nEND\r\n" % (k, len(v), v)
    assert c.line(b"version\r\n").startswith(b"VERSION ")


def _store_canaries(srv):
    c = srv.connect()
    keys = {b"canary%d" % i: os.urandom(16).hex().encode() * (1 + i) for i in range(20)}
    for k, v in keys.items():
        assert c.line(b"set %s 0 0 %d\r\n%s\r\n" % (k, len(v), v)) == b"STORED\r\n"
    return keys


def test_random_garbage_never_crashes(srv):
    seed = int(os.environ.get("FUZZ_SEED", random.randrange(1 << 30)))
    print("FUZZ_SEED=%d" % seed)
    rnd = random.Random(seed)
    keys = _store_canaries(srv)
    words = [b"get", b"set", b"gets", b"cas", b"incr", b"decr", b"delete", b"touch", b"gat", b"mg", b"ms",
             b"md", b"ma", b"mn", b"me", b"stats", b"flush_all 1000", b"verbosity", b"add", b"append",
             b"\x00", b"\xff", b"\r", b"\n", b" ", b"-1", b"18446744073709551616", b"noreply", b"99999999999",
             b"canary1"]
    for _round in range(60):
        k = socket.create_connection((srv.host, srv.port), timeout=5)
        kind = rnd.randrange(4)
        if kind == 0:
            data = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 4096)))
        elif kind == 1:
            data = b" ".join(rnd.choice(words) for _ in range(rnd.randrange(1, 20))) + rnd.choice([b"\r\n", b"\n", b""])
        elif kind == 2:  # binary-protocol-looking garbage
            data = b"\x80" + bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 64)))
        else:
            data = b"set canary0x 0 0 %d\r\n" % rnd.choice([0, 1, 5, 100]) + os.urandom(rnd.randrange(0, 200))
        data = data.replace(b"flush_all", b"flush_al_")
        try:
            k.sendall(data)
            recv_for(k, 0.02)
        except OSError:
            pass
        k.close()
        assert srv.alive(), "server died on input %r (FUZZ_SEED=%d)" % (data[:200], seed)
    _check_intact(srv, keys)


def test_huge_lines_never_crash(srv):
    keys = _store_canaries(srv)
    # a 4 MB line without a newline: the server may answer an error and/or close, but must live
    for payload in (b"get " + b"a" * (4 << 20), b"x" * (4 << 20), b"set " + b"k" * (1 << 20) + b" 0 0 1\r\nx\r\n",
                    b"get " + b"k " * (1 << 20) + b"\r\n"):
        k = socket.create_connection((srv.host, srv.port), timeout=10)
        try:
            k.sendall(payload)
            recv_for(k, 0.3)
        except OSError:
            pass
        k.close()
        assert srv.alive()
    _check_intact(srv, keys)


def test_half_sent_commands_and_slow_client(srv):
    keys = _store_canaries(srv)
    c = srv.connect()
    msg = b"set slow 0 0 10\r\n0123456789\r\nget slow\r\n"
    for b in msg:  # one byte at a time
        c.send(bytes([b]))
    r = recv_until(c.sock, b"END\r\n")
    assert r == b"STORED\r\nVALUE slow 0 10\r\n0123456789\r\nEND\r\n"
    # abandon a connection in the middle of a value
    k = socket.create_connection((srv.host, srv.port), timeout=5)
    k.sendall(b"set cut 0 0 1000\r\n" + b"x" * 500)
    k.close()
    time.sleep(0.1)
    _check_intact(srv, keys)
    c2 = srv.connect()
    assert c2.get(b"get cut\r\n") == b"END\r\n"


def test_many_connections_churn(srv):
    for i in range(200):
        k = socket.create_connection((srv.host, srv.port), timeout=5)
        if i % 2:
            k.sendall(b"set c%d 0 0 1\r\nx\r\n" % i)
            assert recv_until(k, b"\r\n") == b"STORED\r\n"
        k.close()
    c = srv.connect()
    assert c.get(b"get c1 c199\r\n") == b"VALUE c1 0 1\r\nx\r\nVALUE c199 0 1\r\nx\r\nEND\r\n"
