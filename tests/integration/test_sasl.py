"""SASL (-S) for the binary protocol, as memcached's: users from $MEMCACHED_SASL_PWDB
(user:password lines, PLAIN) or from a sasldb named by memcached.conf in $SASL_CONF_PATH
(PLAIN and CRAM-MD5); pylibmc and python-binary-memcached log in with a user and password.

Tac-only: the Debian memcached is built without the password-file mode, so it has nothing
to log in against here."""
import hashlib
import hmac
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time

import bmemcached
import pytest

from mcserver import SERVER_BIN, base_args, free_port, is_closed, recv_exact, wait_stderr

pytestmark = pytest.mark.tac_only

HDR = struct.Struct(">BBHBBHIIQ")
GET, SET, VERSION, LIST_MECHS, AUTH, STEP = 0x00, 0x01, 0x0B, 0x20, 0x21, 0x22
OK, AUTH_ERROR, AUTH_CONTINUE = 0x00, 0x20, 0x21


def call(sock, op, key=b"", value=b"", extras=b""):
    body = extras + key + value
    sock.sendall(HDR.pack(0x80, op, len(key), len(extras), 0, 0, len(body), 7, 0) + body)
    magic, rop, klen, elen, _dt, status, blen, opaque, _cas = HDR.unpack(recv_exact(sock, 24))
    assert magic == 0x81 and rop == op and opaque == 7
    data = recv_exact(sock, blen) if blen else b""
    return status, data[elen + klen:]


def bin_stats(sock, sub=b""):
    """A binary STAT request: one key/value per response, then an empty key."""
    status, body = call(sock, 0x10, sub)
    stats = {}
    while status == OK and body:
        _m, _op, klen, elen, _dt, status, blen, _o, _c = HDR.unpack(recv_exact(sock, 24))
        data = recv_exact(sock, blen) if blen else b""
        if not klen:
            break
        stats[data[elen:elen + klen].decode()] = data[elen + klen:].decode()
    return stats


@pytest.fixture
def pwdb(tmp_path, monkeypatch):
    """$MEMCACHED_SASL_PWDB for the servers this test starts."""
    path = tmp_path / "sasl-users"
    path.write_text("alice:plain-pass-1\nbob:pass:with:colons\n")
    monkeypatch.setenv("MEMCACHED_SASL_PWDB", str(path))
    monkeypatch.delenv("SASL_CONF_PATH", raising=False)
    return path


def pylibmc_run(addr, user, password, ops):
    """pylibmc's answers to ops (sasl_pylibmc.py says why it runs apart)."""
    req = json.dumps({"addr": addr, "user": user, "password": password,
                      "ops": [[o[0], o[1]] + [v.decode("latin-1") for v in o[2:]]
                              for o in ops]})
    p = subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__),
                                                     "sasl_pylibmc.py")],
                       input=req.encode(), capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    out = json.loads(p.stdout)
    out["results"] = [r.encode("latin-1") if isinstance(r, str) else r
                      for r in out["results"]]
    return out


def value_for(key, size):
    head = b"%s|%08x|" % (key, hash(key) & 0xFFFFFFFF)
    return head.ljust(size, b"s")


def test_pylibmc_and_bmemcached_log_in(server, pwdb):
    srv = server(["-S"])
    addr = "%s:%d" % (srv.host, srv.port)
    bc = bmemcached.Client([addr], "bob", "pass:with:colons")
    rng = random.Random(4)
    want = {}
    for i in range(150):
        key = "sasl:key:%04d:%s" % (i, "k" * rng.randint(20, 48))
        want[key] = value_for(key.encode(), rng.choice((100, 3000, 100000)))
    keys = list(want)
    # pylibmc writes the even keys, python-binary-memcached the odd ones; each reads all.
    out = pylibmc_run(addr, "alice", "plain-pass-1",
                      [("set", k, want[k]) for k in keys[::2]] + [("get", k) for k in keys])
    assert "error" not in out, out.get("error")
    assert all(out["results"][:len(keys[::2])])
    for k in keys[1::2]:
        assert bc.set(k, want[k])

    def raw(v):      # each client reads the other's flags its own way
        return v.encode() if isinstance(v, str) else v

    got = out["results"][len(keys[::2]):]
    for k, v in zip(keys, got):
        assert v is None or v == want[k], k         # the odd keys were not set yet
    assert [k for k, v in zip(keys, got) if v is not None] == keys[::2]
    for k in keys:
        assert raw(bc.get(k)) == want[k], k
    again = pylibmc_run(addr, "alice", "plain-pass-1", [("get", k) for k in keys[1::2]])
    assert again["results"] == [want[k] for k in keys[1::2]]
    st = bc.stats()[addr]
    assert int(st["auth_cmds"]) >= 2


