"""A damaged lower-tier tuple is never served.

The NVM file is mapped shared, so bytes written into the file here are what
the server reads.  Each test value gets one byte changed at a different
place - in particular the first bytes of the last partial 8-byte word of
the value, which an earlier checksum did not cover - and a get must then
answer a miss (counted in tuple_checksum_failures), never the damaged value.
"""
import mmap
import os
import struct

import pytest

from test_nvm import fill_until_nvm, make_value, nvm_file, nvm_server, parse_get  # noqa: F401

pytestmark = pytest.mark.tac_only

HDR_SIZE = 40   # struct tac_tuple_hdr (tac/tuple.h)


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


def test_nvm_damaged_bytes_are_never_served(server, nvm_file):
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
    fill_until_nvm(c, [(k, v) for k, v, _ in cases])
    before = int(c.stats(b"tiers").get("tuple_checksum_failures", 0))
    with open(path, "r+b") as f:
        mm = mmap.mmap(f.fileno(), 0)
        for key, value, pos in cases:
            off = find_tuple(mm, key, len(value))
            assert off is not None, key
            assert mm[off:off + len(value)] == value
            mm[off + pos] ^= 0x20
        mm.flush()
        mm.close()
    wrong, served = [], 0
    for key, value, pos in cases:
        got = parse_get(c.get(b"get %s\r\n" % key))
        if key in got:
            served += 1
            if got[key][1] != value:
                wrong.append((key, pos))
    st = c.stats(b"tiers")
    assert not wrong, "damaged values served: %r" % wrong[:10]
    assert served == 0, "a changed tuple read back as its old value"
    assert int(st["tuple_checksum_failures"]) - before == len(cases)
    assert srv.alive()
