"""A damaged lower-tier tuple is never served, now or later.

Items are pushed out of a small DRAM (-m 8) into NVM (a file under /dev/shm)
or onto SSD (a file on a disk file system); then bytes of their tuples are
changed in the backing file behind the server's back, as a media fault
would.  The NVM file is mapped shared, so bytes written into it are what the
server reads next; the SSD file is read with O_DIRECT, so a pwrite + fsync
after the buf reached the disk is.

A tuple is found by its key: the key is unique, and the tuple header
(tac/tuple.h, 40 bytes: seq, cas, nbytes, flags, exptime, time,
checksum, nkey, version, pad) lies just before it and must describe it.

Changed bytes include the first bytes of the last partial 8-byte word of the
value (counted with its "\\r\\n", as the tuple holds it), which an earlier
checksum did not cover when the length mod 8 was 5, 6 or 7, and a header
whose value length is out of bounds.  A get must then answer a miss, never
the damaged value; the item must be gone afterwards (a later get cannot
serve it either), and tuple_checksum_failures must count each one.  A
damaged NVM tuple is not carried down to SSD either.
"""
import mmap
import os
import struct
import time
import uuid

import pytest

from test_nvm import (fill_until_nvm, fmt_failures, load, make_value, nvm_file,  # noqa: F401 (nvm_file: fixture)
                      nvm_server, parse_get, tier_of)
from test_ssd import ssd_dir  # noqa: F401 (fixture)

pytestmark = pytest.mark.tac_only

HDR_SIZE = 40   # struct tac_tuple_hdr (tac/tuple.h)
HDR = struct.Struct("<QQIIIIIBB2x")
NBYTES_TOP = 19  # offset of nbytes' most significant byte in the header
FILL_SIZE = 1000


def find_tuple(mm, key, nbytes):
    """Offset of the value of key's tuple in the mapped NVM file."""
    # nbytes is at offset 16 of the header, nkey at 36 (after the checksum).
    off = mm.find(key)
    while off != -1:
        hdr = off - HDR_SIZE
        if hdr >= 0:
            nb = struct.unpack_from("<I", mm, hdr + 16)[0]
            if mm[hdr + 36] == len(key) and nb == nbytes + 2:
                return off + len(key)
        off = mm.find(key, off + 1)
    return None


def gone_after(c, keys):
    """Keys still linked (or served) after their damage was found."""
    left = []
    for key in keys:
        if key in parse_get(c.get(b"get %s\r\n" % key)) or tier_of(c, key) is not None:
            left.append(key)
    return left


