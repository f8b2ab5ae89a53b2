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


def test_expired_items_are_reused_when_memory_is_allocated(server):
    """With the crawler off, a full cache of expired items makes room for new ones at
    allocation time, as memcached does: counted in `reclaimed` (and, for items never read,
    `expired_unfetched`), never in `evictions`; the new values all read back exact."""
    c = server(["-m", "8", "-t", "2", "-o", "no_lru_crawler"]).connect()

    def put(prefix, n, ttl):
        for b in range(0, n, 250):
            reqs = b"".join(b"set %s:%05d:%s %d %d 1000 noreply\r\n%s\r\n"
                            % (prefix, i, b"k" * 30, i, ttl, (b"%s%05d" % (prefix, i)) * 125)
                            for i in range(b, min(n, b + 250)))
            assert c.line(reqs + b"mn\r\n") == b"MN\r\n"

    put(b"old", 6000, 2)                         # ~6.5 MB of -m 8
    old_fetched = 0
    for i in range(0, 6000, 2):
        got = c.get(b"get old:%05d:%s\r\n" % (i, b"k" * 30))
        old_fetched += got != b"END\r\n"
    time.sleep(3.1)
    put(b"new", 6000, 0)                         # as much again: only reuse makes room
    st = c.stats()
    assert int(st["evictions"]) == 0, st["evictions"]
    reclaimed, unfetched = int(st["reclaimed"]), int(st["expired_unfetched"])
    assert reclaimed >= 3000, "reclaimed %d" % reclaimed
    assert 0 < unfetched <= reclaimed - 1, (unfetched, reclaimed)
    items = c.stats(b"items")
    assert sum(int(v) for k, v in items.items() if k.endswith(":reclaimed")) == reclaimed
    for i in range(0, 6000, 7):
        key = b"new:%05d:%s" % (i, b"k" * 30)
        assert c.get(b"get %s\r\n" % key) == b"VALUE %s %d 1000\r\n%s\r\nEND\r\n" % (
            key, i, (b"new%05d" % i) * 125)
