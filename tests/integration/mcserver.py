"""Shared test machinery: start the server under test, talk to it over raw sockets.

The server binary is $TAC_SERVER (default: <repo>/tac-memcached).  Every test
must pass against stock memcached (TAC_SERVER=/usr/bin/memcached); tests that
check tac-specific behaviour carry the `tac_only` marker.
"""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SERVER_BIN = os.path.abspath(os.environ.get("TAC_SERVER") or os.path.join(REPO, "tac-memcached"))
# Stock memcached is the reference implementation; detect it by name.
IS_STOCK = os.path.basename(os.path.realpath(SERVER_BIN)) == "memcached"
START_TIMEOUT = float(os.environ.get("TAC_START_TIMEOUT", "15"))


def _sanitized(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return False
    return b"__asan_init" in data or b"__tsan_init" in data


# A sanitizer build's allocator keeps freed memory (quarantine) and shadow
# memory counts in its RSS: tests measure memory through the server's own
# gauges there, and RSS only in a release build.
SANITIZED = _sanitized(SERVER_BIN)
# A graceful stop saves the restart state and syncs the tier files; a
# sanitizer build then also runs LeakSanitizer's heap scan at exit, which on a
# loaded 2-core machine once took more than 5 s (test_hardening_files, ASan
# pass).  A stop that never ends still fails, only later.
STOP_TIMEOUT = 20.0 if SANITIZED else 5.0
# The long stress runs' default length: a sanitizer build runs every path they
# reach within seconds, and its pass already takes twice the release pass's time.
STRESS_DEFAULT_SECONDS = "10" if SANITIZED else "20"


def free_port(kind=socket.SOCK_STREAM):
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def base_args():
    args = []
    if os.geteuid() == 0:
        args += ["-u", "root"]  # memcached refuses to run as root without -u
    return args


def remove_tier_file(path):
    """Removes a tier file and what the server keeps beside it: the restart
    state and its journal (<path>.state, <path>.state.journal) and the DRAM
    log (<path>.dramlog)."""
    for p in (path, path + ".state", path + ".state.journal", path + ".dramlog"):
        try:
            os.unlink(p)
        except OSError:
            pass


def recv_until(sock, terminators, timeout=10.0, limit=64 << 20):
    """Read until the buffer ends with one of `terminators` (bytes or tuple)."""
    if isinstance(terminators, bytes):
        terminators = (terminators,)
    buf = b""
    deadline = time.time() + timeout
    while not any(buf.endswith(t) for t in terminators):
        left = deadline - time.time()
        if left <= 0:
            raise TimeoutError("timed out waiting for %r; got %r" % (terminators, buf[-300:]))
        sock.settimeout(left)
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("connection closed; got %r" % buf[-300:])
        buf += chunk
        if len(buf) > limit:
            raise AssertionError("response too large")
    return buf


def recv_exact(sock, n, timeout=10.0):
    buf = b""
    deadline = time.time() + timeout
    while len(buf) < n:
        left = deadline - time.time()
        if left <= 0:
            raise TimeoutError("timed out after %d/%d bytes: %r" % (len(buf), n, buf[-200:]))
        sock.settimeout(left)
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed after %d/%d bytes: %r" % (len(buf), n, buf[-200:]))
        buf += chunk
    return buf


def recv_for(sock, seconds=0.3, done=None):
    """Read whatever arrives within `seconds` (for responses of unknown shape),
    or until done(bytes so far) says the response is whole."""
    buf = b""
    deadline = time.time() + seconds
    while True:
        left = deadline - time.time()
        if left <= 0 or (done is not None and done(buf)):
            return buf
        sock.settimeout(left)
        try:
            chunk = sock.recv(1 << 20)
        except socket.timeout:
            return buf
        except ConnectionResetError:
            return buf + b"<RESET>"
        if not chunk:
            return buf + b"<EOF>"
        buf += chunk


def wait_until(pred, seconds, step=0.05):
    """Polls pred() every `step` seconds; True once it holds, False if it
    still does not after `seconds`."""
    deadline = time.time() + seconds
    while True:
        if pred():
            return True
        if time.time() > deadline:
            return False
        time.sleep(step)


def thread_switches(pid, name):
    """Voluntary context switches of the server's thread `name` (each one a
    sleep the thread woke from)."""
    total, found = 0, False
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
            if f.read().strip() != name:
                continue
        with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
            for line in f:
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
                    found = True
    assert found, "no thread %s in server %d" % (name, pid)
    return total


def is_closed(sock, timeout=3.0):
    """True if the peer closed the connection within `timeout` seconds."""
    sock.settimeout(timeout)
    try:
        data = sock.recv(4096)
    except socket.timeout:
        return False
    except (ConnectionResetError, BrokenPipeError):
        return True
    return data == b""


class Conn:
    """A raw text-protocol connection."""

    def __init__(self, sock):
        self.sock = sock

    def send(self, data):
        self.sock.sendall(data)

    def req(self, data, end=b"\r\n", timeout=10.0):
        """Send `data` and read until the response ends with `end`."""
        self.sock.sendall(data)
        return recv_until(self.sock, end, timeout)

    def line(self, data, timeout=10.0):
        return self.req(data, b"\r\n", timeout)

    def get(self, data, timeout=10.0):
        return self.req(data, b"END\r\n", timeout)

    def exact(self, data, n, timeout=10.0):
        self.sock.sendall(data)
        return recv_exact(self.sock, n, timeout)

    def stats(self, sub=b""):
        cmd = b"stats" + ((b" " + sub) if sub else b"") + b"\r\n"
        raw = self.req(cmd, b"END\r\n")
        out = {}
        for ln in raw.split(b"\r\n"):
            if ln.startswith(b"STAT "):
                parts = ln.decode().split(" ", 2)
                out[parts[1]] = parts[2] if len(parts) > 2 else ""
        return out

    def stats_general(self):
        """Plain `stats` (memcached's names) and `stats tac` (this server's own) in one dict."""
        return {**self.stats(), **self.stats(b"tac")}

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class Server:
    def __init__(self, args, tmpdir, port=None, udp_port=0, unix=None, wait=True, binary=None):
        self.host = "127.0.0.1"
        self.port = port
        self.udp_port = udp_port
        self.unix = unix
        self.conns = []
        self.expect_exit = False
        self.stderr_path = os.path.join(tmpdir, "server-%d.stderr" % id(self))
        binary = binary or SERVER_BIN
        if unix:
            cmd = [binary] + base_args() + ["-s", unix] + list(args)
        else:
            cmd = [binary] + base_args() + ["-l", "127.0.0.1", "-p", str(port), "-U", str(udp_port)] + list(args)
        self.cmd = cmd
        self.stderr_file = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.stderr_file, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        if wait:
            self.wait_ready()

    def _try_connect(self):
        if self.unix:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(self.unix)
            return s
        return socket.create_connection((self.host, self.port), timeout=1)

    def wait_ready(self):
        deadline = time.time() + START_TIMEOUT
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise RuntimeError("server exited during start-up (rc=%s): %s\n%s"
                                   % (rc, " ".join(self.cmd), self.stderr_text()))
            try:
                s = self._try_connect()
                s.close()
                return
            except OSError:
                if time.time() > deadline:
                    raise RuntimeError("server did not accept connections within %ss: %s\n%s"
                                       % (START_TIMEOUT, " ".join(self.cmd), self.stderr_text()))
                time.sleep(0.05)

    def stderr_text(self):
        try:
            self.stderr_file.flush()
            with open(self.stderr_path, "rb") as f:
                return f.read().decode("utf-8", "replace")[-20000:]
        except OSError:
            return ""

    def connect(self, timeout=10.0):
        s = self._try_connect()
        s.settimeout(timeout)
        c = Conn(s)
        self.conns.append(c)
        return c

    @property
    def addr(self):
        return "%s:%d" % (self.host, self.port)

    def alive(self):
        return self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM):
        """Signal the server and return its exit code (None if it did not exit in time)."""
        for c in self.conns:
            c.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None


