"""Fuzz the binary protocol over the network with frames built to hit the
length checks.

Most frames are requests of every opcode with their real layout; a mutated
one has header fields set on purpose: the body, key or extras length to a
boundary value (0, 1, the real lengths +-1, 2^31-1, 2^32-2, 2^32-1,
-I +-1 ...), the opcode to any valid one (or a few invalid), the magic,
the CAS; then random bytes over the frame, a cut, or more bytes after it.
A random fuzzer never found the 4 GB body length of an APPEND that once
crashed the server (vlen + 2 wrapped in 32 bits); these frames do.

Checks: every answer on a binary connection is a sequence of well-formed
response frames; a store whose header announces a value larger than -I
gets an error response carrying its opaque (tac refuses it before the
value arrives; stock memcached closes or waits for the value, so this one
is not checked there); keys stored before the fuzzing read back intact
afterwards; the server stays up.  The server runs with -F so that a mutated
frame that happens to be a valid FLUSH cannot legitimately wipe the data.
FUZZ_SEED replays a run (the seed is printed); FUZZ_FRAMES sets its length.
"""
import os
import random
import socket
import struct
import zlib

import pytest

from fuzz_net import exchange, fuzz_seed
from mcserver import IS_STOCK, recv_exact

HDR = struct.Struct(">BBHBBHIIQ")
FRAMES = int(os.environ.get("FUZZ_FRAMES", "12000"))
ITEM_MAX = 1 << 20

# opcode: (extras length, has a key, has a value)
OPS = {
    0x00: (0, True, False), 0x01: (8, True, True), 0x02: (8, True, True),
    0x03: (8, True, True), 0x04: (0, True, False), 0x05: (20, True, False),
    0x06: (20, True, False), 0x07: (0, False, False), 0x08: (4, False, False),
    0x09: (0, True, False), 0x0A: (0, False, False), 0x0B: (0, False, False),
    0x0C: (0, True, False), 0x0D: (0, True, False), 0x0E: (0, True, True),
    0x0F: (0, True, True), 0x10: (0, True, False), 0x11: (8, True, True),
    0x12: (8, True, True), 0x13: (8, True, True), 0x14: (0, True, False),
    0x15: (20, True, False), 0x16: (20, True, False), 0x17: (0, False, False),
    0x18: (4, False, False), 0x19: (0, True, True), 0x1A: (0, True, True),
    0x1B: (4, False, False), 0x1C: (4, True, False), 0x1D: (4, True, False),
    0x1E: (4, True, False), 0x23: (4, True, False), 0x24: (4, True, False),
}
VALID_OPS = sorted(OPS)
STORE_OPS = [op for op in VALID_OPS if OPS[op][2]]
QUIT_OPS = [0x07, 0x17]
OTHER_OPS = [0x20, 0x21, 0x22, 0x25, 0x80, 0xFF]
KEY_LENGTHS = [1, 1, 2, 8, 33, 250]  # the shortest key leaves the longest value
LEN32 = [0, 1, 2, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFD, 0xFFFFFFFE, 0xFFFFFFFF,
         ITEM_MAX - 1, ITEM_MAX, ITEM_MAX + 1, 65535, 65536]
EXPTIMES = [0, 1, 100, 2592000, 2592001, 0x7FFFFFFF, 0xFFFFFFFF]


def frame(op, key=b"", value=b"", extras=b"", opaque=0, cas=0):
    body = extras + key + value
    return HDR.pack(0x80, op, len(key), len(extras), 0, 0, len(body), opaque, cas) + body


def encode(key, version):
    body = b"%s|%d|" % (key, version) + random.Random(key).randbytes(40)
    return body + b"|%08x" % zlib.crc32(body)


def fuzz_key(rng):
    """Keys of 1 to 250 bytes, none of them a "pre:" key."""
    return (b"z%d-" % rng.randrange(50) + b"k" * 250)[:rng.choice(KEY_LENGTHS)]


def valid_frame(rng, ops=VALID_OPS):
    op = rng.choice(ops)
    extlen, has_key, has_value = OPS[op]
    key = fuzz_key(rng) if has_key else b""
    if op == 0x10:
        key = rng.choice([b"", b"settings", b"items", b"slabs", b"sizes", b"bogus"])
    value = rng.randbytes(rng.choice([0, 1, 10, 100, 1000])) if has_value else b""
    if extlen == 8:
        extras = struct.pack(">II", rng.getrandbits(32), rng.choice(EXPTIMES))
    elif extlen == 20:
        extras = struct.pack(">QQI", rng.choice([0, 1, 1 << 63, (1 << 64) - 1]),
                             rng.choice([0, 7, (1 << 64) - 1]), rng.choice(EXPTIMES))
    elif op == 0x1B:
        extras = struct.pack(">I", 0)   # verbosity stays off: stderr is not the test
    elif extlen == 4:
        extras = struct.pack(">I", rng.choice(EXPTIMES))
    else:
        extras = b""
    return frame(op, key, value, extras, opaque=rng.getrandbits(32),
                 cas=rng.choice([0, 0, 1, rng.getrandbits(64)]))


