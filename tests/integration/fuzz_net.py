"""Shared machinery of the network fuzzers (test_binary_fuzz.py,
test_meta_fuzz.py): the seed, boundary numbers, and one connection fed a
batch of requests and read to its end.

Every request byte comes from one random.Random(seed), so FUZZ_SEED=<n>
sends the same requests again; how the server's reads split them may
differ from run to run.
"""
import os
import random
import select
import socket
import time

# Numbers where a parser's range checks and sums change: the edges of
# 31, 32, 63 and 64 bits, -I (1 MB) and 30 days of exptime.
BOUNDARY_NUMBERS = [
    b"-1", b"0", b"1", b"2", b"-2147483648", b"2147483647", b"2147483648",
    b"4294967295", b"4294967296", b"9223372036854775807", b"9223372036854775808",
    b"18446744073709551615", b"18446744073709551616", b"-9223372036854775809",
    b"1048575", b"1048576", b"1048577", b"2592000", b"2592001",
    b"999999999999999999999999999999", b"+1", b"-0", b"0x10", b"1e3", b"",
]


def fuzz_seed():
    """FUZZ_SEED if set, else a fresh seed; printed either way."""
    seed = int(os.environ.get("FUZZ_SEED") or random.SystemRandom().randrange(1 << 31))
    print("FUZZ_SEED=%d" % seed)
    return seed


def exchange(srv, pieces, timeout=10.0):
    """Sends each piece in turn on a new connection, reading answers
    meanwhile, then shuts the connection for writing and reads until the
    server closes it.  Returns (answer, whole): whole is False when the
    server reset the connection (it closed with input unread), so that the
    answer's last bytes may be missing."""
    sock = socket.create_connection((srv.host, srv.port), timeout=timeout)
    sock.setblocking(False)
    out = bytearray()
    whole = True
    deadline = time.time() + timeout

    def read_some():
        nonlocal whole
        try:
            chunk = sock.recv(1 << 20)
        except BlockingIOError:
            return True
        except ConnectionResetError:
            whole = False
            return False
        if not chunk:
            return False
        out.extend(chunk)
        return True

    try:
        open_ = True
        for piece in pieces:
            view = memoryview(piece)
            while view and open_:
                left = deadline - time.time()
                assert left > 0, "server read no more after %d bytes of answer" % len(out)
                r, w, _ = select.select([sock], [sock], [], left)
                if r:
                    open_ = read_some()
                if w and open_:
                    try:
                        view = view[sock.send(view):]
                    except BlockingIOError:
                        pass
                    except (BrokenPipeError, ConnectionResetError):
                        open_ = False
                        whole = False
            if not open_:
                break
        if open_:
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass
        while True:
            left = deadline - time.time()
            assert left > 0, "server kept the connection open after the client's EOF"
            r, _, _ = select.select([sock], [], [], left)
            if r and not read_some():
                break
    finally:
        sock.close()
    return bytes(out), whole
