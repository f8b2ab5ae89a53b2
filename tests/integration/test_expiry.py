"""Expiry: negative, relative, absolute unix time, touch/gat changing the TTL."""
import time


def test_expiry_semantics(conn):
    now = int(conn.stats()["time"])
    assert conn.line(b"set neg 0 -1 1\r\nx\r\n") == b"STORED\r\n"
    assert conn.line(b"set rel 0 1 1\r\nx\r\n") == b"STORED\r\n"
    assert conn.line(b"set long 0 100 1\r\nx\r\n") == b"STORED\r\n"
    assert conn.line(b"set abs 0 %d 1\r\nx\r\n" % (now + 2)) == b"STORED\r\n"          # absolute, > 30 days
    assert conn.line(b"set absfar 0 %d 1\r\nx\r\n" % (now + 1000)) == b"STORED\r\n"
    assert conn.line(b"set past 0 %d 1\r\nx\r\n" % (now - 1000)) == b"STORED\r\n"     # already expired
    assert conn.line(b"set tch 0 1 1\r\nx\r\n") == b"STORED\r\n"
    assert conn.line(b"set shrink 0 100 1\r\nx\r\n") == b"STORED\r\n"
    assert conn.line(b"set gatx 0 1 1\r\nx\r\n") == b"STORED\r\n"
    assert conn.line(b"set gatshrink 0 100 1\r\nx\r\n") == b"STORED\r\n"
    assert conn.line(b"set zero 0 0 1\r\nx\r\n") == b"STORED\r\n"
    assert conn.get(b"get neg past\r\n") == b"END\r\n"
    assert conn.get(b"get rel abs\r\n") == b"VALUE rel 0 1\r\nx\r\nVALUE abs 0 1\r\nx\r\nEND\r\n"
    assert conn.line(b"touch tch 100\r\n") == b"TOUCHED\r\n"
    assert conn.line(b"touch shrink 1\r\n") == b"TOUCHED\r\n"
    assert conn.get(b"gat 100 gatx\r\n") == b"VALUE gatx 0 1\r\nx\r\nEND\r\n"
    assert conn.get(b"gat 1 gatshrink\r\n") == b"VALUE gatshrink 0 1\r\nx\r\nEND\r\n"
    # mg t shows the remaining TTL
    r = conn.line(b"mg long t\r\n")
    assert r in (b"HD t100\r\n", b"HD t99\r\n"), r
    time.sleep(3.1)
    assert conn.get(b"get rel abs shrink gatshrink\r\n") == b"END\r\n"
    assert conn.get(b"get long absfar tch gatx zero\r\n") == (
        b"VALUE long 0 1\r\nx\r\nVALUE absfar 0 1\r\nx\r\nVALUE tch 0 1\r\nx\r\n"
        b"VALUE gatx 0 1\r\nx\r\nVALUE zero 0 1\r\nx\r\nEND\r\n")
    # expired items cannot be touched, incremented or appended
    assert conn.line(b"touch rel 10\r\n") == b"NOT_FOUND\r\n"
    assert conn.line(b"append rel 0 0 1\r\ny\r\n") == b"NOT_STORED\r\n"
    assert conn.line(b"add rel 0 0 1\r\ny\r\n") == b"STORED\r\n"
    st = conn.stats()
    assert int(st["get_expired"]) >= 1
