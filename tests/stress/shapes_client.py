"""Client machinery for the shapes stress test and the bench/ scripts built on it.

* Self-checking values: a value carries its key's hash, a version and a CRC32
  over key, version and padding, so any reader can verify any value it gets.
* Mux: one text-protocol connection shared by several client threads the way
  spymemcached (YCSB's memcached binding) shares one: requests are queued,
  a writer thread sends whatever has queued up in one write (pipelining), a
  single reader thread matches replies to requests in FIFO order.
* Keys of an exact length, a skewed (zipfian-ish) key chooser, a CPU hog,
  stall-window analysis, `stats` parsing and sanitizer-build detection.

Nothing here starts a server; the callers do.
"""
import collections
import os
import socket
import subprocess
import sys
import threading
import time
import zlib

# ---- values ----------------------------------------------------------------

HDR_MIN = 24  # the shortest header: 8 hex key hash, version, 8 hex crc, three ':'


def key_hash(key):
    return zlib.crc32(key) & 0xFFFFFFFF


def make_value(key, ver, size, salt):
    """A value of exactly `size` bytes (at least the header) for version `ver` of `key`.
    `salt` (any int) varies the padding between writes."""
    head = b"%08x:%x:" % (key_hash(key), ver)
    npad = max(0, size - len(head) - 9)
    unit = b"%016x" % (salt & 0xFFFFFFFFFFFFFFFF)
    pad = (unit * (npad // 16 + 1))[:npad]
    crc = zlib.crc32(pad, zlib.crc32(b"%s:%x:" % (key, ver))) & 0xFFFFFFFF
    return head + b"%08x:" % crc + pad


class WrongValue(AssertionError):
    pass


def check_value(key, raw):
    """Verify a value read for `key`; return (version, crc).  Raises WrongValue."""
    parts = raw.split(b":", 3)
    if len(parts) != 4 or len(parts[0]) != 8 or len(parts[2]) != 8:
        raise WrongValue("malformed value for %r (len %d): %r" % (key[:40], len(raw), raw[:60]))
    kh, ver, crc, pad = parts
    try:
        kh, ver, crc = int(kh, 16), int(ver, 16), int(crc, 16)
    except ValueError:
        raise WrongValue("malformed value header for %r: %r" % (key[:40], raw[:60])) from None
    if kh != key_hash(key):
        raise WrongValue("value read for %r belongs to another key (hash %08x): %r" % (key[:40], kh, raw[:60]))
    if crc != zlib.crc32(pad, zlib.crc32(b"%s:%x:" % (key, ver))) & 0xFFFFFFFF:
        raise WrongValue("checksum mismatch for %r (len %d): %r...%r" % (key[:40], len(raw), raw[:60], raw[-20:]))
    return ver, crc


# ---- keys ------------------------------------------------------------------

def make_keys(n, length):
    """n distinct keys of exactly `length` bytes.  From 20 bytes on they look like
    YCSB's (b"usertable-user" + digits); the digits are a bijective scramble of the
    index, so neighbouring indexes do not share long prefixes."""
    prefix = b"usertable-user" if length >= 20 else b"k"
    d = length - len(prefix)
    assert d >= 1 and n <= 10 ** d, (n, length)
    mod = 10 ** d
    return [prefix + b"%0*d" % (d, (i * 2654435761 + 97) % mod) for i in range(n)]


class Skewed:
    """A zipfian-ish index in [0, n): rank = n * u**4 (the top 1% of ranks draws about
    32% of the picks, the top 10% about 56%), then a fixed scramble of the ranks, so the
    hot keys are spread over the key space as YCSB's scrambled zipfian spreads them."""

    def __init__(self, n):
        self.n = n
        self.mul = 1
        for p in (1000003, 999983, 7919, 104729, 15485863):
            if n % p:
                self.mul = p % n if n > 1 else 1
                break

    def __call__(self, rnd):
        r = int(self.n * rnd.random() ** 4)
        return (r * self.mul + 13) % self.n


# ---- the shared connection -------------------------------------------------

class Reply:
    """One request's reply.  kind: "store" (one line) or "get" (VALUE blocks, END)."""
    __slots__ = ("kind", "ev", "line", "values", "error", "t_send", "t_done")

    def __init__(self, kind):
        self.kind = kind
        self.ev = threading.Event()
        self.line = None  # store: the reply line; get: None, or an error line instead of END
        self.values = None  # get: {key: raw value}
        self.error = None  # the connection failed before the reply came
        self.t_send = 0.0
        self.t_done = 0.0

    def wait(self, timeout):
        if not self.ev.wait(timeout):
            raise TimeoutError("no %s reply within %ss" % (self.kind, timeout))
        if self.error is not None:
            raise ConnectionError(self.error)
        return self


class Mux:
    """A text-protocol connection that several threads share, pipelined.

    submit() queues a request and returns its Reply at once; Reply.wait() blocks
    until the reader thread has matched it (FIFO).  At most `max_queued` bytes
    wait to be written; past that submit() blocks (spymemcached's bounded
    operation queue)."""

    def __init__(self, port, name="mux", host="127.0.0.1", max_queued=8 << 20):
        self.name = name
        self.sock = socket.create_connection((host, port), timeout=10)
        self.sock.settimeout(None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.cond = threading.Condition()
        self.out = []
        self.out_bytes = 0
        self.max_queued = max_queued
        self.fifo = collections.deque()
        self.dead = None
        self.closing = False
        self.requests = 0
        self.writes = 0
        self.max_in_flight = 0
        self.reader = threading.Thread(target=self._read_loop, name=name + "-reader", daemon=True)
        self.writer = threading.Thread(target=self._write_loop, name=name + "-writer", daemon=True)
        self.reader.start()
        self.writer.start()

    # -- requests

    def submit(self, data, kind):
        r = Reply(kind)
        with self.cond:
            while self.out_bytes > self.max_queued and self.dead is None:
                self.cond.wait(1.0)
            if self.dead is not None:
                r.error = self.dead
                r.ev.set()
                return r
            r.t_send = time.monotonic()
            self.fifo.append(r)
            self.out.append(data)
            self.out_bytes += len(data)
            self.requests += 1
            if len(self.fifo) > self.max_in_flight:
                self.max_in_flight = len(self.fifo)
            self.cond.notify_all()
        return r

    def store(self, verb, key, value, flags=0, exptime=0):
        return self.submit(b"%s %s %d %d %d\r\n%s\r\n" % (verb, key, flags, exptime, len(value), value), "store")

    def get(self, keys):
        return self.submit(b"get " + b" ".join(keys) + b"\r\n", "get")

    def command(self, line):
        """A one-line command with a one-line reply (delete, touch, ...)."""
        return self.submit(line + b"\r\n", "store")

    def stats(self, sub=b"", timeout=60):
        r = self.submit(b"stats" + (b" " + sub if sub else b"") + b"\r\n", "stats").wait(timeout)
        return r.values

    # -- threads

    def _fail(self, why):
        with self.cond:
            if self.dead is None:
                self.dead = why
            pending = list(self.fifo)
            self.fifo.clear()
            self.cond.notify_all()
        for r in pending:
            r.error = self.dead
            r.ev.set()

    def _write_loop(self):
        try:
            while True:
                with self.cond:
                    while not self.out and self.dead is None and not self.closing:
                        self.cond.wait()
                    if self.dead is not None or (self.closing and not self.out):
                        return
                    data = b"".join(self.out) if len(self.out) > 1 else self.out[0]
                    self.out = []
                    self.out_bytes = 0
                    self.cond.notify_all()
                self.sock.sendall(data)
                self.writes += 1
        except OSError as e:
            self._fail("%s: write failed: %s" % (self.name, e))

    def _read_loop(self):
        buf = bytearray()
        pos = 0
        sock = self.sock

        def fill():
            nonlocal buf, pos
            if pos > (1 << 20):
                del buf[:pos]
                pos = 0
            chunk = sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("%s: the server closed the connection" % self.name)
            buf += chunk

        def line():
            nonlocal pos
            while True:
                i = buf.find(b"\r\n", pos)
                if i >= 0:
                    ln = bytes(buf[pos:i])
                    pos = i + 2
                    return ln
                fill()

        def exact(n):
            nonlocal pos
            while len(buf) - pos < n:
                fill()
            d = bytes(buf[pos:pos + n])
            pos += n
            return d

        try:
            while True:
                ln = line()
                with self.cond:
                    if not self.fifo:
                        raise ConnectionError("%s: reply %r with no request outstanding" % (self.name, ln[:100]))
                    r = self.fifo[0]
                if r.kind == "store":
                    r.line = ln
                elif r.kind == "stats":
                    vals = {}
                    while ln != b"END":
                        if not ln.startswith(b"STAT "):
                            r.line = ln
                            break
                        p = ln.decode("utf-8", "replace").split(" ", 2)
                        vals[p[1]] = p[2] if len(p) > 2 else ""
                        ln = line()
                    r.values = vals
                else:
                    vals = {}
                    while ln != b"END":
                        p = ln.split(b" ")
                        if p[0] != b"VALUE" or len(p) not in (4, 5):
                            r.line = ln  # an error line ends a get
                            break
                        data = exact(int(p[3]) + 2)
                        if data[-2:] != b"\r\n":
                            raise ConnectionError("%s: value of %r not followed by CRLF" % (self.name, p[1][:40]))
                        if p[1] in vals:
                            r.line = b"REPEATED KEY " + p[1]
                        vals[p[1]] = data[:-2]
                        ln = line()
                    r.values = vals
                with self.cond:
                    self.fifo.popleft()
                r.t_done = time.monotonic()
                r.ev.set()
        except (OSError, ConnectionError, ValueError) as e:
            if not self.closing:
                self._fail(str(e))
            else:
                self._fail("closed")

    def in_flight(self):
        with self.cond:
            return len(self.fifo)

    def close(self):
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        self.writer.join(10)
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self.reader.join(10)


# ---- progress --------------------------------------------------------------

def stall_windows(pairs, limit):
    """Stalls in a list of (t_send, t_done) of completed stores: intervals longer than
    `limit` seconds in which no store completed although one was outstanding the whole
    time (a client that sent nothing is not a stalled server).
    Returns [(start, length)], longest first."""
    if not pairs:
        return []
    pairs = sorted(pairs, key=lambda p: p[1])
    n = len(pairs)
    suffix_min_send = [0.0] * n
    m = float("inf")
    for i in range(n - 1, -1, -1):
        m = min(m, pairs[i][0])
        suffix_min_send[i] = m
    out = []
    for i in range(n):
        prev_done = pairs[i - 1][1] if i else float("-inf")
        start = max(prev_done, suffix_min_send[i])
        if pairs[i][1] - start > limit:
            out.append((start, pairs[i][1] - start))
    out.sort(key=lambda w: -w[1])
    return out


# ---- environment -----------------------------------------------------------

def sanitizer_build(path):
    """True if the binary carries ASan's or TSan's runtime (the symbol names appear in
    its dynamic or static symbol table)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return False
    return any(s in data for s in (b"__asan_init", b"__tsan_init", b"__msan_init"))


class CpuHog:
    """`n` busy-loop processes at nice 0 for the duration of a `with` block."""

    def __init__(self, n):
        self.n = n
        self.procs = []

    def __enter__(self):
        def nice0():
            try:
                os.setpriority(os.PRIO_PROCESS, 0, 0)
            except OSError:
                pass
        for _ in range(self.n):
            self.procs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                               stdin=subprocess.DEVNULL, preexec_fn=nice0))
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()
        self.procs = []
        return False


def fmt_bytes(n):
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1024 or unit == "GB":
            return ("%d %s" if unit == "B" else "%.1f %s") % (n, unit)
        n /= 1024.0
