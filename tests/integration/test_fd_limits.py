"""File descriptor limits: a start that cannot cover -c is refused (as in
memcached, exit status 71), and running out of descriptors pauses accepting
instead of spinning on the readable listen socket."""
import os
import resource
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from mcserver import SANITIZED, SERVER_BIN, Conn, base_args, free_port

pytestmark = pytest.mark.tac_only


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.fixture
def nobody_binary():
    """The server binary where user nobody can run it."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to nobody")
    d = tempfile.mkdtemp(prefix="tac-fd-")
    os.chmod(d, 0o755)
    path = os.path.join(d, "tac-memcached")
    shutil.copy(SERVER_BIN, path)
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(d, ignore_errors=True)


def run_as_nobody(binary, nofile, args, timeout=5.0):
    cmd = ["prlimit", "--nofile=%d:%d" % (nofile, nofile), "--",
           "setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--",
           binary] + args
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)


def test_start_refused_when_fd_limit_below_conns(nobody_binary):
    port = free_port()
    p = run_as_nobody(nobody_binary, 256, ["-l", "127.0.0.1", "-p", str(port), "-c", "1024"])
    try:
        out, _ = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        raise AssertionError("the server started with an fd limit of 256 and -c 1024")
    assert p.returncode == 71, (p.returncode, out)
    text = out.decode()
    assert "-c 1024" in text and "256" in text and "ulimit" in text, text


def test_start_allowed_when_fd_limit_covers_conns(nobody_binary):
    port = free_port()
    p = run_as_nobody(nobody_binary, 256, ["-l", "127.0.0.1", "-p", str(port), "-c", "100"])
    try:
        deadline = time.time() + 10
        while True:
            assert p.poll() is None, p.communicate()[0]
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=1)
                s.sendall(b"version\r\n")
                assert s.recv(100).startswith(b"VERSION ")
                s.close()
                break
            except OSError:
                assert time.time() < deadline
                time.sleep(0.05)
    finally:
        p.terminate()
        p.communicate(timeout=10)


def test_out_of_fds_pauses_accept(server):
    """prlimit on the running server leaves it a few descriptors; the
    connection past them waits in the backlog without a busy loop and is
    served within 1 s of another connection closing."""
    srv = server(["-c", "1000", "-t", "2", "-v"])
    pid = srv.proc.pid
    fds = len(os.listdir("/proc/%d/fd" % pid))
    limit = fds + 4
    subprocess.run(["prlimit", "--pid", str(pid), "--nofile=%d:%d" % (limit, limit)], check=True)
    held, waiting = [], None
    # Connect until one is no longer served: the server then has no
    # descriptor left and that one waits in the backlog.
    for _ in range(16):
        s = socket.create_connection((srv.host, srv.port), timeout=5)
        s.sendall(b"version\r\n")
        s.settimeout(1.0)
        try:
            assert s.recv(100).startswith(b"VERSION ")
        except socket.timeout:
            waiting = s
            break
        held.append(s)
    assert waiting is not None, "still accepting with %d connections at a limit of %d" % (len(held), limit)
    # No busy loop: CPU over 3 s while paused.
    c0, t0 = cpu_seconds(pid), time.time()
    time.sleep(3)
    cpu = (cpu_seconds(pid) - c0) / (time.time() - t0)
    # (A spinning accept loop took a whole core; a sanitizer build's idle
    # threads cost more than a release build's.)
    assert cpu < (0.25 if SANITIZED else 0.05), "%.1f%% CPU while out of descriptors" % (100 * cpu)
    # A close lets the waiting client in, within 1 s.
    held.pop().close()
    t0 = time.time()
    waiting.settimeout(5)
    assert waiting.recv(100).startswith(b"VERSION ")
    assert time.time() - t0 < 1.0, time.time() - t0
    for s in held:
        s.close()
    waiting.close()
    # Every close handled before the next connection, so that it finds
    # descriptors to spare.
    deadline = time.time() + 5
    while len(os.listdir("/proc/%d/fd" % pid)) > fds and time.time() < deadline:
        time.sleep(0.05)
    st = srv.connect().stats()
    # One line per change of state, not one per failed accept.  The main
    # thread logs the end of the pause after handing the connection over.
    deadline = time.time() + 5
    while "Accepting connections again" not in srv.stderr_text() and time.time() < deadline:
        time.sleep(0.05)
    log = srv.stderr_text()
    assert log.count("Too many open files") == 1, log[-3000:]
    assert log.count("Accepting connections again") == 1, log[-3000:]
    st = srv.connect().stats()
    assert int(st["listen_disabled_num"]) == 1
    assert int(st["time_in_listen_disabled_us"]) > 0
    assert st["accepting_conns"] == "1"


def open_fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def soft_nofile(pid):
    with open("/proc/%d/limits" % pid) as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    raise AssertionError("no open file limit for %d" % pid)


def test_conn_limit_reachable_and_enforced():
    """Started with a soft limit below -c, the server raises it to cover -c
    plus its own descriptors (many workers, a UDP socket dup'd per worker,
    an SSD tier's rings), so that every one of -c connections is served
    without running out of descriptors; past -c each connection is refused
    and counted, also in a burst that arrives before the workers have
    registered the ones before it."""
    maxconns, workers = 60, 16
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    d = tempfile.mkdtemp(prefix="tac-fd-")
    port = free_port()
    cmd = ["prlimit", "--nofile=64:%d" % hard, "--", SERVER_BIN] + base_args() + [
        "-l", "127.0.0.1", "-p", str(port), "-U", str(free_port(socket.SOCK_DGRAM)),
        "-c", str(maxconns), "-t", str(workers),
        "-o", "ssd_path=%s:64m" % os.path.join(d, "ssd.dat")]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         stdin=subprocess.DEVNULL)
    socks = []
    try:
        deadline = time.time() + float(os.environ.get("TAC_START_TIMEOUT", "15"))
        while True:
            assert p.poll() is None, p.communicate()[0].decode()
            try:
                st = Conn(socket.create_connection(("127.0.0.1", port), timeout=5))
                st.sock.settimeout(5)
                break
            except OSError:
                assert time.time() < deadline, "the server did not start"
                time.sleep(0.05)
        socks.append(st.sock)
        # pid of the server, not of prlimit (it execs, so they are one).
        pid = p.pid
        spare = soft_nofile(pid) - open_fds(pid)
        assert spare >= maxconns, "limit %d, %d descriptors open: -c %d is out of reach" % (
            soft_nofile(pid), open_fds(pid), maxconns)

        def connect_and_ask():
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            socks.append(s)
            return s

        def answer(s):
            s.settimeout(5)
            got = b""
            while not got.endswith(b"\r\n"):
                chunk = s.recv(100)
                if not chunk:
                    break
                got += chunk
            return got

        # One at a time up to -c: every one is served.
        for _ in range(maxconns - 1):
            s = connect_and_ask()
            s.sendall(b"version\r\n")
            assert answer(s).startswith(b"VERSION "), "connection %d of -c %d" % (len(socks), maxconns)
        s = connect_and_ask()
        assert answer(s) == b"ERROR Too many open connections\r\n"
        stats = st.stats()
        assert int(stats["rejected_connections"]) == 1
        assert int(stats["curr_connections"]) == maxconns
        assert int(stats["listen_disabled_num"]) == 0 and stats["accepting_conns"] == "1"

        # Half of them go; twice as many arrive at once (queued in the
        # backlog while the server is stopped, so that the listener accepts
        # them all before any worker registers one): at most half are
        # served, and every other one is refused and counted.
        half = maxconns // 2
        for s in socks[1:1 + half]:
            s.close()
        deadline = time.time() + 5
        while int(st.stats()["curr_connections"]) > maxconns - half:
            assert time.time() < deadline
            time.sleep(0.02)
        p.send_signal(signal.SIGSTOP)
        try:
            burst = [connect_and_ask() for _ in range(2 * half)]
            for s in burst:
                s.sendall(b"version\r\n")
        finally:
            p.send_signal(signal.SIGCONT)
        answers = [answer(s) for s in burst]
        served = sum(a.startswith(b"VERSION ") for a in answers)
        refused = sum(a == b"ERROR Too many open connections\r\n" for a in answers)
        assert served + refused == len(burst), answers
        assert served <= half, "%d served past -c %d" % (served - half, maxconns)
        stats = st.stats()
        assert int(stats["rejected_connections"]) == 1 + refused
        assert int(stats["curr_connections"]) <= maxconns
        assert int(stats["listen_disabled_num"]) == 0
    finally:
        for s in socks:
            s.close()
        if p.poll() is None:
            p.terminate()
        out = p.communicate(timeout=10)[0].decode()
        shutil.rmtree(d, ignore_errors=True)
    assert p.returncode == 0, out
