"""TLS (-Z), as memcached's: -o ssl_chain_cert/ssl_key/ssl_ca_cert/ssl_verify_mode,
-l notls:ADDR for a plain listener beside, and refresh_certs.  The certificates come from a
test CA made here with the openssl command."""
import os
import random
import socket
import ssl
import subprocess
import threading
import time

import pytest
from pymemcache.client.base import Client

from mcserver import SERVER_BIN, base_args, free_port
from test_ssd import ssd_dir  # noqa: F401  (fixture: a disk that takes O_DIRECT)

pytestmark = pytest.mark.tac_only


def openssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True,
                   timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate for 127.0.0.1, a client certificate from the CA, and a
    client certificate from another CA."""
    d = str(tmp_path_factory.mktemp("pki"))
    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca + ".key",
                "-out", ca + ".pem", "-days", "2", "-subj", "/CN=tac test " + ca, cwd=d)

    def issue(name, ca, cn):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key", "-out",
                name + ".csr", "-subj", "/CN=" + cn, cwd=d)
        ext = os.path.join(d, name + ".ext")
        with open(ext, "w") as f:
            f.write("subjectAltName=IP:127.0.0.1\n")
        openssl("x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
                "-CAcreateserial", "-out", name + ".pem", "-days", "2", "-extfile", ext, cwd=d)

    issue("server", "ca", "127.0.0.1")
    issue("server2", "ca", "127.0.0.1")
    issue("client", "ca", "tac test client")
    issue("stranger", "other-ca", "stranger")
    return d


def tls_args(pki, *extra):
    opts = ["ssl_chain_cert=%s/server.pem" % pki, "ssl_key=%s/server.key" % pki] + list(extra)
    return ["-Z", "-o", ",".join(opts)]


def context(pki, cert=None):
    ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.pem"))
    if cert:
        ctx.load_cert_chain(os.path.join(pki, cert + ".pem"), os.path.join(pki, cert + ".key"))
    return ctx


def tls_client(srv, pki, cert=None):
    return Client((srv.host, srv.port), tls_context=context(pki, cert), connect_timeout=5,
                  timeout=10)


def test_pymemcache_over_tls(server, pki):
    """Values from 100 B to 500 KB (many TLS records each), 30-60 B keys, a multi-get, and
    four threads with clients of their own, all verified."""
    srv = server(tls_args(pki))
    c = tls_client(srv, pki)
    # The harness's readiness probe closed a TCP connection without a handshake;
    # its worker may count that after this client's first request (a busy machine).
    deadline = time.time() + 5
    while c.stats()[b"ssl_handshake_errors"] < 1 and time.time() < deadline:
        time.sleep(0.02)
    errors_before = c.stats()[b"ssl_handshake_errors"]
    rng = random.Random(9)
    want = {}
    for i in range(120):
        key = b"tls:%04d:" % i + b"k" * rng.randint(21, 51)
        want[key] = (b"%s|%d|" % (key, i)).ljust(rng.choice((100, 5000, 70000, 500000)), b"t")
        assert c.set(key, want[key], noreply=False)
    assert c.get_many(list(want)) == want
    errors = []

    def worker(t):
        cl = tls_client(srv, pki)
        try:
            for j in range(60):
                key = b"tls:thread:%d:%04d:" % (t, j) + b"x" * 30
                val = (b"%s|%d" % (key, j)).ljust(3000 + j * 100, b"y")
                cl.set(key, val, noreply=False)
                if cl.get(key) != val:
                    errors.append(key)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))
        finally:
            cl.close()

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    st = c.stats()
    assert st[b"ssl_new_sessions"] >= 5
    assert st[b"ssl_handshake_errors"] == errors_before
    assert c.stats("settings")[b"ssl_enabled"] == b"yes"


def test_openssl_s_client(server, pki):
    srv = server(tls_args(pki))
    p = subprocess.run(["openssl", "s_client", "-connect", "%s:%d" % (srv.host, srv.port),
                        "-CAfile", os.path.join(pki, "ca.pem"), "-verify_return_error",
                        "-quiet"],
                       input=b"set sc 0 0 5\r\nhello\r\nget sc\r\nquit\r\n",
                       capture_output=True, timeout=20)
    assert b"STORED\r\nVALUE sc 0 5\r\nhello\r\nEND\r\n" in p.stdout, (p.stdout, p.stderr)


def test_plain_text_on_a_tls_port_is_refused(server, pki):
    srv = server(tls_args(pki))
    s = socket.create_connection((srv.host, srv.port))
    s.sendall(b"set a 0 0 1\r\nx\r\nget a\r\n")
    s.settimeout(5)
    got = b""
    try:
        while True:
            d = s.recv(4096)
            if not d:
                break
            got += d
    except (ConnectionResetError, socket.timeout):
        pass
    assert b"STORED" not in got and b"VALUE" not in got, got
    c = tls_client(srv, pki)
    assert c.get(b"a") is None, "a plain-text set reached the cache"
    assert c.stats()[b"ssl_handshake_errors"] >= 1


def test_notls_listener_beside(server, pki):
    plain = free_port()
    srv = server(tls_args(pki) + ["-l", "127.0.0.1,notls:127.0.0.1:%d" % plain])
    tls_client(srv, pki).set(b"both", b"ways", noreply=False)
    c = Client(("127.0.0.1", plain), connect_timeout=5, timeout=5)
    assert c.get(b"both") == b"ways"


@pytest.mark.parametrize("mode", [2, 3])
def test_client_certificate_required(server, pki, mode):
    srv = server(tls_args(pki, "ssl_ca_cert=%s/ca.pem" % pki, "ssl_verify_mode=%d" % mode))
    ok = tls_client(srv, pki, cert="client")
    assert ok.set(b"cert", b"ok", noreply=False)
    for who in (None, "stranger"):
        bad = tls_client(srv, pki, cert=who)
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)) as e:
            bad.set(b"cert", b"refused", noreply=False)
            bad.get(b"cert")
        assert e.value is not None
    assert ok.get(b"cert") == b"ok"
    assert int(ok.stats()[b"ssl_handshake_errors"]) >= 2


def test_refresh_certs_takes_the_new_files(server, pki, tmp_path):
    """refresh_certs reads the files again: new connections see the new certificate, open
    ones stay; a broken file is refused and the old certificate stays."""
    chain, key = tmp_path / "chain.pem", tmp_path / "chain.key"
    chain.write_bytes(open(os.path.join(pki, "server.pem"), "rb").read())
    key.write_bytes(open(os.path.join(pki, "server.key"), "rb").read())
    srv = server(["-Z", "-o", "ssl_chain_cert=%s,ssl_key=%s" % (chain, key)])

    def serial():
        with socket.create_connection((srv.host, srv.port)) as raw:
            with context(pki).wrap_socket(raw, server_hostname="127.0.0.1") as s:
                return s.getpeercert()["serialNumber"]

    raw = context(pki).wrap_socket(socket.create_connection((srv.host, srv.port)),
                                   server_hostname="127.0.0.1")
    f = raw.makefile("rwb")

    def command(line):
        f.write(line + b"\r\n")
        f.flush()
        return f.readline()

    first = serial()
    chain.write_bytes(open(os.path.join(pki, "server2.pem"), "rb").read())
    key.write_bytes(open(os.path.join(pki, "server2.key"), "rb").read())
    assert command(b"refresh_certs") == b"OK\r\n"
    second = serial()
    assert second != first
    assert command(b"set still 0 0 4\r\nopen") == b"STORED\r\n"   # the open one stays
    chain.write_bytes(b"not a certificate\n")
    answer = command(b"refresh_certs")
    assert answer.startswith(b"ERROR ") and b"ssl_chain_cert" in answer, answer
    assert serial() == second
    raw.close()


@pytest.mark.parametrize("extra,says", [
    (["-o", "ssl_chain_cert=/x.pem"], "give -Z too"),
    (["-Z"], "ssl_chain_cert"),
    (["-Z", "-o", "ssl_chain_cert=/nonexistent.pem"], "ssl_chain_cert"),
    (["-Z", "-o", "ssl_chain_cert=CERT", "-U", "%d"], "give -U 0"),
], ids=["ssl-without-Z", "Z-without-cert", "missing-cert", "udp"])
def test_starts_that_tls_refuses(pki, extra, says):
    args = [a.replace("CERT", os.path.join(pki, "server.pem")) for a in extra]
    args = [a % free_port() if a == "%d" else a for a in args]
    if "ssl_chain_cert=%s" % os.path.join(pki, "server.pem") in args:
        args[args.index("ssl_chain_cert=%s" % os.path.join(pki, "server.pem"))] += \
            ",ssl_key=%s" % os.path.join(pki, "server.key")
    cmd = [SERVER_BIN] + base_args() + ["-l", "127.0.0.1", "-p", str(free_port())] + args
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
    msg = (p.stdout + p.stderr).decode("utf-8", "replace")
    assert p.returncode != 0 and says in msg, (p.returncode, msg)


def test_ssd_reads_park_under_tls(server, pki, ssd_dir):  # noqa: F811
    """Values on SSD are read while TLS records of earlier answers are being written: a
    multi-get over many SSD items comes back whole and in order."""
    srv = server(tls_args(pki) + ["-m", "8", "-t", "2", "-o",
                                  "ssd_path=%s/ssd:256m" % ssd_dir])
    c = tls_client(srv, pki)
    keys = [b"tls:ssd:%05d:" % i + b"s" * 30 for i in range(6000)]
    vals = {k: (k + b"|v1|").ljust(4000 + (i % 7) * 500, b"d") for i, k in enumerate(keys)}
    for i in range(0, len(keys), 200):
        c.set_many({k: vals[k] for k in keys[i:i + 200]}, noreply=False)
    st = c.stats("tiers")
    assert int(st[b"ssd_items"]) > len(keys) // 2, st[b"ssd_items"]
    reads_before = int(st[b"ssd_reads"])
    for i in range(0, len(keys), 300):
        batch = keys[i:i + 300]
        assert c.get_many(batch) == {k: vals[k] for k in batch}
    assert int(c.stats("tiers")[b"ssd_reads"]) > reads_before + 1000


def test_failed_handshakes_leak_no_connection(server, pki):
    """Garbage, plain text, a client certificate refused and a handshake cut halfway: each
    fails alone, the server lives, and every connection slot comes back."""
    plain = free_port()
    srv = server(tls_args(pki, "ssl_ca_cert=%s/ca.pem" % pki, "ssl_verify_mode=2") +
                 ["-c", "64", "-l", "127.0.0.1,notls:127.0.0.1:%d" % plain])
    rng = random.Random(3)
    for i in range(120):
        s = socket.create_connection((srv.host, srv.port))
        kind = i % 4
        try:
            if kind == 0:
                s.sendall(bytes(rng.randrange(256) for _ in range(rng.randint(1, 3000))))
            elif kind == 1:
                s.sendall(b"get k\r\n")
            elif kind == 2:
                ctx = context(pki)          # no client certificate: refused
                with ctx.wrap_socket(s, server_hostname="127.0.0.1") as t:
                    t.sendall(b"version\r\n")
                    t.recv(100)
                continue
            else:
                s.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")   # a cut ClientHello
        except (OSError, ssl.SSLError):
            pass
        s.close()
    c = Client(("127.0.0.1", plain), connect_timeout=5, timeout=5)
    deadline = time.time() + 20
    while int(c.stats()[b"curr_connections"]) > 2:
        assert time.time() < deadline, c.stats()[b"curr_connections"]
        time.sleep(0.1)
    assert int(c.stats()[b"ssl_handshake_errors"]) >= 90
    assert tls_client(srv, pki, cert="client").set(b"after", b"ok", noreply=False)