def mutate(rng, data):
    """Sets header fields on purpose, then maybe damages bytes at random."""
    data = bytearray(data)
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        keylen, extlen = struct.unpack_from(">HB", data, 2)
        real = keylen + extlen
        field = rng.choice([0, 1, 1, 2, 3, 4, 5])
        if field == 0:
            struct.pack_into(">I", data, 8, rng.choice(
                LEN32 + [real, max(real - 1, 0), real + 1, len(data) - 24]))
        elif field == 1:
            # The value length (body - key - extras) at a boundary, up to
            # the largest the 32-bit body length allows.
            vlen = rng.choice(rng.choice([[0, 1, ITEM_MAX - 2, ITEM_MAX - 1, ITEM_MAX],
                                          [0x7FFFFFFF, 0xFFFFFFFE - real, 0xFFFFFFFF - real]]))
            struct.pack_into(">I", data, 8, (real + vlen) & 0xFFFFFFFF)
        elif field == 2:
            struct.pack_into(">H", data, 2, rng.choice(
                [0, 1, 250, 251, 0xFFFF, min(keylen + 1, 0xFFFF), max(keylen - 1, 0)]))
        elif field == 3:
            data[4] = rng.choice([0, 4, 8, 20, 255, (extlen + 1) % 256, max(extlen - 1, 0)])
        elif field == 4:
            data[1] = rng.choice(VALID_OPS + OTHER_OPS)
        else:
            struct.pack_into(">Q", data, 16, rng.choice([0, 1, (1 << 64) - 1, rng.getrandbits(64)]))
    kind = rng.randrange(10)
    if kind == 0:
        data[rng.randrange(len(data))] = rng.randrange(256)
    elif kind == 1:
        del data[rng.randrange(1, len(data)):]
    elif kind == 2:
        data += rng.randbytes(rng.randrange(1, 300))
    elif kind == 3:
        data[0] = rng.choice([0x81, 0x00, rng.randrange(256)])
    return bytes(data)


def bad_frame(rng):
    r = rng.random()
    if r < 0.45:
        return mutate(rng, valid_frame(rng, STORE_OPS))
    if r < 0.9:
        return mutate(rng, valid_frame(rng))
    if r < 0.95:
        return b"\x80" + rng.randbytes(rng.randrange(0, 60))
    return HDR.pack(0x80, rng.randrange(256), rng.randrange(65536), rng.randrange(256), 0, 0,
                    rng.getrandbits(32), rng.getrandbits(32), 0)


def connection_frames(rng):
    """Valid requests, then bad frames, then a few more valid ones: a frame
    the server refuses may end the connection, so it comes after the valid
    ones.  Returns the frames and the index of the first bad one."""
    frames = [valid_frame(rng) for _ in range(rng.randrange(0, 12))]
    bad = len(frames)
    frames += [bad_frame(rng) for _ in range(rng.choice([1, 1, 1, 2, 3]))]
    frames += [valid_frame(rng) for _ in range(rng.randrange(0, 4))]
    return frames, bad


def responses(answer):
    """(opaque, status) of each whole response frame."""
    pos, out = 0, []
    while len(answer) - pos >= 24:
        hdr = HDR.unpack_from(answer, pos)
        pos += 24 + hdr[6]
        if pos <= len(answer):
            out.append((hdr[7], hdr[5]))
    return out


def oversized_store(frames, bad):
    """The opaque of frames[bad] if it is a store with a valid header
    whose value cannot fit an item (-I), no quit comes before it, and its
    extras and key are all sent; else None."""
    if any(f[1] in QUIT_OPS for f in frames[:bad]):
        return None
    f = frames[bad]
    if len(f) < 24 or f[0] != 0x80 or f[1] not in OPS or not OPS[f[1]][2]:
        return None
    keylen, extlen = struct.unpack_from(">HB", f, 2)
    bodylen, opaque = struct.unpack_from(">II", f, 8)
    if extlen != OPS[f[1]][0] or not 0 < keylen <= 250 or bodylen < keylen + extlen:
        return None
    if bodylen - keylen - extlen + 2 <= ITEM_MAX:
        return None
    if sum(map(len, frames[bad:])) < 24 + extlen + keylen:
        return None
    return opaque


