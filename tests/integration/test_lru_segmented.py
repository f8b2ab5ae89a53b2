"""memcached's segmented LRU (engine/lru_seg.c): -o lru_maintainer and -o temporary_ttl.

With -o lru_maintainer a slab class keeps HOT, WARM and COLD queues: a new item
goes to HOT, the maintainer moves HOT's tail to COLD once HOT holds more than
hot_lru_pct of the class's bytes, an item read twice while in COLD moves to WARM,
and only COLD is evicted from.  With -o temporary_ttl an item stored with that many
seconds or fewer to live goes to TEMP, which nothing evicts from.  The tests read
the queues through `stats items` (number_hot/warm/cold/temp, moves_to_cold,
moves_to_warm, hits_to_*), as memcached's t/lru-maintainer.t does, over raw
sockets.  Each value read back is compared whole.  Waits for the maintainer (it
juggles every 50 ms) are polls with a deadline.
"""
import re
import time

import pytest

from mcserver import IS_STOCK, wait_until

pytestmark = [pytest.mark.tac_only,
              pytest.mark.skipif(IS_STOCK, reason="tac-only behaviour; TAC_SERVER is stock memcached")]


def value_of(i, n):
    head = b"%08d|" % i
    return (head * (n // len(head) + 1))[:n]


def class_stats(c):
    per = {}
    for name, val in c.stats(b"items").items():
        m = re.match(r"items:(\d+):(\w+)$", name)
        per.setdefault(int(m.group(1)), {})[m.group(2)] = int(val)
    return per


def class_of(c, key):
    """The slab class of a stored key (`me` shows it as `cls`)."""
    r = c.line(b"me " + key + b"\r\n")
    m = re.search(rb" cls=(\d+)", r)
    assert m, r
    return int(m.group(1))


def fill(c, prefix, count, size, ttl=0):
    """Pipelined noreply sets, then a round trip so that all are done."""
    batch = []
    for i in range(count):
        batch.append(b"set %s%d 0 %d %d noreply\r\n%s\r\n" % (prefix, i, ttl, size, value_of(i, size)))
        if len(batch) == 50:
            c.send(b"".join(batch))
            batch = []
    c.send(b"".join(batch))
    assert c.line(b"mn\r\n") == b"MN\r\n"


def get_value(c, key):
    r = c.get(b"get " + key + b"\r\n")
    if r == b"END\r\n":
        return None
    head, rest = r.split(b"\r\n", 1)
    n = int(head.split()[3])
    return rest[:n]


def test_settings_show_the_segmented_lru(server):
    c = server(["-m", "8", "-o", "lru_maintainer,hot_lru_pct=25,warm_lru_pct=35,"
                "hot_max_factor=0.5,temporary_ttl=30"]).connect()
    st = c.stats(b"settings")
    assert (st["lru_segmented"], st["temp_lru"], st["hot_lru_pct"], st["warm_lru_pct"],
            st["hot_max_factor"], st["temporary_ttl"]) == ("yes", "yes", "25", "35", "0.50", "30"), st
    d = server(["-m", "8"]).connect().stats(b"settings")
    assert (d["lru_segmented"], d["temp_lru"]) == ("no", "no"), d


def test_hot_moves_to_cold_and_only_cold_is_evicted(server):
    c = server(["-m", "8", "-o", "lru_maintainer"]).connect()
    fill(c, b"k", 1200, 10000)                      # ~12 MB into 8 MB, never read
    st = c.stats()
    assert int(st["evictions"]) > 0 and int(st["moves_to_cold"]) > 0, st
    cls = class_of(c, b"k1199")
    last = {}

    def hot_within_share():
        last.update(class_stats(c)[cls])
        return last["number_hot"] * 100 <= 25 * last["number"]
    assert wait_until(hot_within_share, 10), last
    # HOT may also have emptied by age (hot_max_factor) when the fill was
    # slow, as under a sanitizer build.
    assert last["number_cold"] > 0, last
    assert last["number_warm"] == 0 and last["moves_to_warm"] == 0, last    # nothing read
    assert last["number_hot"] + last["number_warm"] + last["number_cold"] == last["number"], last
    assert last["moves_to_cold"] > 0 and last["evicted"] > 0, last
    # The newest items are kept; the oldest were evicted from COLD.
    assert get_value(c, b"k1199") == value_of(1199, 10000)
    assert get_value(c, b"k0") is None


def test_an_item_read_twice_in_cold_moves_to_warm(server):
    c = server(["-m", "8", "-o", "lru_maintainer"]).connect()
    fill(c, b"f", 50, 3000)
    val = value_of(7, 3000)
    assert c.line(b"set canary 0 0 3000\r\n" + val + b"\r\n") == b"STORED\r\n"
    cls = class_of(c, b"canary")
    # Unread, all 51 leave HOT for COLD: past HOT's share of the class's
    # bytes, or older than hot_max_factor times COLD's oldest.
    assert wait_until(lambda: class_stats(c)[cls]["number_cold"] == 51, 10), class_stats(c)[cls]
    assert get_value(c, b"canary") == val           # FETCHED
    assert get_value(c, b"canary") == val           # ACTIVE: the LRU thread moves it
    last = {}

    def in_warm():
        last.update(class_stats(c)[cls])
        return last["number_warm"] == 1
    assert wait_until(in_warm, 5), last
    assert (last["number_cold"], last["number_hot"], last["moves_to_warm"],
            last["moves_to_cold"], last["hits_to_cold"]) == (50, 0, 1, 51, 2), last
    # One item of 51 is within WARM's share: it stays there.
    assert get_value(c, b"canary") == val
    s = class_stats(c)[cls]
    assert (s["number_warm"], s["hits_to_warm"], s["hits_to_hot"]) == (1, 1, 0), s
    assert int(c.stats()["moves_to_warm"]) == 1
    for i in (0, 49):
        assert get_value(c, b"f%d" % i) == value_of(i, 3000)


def test_temp_items_are_not_evicted_and_leave_when_they_expire(server):
    c = server(["-m", "8", "-o", "temporary_ttl=61"]).connect()
    assert c.stats(b"settings")["temp_lru"] == "yes"
    keep = value_of(3, 10000)
    assert c.line(b"set temp 0 30 10000\r\n" + keep + b"\r\n") == b"STORED\r\n"
    assert c.line(b"set brief 0 1 10000\r\n" + keep + b"\r\n") == b"STORED\r\n"
    cls = class_of(c, b"temp")
    assert class_stats(c)[cls]["number_temp"] == 2
    fill(c, b"long", 1600, 10000, ttl=3600)          # twice the memory, never read
    st = class_stats(c)[cls]
    assert st["evicted"] > 0, st
    # `brief` expired meanwhile: the maintainer reclaims it from TEMP's tail.
    last = {}

    def brief_gone():
        last.update(class_stats(c)[cls])
        return last["number_temp"] == 1
    assert wait_until(brief_gone, 10), last
    assert last["reclaimed"] + last["crawler_reclaimed"] >= 1, last
    assert get_value(c, b"temp") == keep
    assert get_value(c, b"brief") is None
    assert class_stats(c)[cls]["hits_to_temp"] == 1


def test_a_lower_tier_keeps_the_lazy_lru(server, tmp_path):
    s = server(["-m", "16", "-o", "lru_maintainer,temporary_ttl=61,ssd_path=%s/ssd:64m" % tmp_path])
    c = s.connect()
    st = c.stats(b"settings")
    assert (st["lru_segmented"], st["temp_lru"]) == ("no", "no"), st
    assert "have no effect with a lower tier" in s.stderr_text(), s.stderr_text()
    assert c.line(b"set k 0 5 1\r\nx\r\n") == b"STORED\r\n"
    assert "number_temp" not in " ".join(c.stats(b"items"))
    for cmd, answer in [(b"lru mode segmented", b"ERROR lru mode segmented has no meaning "
                                                 b"with a lower tier"),
                        (b"lru temp_ttl 5", b"ERROR lru temp_ttl has no meaning with a lower tier"),
                        (b"lru mode flat", b"OK"), (b"lru temp_ttl -1", b"OK")]:
        got = c.line(cmd + b"\r\n")
        assert got.startswith(answer), (cmd, got)
    assert c.stats(b"settings")["lru_segmented"] == "no"


def test_lru_commands_change_the_queues_at_run_time(server):
    c = server(["-m", "8"]).connect()
    for cmd, answer in [(b"lru tune 50 40 0.1 2", b"ERROR hot and warm pcts must not exceed 80"),
                        (b"lru tune 10 10 0 1", b"ERROR hot/warm age factors must be greater than 0"),
                        (b"lru tune x 10 1 1", b"ERROR"), (b"lru tune 10 10 inf 1", b"ERROR"),
                        (b"lru tune 10 10 1 nan", b"ERROR"), (b"lru mode bogus", b"ERROR"),
                        (b"lru temp_ttl x", b"ERROR"), (b"lru bogus", b"ERROR"), (b"lru", b"ERROR"),
                        (b"lru tune 10 25 0.1 2.0", b"OK")]:
        assert c.line(cmd + b"\r\n") == answer + b"\r\n", cmd
    st = c.stats(b"settings")
    assert (st["hot_lru_pct"], st["warm_lru_pct"], st["hot_max_factor"], st["warm_max_factor"],
            st["lru_segmented"]) == ("10", "25", "0.10", "2.00", "no"), st
    c.send(b"lru tune 20 40 0.2 2.0 noreply\r\n")
    assert c.stats(b"settings")["hot_lru_pct"] == "20"

    # Segmented from now on: new items enter HOT, and leave it for COLD.
    assert c.line(b"lru mode segmented\r\n") == b"OK\r\n"
    assert c.stats(b"settings")["lru_segmented"] == "yes"
    fill(c, b"s", 40, 3000)
    cls = class_of(c, b"s0")
    assert wait_until(lambda: class_stats(c)[cls]["moves_to_cold"] > 0, 5), class_stats(c)[cls]
    # A huge factor means "never by age": juggles with COLD's oldest a
    # second old or more multiply it into an age past any rel_time_t.
    assert c.line(b"lru tune 20 40 1e300 1e300\r\n") == b"OK\r\n"
    time.sleep(1.2)
    assert get_value(c, b"s39") == value_of(39, 3000)
    # Flat again: HOT and WARM drain into COLD, and new items go there directly.
    assert c.line(b"lru mode flat\r\n") == b"OK\r\n"
    assert wait_until(lambda: class_stats(c)[cls]["number_cold"] == 40, 5), class_stats(c)[cls]
    moved = class_stats(c)[cls]["moves_to_cold"]
    fill(c, b"t", 5, 3000)
    time.sleep(0.2)
    s = class_stats(c)[cls]
    assert (s["number_cold"], s["number_hot"], s["moves_to_cold"]) == (45, 0, moved), s

    assert c.line(b"lru temp_ttl 60\r\n") == b"OK\r\n"
    st = c.stats(b"settings")
    assert (st["temp_lru"], st["temporary_ttl"]) == ("yes", "60"), st
    val = value_of(1, 3000)
    assert c.line(b"set brief 0 30 3000\r\n" + val + b"\r\n") == b"STORED\r\n"
    assert class_stats(c)[cls]["number_temp"] == 1
    assert c.line(b"lru temp_ttl -1\r\n") == b"OK\r\n"
    assert c.stats(b"settings")["temp_lru"] == "no"
    assert get_value(c, b"brief") == val
    for i in (0, 39):
        assert get_value(c, b"s%d" % i) == value_of(i, 3000)


def test_queues_under_concurrent_load_keep_every_value_whole(server):
    """Four clients set, read, touch and delete keys of sizes across several
    classes while memory is short (evictions, the maintainer's moves, TEMP
    items expiring) and a fifth switches the modes back and forth.  Every
    value read must be one a set wrote for that key."""
    import random
    import threading
    seed = random.randrange(1 << 30)
    print("seed", seed)
    s = server(["-m", "8", "-o", "lru_maintainer,temporary_ttl=1"])
    sizes = [100, 900, 3000, 9000]

    def val(key, size):
        head = b"%s:%d|" % (key, size)
        return (head * (size // len(head) + 1))[:size]

    errors = []
    stop = time.time() + 4

    def client(n):
        rnd = random.Random(seed + n)
        c = s.connect()
        try:
            while time.time() < stop:
                key = b"k%d" % rnd.randrange(4000)
                op = rnd.random()
                if op < 0.45:
                    size = rnd.choice(sizes)
                    ttl = rnd.choice([0, 0, 0, 1])
                    r = c.line(b"set %s 0 %d %d\r\n%s\r\n" % (key, ttl, size, val(key, size)))
                    if r != b"STORED\r\n":
                        errors.append((key, r))
                elif op < 0.85:
                    cmd = b"get " if op < 0.75 else b"gat 100 "
                    r = c.get(cmd + key + b"\r\n")
                    if r != b"END\r\n":
                        head, rest = r.split(b"\r\n", 1)
                        size = int(head.split()[3])
                        if rest[:size] != val(key, size):
                            errors.append((key, head, rest[:40]))
                else:
                    r = c.line(b"delete %s\r\n" % key)
                    if r not in (b"DELETED\r\n", b"NOT_FOUND\r\n"):
                        errors.append((key, r))
        except Exception as e:  # noqa: BLE001  (reported below with the seed)
            errors.append(repr(e))

    def switcher():
        c = s.connect()
        cmds = [b"lru mode flat", b"lru mode segmented", b"lru temp_ttl -1",
                b"lru temp_ttl 1", b"lru tune 10 30 0.1 1.5", b"lru tune 20 40 0.2 2.0"]
        i = 0
        while time.time() < stop:
            r = c.line(cmds[i % len(cmds)] + b"\r\n")
            if r != b"OK\r\n":
                errors.append((cmds[i % len(cmds)], r))
            i += 1
            time.sleep(0.1)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(4)]
    threads.append(threading.Thread(target=switcher))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, (seed, errors[:5])
    err = s.stderr_text()
    for marker in ("WARNING: ThreadSanitizer", "ERROR: AddressSanitizer", "runtime error:"):
        assert marker not in err, (seed, err)
    c = s.connect()
    st = c.stats()
    assert int(st["evictions"]) > 0, st
    moved = sum(q.get("moves_to_cold", 0) for q in class_stats(c).values())
    assert moved > 0, class_stats(c)
