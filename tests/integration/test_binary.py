"""Binary protocol: exact frames for every opcode, quiet variants, errors.

Frames are built by hand here so that each field (opaque, CAS, extras,
status) is checked exactly.  Every test also passes against stock memcached.
"""
import socket
import struct

import pytest

from mcserver import recv_exact

HDR = struct.Struct(">BBHBBHIIQ")

GET, SET, ADD, REPLACE, DELETE, INCR, DECR, QUIT, FLUSH, GETQ, NOOP, VERSION = range(12)
GETK, GETKQ, APPEND, PREPEND, STAT, SETQ, ADDQ, REPLACEQ, DELETEQ = range(0x0C, 0x15)
INCRQ, DECRQ, QUITQ, FLUSHQ, APPENDQ, PREPENDQ, VERBOSITY, TOUCH, GAT, GATQ = range(0x15, 0x1F)
GATK, GATKQ = 0x23, 0x24

OK, ENOENT, EEXISTS, E2BIG, EINVAL, NOT_STORED, DELTA_BADVAL = range(7)
UNKNOWN = 0x81


def frame(op, key=b"", value=b"", extras=b"", opaque=0, cas=0):
    body = extras + key + value
    return HDR.pack(0x80, op, len(key), len(extras), 0, 0, len(body), opaque, cas) + body


class Bin:
    def __init__(self, sock):
        self.sock = sock

    def send(self, data):
        self.sock.sendall(data)

    def recv(self):
        magic, op, klen, elen, _dt, status, blen, opaque, cas = HDR.unpack(recv_exact(self.sock, 24))
        assert magic == 0x81, "bad response magic %#x" % magic
        body = recv_exact(self.sock, blen) if blen else b""
        return dict(op=op, status=status, opaque=opaque, cas=cas,
                    extras=body[:elen], key=body[elen:elen + klen], value=body[elen + klen:])

    def call(self, op, **kw):
        self.send(frame(op, **kw))
        return self.recv()

    def set(self, key, value, flags=0, exp=0, op=SET, cas=0, opaque=0):
        return self.call(op, key=key, value=value, extras=struct.pack(">II", flags, exp),
                         cas=cas, opaque=opaque)


@pytest.fixture
def b(shared_srv):
    s = socket.create_connection(("127.0.0.1", shared_srv.port), timeout=10)
    c = Bin(s)
    r = c.call(FLUSH)
    assert r["status"] == OK
    yield c
    s.close()


def test_set_get_roundtrip_with_flags_and_cas(b):
    r = b.set(b"k1", b"hello", flags=0xDEADBEEF, opaque=0x1234)
    assert r["status"] == OK and r["opaque"] == 0x1234 and r["cas"] != 0
    cas = r["cas"]
    g = b.call(GET, key=b"k1", opaque=7)
    assert g["status"] == OK and g["opaque"] == 7
    assert g["extras"] == struct.pack(">I", 0xDEADBEEF)
    assert g["key"] == b"" and g["value"] == b"hello" and g["cas"] == cas
    gk = b.call(GETK, key=b"k1")
    assert gk["key"] == b"k1" and gk["value"] == b"hello"


def test_get_miss_variants(b):
    r = b.call(GET, key=b"nope")
    assert r["status"] == ENOENT and r["value"] == b"Not found"
    r = b.call(GETK, key=b"nope")
    assert r["status"] == ENOENT and r["key"] == b"nope"
    # Quiet misses say nothing: the NOOP answer comes first.
    b.send(frame(GETQ, key=b"nope", opaque=1) + frame(GETKQ, key=b"nope", opaque=2) +
           frame(NOOP, opaque=3))
    r = b.recv()
    assert r["op"] == NOOP and r["opaque"] == 3


def test_quiet_multiget_in_order(b):
    for i in range(20):
        assert b.set(b"mk%d" % i, b"v%d" % i)["status"] == OK
    req = b"".join(frame(GETKQ, key=b"mk%d" % i, opaque=i) for i in range(0, 30, 2))
    b.send(req + frame(NOOP, opaque=999))
    got = []
    while True:
        r = b.recv()
        if r["op"] == NOOP:
            break
        got.append((r["opaque"], r["key"], r["value"]))
    assert got == [(i, b"mk%d" % i, b"v%d" % i) for i in range(0, 20, 2)]


def test_add_replace_cas_semantics(b):
    assert b.set(b"a", b"1", op=ADD)["status"] == OK
    r = b.set(b"a", b"2", op=ADD)
    assert r["status"] == EEXISTS and r["value"] == b"Data exists for key."
    r = b.set(b"missing", b"x", op=REPLACE)
    assert r["status"] == ENOENT
    cas = b.call(GET, key=b"a")["cas"]
    assert b.set(b"a", b"3", cas=cas + 1000)["status"] == EEXISTS
    r = b.set(b"a", b"3", cas=cas)
    assert r["status"] == OK and r["cas"] != cas
    assert b.set(b"nokey", b"3", cas=12345)["status"] == ENOENT
    assert b.call(GET, key=b"a")["value"] == b"3"


