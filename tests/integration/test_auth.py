"""ASCII authentication (-Y FILE), as memcached's: FILE holds user:password lines, a
connection's first command is a `set` whose data is "user password", and until then every
command is refused and never run.  Here the third refused password, the sixteenth refused
command, or input that cannot be framed closes the connection (memcached leaves it open).
SIGHUP reads the file again.

The tests that do not look at tac-memcached's own start-up messages also pass against stock
memcached 1.6.18 (TAC_SERVER=/usr/bin/memcached)."""
import os
import random
import signal
import subprocess
import time

import bmemcached
import pytest
from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheClientError, MemcacheUnexpectedCloseError

from mcserver import IS_STOCK, SERVER_BIN, base_args, free_port, is_closed, wait_stderr


def refused_and_closed(sock):
    """A connection closes here at its third refused password (as -S after three SASL
    failures) or at the first input that cannot be framed; memcached leaves it open."""
    return IS_STOCK or is_closed(sock)


@pytest.fixture
def authfile(tmp_path):
    path = tmp_path / "users"
    path.write_text("alice:s3cret-pass\nbob:another:with:colons\n")
    return path


def client(srv):
    return Client((srv.host, srv.port), connect_timeout=5, timeout=5)


def value_for(key, ver, size):
    """key|ver|crc|padding: a value that says what it belongs to."""
    head = b"%s|%d|" % (key, ver)
    return (head + b"%08x|" % (hash((key, ver)) & 0xFFFFFFFF)).ljust(size, b"v")


def test_pymemcache_authenticates_then_works(server, authfile):
    srv = server(["-Y", str(authfile)])
    c = client(srv)
    assert c.set(b"auth", b"alice s3cret-pass", noreply=False) is True
    rng = random.Random(1)
    want = {}
    for i in range(200):
        key = b"auth:user:%04d:" % i + b"k" * rng.randint(20, 50)
        want[key] = value_for(key, 1, rng.choice((100, 4000, 100000)))
        assert c.set(key, want[key], noreply=False) is True
    got = c.get_many(list(want))
    assert got == want
    # A password holding colons: only the first colon of the line splits.
    c2 = client(srv)
    assert c2.set(b"x", b"bob another:with:colons", noreply=False) is True
    assert c2.get(next(iter(want))) == want[next(iter(want))]


def test_wrong_passwords_are_refused_and_the_third_closes(server, authfile):
    srv = server(["-Y", str(authfile)])
    c = client(srv)
    with pytest.raises(MemcacheClientError, match="authentication failure"):
        c.set(b"auth", b"alice wrong-pass", noreply=False)
    guesses = ((b"mallory s3cret-pass", b"authentication failure"),
               (b"alices3cret-pass", b"bad authentication token format"),
               (b"alice s3cret-pas", b"authentication failure"))
    for order in (guesses, guesses[1:] + guesses[:1]):
        raw = srv.connect()
        for i, (data, why) in enumerate(order):
            raw.send(b"set k 0 0 %d\r\n%s\r\n" % (len(data), data))
            assert raw.line(b"") == b"CLIENT_ERROR %s\r\n" % why, (i, data)
            if i < 2:
                assert not is_closed(raw.sock, timeout=0.3), (i, data)
        assert refused_and_closed(raw.sock), "open after three refused passwords"
    # Two refused guesses and a good one: memcached's retry on one connection.
    raw = srv.connect()
    for data in (b"alice bad", b"bob s3cret-pass"):
        assert raw.line(b"set k 0 0 %d\r\n%s\r\n" % (len(data), data)) == \
            b"CLIENT_ERROR authentication failure\r\n"
    assert raw.line(b"set k 0 0 17\r\nalice s3cret-pass\r\n") == b"STORED\r\n"
    assert raw.line(b"set k2 0 0 2\r\nok\r\n") == b"STORED\r\n"
    # The refused sets stored nothing.
    assert raw.line(b"get k\r\n") == b"END\r\n"


def test_commands_before_auth_are_refused_and_never_run(server, authfile):
    srv = server(["-Y", str(authfile)])
    c = client(srv)
    assert c.set(b"auth", b"alice s3cret-pass", noreply=False) is True
    assert c.set(b"keep", b"v", noreply=False) is True
    firsts = (b"get keep\r\n", b"version\r\n", b"mg keep v\r\n", b"stats\r\n",
              b"flush_all\r\n", b"delete keep\r\n", b"incr n 1\r\n")
    raw = srv.connect()
    for first in firsts:
        assert raw.line(first) == b"CLIENT_ERROR unauthenticated\r\n", first
    # Here, pipelined, each command of a batch is refused on its own (memcached drops
    # the rest of what it read), and the sixteenth refusal closes the connection.
    if not IS_STOCK:
        refusal = b"CLIENT_ERROR unauthenticated\r\n"
        assert raw.exact(b"".join(firsts), len(firsts) * len(refusal)) == refusal * len(firsts)
        assert raw.line(b"touch keep 0\r\n") == b"CLIENT_ERROR unauthenticated\r\n"
        assert raw.line(b"get keep\r\n") == b"CLIENT_ERROR unauthenticated\r\n"
        assert is_closed(raw.sock)
    # Nothing a refused connection sent was run.
    assert c.get(b"keep") == b"v"
    assert c.get(b"n") is None
    # Here input that cannot be framed is refused and closes at once (memcached waits
    # for more of it).
    for bad in () if IS_STOCK else (b"set k 0 0\r\n", b"set k 0 0 99999\r\n", b"set k 0 0 1\r\nxy\r\n",
                b"x" * 5000):
        raw = srv.connect()
        raw.send(bad)
        assert raw.line(b"").startswith(b"CLIENT_ERROR "), bad[:20]
        assert refused_and_closed(raw.sock), bad[:20]


