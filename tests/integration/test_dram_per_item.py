"""DRAM per lower-tier item (`stats tiers`: nvm_/ssd_dram_bytes_per_item[_past_key]).

Each NVM- or SSD-resident item keeps a meta tuple in DRAM.  `stats tiers`
reports, per tier, the average DRAM one costs: its slab chunk (rounding
included) plus its share of the hash index (bucket table bytes over every
indexed item), and the same less the key.  The tests fill DRAM with values
that must move down, with keys of one length (8, 33, 60 or 250 bytes), and check
the figures against what the server's own numbers give: the chunk part is
the compact meta tuple's size (`ssd_meta_tuple_bytes` or
`nvm_meta_tuple_bytes`, the same for both tiers and every key length: a
meta tuple keeps the key's fingerprint, not the key) rounded up to the
8-byte class step, the index part `hash_bytes` / `curr_items`, and the
difference of the two lines the key length.  Every value read back is
checked (it encodes its key, a version and a CRC).
"""
import pytest

from mcserver import IS_STOCK
from test_ssd import load, make_value, nvm_file, read_check, ssd_dir, ssd_server  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.tac_only,
              pytest.mark.skipif(IS_STOCK, reason="tac-only stats; TAC_SERVER is stock memcached")]


def key_of(i, klen):
    k = b"k%d-" % i
    return k + b"x" * (klen - len(k))


def tier_stats(srv):
    c = srv.connect()
    return {**c.stats(), **c.stats(b"tiers")}


def fill(srv, klen, n, vlen=3000):
    keys = [key_of(i, klen) for i in range(n)]
    c = srv.connect()
    stored, failures, _ = load(c, ((k, make_value(k, 1, vlen)) for k in keys))
    assert not failures, "sets refused: %r" % list(failures.items())[:3]
    return stored


def check_values(srv, keys):
    hits, misses, wrong = read_check(srv.connect(), keys, lambda k: (0, make_value(k, 1, 3000)))
    assert not wrong, wrong[:3]
    assert not misses, "%d of %d keys missing: %r" % (len(misses), len(keys), misses[:3])


def index_share(st):
    return int(st["hash_bytes"]) / int(st["curr_items"])


def check_tier_cost(srv, tier, klen, min_items, hdr):
    """The tier's DRAM-per-item lines against its meta tuples' size: a
    chunk of hdr bytes, whatever the key's length, rounded to the 8-byte
    class step, plus the index's share; the two lines differ by the key
    length."""
    st = tier_stats(srv)
    print({k: v for k, v in st.items() if "per_item" in k or
           k in ("hash_bytes", "curr_items", "ssd_items", "nvm_items")})
    assert int(st[tier + "_items"]) > min_items, \
        "too few items reached %s: %s" % (tier, st[tier + "_items"])
    per = float(st[tier + "_dram_bytes_per_item"])
    past = float(st[tier + "_dram_bytes_per_item_past_key"])
    assert abs(per - past - klen) < 0.05, (per, past, klen)
    chunk = -(-hdr(st) // 8) * 8
    assert abs(per - chunk - index_share(st)) < 0.5, \
        "%s_dram_bytes_per_item %.1f, expected chunk %d + index %.1f" % (
            tier, per, chunk, index_share(st))


@pytest.mark.parametrize("klen", [8, 33, 60, 250])
def test_ssd_resident_items_dram_cost(server, ssd_dir, klen):
    srv = ssd_server(server, ssd_dir, "256m", mem=16)
    keys = fill(srv, klen, 12000)
    # A compact meta tuple: ssd_meta_tuple_bytes, the key's fingerprint included.
    check_tier_cost(srv, "ssd", klen, 6000, lambda st: int(st["ssd_meta_tuple_bytes"]))
    check_values(srv, keys[::23])


@pytest.mark.parametrize("klen", [8, 33, 60])
def test_nvm_resident_items_dram_cost(server, ssd_dir, nvm_file, klen):
    srv = ssd_server(server, ssd_dir, "256m", mem=16, nvm=nvm_file() + ":24m")
    keys = fill(srv, klen, 9000)
    # A compact meta tuple, as on SSD: nvm_meta_tuple_bytes.
    check_tier_cost(srv, "nvm", klen, 2000, lambda st: int(st["nvm_meta_tuple_bytes"]))
    check_values(srv, keys[::17])


def test_more_keys_than_dram_holds_keys_for(server, ssd_dir):
    """A meta tuple keeps the key's fingerprint, not the key, so -m indexes
    keys whose bytes alone would not fit in it.  200,000 keys of 60 bytes
    (YCSB-like 100-byte values): with their keys in DRAM the meta tuples
    would take 200,000 x 112 B = 22 MB of -m 16; as 56-byte meta tuples they
    take 11 MB.  Every key must be stored and read back exact, and SSD must
    hold most of them."""
    srv = ssd_server(server, ssd_dir, "256m", mem=16)
    n, klen = 200000, 60
    keys = [key_of(i, klen) for i in range(n)]
    c = srv.connect()
    stored, failures, _ = load(c, ((k, make_value(k, 1, 100)) for k in keys), batch=500)
    assert not failures, "sets refused: %d, e.g. %r" % (len(failures), list(failures.items())[:3])
    st = tier_stats(srv)
    assert int(st["curr_items"]) == n, st["curr_items"]
    assert int(st["ssd_items"]) > n // 2, st["ssd_items"]
    assert n * (int(st["ssd_meta_tuple_bytes"]) + klen) > 16 << 20
    hits, misses, wrong = read_check(c, keys[::7], lambda k: (0, make_value(k, 1, 100)))
    assert not wrong, wrong[:3]
    assert not misses, "%d of %d keys missing: %r" % (len(misses), len(keys[::7]), misses[:3])
