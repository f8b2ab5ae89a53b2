"""Classic text protocol over raw sockets: exact response bytes (reference: memcached 1.6.18)."""
import time

from mcserver import IS_STOCK, is_closed, recv_for, recv_until


def test_set_get_exact(conn):
    assert conn.line(b"set foo 5 0 3\r\nbar\r\n") == b"STORED\r\n"
    assert conn.get(b"get foo\r\n") == b"VALUE foo 5 3\r\nbar\r\nEND\r\n"
    assert conn.get(b"get nope\r\n") == b"END\r\n"
    # multi-get returns hits in request order and skips misses
    assert conn.line(b"set k2 0 0 2\r\nv2\r\n") == b"STORED\r\n"
    assert conn.get(b"get k2 nope foo\r\n") == b"VALUE k2 0 2\r\nv2\r\nVALUE foo 5 3\r\nbar\r\nEND\r\n"


def test_empty_value_and_binary_value(conn):
    assert conn.line(b"set e 0 0 0\r\n\r\n") == b"STORED\r\n"
    assert conn.get(b"get e\r\n") == b"VALUE e 0 0\r\n\r\nEND\r\n"
    blob = bytes(range(256)) + b"\r\nEND\r\n\x00"
    assert conn.line(b"set b 4294967295 0 %d\r\n%s\r\n" % (len(blob), blob)) == b"STORED\r\n"
    assert conn.get(b"get b\r\n") == b"VALUE b 4294967295 %d\r\n%s\r\nEND\r\n" % (len(blob), blob)


def test_gets_and_cas(conn):
    assert conn.line(b"set c 0 0 1\r\na\r\n") == b"STORED\r\n"
    r = conn.get(b"gets c\r\n")
    assert r.startswith(b"VALUE c 0 1 ") and r.endswith(b"\r\na\r\nEND\r\n")
    cas = int(r.split(b"\r\n")[0].split()[4])
    assert cas > 0
    assert conn.line(b"cas c 0 0 1 %d\r\nb\r\n" % (cas + 1000)) == b"EXISTS\r\n"
    assert conn.line(b"cas c 0 0 1 %d\r\nb\r\n" % cas) == b"STORED\r\n"
    assert conn.line(b"cas c 0 0 1 %d\r\nz\r\n" % cas) == b"EXISTS\r\n"
    assert conn.get(b"get c\r\n") == b"VALUE c 0 1\r\nb\r\nEND\r\n"
    r2 = conn.get(b"gets c\r\n")
    cas2 = int(r2.split(b"\r\n")[0].split()[4])
    assert cas2 != cas
    assert conn.line(b"cas missing 0 0 1 1\r\nb\r\n") == b"NOT_FOUND\r\n"
    # cas without the unique is a malformed command
    assert conn.line(b"cas c 0 0 1\r\n") == b"ERROR\r\n"


def test_add_replace_append_prepend(conn):
    assert conn.line(b"add a 0 0 1\r\nx\r\n") == b"STORED\r\n"
    assert conn.line(b"add a 0 0 1\r\nq\r\n") == b"NOT_STORED\r\n"
    assert conn.line(b"replace zz 0 0 1\r\nq\r\n") == b"NOT_STORED\r\n"
    assert conn.line(b"replace a 7 0 1\r\ny\r\n") == b"STORED\r\n"
    assert conn.line(b"append a 0 0 2\r\n12\r\n") == b"STORED\r\n"
    assert conn.line(b"prepend a 0 0 2\r\n00\r\n") == b"STORED\r\n"
    # append/prepend keep the original flags
    assert conn.get(b"get a\r\n") == b"VALUE a 7 5\r\n00y12\r\nEND\r\n"
    assert conn.line(b"append zz 0 0 1\r\ny\r\n") == b"NOT_STORED\r\n"
    assert conn.line(b"prepend zz 0 0 1\r\ny\r\n") == b"NOT_STORED\r\n"