def test_binary_clients_are_closed(server, authfile):
    srv = server(["-Y", str(authfile)])
    b = bmemcached.Client(["%s:%d" % (srv.host, srv.port)], socket_timeout=3)
    with pytest.raises(Exception):
        if not b.set("k", "v"):
            raise ConnectionError("refused")
    b.disconnect_all()
    c = client(srv)
    assert c.set(b"auth", b"alice s3cret-pass", noreply=False) is True
    assert c.get(b"k") is None


@pytest.mark.tac_only
def test_sighup_reloads_the_file(server, authfile):
    srv = server(["-Y", str(authfile)])
    c = client(srv)
    assert c.set(b"auth", b"alice s3cret-pass", noreply=False) is True
    authfile.write_text("carol:new-pass\n")
    srv.proc.send_signal(signal.SIGHUP)
    wait_stderr(srv, "reloaded the password file")
    new = client(srv)
    assert new.set(b"auth", b"carol new-pass", noreply=False) is True
    with pytest.raises((MemcacheClientError, MemcacheUnexpectedCloseError)):
        client(srv).set(b"auth", b"alice s3cret-pass", noreply=False)
    # Authenticated connections stay so.
    assert c.set(b"still", b"here", noreply=False) is True
    # A malformed file on reload changes nothing, and says so.
    authfile.write_text("no colon here\n")
    srv.proc.send_signal(signal.SIGHUP)
    wait_stderr(srv, "stay in force")
    assert client(srv).set(b"auth", b"carol new-pass", noreply=False) is True
    st = c.stats()
    assert st[b"auth_cmds"] >= 4 and st[b"auth_errors"] >= 1
    assert c.stats("settings")[b"auth_enabled_ascii"] == b"yes"
    assert srv.alive()


@pytest.mark.tac_only
@pytest.mark.parametrize("extra,says,rc", [
    (["-U", "0"], None, None),
    (["-U", "%d"], "give -U 0", 64),
    (["-B", "binary"], "-B binary", 64),
    (["-Y", "/nonexistent/users"], "cannot open the password file", 78),
    (["-Y", "BAD"], "expected user:password", 78),
], ids=["tcp-only-starts", "udp", "binary-only", "missing-file", "malformed-file"])
def test_starts_that_auth_refuses(authfile, tmp_path, extra, says, rc):
    bad = tmp_path / "bad"
    bad.write_text("alice:ok\njust-a-name\n")
    args = [a.replace("BAD", str(bad)) for a in extra]
    args = [a % free_port() if a == "%d" else a for a in args]
    if "-Y" not in args:
        args = ["-Y", str(authfile)] + args
    cmd = [SERVER_BIN] + base_args() + ["-l", "127.0.0.1", "-p", str(free_port())] + args
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    try:
        out, _ = p.communicate(timeout=3)
    except subprocess.TimeoutExpired:
        p.terminate()
        out, _ = p.communicate()
        assert says is None, "started with %s" % args
        return
    msg = out.decode("utf-8", "replace")
    assert says is not None, "did not start: %s" % msg
    assert p.returncode == rc and says in msg, (p.returncode, msg)
    assert "line 2" in msg or "BAD" not in extra, msg


@pytest.mark.tac_only
def test_memccapable_is_refused_without_a_crash(server, authfile):
    """A client that knows nothing of -Y (memccapable's whole text suite) gets refusals
    and closed connections, and the server lives on."""
    srv = server(["-Y", str(authfile)])
    subprocess.run(["memccapable", "-h", srv.host, "-p", str(srv.port), "-a"],
                   stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    c = client(srv)
    assert c.set(b"auth", b"alice s3cret-pass", noreply=False) is True
    assert c.set(b"k", b"v", noreply=False) is True and c.get(b"k") == b"v"
    assert os.path.exists(str(authfile))


@pytest.mark.tac_only
def test_handshake_fuzz_keeps_server_and_slots(server, authfile):
    """Random first commands before authentication (set lines with odd counts and lengths,
    data cut short, binary bytes, long lines): each is refused or waits, none crashes the
    server or holds a slot once closed, and the data stays."""
    srv = server(["-Y", str(authfile), "-c", "48"])
    good = client(srv)
    assert good.set(b"auth", b"alice s3cret-pass", noreply=False)
    assert good.set(b"keep", b"safe", noreply=False)
    rng = random.Random(int(os.environ.get("FUZZ_SEED", "7")))
    words = [b"set", b"get", b"alice", b"s3cret-pass", b"0", b"-1", b"999999999999",
             b"4294967296", b"\x00", b"\xff" * 3, b"noreply", b"13", b"17"]
    for i in range(300):
        raw = srv.connect(timeout=3)
        kind = i % 3
        if kind == 0:
            line = b" ".join(rng.choice(words) for _ in range(rng.randint(0, 8)))
            data = bytes(rng.randrange(256) for _ in range(rng.randint(0, 40)))
            raw.send(line + b"\r\n" + data + rng.choice((b"\r\n", b"", b"\n")))
        elif kind == 1:
            raw.send(bytes(rng.randrange(256) for _ in range(rng.randint(1, 5000))))
        else:
            raw.send(b"set k 0 0 %d\r\nalice s3cret-pass" % rng.randint(17, 1100))
        raw.close()
    deadline = time.time() + 20
    while int(good.stats()[b"curr_connections"]) > 2:
        assert time.time() < deadline, good.stats()[b"curr_connections"]
        time.sleep(0.1)
    assert good.get(b"keep") == b"safe"
    assert srv.alive()