def test_nvm_damaged_bytes_are_never_served(server, nvm_file):  # noqa: F811
    srv = nvm_server(server, nvm_file, mem=8, nvm="64m")
    c = srv.connect()
    path = srv.cmd[srv.cmd.index("-o") + 1].split("nvm_path=")[1].rsplit(":", 1)[0]
    # Value lengths with every remainder mod 8 (5, 6 and 7 among them), in
    # the filler's slab class so that they move to NVM with it, and
    # for each, damage at the first bytes of the last partial word, in the
    # middle, and in the first byte.
    cases = []
    for length in range(997, 1005):
        full = length + 2                       # the tuple's value ends "\r\n"
        last_word = full - full % 8 if full % 8 else full - 8
        for pos in sorted({last_word, last_word + 1, last_word + 2, length // 2, 0}):
            if pos < length:
                key = b"dmg-%04d-%04d-%s" % (length, pos, b"x" * 20)
                cases.append((key, make_value(key, 1, length), pos))
    # One more whose header claims a value far past its slot.
    hkey = b"dmg-header-%s" % (b"x" * 20)
    hvalue = make_value(hkey, 1, 1000)
    fill_until_nvm(c, [(k, v) for k, v, _ in cases] + [(hkey, hvalue)])
    before = int(c.stats(b"tiers").get("tuple_checksum_failures", 0))
    with open(path, "r+b") as f:
        mm = mmap.mmap(f.fileno(), 0)
        for key, value, pos in cases:
            off = find_tuple(mm, key, len(value))
            assert off is not None, key
            assert mm[off:off + len(value)] == value
            mm[off + pos] ^= 0x20
        off = find_tuple(mm, hkey, len(hvalue))
        assert off is not None, hkey
        mm[off - len(hkey) - HDR_SIZE + NBYTES_TOP] ^= 0xFF
        mm.flush()
        mm.close()
    wrong, served = [], 0
    for key, value, pos in cases + [(hkey, hvalue, None)]:
        got = parse_get(c.get(b"get %s\r\n" % key))
        if key in got:
            served += 1
            if got[key][1] != value:
                wrong.append((key, pos))
    st = c.stats(b"tiers")
    assert not wrong, "damaged values served: %r" % wrong[:10]
    assert served == 0, "a changed tuple read back as its old value"
    assert int(st["tuple_checksum_failures"]) - before == len(cases) + 1, st
    left = gone_after(c, [k for k, _, _ in cases] + [hkey])
    assert not left, "%d damaged items still linked, first %r" % (len(left), left[:5])
    assert srv.alive()


# ---------------------------------------------------------------- SSD

def targets(tag):
    """Two keys per residue of nbytes (value + "\\r\\n") mod 8, values near FILL_SIZE
    (the filler's slab class, so that they leave DRAM with it), a key whose header gets
    damaged, and two controls left alone.  Items are (key, value, what)."""
    u = uuid.uuid4().hex[:8].encode()
    out = []
    for r in range(8):
        for j in range(2):
            nbytes = FILL_SIZE + 8 * j + (r - FILL_SIZE - 8 * j) % 8
            k = b"crc-%s-%s-m%d-%d" % (tag, u, r, j)
            out.append((k, make_value(k, 1, nbytes - 2), "value"))
    for what in (b"header", b"control", b"control"):
        k = b"crc-%s-%s-%s-%d" % (tag, u, what, len(out))
        out.append((k, make_value(k, 1, FILL_SIZE), what.decode()))
    return out


def find_tuples(data, key, value):
    """Offsets of the tuple headers in `data` that describe key=value."""
    found = []
    pos = data.find(key)
    while pos >= 0:
        h = pos - HDR.size
        if h >= 0:
            _, _, nbytes, _, _, _, _, nkey, _ = HDR.unpack_from(data, h)
            end = pos + len(key)
            if nkey == len(key) and nbytes == len(value) + 2 and data[end:end + nbytes] == value + b"\r\n":
                found.append(h)
        pos = data.find(key, pos + 1)
    return found


def damage_offset(hdr_off, key, value, what):
    """(file offset, xor) of the byte to change in the tuple whose header is at hdr_off."""
    if what == "header":
        return hdr_off + NBYTES_TOP, 0xFF
    vstart = hdr_off + HDR.size + len(key)
    nbytes = len(value) + 2
    tail = nbytes % 8
    if tail <= 2:
        # No partial word, or one of "\r\n" bytes only: the first byte of the
        # last whole word instead (data, so that a reply would stay parseable).
        return vstart + nbytes - tail - 8, 0x01
    return vstart + nbytes - tail, 0x01


def stat(c, name):
    return int(c.stats_general().get(name, "0"))


def push_down(c, keys, done, first=0, max_keys=60000):
    """Filler keys from number `first` on until done() is true; returns the next number."""
    n = first
    deadline = None
    while not done():
        if n - first < max_keys:
            items = [(b"fill%06d" % i, make_value(b"fill%06d" % i, 1, FILL_SIZE)) for i in range(n, n + 2000)]
            _, failures = load(c, items)
            assert not failures, fmt_failures(failures, c.stats(b"tiers"))
            n += 2000
        else:
            deadline = deadline or time.time() + 10
            if time.time() > deadline:
                where = {k: tier_of(c, k) for k in keys}
                raise AssertionError("filler did not get there: %r; stats tiers %r" % (where, c.stats(b"tiers")))
            time.sleep(0.2)
    return n


def check_reads(c, items, damaged):
    """Damaged items must miss, twice, and be gone after; the others come back intact."""
    bad = []
    for k, v, what in items:
        got = parse_get(c.get(b"get %s\r\n" % k, timeout=30))
        if k not in damaged:
            if got.get(k, (0, None))[1] != v:
                bad.append("undamaged %r (%s): %r" % (k, what, got.get(k)))
            continue
        if k in got:
            bad.append("served %s value for %r (%s, nbytes %% 8 = %d)"
                       % ("its stored" if got[k][1] == v else "a damaged", k, what, (len(v) + 2) % 8))
    left = gone_after(c, sorted(damaged))
    if left:
        bad.append("%d damaged items still linked, first %r" % (len(left), left[:5]))
    return bad


def test_ssd_damaged_bytes_are_never_served(server, ssd_dir):  # noqa: F811
    path = os.path.join(ssd_dir, "ssd")
    s = server(["-m", "8", "-t", "2", "-o", "ssd_path=%s:64m,ssd_buf_size=64k" % path])
    c = s.connect()
    items = targets(b"ssd")
    _, failures = load(c, [(k, v) for k, v, _ in items])
    assert not failures, fmt_failures(failures, c.stats(b"tiers"))

    def on_disk():
        if not all(tier_of(c, k) == "ssd" for k, _, _ in items):
            return False
        with open(path, "rb") as f:
            data = f.read()
        return all(len(find_tuples(data, k, v)) == 1 for k, v, _ in items)

    push_down(c, [k for k, _, _ in items], on_disk)
    # The bufs are on disk; give their write completions time to drop the
    # in-memory copies, so that the reads below go to the device.
    time.sleep(0.5)

    damaged = set()
    fd = os.open(path, os.O_RDWR)
    try:
        with open(path, "rb") as f:
            data = f.read()
        for k, v, what in items:
            found = find_tuples(data, k, v)
            assert len(found) == 1, "tuple of %r found at %r in the SSD file" % (k, found)
            if what == "control":
                continue
            off, x = damage_offset(found[0], k, v, what)
            os.pwrite(fd, bytes([data[off] ^ x]), off)
            damaged.add(k)
        os.fsync(fd)
    finally:
        os.close(fd)
    f0 = stat(c, "tuple_checksum_failures")

    bad = check_reads(c, items, damaged)
    assert not bad, "\n".join(bad)
    assert stat(c, "tuple_checksum_failures") - f0 == len(damaged), c.stats(b"tiers")


def test_damaged_nvm_tuples_are_not_moved_to_ssd(server, nvm_file, ssd_dir):  # noqa: F811
    npath = nvm_file("crcmove")
    spath = os.path.join(ssd_dir, "ssd")
    s = server(["-m", "8", "-t", "2", "-o", "nvm_path=%s:16m,ssd_path=%s:64m,ssd_buf_size=64k" % (npath, spath)])
    c = s.connect()
    items = targets(b"mv")
    keys = [k for k, _, _ in items]
    _, failures = load(c, [(k, v) for k, v, _ in items])
    assert not failures, fmt_failures(failures, c.stats(b"tiers"))
    n = push_down(c, keys, lambda: all(tier_of(c, k) == "nvm" for k in keys))

    damaged = set()
    with open(npath, "r+b") as f, mmap.mmap(f.fileno(), 0) as mm:
        for k, v, what in items:
            found = find_tuples(mm, k, v)
            assert len(found) == 1, "tuple of %r found at %r in the NVM file" % (k, found)
            if what == "control":
                continue
            off, x = damage_offset(found[0], k, v, what)
            mm[off] ^= x
            damaged.add(k)
        mm.flush()
    f0 = stat(c, "tuple_checksum_failures")

    # More filler: NVM fills up and its coldest tuples, these, move to SSD.
    push_down(c, keys, lambda: all(tier_of(c, k) != "nvm" for k in keys), first=n)
    where = {k: tier_of(c, k) for k in sorted(damaged)}
    carried = [k for k, t in where.items() if t is not None]
    assert not carried, "damaged NVM tuples moved on instead of dropped: %r" % {k: where[k] for k in carried}
    assert stat(c, "tuple_checksum_failures") - f0 == len(damaged), c.stats(b"tiers")
    bad = check_reads(c, items, damaged)
    assert not bad, "\n".join(bad)
