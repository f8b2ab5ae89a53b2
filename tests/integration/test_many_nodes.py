"""Many nodes: three servers behind twemproxy (nutcracker, the Debian package)
with ketama, and the same three under pylibmc's ketama ring.  Values are
verified (each encodes its key and a checksum); one node is lost and comes
back on its port."""
import os
import shutil
import socket
import subprocess
import time
import zlib

import pylibmc
import pytest
from pymemcache.client.base import Client

from mcserver import Server, free_port

NUTCRACKER = shutil.which("nutcracker") or "/usr/sbin/nutcracker"

pytestmark = pytest.mark.skipif(not os.path.exists(NUTCRACKER),
                                reason="nutcracker is not installed (scripts/setup.sh installs it)")


def value_of(key, version=1):
    body = b"%s|%d|" % (key, version) + key * 4
    return body + b"|%08x" % zlib.crc32(body)


def wait_port(port, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("nothing listens on %d" % port)


@pytest.fixture
def proxy(tmp_path):
    procs = []

    def start(node_ports):
        port, stats_port = free_port(), free_port()
        conf = tmp_path / "nutcracker.yml"
        conf.write_text(
            "pool:\n"
            "  listen: 127.0.0.1:%d\n"
            "  hash: fnv1a_64\n"
            "  distribution: ketama\n"
            "  timeout: 2000\n"
            "  preconnect: true\n"
            "  auto_eject_hosts: true\n"
            "  server_retry_timeout: 500\n"
            "  server_failure_limit: 1\n"
            "  servers:\n" % port +
            "".join("   - 127.0.0.1:%d:1 node%d\n" % (p, i) for i, p in enumerate(node_ports)))
        log = open(tmp_path / "nutcracker.log", "wb")
        p = subprocess.Popen([NUTCRACKER, "-c", str(conf), "-s", str(stats_port), "-a", "127.0.0.1"],
                             stdout=log, stderr=subprocess.STDOUT)
        procs.append(p)
        wait_port(port)
        return port

    yield start
    for p in procs:
        p.terminate()
        p.wait(timeout=10)


def node_items(srv):
    return int(srv.connect().stats()["curr_items"])


def test_three_nodes_behind_nutcracker(server, proxy):
    nodes = [server(["-m", "32", "-t", "2"]) for _ in range(3)]
    port = proxy([n.port for n in nodes])
    c = Client(("127.0.0.1", port), connect_timeout=5, timeout=5)
    keys = [b"user:%036d" % i for i in range(3000)]           # 41-byte keys
    for k in keys:
        assert c.set(k, value_of(k), noreply=False), k
    got = {}
    for i in range(0, len(keys), 100):
        got.update(c.get_many(keys[i:i + 100]))
    bad = [k for k in keys if got.get(k) != value_of(k)]
    assert not bad, "%d of %d keys wrong or missing through nutcracker, e.g. %r" % (
        len(bad), len(keys), bad[:3])
    counts = [node_items(n) for n in nodes]
    assert sum(counts) == len(keys) and min(counts) > len(keys) // 10, counts

    # A node lost: its keys miss (or error), the others' stay right.
    lost = nodes[1]
    lost.expect_exit = True
    lost.stop()
    time.sleep(1.0)
    right = 0
    for k in keys[:600]:
        try:
            v = c.get(k)
        except Exception:   # the proxy's error for the ejected node
            continue
        assert v is None or v == value_of(k), k
        right += v is not None
    assert 0 < right < 600, right

    # Back on its port, empty: sets through the proxy reach it again.
    back = Server(["-m", "32", "-t", "2"], server.tmpdir, port=lost.port)
    server.servers.append(back)
    # The proxy retries an ejected node after server_retry_timeout; until
    # then its keys go to the other two.  Once every key reads back the
    # version just set, the ring is whole again.
    deadline = time.time() + 20
    while True:
        time.sleep(0.5)
        try:
            for k in keys:
                assert c.set(k, value_of(k, 2), noreply=False), k
            got = {}
            for i in range(0, len(keys), 100):
                got.update(c.get_many(keys[i:i + 100]))
        except Exception:
            got = {}
        if all(got.get(k) == value_of(k, 2) for k in keys) and node_items(back) > 0:
            break
        assert time.time() < deadline, "the proxy did not take the node back"
    assert node_items(back) > 0


def test_three_nodes_under_pylibmc_ketama(server):
    nodes = [server(["-m", "32", "-t", "2"]) for _ in range(3)]
    mc = pylibmc.Client(["127.0.0.1:%d" % n.port for n in nodes],
                        behaviors={"ketama": True, "remove_failed": 1, "retry_timeout": 1})
    keys = ["session:%036d" % i for i in range(3000)]
    for k in keys:
        assert mc.set(k, value_of(k.encode())), k
    got = mc.get_multi(keys)
    assert all(got.get(k) == value_of(k.encode()) for k in keys)
    counts = [node_items(n) for n in nodes]
    assert sum(counts) == len(keys) and min(counts) > len(keys) // 10, counts
    # The ring is consistent: with one node gone, keys of the other two still hit.
    nodes[2].expect_exit = True
    nodes[2].stop()
    survivors = 0
    for k in keys[:600]:
        try:
            v = mc.get(k)
        except pylibmc.Error:       # the lost node, until it is marked failed
            continue
        assert v is None or v == value_of(k.encode()), k
        survivors += v is not None
    assert survivors >= 600 * 0.5, survivors
