"""The SSD tier over several files: ssd_path (or memcached's ext_path) given twice.

One tier whose pages are spread over both files, each file with its own
header naming its place in the set.  Checked here: both files get pages, a
SIGTERM restart brings back every value byte-exact, a SIGKILL restart brings
back what test_crash's idle kill expects (every hit exact, nearly all of
NVM's and SSD's items back), a file missing at restart refuses the start
naming it, and one file given twice is refused.  Kept small (-m 8, NVM 16 MB,
two 64 MB SSD files) for the suite's time under ASan.
"""
import os
import subprocess
import time

import pytest

from mcserver import SERVER_BIN, base_args, free_port
from test_crash import IDLE_WAIT, check_loaded, crash_seed, kill_idle_and_restart, lower_count
from test_restart import (  # noqa: F401 (tier_files: fixture)
    DataSet,
    check_clean_recovery,
    fill,
    gets_all,
    graceful_stop,
    restart,
    tier_files,
    wait_recovered,
)

M_MB = 8
NVM_MB = 16
SSD_MB = 64
# Pages: ssd_page_size 1.25 MB (5 bufs, the least that holds -I 1m), 51 per
# file; ext_page_size 2 MB, 31 per file.
PAGE = {"ssd_path": 5 << 18, "ext_path": 2 << 20}
HEADER = 8192           # the two header blocks before a file's first page


def two_file_args(nvm, ssd, option):
    """-o options of a tier of NVM and two SSD files, named by `option`
    (ssd_path or ext_path) given twice."""
    o = "nvm_path=%s:%dm,%s=%s:%dm,%s=%s:%dm" % (nvm, NVM_MB, option, ssd[0], SSD_MB,
                                               option, ssd[1], SSD_MB)
    if option == "ssd_path":
        o += ",ssd_page_size=%d" % PAGE[option]
    else:
        o += ",ext_page_size=%d" % (PAGE[option] >> 20)
    return ["-t", "2", "-m", str(M_MB), "-o", o]


def pages_written(path, page):
    """Pages of the file holding something other than zeros in their first 4 KiB."""
    n = 0
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        for off in range(HEADER, size - page + 1, page):
            f.seek(off)
            if f.read(4096).strip(b"\0"):
                n += 1
    return n


def refused(opts, says):
    """The server started with -o opts exits non-zero saying `says`; its output."""
    p = subprocess.run([SERVER_BIN] + base_args() +
                       ["-l", "127.0.0.1", "-p", str(free_port()), "-U", "0"] + opts,
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    msg = (p.stdout + p.stderr).decode("utf-8", "replace")
    assert p.returncode not in (0, None), "started with %s: %s" % (opts, msg)
    assert says in msg, "expected %r in: %s" % (says, msg)
    return msg


@pytest.mark.tac_only
@pytest.mark.parametrize("option", ["ssd_path", "ext_path"])
def test_two_files_fill_restart_and_kill(server, tier_files, option):
    seed = crash_seed()
    nvm, ssd0 = tier_files()
    ssd = (ssd0, ssd0 + ".second")
    args = two_file_args(nvm, ssd, option)
    ds = DataSet(seed, 15000, 1024, 3072)

    srv = server(args)
    c = fill(srv, ds, M_MB)
    st = c.stats(b"settings")
    assert st["ssd_path"] == "%s:%dm,%s:%dm" % (ssd[0], SSD_MB, ssd[1], SSD_MB), st["ssd_path"]
    assert int(st["ssd_capacity"]) == 2 * (SSD_MB << 20) // PAGE[option] * PAGE[option], st["ssd_capacity"]
    graceful_stop(srv, "SIGTERM")
    written = [pages_written(p, PAGE[option]) for p in ssd]
    print("pages written per file: %s" % written)
    assert all(n >= 3 for n in written), "both SSD files must hold pages, got %s (seed %d)" % (written, seed)
    assert abs(written[0] - written[1]) <= 2, "pages go round robin over the files: %s (seed %d)" % (
        written, seed)

    srv = restart(server, srv, args)
    c, rs = wait_recovered(srv, seed)
    check_clean_recovery(rs, len(ds.val), seed)
    ds.compare(gets_all(c, ds.all_keys()), "after the SIGTERM restart on two SSD files")

    time.sleep(IDLE_WAIT)
    n_lower = lower_count(c, seed, "before the SIGKILL")
    srv, c = kill_idle_and_restart(server, srv, args, ds, n_lower, "two SSD files")
    graceful_stop(srv, "SIGTERM")

    # The second file missing: the start is refused, naming it, and the
    # first file is left as it was.
    os.rename(ssd[1], ssd[1] + ".away")
    with open(ssd[0], "rb") as f:
        first = f.read(1 << 20)
    msg = refused(args, "a file of the tier is missing")
    assert ssd[1] in msg and ssd[0] in msg and "tier_reformat=yes" in msg, msg
    assert not os.path.exists(ssd[1]), "a refused start left the missing file created"
    with open(ssd[0], "rb") as f:
        assert f.read(1 << 20) == first, "a refused start changed %s" % ssd[0]
    # The files swapped: refused, naming their order.
    os.rename(ssd[0], ssd[1])
    os.rename(ssd[1] + ".away", ssd[0])
    refused(args, "given here as file 1 of 2")
    # Back in order: it starts and serves the values again.
    os.rename(ssd[0], ssd[0] + ".tmp")
    os.rename(ssd[1], ssd[0])
    os.rename(ssd[0] + ".tmp", ssd[1])
    srv = restart(server, srv, args)
    c, rs = wait_recovered(srv, seed)
    check_loaded(c, ds, "after the files were put back in order")
    graceful_stop(srv, "SIGTERM")


@pytest.mark.parametrize("option", ["ssd_path", "ext_path"])
def test_one_file_given_twice_is_refused(tmp_path, option):
    p = str(tmp_path / "ssd.bin")
    refused(["-o", "%s=%s:64m,%s=%s:64m" % (option, p, option, p)], "is given twice")
    assert not os.path.exists(p), "a refused start created the SSD file"
    # The same file under another name (a hard link) is refused by the SSD tier.
    link = str(tmp_path / "link.bin")
    os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o600))
    os.link(p, link)
    refused(["-o", "%s=%s:64m,%s=%s:64m" % (option, p, option, link)], "is the same file as")
    assert os.path.getsize(p) == 0, "a refused start wrote the SSD file"