def test_append_prepend(b):
    r = b.call(APPEND, key=b"ap", value=b"x")
    assert r["status"] == NOT_STORED and r["value"] == b"Not stored."
    b.set(b"ap", b"mid", flags=5)
    assert b.call(APPEND, key=b"ap", value=b"_end")["status"] == OK
    assert b.call(PREPEND, key=b"ap", value=b"start_")["status"] == OK
    g = b.call(GET, key=b"ap")
    assert g["value"] == b"start_mid_end" and g["extras"] == struct.pack(">I", 5)


def test_incr_decr(b):
    ext = struct.pack(">QQI", 5, 100, 0)
    r = b.call(INCR, key=b"n", extras=ext)
    assert r["status"] == OK and struct.unpack(">Q", r["value"])[0] == 100
    r = b.call(INCR, key=b"n", extras=ext)
    assert struct.unpack(">Q", r["value"])[0] == 105
    r = b.call(DECR, key=b"n", extras=struct.pack(">QQI", 1000, 0, 0))
    assert struct.unpack(">Q", r["value"])[0] == 0
    r = b.call(INCR, key=b"absent", extras=struct.pack(">QQI", 1, 0, 0xFFFFFFFF))
    assert r["status"] == ENOENT
    b.set(b"txt", b"abc")
    r = b.call(INCR, key=b"txt", extras=ext)
    assert r["status"] == DELTA_BADVAL
    b.set(b"big", b"18446744073709551615")
    r = b.call(INCR, key=b"big", extras=struct.pack(">QQI", 2, 0, 0))
    assert struct.unpack(">Q", r["value"])[0] == 1


def test_delete_and_cas_delete(b):
    cas = b.set(b"d", b"v")["cas"]
    assert b.call(DELETE, key=b"d", cas=cas + 1)["status"] == EEXISTS
    assert b.call(DELETE, key=b"d", cas=cas)["status"] == OK
    assert b.call(DELETE, key=b"d")["status"] == ENOENT
    assert b.call(GET, key=b"d")["status"] == ENOENT


def test_touch_and_gat(b):
    b.set(b"t", b"tv", flags=3)
    r = b.call(TOUCH, key=b"t", extras=struct.pack(">I", 100))
    assert r["status"] == OK and r["value"] == b""
    r = b.call(GAT, key=b"t", extras=struct.pack(">I", 100))
    assert r["status"] == OK and r["value"] == b"tv" and r["extras"] == struct.pack(">I", 3)
    r = b.call(GATK, key=b"t", extras=struct.pack(">I", 100))
    assert r["key"] == b"t" and r["value"] == b"tv"
    assert b.call(TOUCH, key=b"zz", extras=struct.pack(">I", 1))["status"] == ENOENT
    # Binary expirations are unsigned: 0xffffffff is an absolute time far
    # in the future, not "already expired".
    assert b.call(TOUCH, key=b"t", extras=struct.pack(">I", 0xFFFFFFFF))["status"] == OK
    assert b.call(GET, key=b"t")["status"] == OK


def test_quiet_storage_replies_only_on_error(b):
    b.send(frame(SETQ, key=b"q1", value=b"v", extras=struct.pack(">II", 0, 0), opaque=1) +
           frame(ADDQ, key=b"q1", value=b"v", extras=struct.pack(">II", 0, 0), opaque=2) +
           frame(DELETEQ, key=b"q1", opaque=3) +
           frame(NOOP, opaque=4))
    r = b.recv()
    assert r["opaque"] == 2 and r["status"] == EEXISTS
    r = b.recv()
    assert r["op"] == NOOP and r["opaque"] == 4


def test_version_noop_verbosity_flush(b):
    r = b.call(VERSION)
    assert r["status"] == OK and r["value"][:1].isdigit()
    assert b.call(NOOP)["status"] == OK
    b.set(b"f", b"v")
    assert b.call(FLUSH, extras=struct.pack(">I", 0))["status"] == OK
    assert b.call(GET, key=b"f")["status"] == ENOENT


def test_stat_packets(b):
    b.send(frame(STAT, opaque=9))
    stats = {}
    while True:
        r = b.recv()
        assert r["opaque"] == 9 and r["status"] == OK
        if not r["key"]:
            break
        stats[r["key"].decode()] = r["value"].decode()
    for name in ("pid", "uptime", "curr_items", "get_hits", "cmd_get", "bytes", "threads"):
        assert name in stats
    b.send(frame(STAT, key=b"settings"))
    names = set()
    while True:
        r = b.recv()
        if not r["key"]:
            break
        names.add(r["key"])
    assert b"maxbytes" in names
    assert b.call(STAT, key=b"nonsense")["status"] == ENOENT