def test_incr_decr(conn):
    assert conn.line(b"set n 0 0 2\r\n10\r\n") == b"STORED\r\n"
    assert conn.line(b"incr n 5\r\n") == b"15\r\n"
    assert conn.line(b"decr n 3\r\n") == b"12\r\n"
    assert conn.line(b"decr n 100\r\n") == b"0\r\n"  # decr saturates at 0
    assert conn.line(b"incr n 18446744073709551615\r\n") == b"18446744073709551615\r\n"
    assert conn.line(b"incr n 1\r\n") == b"0\r\n"  # incr wraps at 2^64
    assert conn.line(b"incr nx 1\r\n") == b"NOT_FOUND\r\n"
    assert conn.line(b"decr nx 1\r\n") == b"NOT_FOUND\r\n"
    assert conn.line(b"set s 0 0 3\r\nabc\r\n") == b"STORED\r\n"
    assert conn.line(b"incr s 1\r\n") == b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    assert conn.line(b"incr n abc\r\n") == b"CLIENT_ERROR invalid numeric delta argument\r\n"
    assert conn.line(b"incr n -1\r\n") == b"CLIENT_ERROR invalid numeric delta argument\r\n"
    assert conn.line(b"incr n 18446744073709551616\r\n") == b"CLIENT_ERROR invalid numeric delta argument\r\n"
    assert conn.line(b"incr n\r\n") == b"ERROR\r\n"
    # incr on a shorter number: length of the stored value changes
    assert conn.line(b"set w 0 0 1\r\n9\r\n") == b"STORED\r\n"
    assert conn.line(b"incr w 1\r\n") == b"10\r\n"
    assert conn.get(b"get w\r\n") == b"VALUE w 0 2\r\n10\r\nEND\r\n"


def test_delete(conn):
    assert conn.line(b"set d 0 0 1\r\nx\r\n") == b"STORED\r\n"
    assert conn.line(b"delete d\r\n") == b"DELETED\r\n"
    assert conn.line(b"delete d\r\n") == b"NOT_FOUND\r\n"
    assert conn.line(b"set d 0 0 1\r\nx\r\n") == b"STORED\r\n"
    assert conn.line(b"delete d 0\r\n") == b"DELETED\r\n"  # legacy "0" time is accepted
    usage = b"CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n"
    assert conn.line(b"delete d 5\r\n") == usage
    assert conn.line(b"delete d x y\r\n") == usage


def test_touch_and_gat_exact(conn):
    assert conn.line(b"set t 3 0 2\r\nhi\r\n") == b"STORED\r\n"
    assert conn.line(b"touch t 100\r\n") == b"TOUCHED\r\n"
    assert conn.line(b"touch nope 100\r\n") == b"NOT_FOUND\r\n"
    assert conn.line(b"touch t abc\r\n") == b"CLIENT_ERROR invalid exptime argument\r\n"
    assert conn.line(b"touch t\r\n") == b"ERROR\r\n"
    assert conn.get(b"gat 100 t\r\n") == b"VALUE t 3 2\r\nhi\r\nEND\r\n"
    r = conn.get(b"gats 100 t nope\r\n")
    assert r.startswith(b"VALUE t 3 2 ") and r.endswith(b"\r\nhi\r\nEND\r\n")
    assert conn.line(b"gat abc t\r\n") == b"CLIENT_ERROR invalid exptime argument\r\n"


def test_noreply_everywhere(conn):
    conn.send(b"set a 0 0 1 noreply\r\n1\r\n"
              b"add b 0 0 1 noreply\r\n2\r\n"
              b"replace a 0 0 1 noreply\r\n3\r\n"
              b"append a 0 0 1 noreply\r\n4\r\n"
              b"prepend a 0 0 1 noreply\r\n5\r\n"
              b"set n 0 0 1 noreply\r\n5\r\n"
              b"incr n 10 noreply\r\n"
              b"decr n 3 noreply\r\n"
              b"touch a 1000 noreply\r\n"
              b"delete b noreply\r\n"
              b"cas a 0 0 1 1 noreply\r\nz\r\n"
              b"verbosity 0 noreply\r\n")
    assert conn.get(b"get a b n\r\n") == b"VALUE a 0 3\r\n534\r\nVALUE n 0 2\r\n12\r\nEND\r\n"
    conn.send(b"flush_all noreply\r\n")
    assert conn.get(b"get a\r\n") == b"END\r\n"


