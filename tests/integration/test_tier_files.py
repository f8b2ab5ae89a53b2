"""Tier files that hold something else stop the start, untouched.

An NVM or SSD tier file is formatted at start only when it is new, holds only
zeros where the header goes, or already holds a tier of this format and
geometry.  Anything else (foreign data, a memcached extstore file, a tier of
another size or format version, a damaged header) stops the start with a
message that names the file and the way out, -o tier_reformat=yes; the file
keeps every byte and its size.
"""
import hashlib
import os
import shutil
import socket
import struct
import subprocess
import time

import pytest

from mcserver import SERVER_BIN, base_args, free_port, remove_tier_file

SSD_MB = 64
NVM_MB = 32


def digest(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest(), os.path.getsize(path)


def start_refused(opts, path, what):
    """Starts the server with -o opts; it must exit non-zero naming path,
    what the file holds and the way out, and leave path as it was."""
    before = digest(path)
    p = subprocess.run([SERVER_BIN] + base_args() +
                       ["-l", "127.0.0.1", "-p", str(free_port()), "-U", "0", "-o", opts],
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    msg = (p.stdout + p.stderr).decode("utf-8", "replace")
    assert p.returncode not in (0, None), "started on %s (%s): %s" % (path, what, msg)
    assert path in msg and "tier_reformat=yes" in msg, msg
    assert what in msg, "expected %r in: %s" % (what, msg)
    assert digest(path) == before, "a refused start changed %s" % path
    return msg


def stopped(srv):
    """Stops srv with SIGTERM; its exit status."""
    srv.expect_exit = True
    return srv.stop()


def roundtrip(srv):
    c = srv.connect()
    assert c.line(b"set k 0 0 5\r\nhello\r\n") == b"STORED\r\n"
    assert c.get(b"get k\r\n") == b"VALUE k 0 5\r\nhello\r\nEND\r\n"


def write_junk(path, size, seed=1):
    rnd = struct.pack("<Q", seed) * 512
    with open(path, "wb") as f:
        f.write(hashlib.sha512(rnd).digest() * (size // 64))


def test_foreign_ssd_file_stops_the_start(server, tmp_path):
    path = str(tmp_path / "data.bin")
    write_junk(path, 1 << 20)
    opts = "ssd_path=%s:%dm" % (path, SSD_MB)
    start_refused(opts, path, "not a tac-memcached SSD tier")
    # The way out formats it.
    roundtrip(server(["-o", opts + ",tier_reformat=yes"]))


def test_foreign_nvm_file_stops_the_start(server, tmp_path):
    path = "/dev/shm/tac-test-tierfile-%d" % os.getpid()
    try:
        write_junk(path, 3 << 20, seed=2)
        opts = "nvm_path=%s:%dm" % (path, NVM_MB)
        start_refused(opts, path, "not a tac-memcached NVM tier")
        roundtrip(server(["-o", opts + ",tier_reformat=yes"]))
    finally:
        remove_tier_file(path)


def test_other_geometry_and_version(server, tmp_path):
    ssd = str(tmp_path / "ssd.dat")
    opts = "ssd_path=%s:%dm" % (ssd, SSD_MB)
    s = server(["-o", opts])
    roundtrip(s)
    assert stopped(s) == 0
    # The same options open it again; another size or page size does not.
    s = server(["-o", opts])
    roundtrip(s)
    assert stopped(s) == 0
    start_refused("ssd_path=%s:%dm" % (ssd, 2 * SSD_MB), ssd, "another geometry")
    start_refused(opts + ",ssd_page_size=4m", ssd, "another geometry")
    # A header of format version 1 (one copy, no checksum).
    with open(ssd, "r+b") as f:
        f.write(b"TACSSD\x00\x01" + struct.pack("<II", 1, 0) + b"\0" * 8176)
    start_refused(opts, ssd, "format version 1")
    # Both header copies damaged.
    s = server(["-o", opts + ",tier_reformat=yes"])
    assert stopped(s) == 0
    with open(ssd, "r+b") as f:
        for off in (40, 4096 + 40):
            f.seek(off)
            b = f.read(1)
            f.seek(off)
            f.write(bytes([b[0] ^ 0xFF]))
    start_refused(opts, ssd, "damaged")
    roundtrip(server(["-o", opts + ",tier_reformat=yes"]))


def test_one_torn_header_copy_is_survived(server, tmp_path):
    ssd = str(tmp_path / "ssd.dat")
    opts = "ssd_path=%s:%dm" % (ssd, SSD_MB)
    assert stopped(server(["-o", opts])) == 0
    for copy in (0, 1):
        with open(ssd, "r+b") as f:
            f.seek(copy * 4096)
            f.write(os.urandom(512))
        roundtrip(server(["-o", opts]))


def test_zeroed_and_new_files_are_formatted(server, tmp_path):
    ssd = str(tmp_path / "ssd.dat")
    with open(ssd, "wb") as f:
        f.truncate(SSD_MB << 20)
    roundtrip(server(["-o", "ssd_path=%s:%dm" % (ssd, SSD_MB)]))
    roundtrip(server(["-o", "ssd_path=%s:%dm" % (str(tmp_path / "new.dat"), SSD_MB)]))


def memcached_bin():
    for p in ("/usr/bin/memcached", shutil.which("memcached") or ""):
        if p and os.access(p, os.X_OK):
            return p
    return None


@pytest.mark.skipif(memcached_bin() is None, reason="stock memcached not installed")
def test_extstore_file_stops_the_start(server, tmp_path):
    """A memcached extstore file (stock memcached writes it) is not ours;
    switching to tac-memcached on it takes tier_reformat=yes once."""
    ext = str(tmp_path / "extstore.dat")
    port = free_port()
    mc = subprocess.Popen([memcached_bin(), "-u", "root", "-l", "127.0.0.1", "-p", str(port),
                           "-U", "0", "-m", "64", "-o",
                           "ext_page_size=4,ext_wbuf_size=2,ext_threads=1,ext_item_age=0,"
                           "ext_item_size=512,ext_path=%s:%dm" % (ext, SSD_MB)],
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        sock = None
        while sock is None:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError:
                assert time.time() < deadline, "stock memcached did not start"
                time.sleep(0.05)
        value = b"x" * 4000
        for i in range(4000):       # 16 MB of items old enough to flush
            sock.sendall(b"set ext%d 0 0 %d noreply\r\n%s\r\n" % (i, len(value), value))
        written = 0
        while time.time() < deadline + 20:
            sock.sendall(b"stats\r\n")
            buf = b""
            while not buf.endswith(b"END\r\n"):
                buf += sock.recv(65536)
            for line in buf.split(b"\r\n"):
                if line.startswith(b"STAT extstore_bytes_written "):
                    written = int(line.split()[2])
            if written >= 2 << 20:
                break
            time.sleep(0.2)
        sock.close()
        assert written >= 2 << 20, "extstore wrote only %d bytes" % written
    finally:
        mc.terminate()
        mc.wait(10)
    with open(ext, "rb") as f:
        assert any(f.read(16 << 20)), "extstore wrote nothing to its file"
    opts = "ssd_path=%s:%dm" % (ext, SSD_MB)
    start_refused(opts, ext, "not a tac-memcached SSD tier")
    roundtrip(server(["-o", opts + ",tier_reformat=yes"]))