def test_unknown_opcode_keeps_connection(b):
    r = b.call(0x7F)
    assert r["status"] == UNKNOWN and r["value"] == b"Unknown command"
    assert b.call(NOOP)["status"] == OK


def test_too_large_value_is_swallowed(b):
    big = b"x" * (1024 * 1024 + 10)
    r = b.set(b"huge", big)
    assert r["status"] == E2BIG
    assert b.call(NOOP)["status"] == OK
    assert b.call(GET, key=b"huge")["status"] == ENOENT


def test_bad_lengths_close_connection(shared_srv):
    s = socket.create_connection(("127.0.0.1", shared_srv.port), timeout=5)
    c = Bin(s)
    # GET with extras is a protocol error: EINVAL, then the server hangs up.
    c.send(frame(GET, key=b"k", extras=b"1234"))
    assert c.recv()["status"] == EINVAL
    assert s.recv(10) == b""
    s.close()


def test_bad_magic_closes_only_that_connection(shared_srv):
    s = socket.create_connection(("127.0.0.1", shared_srv.port), timeout=5)
    s.sendall(b"\x80" + b"\x00" * 23 + b"\x81" + b"\x00" * 23)
    c = Bin(s)
    assert c.recv()["status"] == EINVAL  # GET without a key
    s.close()
    assert shared_srv.alive()


def test_quit(shared_srv):
    s = socket.create_connection(("127.0.0.1", shared_srv.port), timeout=5)
    c = Bin(s)
    assert c.call(QUIT)["status"] == OK
    assert s.recv(10) == b""
    s.close()


def parse_bin(data):
    """The binary responses packed in `data`, in order."""
    out = []
    while data:
        magic, op, klen, elen, _dt, status, blen, opaque, cas = HDR.unpack(data[:24])
        assert magic == 0x81, "bad response magic %#x" % magic
        body = data[24:24 + blen]
        assert len(body) == blen, "a response cut short"
        out.append(dict(op=op, status=status, opaque=opaque, cas=cas, extras=body[:elen],
                        key=body[elen:elen + klen], value=body[elen + klen:]))
        data = data[24 + blen:]
    return out


def test_binary_over_udp(server):
    """Each datagram picks its protocol by its first byte, as memcached's UDP does: binary
    set, get, getk, a quiet pipeline, a value split over several reply datagrams, and text
    on the same socket."""
    from test_options import udp_request
    s = server(udp=True)
    addr = (s.host, s.udp_port)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    flags = struct.pack(">II", 0xCAFE, 0)
    key = b"udp:binary:" + b"k" * 36
    r, n = udp_request(u, addr, 1, frame(SET, key=key, value=b"hello", extras=flags, opaque=9))
    (res,) = parse_bin(r)
    assert (res["op"], res["status"], res["opaque"], n) == (SET, OK, 9, 1) and res["cas"] != 0
    r, _ = udp_request(u, addr, 2, frame(GETK, key=key, opaque=10))
    (res,) = parse_bin(r)
    assert (res["status"], res["key"], res["value"]) == (OK, key, b"hello")
    assert res["extras"] == struct.pack(">I", 0xCAFE)
    r, _ = udp_request(u, addr, 3, frame(NOOP, opaque=3))
    assert [(g["op"], g["opaque"]) for g in parse_bin(r)] == [(NOOP, 3)]
    # A value larger than a datagram comes back in several, in order.
    big = bytes((i * 13) % 251 for i in range(6000))
    r, _ = udp_request(u, addr, 4, frame(SET, key=b"udp:big", value=big, extras=flags))
    assert parse_bin(r)[0]["status"] == OK
    r, n = udp_request(u, addr, 5, frame(GET, key=b"udp:big"))
    assert n >= 5 and parse_bin(r)[0]["value"] == big
    # Text on the same socket still works, and sees the binary writes.
    r, _ = udp_request(u, addr, 6, b"get " + key + b"\r\n")
    assert r == b"VALUE %s %d 5\r\nhello\r\nEND\r\n" % (key, 0xCAFE)
    r, _ = udp_request(u, addr, 7, frame(DELETE, key=key))
    assert parse_bin(r)[0]["status"] == OK
    r, _ = udp_request(u, addr, 8, frame(GET, key=key))
    assert parse_bin(r)[0]["status"] == ENOENT
    u.close()


@pytest.mark.tac_only
def test_udp_datagrams_of_the_protocol_b_rules_out_are_dropped(server):
    """-B ascii drops binary datagrams and -B binary text ones; the other kind is answered."""
    from test_options import udp_request
    for mode, ok, dropped in (("ascii", b"version\r\n", frame(VERSION)),
                              ("binary", frame(VERSION), b"version\r\n")):
        s = server(["-B", mode], udp=True)
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        addr = (s.host, s.udp_port)
        with pytest.raises(socket.timeout):
            udp_request(u, addr, 1, dropped, timeout=0.5)
        r, _ = udp_request(u, addr, 2, ok)
        assert b"1.6" in r
        u.close()
        assert s.alive()