def test_error_lines(conn):
    assert conn.line(b"bogus\r\n") == b"ERROR\r\n"
    assert conn.line(b"\r\n") == b"ERROR\r\n"
    assert conn.line(b"get\r\n") == b"ERROR\r\n"
    assert conn.line(b"gets\r\n") == b"ERROR\r\n"
    assert conn.line(b"set a 0 0\r\n") == b"ERROR\r\n"
    assert conn.line(b"incr\r\n") == b"ERROR\r\n"
    bad = b"CLIENT_ERROR bad command line format\r\n"
    assert conn.line(b"set a 0 0 -1\r\n") == bad          # negative length
    assert conn.line(b"set a abc 0 1\r\n") == bad         # invalid flags
    assert conn.line(b"set a 0 abc 1\r\n") == bad         # invalid exptime
    assert conn.line(b"set a 0 0 abc\r\n") == bad         # invalid length
    assert conn.line(b"set a -1 0 1\r\n") == bad          # negative flags
    assert conn.line(b"set a 0 0 2147483647\r\n") == bad  # absurd length
    # the connection is still in sync after all of that
    assert conn.line(b"set ok 0 0 2\r\nok\r\n") == b"STORED\r\n"
    assert conn.get(b"get ok a\r\n") == b"VALUE ok 0 2\r\nok\r\nEND\r\n"


def test_bad_data_chunk(srv):
    c = srv.connect()
    r = c.line(b"set a 0 0 1\r\nxyz\r\n")
    assert r.startswith(b"CLIENT_ERROR bad data chunk\r\n"), r
    recv_for(c.sock, 0.2)
    c2 = srv.connect()
    assert c2.get(b"get a\r\n") == b"END\r\n"
    assert c2.line(b"set a 0 0 1\r\nx\r\n") == b"STORED\r\n"


def test_key_too_long(conn):
    k250 = b"k" * 250
    k251 = b"k" * 251
    assert conn.line(b"set %s 0 0 1\r\nx\r\n" % k250) == b"STORED\r\n"
    assert conn.get(b"get %s\r\n" % k250) == b"VALUE %s 0 1\r\nx\r\nEND\r\n" % k250
    bad = b"CLIENT_ERROR bad command line format\r\n"
    assert conn.line(b"set %s 0 0 1\r\n" % k251) == bad
    assert conn.line(b"get %s\r\n" % k251) == bad
    assert conn.line(b"delete %s\r\n" % k251) == bad
    assert conn.line(b"incr %s 1\r\n" % k251) == bad
    assert conn.line(b"touch %s 1\r\n" % k251) == bad
    assert conn.line(b"set ok 0 0 1\r\nx\r\n") == b"STORED\r\n"


def test_too_large(server):
    s = server(["-I", "1m"])
    c = s.connect()
    big = b"x" * (1024 * 1024 + 1)
    r = c.line(b"set big 0 0 %d\r\n%s\r\n" % (len(big), big))
    assert r == b"SERVER_ERROR object too large for cache\r\n"
    # the data was swallowed: the connection stays in sync
    assert c.get(b"get big\r\n") == b"END\r\n"
    assert c.line(b"set small 0 0 1\r\ns\r\n") == b"STORED\r\n"
    # a much larger length is refused the same way
    huge = b"y" * (5 * 1024 * 1024)
    assert c.line(b"set huge 0 0 %d\r\n%s\r\n" % (len(huge), huge)) == b"SERVER_ERROR object too large for cache\r\n"
    assert c.get(b"get small huge\r\n") == b"VALUE small 0 1\r\ns\r\nEND\r\n"


