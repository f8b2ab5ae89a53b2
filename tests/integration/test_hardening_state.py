"""A restart state record whose checksum holds is still checked before it is linked.

Without -o tier_key the state file's record chunks carry a CRC32C, which
anyone who can write the file can compute again.  A record edited that way
once came back as `VALUE victim 0 5\\r\\nEVIL!!!END`: a value without its
trailing CRLF, breaking the reply's framing.  Each test edits one record of
a real state file, sums its chunk again, restarts, and checks that the
record is dropped and counted (recovery_refused) while every other item
comes back exact.
"""
import os
import shutil
import signal
import struct
import tempfile
import time

import pytest

from mcserver import IS_STOCK

pytestmark = [pytest.mark.tac_only,
              pytest.mark.skipif(IS_STOCK, reason="tac-memcached's restart state")]

HDR_SIZE = 4096
CHUNK = struct.Struct("<IIII")                 # len, count, crc, pad
REC = struct.Struct("<BBHIIIqQQQQ")            # struct rs_rec: 56 bytes
REC_OFF_AT = 8 + 4 + 4 + 8 + 8 + 8 + 8 + 8 + 8 + 8 + 8 + 8   # rs_header.rec_off


def _table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


TABLE = _table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def records(state):
    """(chunk offset, chunk header, [(record offset, fields, key)]) for each chunk."""
    (rec_off,) = struct.unpack_from("<Q", state, REC_OFF_AT)
    off = rec_off
    out = []
    while True:
        ln, count, crc, _ = CHUNK.unpack_from(state, off)
        if ln == 0:
            return out
        body = off + CHUNK.size
        assert crc32c(state[body:body + ln]) == crc, "chunk CRC not understood"
        recs, p = [], body
        for _ in range(count):
            f = REC.unpack_from(state, p)
            key = bytes(state[p + REC.size:p + REC.size + f[1]])
            recs.append((p, f, key))
            p += REC.size + f[1] + (f[4] if f[0] == 0 else 0)
        out.append((off, (ln, count), recs))
        off = body + ln


@pytest.fixture
def ssd_dir():
    d = tempfile.mkdtemp(prefix="tac-state-", dir=os.environ.get("TAC_SSD_DIR") or None)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def edit_and_restart(server, ssd_dir, edit):
    args = ["-m", "16", "-o", "ssd_path=%s/ssd:64m" % ssd_dir]
    srv = server(args)
    c = srv.connect()
    keep = {}
    for i in range(200):
        k, v = b"keep-%03d" % i, b"%03d" % i * (i % 9 + 1)
        assert c.line(b"set %s %d 0 %d\r\n%s\r\n" % (k, i, len(v), v)) == b"STORED\r\n"
        keep[k] = (i, v)
    assert c.line(b"set victim 0 0 5\r\nhello\r\n") == b"STORED\r\n"
    srv.expect_exit = True
    assert srv.stop(signal.SIGTERM) == 0
    path = os.path.join(ssd_dir, "ssd.state")
    state = bytearray(open(path, "rb").read())
    found = False
    for off, (ln, _count), recs in records(state):
        for p, f, key in recs:
            if key == b"victim":
                edit(state, p, f)
                found = True
        if found:
            body = off + CHUNK.size
            struct.pack_into("<I", state, off + 8, crc32c(state[body:body + ln]))
            break
    assert found, "no record of the victim key"
    open(path, "wb").write(state)
    srv2 = server(args)
    c2 = srv2.connect()
    deadline = time.time() + 30
    while c2.stats(b"tac")["recovery_state"] != "done":
        assert time.time() < deadline
        time.sleep(0.05)
    for k, (fl, v) in keep.items():
        assert c2.get(b"get %s\r\n" % k) == b"VALUE %s %d %d\r\n%s\r\nEND\r\n" % (k, fl, len(v), v)
    assert c2.get(b"get victim\r\n") == b"END\r\n"
    st = c2.stats(b"tac")
    assert int(st["recovery_refused"]) == 1
    assert int(st["recovery_items"]) == len(keep)


def _value_at(p, f):
    return p + REC.size + f[1]


def test_value_without_its_crlf_is_refused(server, ssd_dir):
    def edit(state, p, f):
        v = _value_at(p, f)
        assert state[v:v + 7] == b"hello\r\n"
        state[v:v + 7] = b"EVIL!!!"
    edit_and_restart(server, ssd_dir, edit)


def test_unknown_flag_bits_are_refused(server, ssd_dir):
    def edit(state, p, f):
        struct.pack_into("<H", state, p + 2, f[2] | 0x8000)
    edit_and_restart(server, ssd_dir, edit)


def test_a_time_before_the_epoch_is_refused(server, ssd_dir):
    def edit(state, p, f):
        struct.pack_into("<q", state, p + 16, -5)
    edit_and_restart(server, ssd_dir, edit)