def test_wrong_password_is_refused(server, pwdb):
    srv = server(["-S"])
    addr = "%s:%d" % (srv.host, srv.port)
    with pytest.raises(bmemcached.exceptions.MemcachedException, match="Auth failure"):
        bmemcached.Client([addr], "alice", "wrong").set("k", "v")
    assert "AUTHENTICATION FAILURE" in pylibmc_run(
        addr, "alice", "wrong", [("set", "k", b"v")]).get("error", "")
    assert "AUTHENTICATION FAILURE" in pylibmc_run(
        addr, "mallory", "plain-pass-1", [("set", "k", b"v")]).get("error", "")
    assert pylibmc_run(addr, "alice", "plain-pass-1", [("get", "k")]) == {"results": [None]}


def test_commands_before_auth_are_refused(server, pwdb):
    """Before authentication only SASL and VERSION are served; a refused request's body is
    skipped and the connection stays usable, as in memcached."""
    srv = server(["-S"])
    s = socket.create_connection((srv.host, srv.port))
    assert call(s, GET, b"k") == (AUTH_ERROR, b"Auth failure.")
    assert call(s, SET, b"k", b"x" * 5000, struct.pack(">II", 0, 0)) == \
        (AUTH_ERROR, b"Auth failure.")
    assert call(s, VERSION)[0] == OK
    assert call(s, LIST_MECHS) == (OK, b"PLAIN")
    assert call(s, AUTH, b"PLAIN", b"\0alice\0nope")[0] == AUTH_ERROR
    assert call(s, GET, b"k")[0] == AUTH_ERROR
    assert call(s, AUTH, b"PLAIN", b"\0alice\0plain-pass-1") == (OK, b"Authenticated")
    assert call(s, SET, b"k", b"stored", struct.pack(">II", 0, 0))[0] == OK
    status, val = call(s, GET, b"k")
    assert (status, val[-6:]) == (OK, b"stored")
    s.close()


def test_ascii_requests_are_refused(server, pwdb):
    srv = server(["-S"])
    c = srv.connect()
    c.send(b"set k 0 0 1\r\nx\r\n")
    assert is_closed(c.sock), "a text request was served under -S"
    assert srv.alive()


def use_sasldb(tmp_path, monkeypatch, mechs):
    """A sasldb holding carol (password cram-pass-3) and a memcached.conf offering
    `mechs`, in SASL_CONF_PATH, with no password file."""
    saslpasswd2 = shutil.which("saslpasswd2") or "/usr/sbin/saslpasswd2"
    if not os.path.exists(saslpasswd2):
        if os.environ.get("CI"):
            pytest.fail("saslpasswd2 is missing: scripts/setup.sh installs sasl2-bin")
        pytest.skip("saslpasswd2 is missing (Debian sasl2-bin)")
    db = tmp_path / "sasldb2"
    subprocess.run([saslpasswd2, "-p", "-a", "memcached", "-c", "-f", str(db), "carol"],
                   input=b"cram-pass-3", check=True, timeout=10)
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "memcached.conf").write_text("mech_list: %s\nsasldb_path: %s\n" % (mechs, db))
    monkeypatch.setenv("SASL_CONF_PATH", str(conf))
    monkeypatch.delenv("MEMCACHED_SASL_PWDB", raising=False)


