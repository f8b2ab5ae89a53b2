"""The same scenarios through every real client library we claim to work with.

Python clients run in-process: pylibmc (text and binary), python-binary-memcached, pymemcache.
spymemcached (text + binary factories, one Maven/JUnit run) and memjs (one `node --test` run)
live in tests/clients/java and tests/clients/node and get the server through TAC_HOST/TAC_PORT.

Every scenario runs against a fresh server with the default -I (1 MiB).  A client that cannot be
run (mvn, node or npm missing) is a failure, not a skip: tests/clients/install-toolchains.sh
installs them and pre-fetches the Maven and npm dependencies.
"""
import glob
import os
import re
import shutil
import struct
import subprocess
import time
import xml.etree.ElementTree as ET

import bmemcached
import pylibmc
import pytest
from pymemcache.client.base import Client as PymemcacheClient
from pymemcache.exceptions import MemcacheServerError

from mcserver import REPO

ITEM_MAX = 1024 * 1024  # the server's default -I
CLIENTS_DIR = os.path.join(REPO, "tests", "clients")
JAVA_DIR = os.path.join(CLIENTS_DIR, "java")
NODE_DIR = os.path.join(CLIENTS_DIR, "node")
MAVEN_REPO = os.path.join(REPO, ".m2")
INSTALL_HINT = "run tests/clients/install-toolchains.sh (scripts/setup.sh does)"


