"""Meta commands (mg/ms/md/ma/mn/me) over raw sockets; bytes as memcached 1.6.18 sends them."""
import re

import pytest


def cas_of(resp):
    m = re.search(rb" c(\d+)", resp)
    assert m, resp
    return int(m.group(1))


def test_mn_and_basic_ms_mg(conn):
    assert conn.line(b"mn\r\n") == b"MN\r\n"
    assert conn.line(b"ms foo 3 T0 F7\r\nbar\r\n") == b"HD\r\n"
    assert conn.req(b"mg foo s v f t k\r\n", b"bar\r\n") == b"VA 3 s3 f7 t-1 kfoo\r\nbar\r\n"
    assert conn.req(b"mg foo v\r\n", b"bar\r\n") == b"VA 3\r\nbar\r\n"
    assert conn.line(b"mg foo\r\n") == b"HD\r\n"
    assert conn.line(b"mg foo k s\r\n") == b"HD kfoo s3\r\n"
    assert conn.line(b"mg miss v\r\n") == b"EN\r\n"
    # the classic get sees the meta-set item
    assert conn.get(b"get foo\r\n") == b"VALUE foo 7 3\r\nbar\r\nEND\r\n"


def test_mg_opaque_and_quiet(conn):
    assert conn.line(b"ms foo 3\r\nbar\r\n") == b"HD\r\n"
    assert conn.req(b"mg foo O123 k v\r\n", b"bar\r\n") == b"VA 3 O123 kfoo\r\nbar\r\n"
    # q: misses are silent, hits are not; mn flushes
    assert conn.req(b"mg miss q k v\r\nmg foo q k\r\nmn\r\n", b"MN\r\n") == b"HD kfoo\r\nMN\r\n"
    assert conn.req(b"mg foo v O1 q\r\nmn\r\n", b"MN\r\n") == b"VA 3 O1\r\nbar\r\nMN\r\n"


def test_mg_base64_key(conn):
    assert conn.line(b"ms foo 3\r\nbar\r\n") == b"HD\r\n"
    # "Zm9v" is base64 for "foo"; k returns the key as sent
    # 1.6.18 echoes the decoded key; later versions echo it encoded with a b flag
    assert conn.req(b"mg Zm9v b k v\r\n", b"bar\r\n") in (b"VA 3 kfoo\r\nbar\r\n",
                                                          b"VA 3 kZm9v b\r\nbar\r\n")
    assert conn.line(b"mg Zm9v b s\r\n") == b"HD s3\r\n"
    assert conn.line(b"mg Zm9v s\r\n") == b"EN\r\n"  # without b it is a different key


def test_ms_cas_flags(conn):
    r = conn.line(b"ms c1 2 c\r\nhi\r\n")
    assert r.startswith(b"HD c")
    cas = cas_of(r)
    assert conn.line(b"mg c1 c\r\n") == b"HD c%d\r\n" % cas
    assert conn.line(b"ms c1 2 C%d\r\nyo\r\n" % (cas + 1000)) == b"EX\r\n"
    assert conn.line(b"ms c1 2 C%d\r\nyo\r\n" % cas) == b"HD\r\n"
    assert conn.req(b"mg c1 v\r\n", b"yo\r\n") == b"VA 2\r\nyo\r\n"
    assert conn.line(b"ms nokey 2 C5\r\nyo\r\n") == b"NF\r\n"