def test_cram_md5_from_a_sasldb(server, tmp_path, monkeypatch):
    use_sasldb(tmp_path, monkeypatch, "anonymous plain cram-md5")
    srv = server(["-S"])
    s = socket.create_connection((srv.host, srv.port))
    status, mechs = call(s, LIST_MECHS)
    assert status == OK and set(mechs.split()) == {b"PLAIN", b"CRAM-MD5"}, mechs
    assert call(s, AUTH, b"ANONYMOUS", b"guest")[0] == AUTH_ERROR
    status, challenge = call(s, AUTH, b"CRAM-MD5")
    assert status == AUTH_CONTINUE and challenge.startswith(b"<"), (status, challenge)
    digest = hmac.new(b"cram-pass-3", challenge, hashlib.md5).hexdigest().encode()
    assert call(s, STEP, b"CRAM-MD5", b"carol " + digest) == (OK, b"Authenticated")
    assert call(s, SET, b"c", b"v", struct.pack(">II", 0, 0))[0] == OK
    # A wrong digest is refused.
    s2 = socket.create_connection((srv.host, srv.port))
    status, challenge = call(s2, AUTH, b"CRAM-MD5")
    assert call(s2, STEP, b"CRAM-MD5", b"carol " + b"0" * 32)[0] == AUTH_ERROR
    # libmemcached picks its mechanism from the list.
    out = pylibmc_run("%s:%d" % (srv.host, srv.port), "carol", "cram-pass-3", [("get", "c")])
    assert out == {"results": [b"v"]}, out


def test_sighup_reloads_the_password_file(server, pwdb):
    srv = server(["-S"])
    addr = "%s:%d" % (srv.host, srv.port)
    pwdb.write_text("dave:new-pass-4\n")
    srv.proc.send_signal(signal.SIGHUP)
    wait_stderr(srv, "reloaded the password file")
    assert bmemcached.Client([addr], "dave", "new-pass-4").set("d", "v")
    with pytest.raises(bmemcached.exceptions.MemcachedException):
        bmemcached.Client([addr], "alice", "plain-pass-1").set("k", "v")


@pytest.mark.parametrize("extra,env,says,rc", [
    (["-U", "%d"], {}, "give -U 0", 64),
    (["-B", "ascii"], {}, "-B ascii", 64),
    (["-Y", "USERS"], {}, "give one", 64),
    ([], {"MEMCACHED_SASL_PWDB": "/nonexistent/users"}, "cannot open the password file", 78),
], ids=["udp", "ascii-only", "with-Y", "missing-pwdb"])
def test_starts_that_sasl_refuses(tmp_path, pwdb, extra, env, says, rc):
    users = tmp_path / "users"
    users.write_text("a:b\n")
    args = [str(users) if a == "USERS" else a % free_port() if a == "%d" else a for a in extra]
    cmd = [SERVER_BIN] + base_args() + ["-l", "127.0.0.1", "-p", str(free_port()), "-S"] + args
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=10,
                       env=dict(os.environ, **env))
    msg = (p.stdout + p.stderr).decode("utf-8", "replace")
    assert p.returncode == rc and says in msg, (p.returncode, msg)


def test_failed_negotiations_leak_no_connection(server, pwdb):
    """Wrong passwords, unknown mechanisms, broken steps and garbage: the server lives and
    every connection slot comes back (-c 32, 120 connections)."""
    srv = server(["-S", "-c", "32"])
    for i in range(120):
        s = socket.create_connection((srv.host, srv.port))
        try:
            kind = i % 4
            if kind == 0:
                assert call(s, AUTH, b"PLAIN", b"\0alice\0wrong")[0] == AUTH_ERROR
            elif kind == 1:
                assert call(s, AUTH, b"NO-SUCH-MECH", b"x")[0] == AUTH_ERROR
            elif kind == 2:
                assert call(s, STEP, b"PLAIN", b"\0" * 3000)[0] == AUTH_ERROR
            else:
                s.sendall(HDR.pack(0x80, AUTH, 5, 0, 0, 0, 1 << 20, 0, 0) + b"PLAIN")
        finally:
            s.close()
    s = socket.create_connection((srv.host, srv.port))
    assert call(s, AUTH, b"PLAIN", b"\0alice\0plain-pass-1") == (OK, b"Authenticated")
    deadline = time.time() + 20
    while True:
        stats = bin_stats(s)
        if int(stats.get("curr_connections", "99")) <= 2 or time.time() > deadline:
            break
        time.sleep(0.1)
    assert int(stats["curr_connections"]) <= 2, stats.get("curr_connections")
    assert int(stats["auth_errors"]) >= 90