class ServerFactory:
    """`server(args=[...])` starts a server on a free port; teardown checks it."""

    def __init__(self, tmpdir):
        self.tmpdir = tmpdir
        self.servers = []

    def __call__(self, args=(), udp=False, unix=None, wait=True):
        last_err = None
        for _attempt in range(3):  # a free port may be grabbed by someone else meanwhile
            port = None if unix else free_port()
            udp_port = free_port(socket.SOCK_DGRAM) if udp else 0
            try:
                srv = Server(args, self.tmpdir, port=port, udp_port=udp_port, unix=unix, wait=wait)
            except RuntimeError as e:
                last_err = e
                if "Address already in use" in str(e) or "bind" in str(e).lower():
                    continue
                raise
            self.servers.append(srv)
            return srv
        raise last_err

    def finish(self, failed):
        problems = []
        for srv in self.servers:
            if failed:
                print("---- server stderr (%s) ----\n%s" % (" ".join(srv.cmd), srv.stderr_text()))
            if srv.expect_exit:
                srv.stop()
                continue
            rc = srv.proc.poll()
            if rc is not None:
                problems.append("server died during the test (rc=%s): %s\n%s"
                                % (rc, " ".join(srv.cmd), srv.stderr_text()))
                continue
            rc = srv.stop(signal.SIGTERM)
            if rc != 0:
                problems.append("server did not exit cleanly on SIGTERM within %ss (rc=%s): %s\n%s"
                                % (STOP_TIMEOUT, rc, " ".join(srv.cmd), srv.stderr_text()))
        for srv in self.servers:
            srv.stderr_file.close()
        shutil.rmtree(self.tmpdir, ignore_errors=True)   # stderr printed above on failure
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)