def pattern(n, seed):
    """Deterministic, incompressible-ish bytes, including CR/LF."""
    block = bytes(((i * 31 + seed) & 0xFF) for i in range(4096))
    return (block * (n // len(block) + 1))[:n]


# ---------------------------------------------------------------- client adapters
#
# Each adapter maps the scenario's operations onto one client's own API, with bytes values.
# Where a client has no such command, the adapter says so in a comment and goes through the
# client's own connection with a hand-built request instead.

class PylibmcAdapter:
    keeps_connection_on_server_error = True
    incr_missing_creates = False

    def __init__(self, srv, binary):
        self.srv, self.binary = srv, binary
        self.c = self._new()
        # libmemcached 1.1.4 takes the binary "non-numeric value" status (0x06) for a broken
        # server and disables it until a timed retry: a client quirk, so skip that step there.
        self.incr_nonnumeric_ok = not binary

    def _new(self):
        return pylibmc.Client(["%s:%d" % (self.srv.host, self.srv.port)], binary=self.binary,
                              behaviors={"cas": True, "connect_timeout": 5000,
                                         "receive_timeout": 10000000, "send_timeout": 10000000})

    def other(self):
        o = PylibmcAdapter.__new__(PylibmcAdapter)
        o.srv, o.binary, o.c = self.srv, self.binary, self._new()
        return o

    def close(self):
        self.c.disconnect_all()
        if hasattr(self, "touch_c"):
            self.touch_c.disconnect_all()

    def set(self, k, v, ttl=0):
        return self.c.set(k, v, time=ttl)

    def add(self, k, v):
        return self.c.add(k, v)

    def get(self, k):
        return self.c.get(k)

    def get_multi(self, keys):
        return self.c.get_multi(keys)

    def gets(self, k):
        return self.c.gets(k)

    def cas(self, k, v, token):
        try:
            return self.c.cas(k, v, token)
        except pylibmc.NotFound:
            return False

    def incr(self, k, n):
        try:
            return self.c.incr(k, n)
        except pylibmc.NotFound:
            return None

    def decr(self, k, n):
        try:
            return self.c.decr(k, n)
        except pylibmc.NotFound:
            return None

    def append(self, k, v):
        return self.c.append(k, v)

    def prepend(self, k, v):
        return self.c.prepend(k, v)

    def touch(self, k, ttl):
        if not self.binary:
            return self.c.touch(k, ttl)
        # libmemcached's binary touch of a present key returns only after its poll
        # timeout (5 s, against stock memcached too), the answer already read: a client
        # that waits 200 ms instead gets the same answer at once.
        if not hasattr(self, "touch_c"):
            self.touch_c = pylibmc.Client(["%s:%d" % (self.srv.host, self.srv.port)], binary=True,
                                          behaviors={"connect_timeout": 5000, "_poll_timeout": 200})
        return self.touch_c.touch(k, ttl)

    def delete(self, k):
        return self.c.delete(k)

    def flush(self):
        return self.c.flush_all()

    def set_rejected(self, k, v):
        try:
            return self.c.set(k, v) is False
        except pylibmc.TooBig:
            return True


class BmemcachedAdapter:
    keeps_connection_on_server_error = True
    incr_missing_creates = True  # bmemcached always sends an initial value (default 0)
    incr_nonnumeric_ok = True

    def __init__(self, srv):
        self.srv = srv
        self.c = bmemcached.Client(("%s:%d" % (srv.host, srv.port),), socket_timeout=10)

    def other(self):
        return BmemcachedAdapter(self.srv)

    def close(self):
        self.c.disconnect_all()

    # python-binary-memcached has no touch/append/prepend: send those through its own
    # connection (Protocol._send/_get_response) as plain binary-protocol requests.
    def _raw(self, opcode, key, extras=b"", value=b""):
        proto = list(self.c.servers)[0]
        kb = key.encode()
        hdr = struct.pack("!BBHBBHLLQ", 0x80, opcode, len(kb), len(extras), 0, 0,
                          len(extras) + len(kb) + len(value), 0, 0)
        proto._send(hdr + extras + kb + value)
        resp = proto._get_response()
        assert resp[0] == 0x81 and resp[1] == opcode, "bad response %r" % (resp,)
        return resp[5]  # status

    def set(self, k, v, ttl=0):
        return self.c.set(k, v, time=ttl, compress_level=0)

    def add(self, k, v):
        return self.c.add(k, v, compress_level=0)

    def get(self, k):
        return self.c.get(k)

    def get_multi(self, keys):
        return self.c.get_multi(keys)

    def gets(self, k):
        return self.c.gets(k)

    def cas(self, k, v, token):
        return self.c.cas(k, v, token, compress_level=0)

    def incr(self, k, n):
        return self.c.incr(k, n)

    def decr(self, k, n):
        return self.c.decr(k, n)

    def append(self, k, v):
        return {0: True, 5: False}[self._raw(0x0E, k, value=v)]

    def prepend(self, k, v):
        return {0: True, 5: False}[self._raw(0x0F, k, value=v)]

    def touch(self, k, ttl):
        return {0: True, 1: False}[self._raw(0x1C, k, extras=struct.pack("!L", ttl))]

    def delete(self, k):
        # bmemcached's delete() reports True for a missing key too; look at the status instead
        return {0: True, 1: False}[self._raw(0x04, k)]

    def flush(self):
        return self.c.flush_all()

    def set_rejected(self, k, v):
        try:
            return self.c.set(k, v, compress_level=0) is False
        except bmemcached.exceptions.MemcachedException as e:
            return e.code == 3  # E2BIG


class PymemcacheAdapter:
    keeps_connection_on_server_error = False  # pymemcache closes its socket on SERVER_ERROR
    incr_missing_creates = False
    incr_nonnumeric_ok = True

    def __init__(self, srv):
        self.srv = srv
        self.c = PymemcacheClient((srv.host, srv.port), connect_timeout=5, timeout=10,
                                  default_noreply=False)

    def other(self):
        return PymemcacheAdapter(self.srv)

    def close(self):
        self.c.close()

    def set(self, k, v, ttl=0):
        return self.c.set(k, v, expire=ttl)

    def add(self, k, v):
        return self.c.add(k, v)

    def get(self, k):
        return self.c.get(k)

    def get_multi(self, keys):
        return self.c.get_many(keys)

    def gets(self, k):
        return self.c.gets(k)

    def cas(self, k, v, token):
        return bool(self.c.cas(k, v, token))  # None (NOT_FOUND) -> False

    def incr(self, k, n):
        return self.c.incr(k, n)

    def decr(self, k, n):
        return self.c.decr(k, n)

    def append(self, k, v):
        return self.c.append(k, v)

    def prepend(self, k, v):
        return self.c.prepend(k, v)

    def touch(self, k, ttl):
        return self.c.touch(k, ttl)

    def delete(self, k):
        return self.c.delete(k)

    def flush(self):
        return self.c.flush_all()

    def set_rejected(self, k, v):
        try:
            return self.c.set(k, v) is False
        except MemcacheServerError:
            return True


PY_CLIENTS = {
    "pylibmc-text": lambda srv: PylibmcAdapter(srv, binary=False),
    "pylibmc-binary": lambda srv: PylibmcAdapter(srv, binary=True),
    "bmemcached": BmemcachedAdapter,
    "pymemcache": PymemcacheAdapter,
}


# ---------------------------------------------------------------- scenarios

def sc_set_get(c, srv):
    assert c.set("sg", b"hello world") is True
    assert c.get("sg") == b"hello world"
    assert c.set("sg", b"replaced") is True
    assert c.get("sg") == b"replaced"
    assert c.get("sg-missing") is None
    binary = b"\r\nEND\r\n" + pattern(4096, 7) + b"\x00\r\n"
    assert c.set("sg-bin", binary) is True
    assert c.get("sg-bin") == binary
    assert c.set("sg-empty", b"") is True
    assert c.get("sg-empty") == b""
    assert c.add("sg-add", b"a") is True
    assert c.add("sg-add", b"b") is False
    assert c.get("sg-add") == b"a"


def sc_multi_get(c, srv):
    keys = ["mg-%d" % i for i in range(150)]
    for i, k in enumerate(keys):
        assert c.set(k, b"value-%d" % i) is True
    missing = ["mg-missing-%d" % i for i in range(10)]
    got = c.get_multi(keys[:75] + missing + keys[75:])
    assert len(got) == len(keys), sorted(set(keys) - set(got))
    for i, k in enumerate(keys):
        assert got[k] == b"value-%d" % i


def sc_cas_conflict(c, srv):
    assert c.set("cas", b"v1") is True
    value, token = c.gets("cas")
    assert value == b"v1" and token
    other = c.other()
    try:
        assert other.set("cas", b"other") is True
        assert c.cas("cas", b"mine", token) is False, "cas with a stale token must fail"
        assert c.get("cas") == b"other"
        value2, token2 = c.gets("cas")
        assert value2 == b"other" and token2 != token
        assert c.cas("cas", b"mine", token2) is True
        assert c.get("cas") == b"mine"
        assert other.cas("cas", b"stale", token2) is False
        assert c.get("cas") == b"mine"
    finally:
        other.close()
    assert c.cas("cas-missing", b"x", token2) is False
    assert c.get("cas-missing") is None


def sc_incr_decr(c, srv):
    assert c.set("n", b"10") is True
    assert c.incr("n", 5) == 15
    assert c.decr("n", 3) == 12
    assert c.decr("n", 100) == 0  # decr floors at 0
    assert c.get("n").strip() == b"0"  # memcached may keep the old length, space-padded
    assert c.incr("n", 7) == 7
    assert c.get("n").strip() == b"7"
    assert c.set("max", b"18446744073709551615") is True
    assert c.incr("max", 1) == 0  # 64-bit wrap-around
    if c.incr_missing_creates:
        assert c.incr("n-missing", 1) == 0  # created with the client's initial value
    else:
        assert c.incr("n-missing", 1) is None
        assert c.decr("n-missing", 1) is None
        assert c.get("n-missing") is None
    if c.incr_nonnumeric_ok:
        assert c.set("text", b"abc") is True
        with pytest.raises(Exception):
            c.incr("text", 1)
        assert c.get("text") == b"abc"


def sc_append_prepend(c, srv):
    assert c.set("ap", b"mid") is True
    assert c.append("ap", b"-end") is True
    assert c.prepend("ap", b"start-") is True
    assert c.get("ap") == b"start-mid-end"
    assert c.append("ap-missing", b"x") is False
    assert c.prepend("ap-missing", b"x") is False
    assert c.get("ap-missing") is None


def sc_touch_expiry(c, srv):
    # memcached's clock ticks once a second, so an item with ttl 1 may be gone at once: only
    # ttls of 2 or more are relied upon right after the set.
    assert c.set("ttl-dies", b"a", ttl=1) is True
    assert c.set("ttl-extended", b"b", ttl=2) is True
    assert c.set("ttl-shortened", b"c", ttl=100) is True
    assert c.set("ttl-forever", b"d") is True
    assert c.touch("ttl-extended", 100) is True
    assert c.touch("ttl-shortened", 1) is True
    assert c.touch("ttl-missing", 100) is False
    time.sleep(2.5)
    assert c.get("ttl-dies") is None, "an item set with ttl 1 is still there after 2.5 s"
    assert c.get("ttl-shortened") is None, "touch to ttl 1 did not shorten the item's life"
    assert c.get("ttl-extended") == b"b", "touch to ttl 100 did not extend the item's life"
    assert c.get("ttl-forever") == b"d"
    assert c.touch("ttl-dies", 100) is False


def sc_delete(c, srv):
    assert c.set("del", b"x") is True
    assert c.delete("del") is True
    assert c.get("del") is None
    assert c.delete("del") is False
    assert c.add("del", b"y") is True
    assert c.get("del") == b"y"


def _total_connections(stats_conn):
    return int(stats_conn.stats()["total_connections"])


def sc_large_values(c, srv):
    stats_conn = srv.connect()
    big = pattern(ITEM_MAX - 1024, 3)
    assert c.set("big", big) is True
    assert c.get("big") == big
    before = _total_connections(stats_conn)
    assert c.set_rejected("too-big", pattern(ITEM_MAX + 1024, 5)), "a value over -I was stored"
    # the client, its connection and the server keep working
    assert c.get("too-big") is None
    assert c.set("after-big", b"still alive") is True
    assert c.get("after-big") == b"still alive"
    assert c.get("big") == big
    if c.keeps_connection_on_server_error:
        assert _total_connections(stats_conn) == before, \
            "the server dropped the client's connection after rejecting a too-large value"


def sc_flush(c, srv):
    for i in range(20):
        assert c.set("fl-%d" % i, b"v%d" % i) is True
    assert c.get("fl-3") == b"v3"
    assert c.flush() is True
    for i in range(20):
        assert c.get("fl-%d" % i) is None
    assert c.set("fl-after", b"new") is True
    assert c.get("fl-after") == b"new"


SCENARIOS = {
    "set_get": sc_set_get,
    "multi_get": sc_multi_get,
    "cas_conflict": sc_cas_conflict,
    "incr_decr": sc_incr_decr,
    "append_prepend": sc_append_prepend,
    "touch_expiry": sc_touch_expiry,
    "delete": sc_delete,
    "large_values": sc_large_values,
    "flush": sc_flush,
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
@pytest.mark.parametrize("client", list(PY_CLIENTS))
def test_python_client(server, client, scenario):
    srv = server()
    c = PY_CLIENTS[client](srv)
    try:
        SCENARIOS[scenario](c, srv)
    finally:
        c.close()
    assert srv.alive(), "server died"


# ---------------------------------------------------------------- external clients

def _require(tool):
    path = shutil.which(tool)
    if not path:
        pytest.fail("%s is not installed, so this client cannot be tested: %s" % (tool, INSTALL_HINT),
                    pytrace=False)
    return path


def _client_env(srv):
    env = dict(os.environ)
    env.update(TAC_HOST=srv.host, TAC_PORT=str(srv.port), TAC_ITEM_MAX=str(ITEM_MAX))
    return env


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _run(cmd, cwd, env, timeout):
    try:
        return subprocess.run(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail("%s timed out after %ss:\n%s" % (" ".join(cmd), timeout,
                                                    (e.output or b"").decode("utf-8", "replace")[-8000:]),
                    pytrace=False)


def test_spymemcached_text_and_binary(server):
    """spymemcached 2.12.3 with DefaultConnectionFactory and BinaryConnectionFactory (one JVM)."""
    mvn = _require("mvn")
    _require("java")
    srv = server()
    reports = os.path.join(JAVA_DIR, "target", "surefire-reports")
    shutil.rmtree(reports, ignore_errors=True)
    base = [mvn, "-q", "-B", "-Dstyle.color=never", "-Dmaven.repo.local=" + MAVEN_REPO]
    proc = _run(base + ["-o", "test"], JAVA_DIR, _client_env(srv), 300)
    out = ANSI.sub("", proc.stdout.decode("utf-8", "replace"))
    if proc.returncode != 0 and ("offline mode" in out or "has not been downloaded" in out):
        # dependencies not pre-fetched yet (install-toolchains.sh does that): fetch them now
        proc = _run(base + ["test"], JAVA_DIR, _client_env(srv), 400)
        out = ANSI.sub("", proc.stdout.decode("utf-8", "replace"))
    tests = failures = 0
    failed = []
    for path in glob.glob(os.path.join(reports, "TEST-*.xml")):
        root = ET.parse(path).getroot()
        tests += int(root.get("tests", 0))
        failures += int(root.get("failures", 0)) + int(root.get("errors", 0))
        for case in root.iter("testcase"):
            for bad in list(case.iter("failure")) + list(case.iter("error")):
                failed.append("%s: %s" % (case.get("name"), (bad.get("message") or bad.text or "")[:500]))
    assert proc.returncode == 0 and failures == 0, \
        "spymemcached tests failed (mvn exit %d):\n%s\n---- mvn output ----\n%s" % (
            proc.returncode, "\n".join(failed), out[-12000:])
    assert tests > 0, "Surefire ran no tests:\n" + out[-4000:]
    assert srv.alive(), "server died"


def test_memjs(server):
    """memjs 1.3.2 (binary protocol) through node's built-in test runner."""
    node = _require("node")
    if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "memjs")):
        npm = _require("npm")
        proc = _run([npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"], NODE_DIR, dict(os.environ), 300)
        assert proc.returncode == 0, "npm ci failed:\n" + proc.stdout.decode("utf-8", "replace")[-4000:]
    srv = server()
    proc = _run([node, "--test", "--test-reporter=tap"], NODE_DIR, _client_env(srv), 120)
    out = proc.stdout.decode("utf-8", "replace")
    counts = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "#" and parts[1] in ("tests", "pass", "fail") and parts[2].isdigit():
            counts[parts[1]] = int(parts[2])
    assert proc.returncode == 0 and counts.get("fail", 1) == 0, \
        "memjs tests failed (node exit %d):\n%s" % (proc.returncode, out[-12000:])
    assert counts.get("tests", 0) > 0 and counts.get("pass") == counts.get("tests"), \
        "node --test ran no tests:\n" + out[-4000:]
    assert srv.alive(), "server died"