def check_frames(answer, whole):
    """The answer is whole response frames (the last may be cut if the
    server reset the connection)."""
    pos = 0
    while pos < len(answer):
        if len(answer) - pos < 24:
            assert not whole, "a cut response header at byte %d: %r" % (pos, answer[pos:])
            return
        magic, _op, keylen, extlen, _dt, _status, bodylen, _opaque, _cas = \
            HDR.unpack_from(answer, pos)
        assert magic == 0x81, "response magic 0x%02x at byte %d: %r" % (magic, pos, answer[pos:pos + 48])
        assert keylen + extlen <= bodylen, "response lengths %d + %d > body %d at byte %d" % (
            keylen, extlen, bodylen, pos)
        if pos + 24 + bodylen > len(answer):
            assert not whole, "response body of %d bytes cut at byte %d" % (bodylen, pos)
            return
        pos += 24 + bodylen


def bin_get(sock, key):
    sock.sendall(frame(0x00, key))
    hdr = HDR.unpack(recv_exact(sock, 24))
    body = recv_exact(sock, hdr[6]) if hdr[6] else b""
    return hdr[5], body[hdr[3] + hdr[2]:]


def sasl_login(s):
    """PLAIN as the fuzz user (-S runs)."""
    body = b"PLAIN" + b"\0fuzz\0fuzz-pass"
    s.sendall(struct.pack(">BBHBBHIIQ", 0x80, 0x21, 5, 0, 0, 0, len(body), 0, 0) + body)
    hdr = HDR.unpack(recv_exact(s, 24))
    recv_exact(s, hdr[6])
    assert hdr[5] == 0, "SASL login refused"


@pytest.mark.parametrize("sasl", [False, pytest.param(True, marks=pytest.mark.tac_only)],
                         ids=["open", "sasl"])
def test_binary_fuzz_keeps_data_and_server(server, sasl, tmp_path, monkeypatch):
    """Random and damaged frames; with -S they arrive unauthenticated, and the SASL
    opcodes among them (list, auth, step in any order, any body) must fail cleanly."""
    seed = fuzz_seed()
    rng = random.Random(seed)
    args = ["-F", "-c", "4096"]
    if sasl:
        users = tmp_path / "users"
        users.write_text("fuzz:fuzz-pass\n")
        monkeypatch.setenv("MEMCACHED_SASL_PWDB", str(users))
        monkeypatch.delenv("SASL_CONF_PATH", raising=False)
        args.append("-S")
    srv = server(args=args)

    keep = {}
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    if sasl:
        sasl_login(s)
    for i in range(300):
        key = b"pre:%d" % i
        value = encode(key, i)
        keep[key] = value
        s.sendall(frame(0x01, key, value, struct.pack(">II", i, 0)))
        hdr = HDR.unpack(recv_exact(s, 24))
        recv_exact(s, hdr[6])
        assert hdr[5] == 0
    s.close()

    sent = answered = conns = refused = 0
    while sent < FRAMES:
        conns += 1
        frames, bad = connection_frames(rng)
        sent += len(frames)
        where = "seed %d, connection %d" % (seed, conns)
        try:
            answer, whole = exchange(srv, frames)
        except AssertionError as e:
            raise AssertionError("%s: %s" % (where, e))
        assert srv.alive(), "server died after %d frames (%s)" % (sent, where)
        if frames[0][:1] != b"\x80":
            continue                    # a text connection
        try:
            check_frames(answer, whole)
        except AssertionError as e:
            raise AssertionError("%s: %s" % (where, e))
        got = responses(answer)
        answered += len(got)
        opaque = oversized_store(frames, bad)
        if opaque is not None and not IS_STOCK:
            # Refused at once (E2BIG), never read into an item; stock
            # memcached closes or answers only after the value.
            assert any(o == opaque and st != 0 for o, st in got), \
                "%s: no refusal for the oversized store %r" % (where, frames[bad][:64])
            refused += 1

    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    if sasl:
        sasl_login(s)
    bad = []
    for key, value in keep.items():
        status, got = bin_get(s, key)
        if status != 0 or got != value:
            bad.append((key, status))
    s.close()
    assert not bad, "seed %d: %d keys damaged, e.g. %r" % (seed, len(bad), bad[:5])
    assert srv.alive()
    print("sent %d frames over %d connections, %d responses, %d oversized stores refused"
          % (sent, conns, answered, refused))