# ---- pytest hooks and fixtures (re-exported by the conftest files) ----

def pytest_configure(config):
    config.addinivalue_line("markers", "tac_only: checks tac-memcached behaviour that stock memcached lacks")
    config.addinivalue_line("markers", "slow: a long run; skipped when TAC_SKIP_SLOW=1 (the sanitizer pass)")
    print("server under test: %s%s" % (SERVER_BIN, " (stock memcached)" if IS_STOCK else ""))


def pytest_collection_modifyitems(config, items):
    if os.environ.get("TAC_SKIP_SLOW") == "1":
        skip_slow = pytest.mark.skip(reason="slow test; TAC_SKIP_SLOW=1")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip_slow)
    if not IS_STOCK:
        return
    skip = pytest.mark.skip(reason="tac-only behaviour; TAC_SERVER is stock memcached")
    for item in items:
        if "tac_only" in item.keywords:
            item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


@pytest.fixture
def server(request):
    if not os.path.exists(SERVER_BIN):
        pytest.fail("server binary %s does not exist (build it, or set TAC_SERVER)" % SERVER_BIN)
    tmpdir = tempfile.mkdtemp(prefix="tacsrv-")
    factory = ServerFactory(tmpdir)
    yield factory
    rep = getattr(request.node, "rep_call", None)
    factory.finish(failed=bool(rep and rep.failed))


@pytest.fixture
def srv(server):
    """A default server (`-U 0 -l 127.0.0.1`)."""
    return server()


@pytest.fixture(scope="module")
def shared_srv(request):
    """One default server per test module, for tests that need no fresh state."""
    if not os.path.exists(SERVER_BIN):
        pytest.fail("server binary %s does not exist (build it, or set TAC_SERVER)" % SERVER_BIN)
    factory = ServerFactory(tempfile.mkdtemp(prefix="tacsrv-"))
    srv = factory()
    srv.factory = factory
    yield srv
    factory.finish(failed=request.session.testsfailed > 0)


@pytest.fixture
def conn(shared_srv, request):
    """A connection to the module's shared server, emptied by flush_all first."""
    c = shared_srv.connect()
    assert c.line(b"flush_all\r\n") == b"OK\r\n"
    yield c
    c.close()
    shared_srv.conns.remove(c)
    if not shared_srv.alive():
        pytest.fail("server died during %s (rc=%s)\n%s" % (request.node.name, shared_srv.proc.poll(),
                                                         shared_srv.stderr_text()), pytrace=False)


@pytest.fixture
def shm_file():
    """Factory of unique /dev/shm paths for NVM tier files; each is removed afterwards,
    with what the server keeps beside it (remove_tier_file)."""
    paths = []

    def make(tag="nvm"):
        p = "/dev/shm/tac-test-%s-%d-%s" % (tag, os.getpid(), uuid.uuid4().hex[:10])
        paths.append(p)
        return p

    yield make
    for p in paths:
        remove_tier_file(p)


def wait_stderr(srv, text, timeout=10.0):
    """Waits until the server's stderr holds `text`."""
    deadline = time.time() + timeout
    while text not in srv.stderr_text():
        assert time.time() < deadline, "no %r on stderr:\n%s" % (text, srv.stderr_text())
        time.sleep(0.05)

