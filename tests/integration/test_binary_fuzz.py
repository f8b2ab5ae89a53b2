"""Fuzz the binary protocol with random and mutated frames.  Mutations set
whole length fields to boundary values on purpose (a 4 GB body length once
crashed the server), besides random bytes.

Keys stored before the fuzzing must read back intact afterwards, and the
server must stay up.  The server runs with -F so that a mutated frame that
happens to be a valid FLUSH cannot legitimately wipe the data.  Set
FUZZ_SEED to replay a run; the seed is printed.
"""
import os
import random
import socket
import struct
import time
import zlib

from mcserver import recv_exact

HDR = struct.Struct(">BBHBBHIIQ")
FRAMES = int(os.environ.get("FUZZ_FRAMES", "12000"))


def frame(op, key=b"", value=b"", extras=b"", opaque=0, cas=0):
    body = extras + key + value
    return HDR.pack(0x80, op, len(key), len(extras), 0, 0, len(body), opaque, cas) + body


def encode(key, version):
    body = b"%s|%d|" % (key, version) + bytes(random.Random(key).randrange(256) for _ in range(40))
    return body + b"|%08x" % zlib.crc32(body)


def valid_frame(rng):
    op = rng.choice([0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x09, 0x0A, 0x0B, 0x0C,
                     0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x1C, 0x1D, 0x23])
    key = b"fz:%d" % rng.randrange(500)
    if op in (0x01, 0x02, 0x03, 0x11):
        return frame(op, key, os.urandom(rng.randrange(0, 300)), struct.pack(">II", 0, 0))
    if op in (0x05, 0x06):
        return frame(op, key, extras=struct.pack(">QQI", 1, 0, 0))
    if op in (0x1C, 0x1D, 0x23):
        return frame(op, key, extras=struct.pack(">I", 0))
    if op in (0x0A, 0x0B):
        return frame(op)
    if op == 0x10:
        return frame(op, key=rng.choice([b"", b"settings", b"items", b"slabs", b"bogus"]))
    if op in (0x0E, 0x0F):
        return frame(op, key, b"app")
    return frame(op, key)


def mutate(rng, data):
    data = bytearray(data)
    for _ in range(rng.randrange(1, 6)):
        kind = rng.randrange(8)
        if kind >= 6 and len(data) >= 24:
            # A whole length field set on purpose: boundary values and
            # values next to the lengths the frame really has.
            keylen, extlen = struct.unpack_from(">HB", data, 2)
            if kind == 6:
                struct.pack_into(">I", data, 8, rng.choice(
                    [0, 1, keylen + extlen, max(keylen + extlen - 1, 0), keylen + extlen + 1,
                     0x7FFFFFFF, 0x80000000, 0xFFFFFFFD, 0xFFFFFFFE, 0xFFFFFFFF,
                     (1 << 20) - 1, 1 << 20, (1 << 20) + 1]))
            else:
                struct.pack_into(">H", data, 2, rng.choice([0, 1, 250, 251, 0xFFFF]))
        elif kind == 0 and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif kind == 1:
            # Header length fields: key length, extras length, body length.
            pos = rng.choice([2, 3, 4, 8, 9, 10, 11])
            if pos < len(data):
                data[pos] = rng.choice([0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)])
        elif kind == 2 and len(data) > 1:
            del data[rng.randrange(1, len(data)):]
        elif kind == 3:
            data += os.urandom(rng.randrange(1, 40))
        elif kind == 4 and len(data) > 1:
            data[1] = rng.randrange(256)
        elif data:
            data[0] = rng.choice([0x80, 0x81, 0x00, rng.randrange(256)])
    return bytes(data)


def random_frame(rng):
    r = rng.random()
    if r < 0.45:
        return mutate(rng, valid_frame(rng))
    if r < 0.75:
        return valid_frame(rng)
    if r < 0.9:
        return b"\x80" + os.urandom(rng.randrange(0, 60))
    return HDR.pack(0x80, rng.randrange(256), rng.randrange(65536), rng.randrange(256), 0, 0,
                    rng.randrange(1 << 32), rng.randrange(1 << 32), 0)


def bin_get(sock, key):
    sock.sendall(frame(0x00, key))
    hdr = HDR.unpack(recv_exact(sock, 24))
    body = recv_exact(sock, hdr[6]) if hdr[6] else b""
    return hdr[5], body[hdr[3] + hdr[2]:]


def test_binary_fuzz_keeps_data_and_server(server):
    seed = int(os.environ.get("FUZZ_SEED", str(int(time.time() * 1000) % (1 << 31))))
    print("FUZZ_SEED=%d" % seed)
    rng = random.Random(seed)
    srv = server(args=["-F", "-c", "4096"])

    keep = {}
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    for i in range(300):
        key = b"pre:%d" % i
        value = encode(key, i)
        keep[key] = value
        s.sendall(frame(0x01, key, value, struct.pack(">II", i, 0)))
        hdr = HDR.unpack(recv_exact(s, 24))
        recv_exact(s, hdr[6])
        assert hdr[5] == 0
    s.close()

    sent = 0
    conns = 0
    while sent < FRAMES:
        conns += 1
        sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        sock.setblocking(False)
        batch = rng.randrange(1, 60)
        try:
            for _ in range(batch):
                data = random_frame(rng)
                try:
                    sock.send(data)
                except (BlockingIOError, BrokenPipeError, ConnectionResetError):
                    break
                sent += 1
                # Drain whatever came back so the server never blocks on us.
                try:
                    while sock.recv(65536):
                        pass
                except (BlockingIOError, ConnectionResetError):
                    pass
        finally:
            sock.close()
        assert srv.alive(), "server died after %d frames (seed %d)" % (sent, seed)

    assert sent >= FRAMES
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    bad = []
    for key, value in keep.items():
        status, got = bin_get(s, key)
        if status != 0 or got != value:
            bad.append((key, status))
    s.close()
    assert not bad, "seed %d: %d keys damaged, e.g. %r" % (seed, len(bad), bad[:5])
    assert srv.alive()
    print("sent %d frames over %d connections" % (sent, conns))