def test_too_large_is_answered_after_the_value(server):
    """As memcached does, a refused text value is answered once the server
    has read it all: libmemcached, still writing the value when an early
    answer came, sometimes dropped its connection.  A value announced past
    twice -I is answered at once (its sender may never send it all)."""
    s = server(["-I", "1m"])
    c = s.connect()
    big = b"x" * (1024 * 1024 + 1024)
    c.send(b"set big 0 0 %d\r\n%s" % (len(big), big[:len(big) // 2]))
    assert recv_for(c.sock, 0.5) == b"", "answered before the value was read"
    c.send(big[len(big) // 2:] + b"\r\n")
    assert recv_until(c.sock, b"\r\n", 10) == b"SERVER_ERROR object too large for cache\r\n"
    assert c.line(b"set small 0 0 1\r\ns\r\n") == b"STORED\r\n"
    if not IS_STOCK:                # memcached waits for the whole value
        c.send(b"set huge 0 0 %d\r\n" % (3 * 1024 * 1024))
        assert recv_until(c.sock, b"\r\n", 10) == b"SERVER_ERROR object too large for cache\r\n"


def test_version_and_verbosity(conn):
    r = conn.line(b"version\r\n")
    assert r.startswith(b"VERSION ") and r.count(b"\r\n") == 1
    v = r[len(b"VERSION "):-2]
    assert v and b" " not in v and v[:1].isdigit(), r
    # libmemcached (pylibmc, memcstat, memccapable) rejects a major version of 0
    assert int(v.split(b".")[0]) >= 1, "libmemcached refuses major version 0: %r" % r
    # extra tokens are ignored
    assert conn.line(b"version foo bar\r\n") == r
    assert conn.line(b"verbosity 1\r\n") == b"OK\r\n"
    assert conn.line(b"verbosity 0\r\n") == b"OK\r\n"
    assert conn.line(b"verbosity\r\n") == b"ERROR\r\n"


def test_quit_closes(srv):
    c = srv.connect()
    c.send(b"quit\r\n")
    assert is_closed(c.sock)
    c2 = srv.connect()
    assert c2.line(b"version\r\n").startswith(b"VERSION ")


def test_shutdown_disabled_by_default(srv):
    c = srv.connect()
    assert c.line(b"shutdown\r\n") == b"ERROR: shutdown not enabled\r\n"
    time.sleep(0.2)
    assert srv.alive()
    assert c.line(b"version\r\n").startswith(b"VERSION ")


def test_shutdown_enabled_with_A(server):
    s = server(["-A"])
    c = s.connect()
    c.send(b"shutdown\r\n")
    assert is_closed(c.sock, 5)
    rc = s.proc.wait(5)
    assert rc == 0
    s.expect_exit = True


def test_flush_all(conn):
    assert conn.line(b"set a 0 0 1\r\n1\r\n") == b"STORED\r\n"
    assert conn.line(b"set b 0 0 1\r\n2\r\n") == b"STORED\r\n"
    assert conn.line(b"flush_all\r\n") == b"OK\r\n"
    assert conn.get(b"get a b\r\n") == b"END\r\n"
    assert conn.line(b"set a 0 0 1\r\n1\r\n") == b"STORED\r\n"
    assert conn.line(b"flush_all 0\r\n") == b"OK\r\n"
    assert conn.get(b"get a\r\n") == b"END\r\n"
    assert conn.line(b"flush_all abc\r\n") == b"CLIENT_ERROR invalid exptime argument\r\n"
    # items set after a flush are visible
    assert conn.line(b"set c 0 0 1\r\n3\r\n") == b"STORED\r\n"
    assert conn.get(b"get c\r\n") == b"VALUE c 0 1\r\n3\r\nEND\r\n"


def test_flush_all_delay(conn):
    assert conn.line(b"set a 0 0 1\r\n1\r\n") == b"STORED\r\n"
    assert conn.line(b"flush_all 2\r\n") == b"OK\r\n"
    # not flushed yet
    assert conn.get(b"get a\r\n") == b"VALUE a 0 1\r\n1\r\nEND\r\n"
    time.sleep(3.2)
    assert conn.get(b"get a\r\n") == b"END\r\n"
    assert conn.line(b"set b 0 0 1\r\n2\r\n") == b"STORED\r\n"
    assert conn.get(b"get b\r\n") == b"VALUE b 0 1\r\n2\r\nEND\r\n"


def test_flush_disabled_with_F(server):
    s = server(["-F"])
    c = s.connect()
    assert c.line(b"set a 0 0 1\r\n1\r\n") == b"STORED\r\n"
    assert c.line(b"flush_all\r\n") == b"CLIENT_ERROR flush_all not allowed\r\n"
    assert c.get(b"get a\r\n") == b"VALUE a 0 1\r\n1\r\nEND\r\n"


def test_cas_disabled_with_C(server):
    s = server(["-C"])
    c = s.connect()
    assert c.line(b"set a 0 0 1\r\n1\r\n") == b"STORED\r\n"
    assert c.get(b"gets a\r\n") == b"VALUE a 0 1 0\r\n1\r\nEND\r\n"
    assert c.req(b"mg a c v\r\n", b"1\r\n") == b"VA 1 c0\r\n1\r\n"
    # with CAS disabled no unique ever matches
    assert c.line(b"cas a 0 0 1 0\r\n2\r\n") == b"EXISTS\r\n"
    assert c.line(b"cas a 0 0 1 5\r\n2\r\n") == b"EXISTS\r\n"