def test_ms_modes(conn):
    assert conn.line(b"ms a 1\r\nx\r\n") == b"HD\r\n"
    assert conn.line(b"ms a 2 MA\r\nzz\r\n") == b"HD\r\n"
    assert conn.req(b"mg a v\r\n", b"xzz\r\n") == b"VA 3\r\nxzz\r\n"
    assert conn.line(b"ms a 2 MP\r\nyy\r\n") == b"HD\r\n"
    assert conn.req(b"mg a v\r\n", b"yyxzz\r\n") == b"VA 5\r\nyyxzz\r\n"
    assert conn.line(b"ms q 2 MR\r\nzz\r\n") == b"NS\r\n"
    assert conn.line(b"ms q 2 MA\r\nzz\r\n") == b"NS\r\n"
    assert conn.line(b"ms q 2 ME\r\nzz\r\n") == b"HD\r\n"
    assert conn.line(b"ms q 2 ME\r\nzz\r\n") == b"NS\r\n"
    assert conn.line(b"ms q 2 MR\r\nrr\r\n") == b"HD\r\n"
    assert conn.line(b"ms q 2 MS\r\nss\r\n") == b"HD\r\n"
    assert conn.req(b"mg q v\r\n", b"ss\r\n") == b"VA 2\r\nss\r\n"
    assert conn.line(b"ms q 2 MX\r\nzz\r\n") == b"CLIENT_ERROR invalid mode for ms M token\r\n"
    # the bad command's data was swallowed; the connection stays in sync
    assert conn.line(b"mn\r\n") == b"MN\r\n"


def test_ms_quiet(conn):
    assert conn.req(b"ms q1 1 q\r\nx\r\nms q1 1 MA q\r\ny\r\nms q2 1 MR q\r\nz\r\nmn\r\n", b"MN\r\n") \
        == b"NS\r\nMN\r\n"
    assert conn.req(b"mg q1 v\r\n", b"xy\r\n") == b"VA 2\r\nxy\r\n"


def test_ms_ttl_and_mg_touch(conn):
    assert conn.line(b"ms t1 1 T100\r\nx\r\n") == b"HD\r\n"
    assert conn.req(b"mg t1 t v\r\n", b"x\r\n") == b"VA 1 t100\r\nx\r\n"
    assert conn.line(b"mg t1 T5 t\r\n") == b"HD t5\r\n"
    assert conn.line(b"mg t1 t\r\n") == b"HD t5\r\n"
    assert conn.line(b"ms ex 1 T-1\r\nx\r\n") == b"HD\r\n"
    assert conn.line(b"mg ex v\r\n") == b"EN\r\n"


def test_mg_hit_and_last_access(conn):
    assert conn.line(b"ms foo 3\r\nbar\r\n") == b"HD\r\n"
    assert conn.req(b"mg foo h l v\r\n", b"bar\r\n") == b"VA 3 h0 l0\r\nbar\r\n"
    assert conn.line(b"mg foo h\r\n") == b"HD h1\r\n"


def test_mg_vivify_and_win_flags(conn):
    r = conn.req(b"mg vv N30 s v t\r\n", b"\r\n\r\n")
    assert r == b"VA 0 s0 t30 W\r\n\r\n"
    r = conn.req(b"mg vv N30 s v t\r\n", b"\r\n\r\n")
    assert r == b"VA 0 s0 t30 Z\r\n\r\n"
    assert conn.line(b"ms vv 1 T0\r\nx\r\n") == b"HD\r\n"
    assert conn.req(b"mg vv v\r\n", b"x\r\n") == b"VA 1\r\nx\r\n"


def test_md_and_invalidate(conn):
    assert conn.line(b"ms d 1\r\nx\r\n") == b"HD\r\n"
    assert conn.line(b"md d\r\n") == b"HD\r\n"
    assert conn.line(b"md d\r\n") == b"NF\r\n"
    # q hides HD but not NF for md
    assert conn.req(b"md d q\r\nmn\r\n", b"MN\r\n") == b"NF\r\nMN\r\n"
    assert conn.line(b"ms d 1 T0\r\nx\r\n") == b"HD\r\n"
    # I: mark stale instead of deleting; first fetcher wins (W), then Z
    assert conn.line(b"md d I T30\r\n") == b"HD\r\n"
    assert conn.req(b"mg d v t\r\n", b"x\r\n") == b"VA 1 t30 X W\r\nx\r\n"
    assert conn.req(b"mg d v\r\n", b"x\r\n") == b"VA 1 Z X\r\nx\r\n"
    # a fresh set clears the stale state
    assert conn.line(b"ms d 1\r\ny\r\n") == b"HD\r\n"
    assert conn.req(b"mg d v\r\n", b"y\r\n") == b"VA 1\r\ny\r\n"


