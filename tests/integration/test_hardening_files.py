"""Files that hold cache data are private and never opened through a link.

The NVM and SSD tier files, the restart state, its journal and the DRAM log
hold keys and values (in clear without -o tier_key).  Each is created 0600
whatever the umask, an existing one that others may read gets a warning,
and a symbolic link planted at any of their paths is never followed: the
file it points to is left as it was.
"""
import os
import signal
import stat
import tempfile
import time

import pytest

from mcserver import IS_STOCK, remove_tier_file, wait_stderr

pytestmark = [pytest.mark.tac_only,
              pytest.mark.skipif(IS_STOCK, reason="tac-memcached's tier files")]

VICTIM = b"precious bytes that are not the server's\n"


@pytest.fixture
def paths(shm_file):
    d = tempfile.mkdtemp(prefix="tac-files-", dir=os.environ.get("TAC_SSD_DIR") or None)
    nvm = shm_file("files")
    ssd = os.path.join(d, "ssd.dat")
    yield {"dir": d, "nvm": nvm, "ssd": ssd, "state": ssd + ".state",
           "tmp": ssd + ".state.tmp", "journal": ssd + ".state.journal", "dramlog": nvm + ".dramlog"}
    for name in os.listdir(d):
        os.unlink(os.path.join(d, name))
    os.rmdir(d)
    remove_tier_file(nvm)


def start(server, p, umask, extra=()):
    old = os.umask(umask)
    try:
        return server(["-m", "16", "-o", "nvm_path=%s:16m,ssd_path=%s:64m,dram_log=on" % (p["nvm"], p["ssd"])]
                      + list(extra))
    finally:
        os.umask(old)


def load(srv, n=3000):
    c = srv.connect()
    for i in range(n):
        v = b"%05d" % i * 40
        c.send(b"set key-%05d 0 0 %d noreply\r\n%s\r\n" % (i, len(v), v))
    assert c.line(b"mn\r\n") == b"MN\r\n"
    return c


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def victim(d, name="victim"):
    v = os.path.join(d, name)
    with open(v, "wb") as f:
        f.write(VICTIM)
    os.chmod(v, 0o644)
    return v


def victim_intact(v):
    with open(v, "rb") as f:
        return f.read() == VICTIM and mode(v) == 0o644


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o177])
def test_cache_files_are_created_private(server, paths, umask):
    """Under any umask every cache file is 0600, the state file written by a
    graceful stop included."""
    srv = start(server, paths, umask)
    load(srv)
    for name in ("nvm", "ssd", "journal", "dramlog"):
        assert mode(paths[name]) == 0o600, "%s is %o" % (name, mode(paths[name]))
    old = os.umask(umask)
    srv.expect_exit = True
    try:
        assert srv.stop(signal.SIGTERM) == 0
    finally:
        os.umask(old)
    assert mode(paths["state"]) == 0o600, "state is %o" % mode(paths["state"])
    assert not os.path.exists(paths["tmp"])


def test_a_link_at_the_state_temporary_path_is_replaced_not_followed(server, paths):
    srv = start(server, paths, 0o022)
    load(srv, 500)
    v = victim(paths["dir"])
    os.symlink(v, paths["tmp"])
    srv.expect_exit = True
    assert srv.stop(signal.SIGTERM) == 0
    assert victim_intact(v)
    assert os.path.isfile(paths["state"]) and not os.path.islink(paths["state"])
    assert mode(paths["state"]) == 0o600
    # The state written is good: the next start brings the items back.
    srv2 = start(server, paths, 0o022)
    c = srv2.connect()
    deadline = time.time() + 30
    while c.stats(b"tac")["recovery_state"] != "done":
        assert time.time() < deadline
        time.sleep(0.05)
    assert c.get(b"get key-00007\r\n") == b"VALUE key-00007 0 200\r\n%s\r\nEND\r\n" % (b"00007" * 40)


@pytest.mark.parametrize("which", ["journal", "state"])
def test_a_link_at_a_cache_path_is_not_followed(server, paths, which):
    """A link planted where the journal, the DRAM log or the state file will be
    read or written: the file it names is never read, written or truncated."""
    v = victim(paths["dir"])
    os.symlink(v, paths[which])
    srv = start(server, paths, 0o022)
    wait_stderr(srv, "is a symbolic link")
    c = load(srv, 200)
    assert c.get(b"get key-00003\r\n") == b"VALUE key-00003 0 200\r\n%s\r\nEND\r\n" % (b"00003" * 40)
    assert victim_intact(v)
    srv.expect_exit = True
    assert srv.stop(signal.SIGTERM) == 0
    assert victim_intact(v)


@pytest.mark.parametrize("which", ["nvm", "ssd", "dramlog"])
def test_a_tier_path_that_is_a_link_refuses_the_start(server, paths, which):
    """A tier file, or the DRAM log that -o dram_log promises, behind a link:
    the start is refused with a message, and the linked file is untouched."""
    v = victim(paths["dir"])
    os.symlink(v, paths[which])
    old = os.umask(0o022)
    try:
        srv = server(["-m", "16", "-o", "nvm_path=%s:16m,ssd_path=%s:64m,dram_log=on"
                      % (paths["nvm"], paths["ssd"])], wait=False)
    finally:
        os.umask(old)
    srv.expect_exit = True
    rc = srv.proc.wait(60)
    assert rc != 0
    assert "is a symbolic link" in srv.stderr_text()
    assert victim_intact(v)


def test_an_existing_file_others_can_read_gets_a_warning(server, paths):
    srv = start(server, paths, 0o022)
    load(srv, 100)
    srv.expect_exit = True
    assert srv.stop(signal.SIGTERM) == 0
    os.chmod(paths["ssd"], 0o644)
    srv2 = start(server, paths, 0o022)
    wait_stderr(srv2, "other users may access it (mode 644)")
    assert paths["ssd"] in srv2.stderr_text()