def test_ma_arithmetic(conn):
    assert conn.line(b"ma cnt\r\n") == b"NF\r\n"
    assert conn.line(b"ma cnt N0 J5\r\n") == b"HD\r\n"
    assert conn.req(b"ma cnt v\r\n", b"6\r\n") == b"VA 1\r\n6\r\n"
    assert conn.req(b"ma cnt MD D2 v\r\n", b"4\r\n") == b"VA 1\r\n4\r\n"
    assert conn.req(b"ma cnt MD D100 v\r\n", b"0\r\n") == b"VA 1\r\n0\r\n"
    assert conn.req(b"ma new N0 J13 v\r\n", b"13\r\n") == b"VA 2\r\n13\r\n"
    r = conn.req(b"ma new MI D7 v t c\r\n", b"20\r\n")
    assert re.fullmatch(rb"VA 2 t-1 c\d+\r\n20\r\n", r), r
    assert conn.req(b"ma gone q\r\nmn\r\n", b"MN\r\n") == b"NF\r\nMN\r\n"
    assert conn.req(b"ma cnt q\r\nmn\r\n", b"MN\r\n") == b"MN\r\n"
    assert conn.line(b"ms txt 3\r\nabc\r\n") == b"HD\r\n"
    assert conn.line(b"ma txt v\r\n") == b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"
    assert conn.line(b"ma cnt MX\r\n") == b"CLIENT_ERROR invalid mode for ma M token\r\n"


def test_me_debug(conn):
    assert conn.line(b"ms dbg 3\r\nabc\r\n") == b"HD\r\n"
    r = conn.line(b"me dbg\r\n")
    assert re.fullmatch(rb"ME dbg exp=-1 la=\d+ cas=\d+ fetch=no cls=\d+ size=\d+(?: tier=dram)?\r\n", r), r
    assert conn.line(b"me nope\r\n") == b"EN\r\n"
    assert conn.line(b"me\r\n") == b"CLIENT_ERROR bad command line format\r\n"


def test_meta_errors(conn):
    assert conn.line(b"mg\r\n") == b"ERROR\r\n"
    assert conn.line(b"ms\r\n") == b"ERROR\r\n"
    assert conn.line(b"md\r\n") == b"ERROR\r\n"
    assert conn.line(b"ma\r\n") == b"ERROR\r\n"
    assert conn.line(b"ms a\r\n") == b"CLIENT_ERROR bad command line format\r\n"
    assert conn.line(b"ms a abc\r\n") == b"CLIENT_ERROR bad command line format\r\n"
    assert conn.line(b"ms a -1\r\n") == b"CLIENT_ERROR bad command line format\r\n"
    assert conn.line(b"ms foo 3\r\nbar\r\n") == b"HD\r\n"
    assert conn.line(b"mg foo !\r\n") == b"CLIENT_ERROR invalid flag\r\n"
    assert conn.line(b"mg foo v v\r\n") == b"CLIENT_ERROR duplicate flag\r\n"
    assert conn.line(b"mg %s v\r\n" % (b"k" * 251)) == b"CLIENT_ERROR bad command line format\r\n"
    assert conn.line(b"mn\r\n") == b"MN\r\n"


def test_meta_pipeline_order(conn):
    cmds = b"".join(b"ms p%d 2 T0\r\nv%d\r\n" % (i, i % 10) for i in range(100))
    cmds += b"".join(b"mg p%d v k O%d\r\n" % (i, i) for i in range(100))
    cmds += b"mn\r\n"
    r = conn.req(cmds, b"MN\r\n")
    want = b"HD\r\n" * 100 + b"".join(b"VA 2 kp%d O%d\r\nv%d\r\n" % (i, i, i % 10) for i in range(100)) + b"MN\r\n"
    assert r == want


@pytest.mark.tac_only
def test_ms_explicit_cas_E(conn):
    # E<cas> (memcached >= 1.6.19): the item takes the given CAS value.
    assert conn.line(b"ms e1 1 E12345\r\nx\r\n") == b"HD\r\n"
    assert conn.line(b"mg e1 c\r\n") == b"HD c12345\r\n"
    assert conn.line(b"ms e1 1 C12345 E777\r\ny\r\n") == b"HD\r\n"
    assert conn.line(b"mg e1 c\r\n") == b"HD c777\r\n"
