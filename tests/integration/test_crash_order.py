"""Orders of events around restarts that once brought back a deleted or older value.

Each test forces one order with real requests, a graceful stop and a
SIGKILL, and checks that no deleted key comes back and no older value is
served.
"""
import os
import random
import re
import signal
import subprocess
import sys
import time

import pytest

from mcserver import IS_STOCK
from test_crash import sigkill, wait_crash_recovered
from test_restart import Reader, graceful_stop, restart, tier_files  # noqa: F401 (fixture)

pytestmark = [pytest.mark.tac_only,
              pytest.mark.skipif(IS_STOCK, reason="tac-memcached's tiers and restart")]

SEED = 37


def value_of(i):
    return (b"%06d:" % i) * 150          # 1050 bytes, different per key


def load(c, n, flags=lambda i: 0):
    """Keys k00000.. with value_of(i), pipelined without replies."""
    for i in range(n):
        v = value_of(i)
        c.send(b"set k%05d %d 0 %d noreply\r\n%s\r\n" % (i, flags(i), len(v), v))
    assert c.line(b"mn\r\n") == b"MN\r\n"


def tier_of(c, key):
    m = re.search(rb"tier=(\w+)", c.line(b"me " + key + b"\r\n"))
    return m.group(1).decode() if m else None


def wait_recovered(srv):
    c = srv.connect()
    deadline = time.time() + 60
    while c.stats(b"tac")["recovery_state"] != "done":
        assert srv.alive() and time.time() < deadline, srv.stderr_text()
        time.sleep(0.05)
    return c


def small_tiers(server, tier_files, nvm_mb, ssd_mb, extra=""):  # noqa: F811
    """A server at -m 8 with small NVM and SSD files (2 MB pages of 64 KB
    bufs): (server, connection, nvm path, ssd path, args)."""
    nvm, ssd = tier_files()
    args = ["-t", "2", "-m", "8", "-o", "nvm_path=%s:%dm,ssd_path=%s:%dm,ssd_page_size=2m,ssd_buf_size=64k%s"
            % (nvm, nvm_mb, ssd, ssd_mb, extra)]
    srv = server(args)
    return srv, srv.connect(), nvm, ssd, args


def two_versions(key):
    """An older and a newer value of key, 1,740 bytes each."""
    return [(b"[%s version %d]" % (key, n)) * 30 for n in (1, 2)]


# The fill of fill_until shares a 46-byte key's slab class with two_versions.
def fill_key(j):
    return b"fill-%041d" % j


def fill_value(j):
    return (b"%057d|" % j) * 30


def fill_until(c, key, where, start=0):
    """Sets fill keys from start on, 200 at a time, until key is in tier
    where; returns the next fill number."""
    i = start
    while tier_of(c, key) != where:
        assert i < start + 60000, "%s never went to %s: %s, %r" % (key, where, tier_of(c, key), c.stats(b"tiers"))
        for j in range(i, i + 200):
            v = fill_value(j)
            c.send(b"set %s 0 0 %d noreply\r\n%s\r\n" % (fill_key(j), len(v), v))
        assert c.line(b"mn\r\n") == b"MN\r\n"
        i += 200
    return i


def test_a_key_fetched_up_then_deleted_after_a_graceful_restart_stays_gone(server, tier_files):  # noqa: F811
    """An SSD item read until it moves up to DRAM keeps a copy on the SSD.  A
    graceful restart must remember that (ITEM_WAS_LOWER), or a delete after it
    records nothing and a SIGKILL brings the SSD copy back."""
    _nvm, ssd = tier_files()
    args = ["-t", "2", "-m", "16", "-o", "ssd_path=%s:128m,fetch_threads=1,temp_sample_interval=0" % ssd]
    srv = server(args)
    c = srv.connect()
    n = 24000
    load(c, n, flags=lambda i: i % 7)
    picks = [b"k%05d" % i for i in range(0, 4000, 97) if tier_of(c, b"k%05d" % i) == "ssd"][:6]
    assert len(picks) >= 3, "too few keys on the SSD"
    up = []
    for k in picks:
        deadline = time.time() + 10
        while tier_of(c, k) != "dram" and time.time() < deadline:
            for _ in range(6):
                c.get(b"get %s\r\n" % k)
            time.sleep(0.05)
        if tier_of(c, k) == "dram":
            up.append(k)
    assert up, "no SSD key was fetched up to DRAM"
    graceful_stop(srv, "SIGTERM")
    srv2 = restart(server, srv, args)
    c2 = wait_recovered(srv2)
    for k in up:
        assert tier_of(c2, k) == "dram", k
        assert c2.line(b"delete %s\r\n" % k) == b"DELETED\r\n"
    time.sleep(1.5)                       # what a crash test allows the journal
    sigkill(srv2, SEED, "after deleting keys fetched up before a graceful restart")
    srv3 = restart(server, srv2, args)
    c3, rs = wait_crash_recovered(srv3, SEED, "after the SIGKILL")
    back = [k for k in up if c3.get(b"get %s\r\n" % k) != b"END\r\n"]
    assert not back, "deleted keys came back after the crash: %s (%s)" % (back, rs)
    # The rest of the data set is intact wherever it came back.
    for i in range(0, n, 53):
        k = b"k%05d" % i
        if k in up:
            continue
        got = c3.get(b"get %s\r\n" % k)
        assert got in (b"END\r\n", b"VALUE %s %d %d\r\n%s\r\nEND\r\n" % (k, i % 7, 1050, value_of(i))), got[:80]


def test_a_stale_mark_is_never_lost_to_a_crash(server, tier_files):  # noqa: F811
    """`md key I` marks a value stale in DRAM only.  The copies on the media (a
    lower tier's tuple, the DRAM log's records) must not come back after a
    SIGKILL as a fresh value: the key is then a miss or still stale."""
    nvm, ssd = tier_files()
    args = ["-t", "2", "-m", "16", "-o", "nvm_path=%s:24m,ssd_path=%s:128m,dram_log=on" % (nvm, ssd)]
    srv = server(args)
    c = srv.connect()
    n = 30000
    load(c, n)
    # Written once the evictors have made room: in DRAM (a set into a full
    # DRAM goes straight to a lower tier).
    deadline = time.time() + 20
    while True:
        time.sleep(0.5)
        for i in range(20):
            v = value_of(i)
            assert c.line(b"set d%05d 0 0 %d\r\n%s\r\n" % (i, len(v), v)) == b"STORED\r\n"
        if sum(tier_of(c, b"d%05d" % i) == "dram" for i in range(20)) >= 5 or time.time() > deadline:
            break
    by_tier = {}
    for k in [b"k%05d" % i for i in range(0, 6000, 101)] + [b"d%05d" % i for i in range(20)]:
        by_tier.setdefault(tier_of(c, k), []).append(k)
    assert by_tier.get("ssd") and by_tier.get("nvm") and by_tier.get("dram"), \
        {t: len(v) for t, v in by_tier.items()}
    marked = by_tier["ssd"][:5] + by_tier["nvm"][:5] + by_tier["dram"][:5]
    for k in marked:
        assert c.line(b"md %s I\r\n" % k) == b"HD\r\n"
        assert b" X" in c.line(b"mg %s c\r\n" % k)
    time.sleep(1.5)
    sigkill(srv, SEED, "after marking keys stale")
    srv2 = restart(server, srv, args)
    c2, rs = wait_crash_recovered(srv2, SEED, "after the SIGKILL")
    fresh = []
    for k in marked:
        ln = c2.line(b"mg %s c\r\n" % k)
        if ln.startswith(b"HD"):
            if b" X" not in ln:
                fresh.append((k, ln))
        else:
            assert ln == b"EN\r\n", ln
    assert not fresh, "stale-marked keys came back fresh: %s (%s)" % (fresh, rs)


@pytest.mark.parametrize("op", ["delete", "set"])
def test_deletes_during_recovery_stay_deleted_after_the_next_crash(server, tier_files, op):  # noqa: F811
    """A delete of a key that the crash recovery has not brought back yet answers
    NOT_FOUND, and the recovery then skips the key's copies, but they stay on the
    media.  The delete must record an invalidation, or the next crash's scan
    brings the deleted key back.  A set of such a key must too: its new value
    lives in DRAM only (no dram_log), and after the next crash the key may be
    missing, never back at the value it had before the set."""
    nvm, ssd = tier_files()
    args = ["-t", "2", "-m", "16", "-o", "nvm_path=%s:24m,ssd_path=%s:160m" % (nvm, ssd)]
    srv = server(args)
    c = srv.connect()
    n = 40000
    load(c, n)
    time.sleep(2.5)                       # open SSD bufs are written when idle 1 s
    sigkill(srv, SEED, "after loading")
    srv2 = restart(server, srv, args, wait=False)
    deadline = time.time() + 30
    while True:
        try:
            c2 = srv2.connect()
            break
        except OSError:
            assert srv2.alive() and time.time() < deadline, srv2.stderr_text()
            time.sleep(0.002)
    doomed = [b"k%05d" % i for i in range(0, n, 7)]
    if op == "delete":
        c2.send(b"".join(b"delete %s\r\n" % k for k in doomed))
    else:
        c2.send(b"".join(b"mg %s q\r\nset %s 0 0 5\r\nnewer\r\n" % (k, k) for k in doomed) + b"mn\r\n")
    buf = b""
    end = b"MN\r\n" if op == "set" else None
    while (buf.count(b"\r\n") < len(doomed)) if end is None else not buf.endswith(end):
        d = c2.sock.recv(1 << 16)
        assert d, "connection closed"
        buf += d
    if op == "delete":
        answers = buf.split(b"\r\n")[:len(doomed)]
        assert set(answers) <= {b"DELETED", b"NOT_FOUND"}, set(answers)
        unrecovered = answers.count(b"NOT_FOUND")
    else:
        # mg ... q answers only a hit: a key missing just before its set was
        # one the recovery had not reached.
        assert buf.count(b"STORED\r\n") == len(doomed), buf[-200:]
        unrecovered = len(doomed) - buf.count(b"HD\r\n")
    print("%ss during recovery: %d of %d keys not recovered yet" % (op, unrecovered, len(doomed)))
    c2, rs = wait_crash_recovered(srv2, SEED, "after the %ss" % op)
    want = b"END\r\n" if op == "delete" else None
    back = [k for k in doomed if c2.get(b"get %s\r\n" % k) != (want or b"VALUE %s 0 5\r\nnewer\r\nEND\r\n" % k)]
    assert not back, "%s during recovery, then otherwise: %s" % (op, back[:5])
    time.sleep(1.5)
    sigkill(srv2, SEED, "after recovery with %ss" % op)
    srv3 = restart(server, srv2, args)
    c3, rs = wait_crash_recovered(srv3, SEED, "after the second SIGKILL")
    back = [k for k in doomed if c3.get(b"get %s\r\n" % k) not in (
        b"END\r\n", b"VALUE %s 0 5\r\nnewer\r\nEND\r\n" % k)]
    assert not back, "%d of %d keys %s during a recovery (%d before it reached them) came back at their " \
        "value before it after the next crash: %s (%s)" % (len(back), len(doomed), op, unrecovered, back[:5], rs)
    if unrecovered == 0:
        pytest.skip("the recovery reached every key before its %s: the order was not forced" % op)


def test_a_page_handed_to_another_class_scans_clean_after_a_crash(server, tier_files):  # noqa: F811
    """NVM pages move between size classes as value sizes change (YCSB's 1.1 KB
    values replaced by 110 B ones).  A crash scan cuts each page into its
    current class's slots, so a slot not yet written since the page changed
    hands must read as free: not as a damaged tuple (recovery_dropped) and
    never as an old tuple of the page's earlier class.  The values here are
    filled with the tuple header's version byte, so leftover bytes of an
    earlier class look like a tuple's start wherever a new slot begins."""
    nvm, ssd = tier_files()
    args = ["-t", "2", "-m", "8", "-o", "nvm_path=%s:8m,ssd_path=%s:96m,temp_sample_interval=0" % (nvm, ssd)]
    srv = server(args)
    c = srv.connect()

    def val(i, ver, size):
        head = b"k%05d:%d:" % (i, ver)
        return head + b"\x04" * (size - len(head))

    want = {}
    # 2,900 B values fill NVM; 700 B values for some of the keys then need
    # a page of a smaller class, which the page mover empties, and fill only
    # part of it.
    for ver, (n, size) in enumerate([(9000, 2900), (1500, 700)]):
        for i in range(n):
            v = val(i, ver, size)
            c.send(b"set k%05d 0 0 %d noreply\r\n%s\r\n" % (i, len(v), v))
            want[b"k%05d" % i] = v
        assert c.line(b"mn\r\n") == b"MN\r\n"
        time.sleep(0.3)
    t = c.stats(b"tiers")
    handed = int(t["nvm_pages_reused"]) + int(t["nvm_pages_drained"])
    assert handed > 0, "no NVM page changed class: %s" % t
    assert int(t["nvm_items"]) > 0, t
    time.sleep(1.5)
    sigkill(srv, SEED, "after NVM pages changed class")
    srv2 = restart(server, srv, args)
    c2, rs = wait_crash_recovered(srv2, SEED, "after the SIGKILL")
    assert rs["dropped"] == 0, "the scan took %d slots of re-classed pages for damaged tuples " \
        "(%d pages changed class): %s" % (rs["dropped"], handed, rs)
    wrong = []
    for k, v in want.items():
        raw = c2.get(b"get %s\r\n" % k)
        if raw == b"END\r\n":
            continue                      # a miss is allowed: a cache may lose a key
        head, rest = raw.split(b"\r\n", 1)
        got = rest[:int(head.split()[3])]
        if got != v:
            wrong.append((k, got[:16]))
    assert not wrong, "%d keys served an older value after the crash, e.g. %s" % (len(wrong), wrong[:5])


def test_a_kill_during_a_graceful_restore_keeps_every_dram_item_with_dram_log(server, tier_files, monkeypatch):  # noqa: F811
    """A graceful start restores its DRAM items from the state file while it
    serves.  With dram_log=on, a SIGKILL in that window must lose none of
    them: those not linked yet come back from the kept state
    (FILE.restoring), and the writes and deletes made meanwhile win over it.
    The restore is slowed by a test hook (TAC_DEBUG_RESTORE_DELAY_MS)."""
    nvm, ssd = tier_files()
    args = ["-t", "2", "-m", "32", "-o", "nvm_path=%s:16m,ssd_path=%s:64m,dram_log=on" % (nvm, ssd)]
    srv = server(args)
    c = srv.connect()
    n = 6000
    load(c, n, flags=lambda i: i % 5)
    assert int(c.stats()["curr_items"]) == n
    graceful_stop(srv, "SIGTERM")

    monkeypatch.setenv("TAC_DEBUG_RESTORE_DELAY_MS", "400")
    srv2 = restart(server, srv, args)
    c2 = srv2.connect()
    state = c2.stats(b"tac")["recovery_state"]         # answered: the start-up is over
    if "debug hook" not in srv2.stderr_text():
        pytest.skip("needs the test hooks: ./configure --enable-debug-hooks (sanitizer builds have them)")
    assert state == "running"
    # Meanwhile: new values for some keys, deletes of others, new keys.
    new_val = {}
    for i in range(0, n, 60):
        v = b"new-%06d:" % i * 40
        assert c2.line(b"set k%05d 7 0 %d\r\n%s\r\n" % (i, len(v), v)) == b"STORED\r\n"
        new_val[b"k%05d" % i] = (7, v)
    deleted = {b"k%05d" % i for i in range(30, n, 60)}
    for k in sorted(deleted):
        assert c2.line(b"delete %s\r\n" % k) in (b"DELETED\r\n", b"NOT_FOUND\r\n")
    for i in range(n, n + 100):
        v = value_of(i)
        assert c2.line(b"set k%05d 3 0 %d\r\n%s\r\n" % (i, len(v), v)) == b"STORED\r\n"
        new_val[b"k%05d" % i] = (3, v)
    assert c2.stats(b"tac")["recovery_state"] == "running", "the restore ended before the kill"
    sigkill(srv2, SEED, "during a graceful restore")
    monkeypatch.delenv("TAC_DEBUG_RESTORE_DELAY_MS")

    srv3 = restart(server, srv2, args)
    c3, rs = wait_crash_recovered(srv3, SEED, "after a kill during a graceful restore")
    assert "restore was interrupted" in srv3.stderr_text(), srv3.stderr_text()
    lost, wrong, back = [], [], []
    for i in range(n + 100):
        k = b"k%05d" % i
        raw = c3.get(b"get %s\r\n" % k)
        if k in deleted:
            if raw != b"END\r\n":
                back.append(k)
            continue
        if raw == b"END\r\n":
            lost.append(k)
            continue
        head, rest = raw.split(b"\r\n", 1)
        flags, nb = int(head.split()[2]), int(head.split()[3])
        want = new_val.get(k, (i % 5, value_of(i)))
        if (flags, rest[:nb]) != want:
            wrong.append((k, flags, rest[:12]))
    assert not back, "%d deleted keys came back, e.g. %s (%s)" % (len(back), back[:5], rs)
    assert not wrong, "%d keys hold an older value or flags, e.g. %s (%s)" % (len(wrong), wrong[:5], rs)
    assert not lost, "%d of %d keys lost, e.g. %s (%s)" % (len(lost), n + 100 - len(deleted), lost[:5], rs)
    # The kept state is gone once the recovery that used it is over.
    assert not [f for f in os.listdir(os.path.dirname(ssd)) if f.endswith(".restoring")]


def ttl_of(c, key):
    """The remaining TTL `mg` reports (-1: none), or None on a miss."""
    ln = c.line(b"mg %s t\r\n" % key)
    if ln.startswith(b"EN"):
        return None
    m = re.search(rb" t(-?\d+)", ln)
    assert m, ln
    return int(m.group(1))


@pytest.mark.parametrize("dram_log", ["off", "on"])
def test_a_touch_to_a_shorter_ttl_on_a_lower_tier_item_survives_a_crash(server, tier_files, dram_log):  # noqa: F811
    """touch, gat and mg T that shorten the TTL of an item in NVM or SSD must not
    cost the item at a crash (the journal keeps the shorter life for its copy),
    and must never let it come back with a longer TTL than the last one set,
    nor after that TTL ran out."""
    nvm, ssd = tier_files()
    args = ["-t", "2", "-m", "16", "-o", "nvm_path=%s:12m,ssd_path=%s:128m,dram_log=%s" % (nvm, ssd, dram_log)]
    srv = server(args)
    c = srv.connect()
    n = 40000
    load(c, n)
    by_tier = {}
    # The whole key range: how far down NVM's share reaches depends on how
    # far the evictors had got when the load ended.
    for k in [b"k%05d" % i for i in range(0, n, 23)]:
        by_tier.setdefault(tier_of(c, k), []).append(k)
    assert len(by_tier.get("ssd", [])) >= 15 and len(by_tier.get("nvm", [])) >= 15, \
        {t: len(v) for t, v in by_tier.items()}
    picks = by_tier["ssd"][:12] + by_tier["nvm"][:12]
    want = {}                              # key -> the longest TTL it may come back with
    for j, k in enumerate(picks):
        how = j % 4
        if how == 0:
            assert c.line(b"touch %s 600\r\n" % k) == b"TOUCHED\r\n"
            want[k] = 600
        elif how == 1:
            raw = c.get(b"gat 900 %s\r\n" % k)
            assert raw.startswith(b"VALUE "), raw[:40]
            want[k] = 900
        elif how == 2:
            assert c.line(b"mg %s T700\r\n" % k) == b"HD\r\n"
            # A longer touch after it is not kept: the 700 s one may come back.
            assert c.line(b"touch %s 5000\r\n" % k) == b"TOUCHED\r\n"
            want[k] = 5000
        else:
            assert c.line(b"touch %s 2\r\n" % k) == b"TOUCHED\r\n"   # gone by the restart
            want[k] = None
    deleted = by_tier["ssd"][12:15] + by_tier["nvm"][12:15]
    for k in deleted:                      # touched shorter, then deleted: stays gone
        assert c.line(b"touch %s 800\r\n" % k) == b"TOUCHED\r\n"
        assert c.line(b"delete %s\r\n" % k) == b"DELETED\r\n"
    time.sleep(3)
    sigkill(srv, SEED, "after touching lower-tier keys to shorter TTLs")
    srv2 = restart(server, srv, args)
    c2, rs = wait_crash_recovered(srv2, SEED, "after the SIGKILL")
    lost, longer, back = [], [], []
    for k, most in want.items():
        ttl = ttl_of(c2, k)
        if most is None:
            if ttl is not None:
                back.append((k, ttl))
        elif ttl is None:
            lost.append(k)
        elif not 0 < ttl <= most:
            longer.append((k, ttl, most))
        else:
            assert c2.get(b"get %s\r\n" % k).split(b"\r\n")[1] == value_of(int(k[1:]))
    for k in deleted:
        if ttl_of(c2, k) is not None:
            back.append((k, "deleted"))
    assert not back, "keys back after their TTL ran out or their delete: %s (%s)" % (back, rs)
    assert not longer, "keys back with a longer TTL than the last one set: %s (%s)" % (longer, rs)
    assert not lost, "%d of %d touched keys lost at the crash: %s (%s)" % (
        len(lost), len([m for m in want.values() if m]), lost, rs)


def test_a_crash_scan_never_drops_what_it_recovered_while_the_ssd_has_room(server, tier_files, monkeypatch):  # noqa: F811
    """After a crash the SSD pages stay pinned until the scan has read them,
    so the room their dead copies hold cannot be won back yet.  Writes made
    while the scan runs push items down to a full-looking SSD; the pages that
    may then be dropped are the ones just scanned, full of recovered items.
    None may be dropped while the scan runs: every key present before the
    crash is back afterwards.  The scan is slowed by a test hook
    (TAC_DEBUG_SCAN_DELAY_MS)."""
    srv, c, nvm, ssd, args = small_tiers(server, tier_files, 4, 16, ",temp_sample_interval=0")
    n = 4000

    def val(i, ver):
        return (b"%05d:%d:" % (i, ver)) * 375             # 3000 B or so

    for ver in range(3):                   # old versions leave dead copies on the SSD
        for i in range(n):
            v = val(i, ver)
            c.send(b"set a%05d 0 0 %d noreply\r\n%s\r\n" % (i, len(v), v))
        assert c.line(b"mn\r\n") == b"MN\r\n"
    time.sleep(0.5)
    # What a crash keeps (no dram_log): the keys in NVM and SSD.
    present = [i for i in range(n) if tier_of(c, b"a%05d" % i) in ("nvm", "ssd")]
    assert len(present) > n * 0.5, len(present)
    assert int(c.stats(b"tiers")["ssd_items"]) > 1000
    time.sleep(1.5)
    sigkill(srv, SEED, "with dead copies on the SSD")

    monkeypatch.setenv("TAC_DEBUG_SCAN_DELAY_MS", "250")
    srv2 = restart(server, srv, args)
    monkeypatch.delenv("TAC_DEBUG_SCAN_DELAY_MS")
    c2 = srv2.connect()
    state = c2.stats(b"tac")["recovery_state"]
    if "debug hook" not in srv2.stderr_text():
        pytest.skip("needs the test hooks: ./configure --enable-debug-hooks (sanitizer builds have them)")
    assert state == "running"
    # New keys while the scan runs: DRAM and NVM are full, so items go down.
    w = srv2.connect()
    for i in range(600):
        v = val(i, 9)
        w.send(b"set b%05d 0 0 %d noreply\r\n%s\r\n" % (i, len(v), v))
    w.line(b"mn\r\n", timeout=60)
    c3, rs = wait_crash_recovered(srv2, SEED, "after the scan")
    dropped = int(c3.stats(b"tiers")["ssd_items_dropped"])
    lost, wrong = [], []
    for i in present:
        raw = c3.get(b"get a%05d\r\n" % i)
        if raw == b"END\r\n":
            lost.append(i)
        elif raw.split(b"\r\n")[1] != val(i, 2):
            wrong.append(i)
    assert not wrong, "%d keys hold an older version: %s" % (len(wrong), wrong[:5])
    assert not lost, "%d of %d keys in NVM or SSD before the crash lost (ssd_items_dropped %d): %s (%s)" % (
        len(lost), len(present), dropped, lost[:5], rs)


def test_an_older_copy_never_takes_the_place_of_a_newer_one_gone_during_the_scan(server, tier_files, monkeypatch):  # noqa: F811
    """Issue item 1.  A key has an older version on the SSD and its newer one
    in NVM.  The crash scan reads the NVM pages first and links the newer
    copy; a read then finds that copy damaged and unlinks it; the scan goes on
    to the SSD page of the older copy.  It must not link it: the scan orders
    copies by the sequence it linked last for the key, not by what the index
    holds now.  An older copy is normally dead by the journal as well, so the
    scan here asks the journal nothing (TAC_DEBUG_SCAN_NO_JOURNAL, the test
    hooks), as if its record had been lost; SSD pages wait 1.5 s each before
    they are read (TAC_DEBUG_SCAN_DELAY_MS), so the read comes between."""
    srv, c, nvm, ssd, args = small_tiers(server, tier_files, 4, 64, ",temp_sample_interval=0")
    key = b"an-older-copy-must-not-return:0123456789abcdef"
    old, new = two_versions(key)
    assert c.line(b"set %s 3 0 %d\r\n%s\r\n" % (key, len(old), old)) == b"STORED\r\n"
    n = fill_until(c, key, "ssd")
    assert c.line(b"set %s 4 0 %d\r\n%s\r\n" % (key, len(new), new)) == b"STORED\r\n"
    n = fill_until(c, key, "nvm", n)
    time.sleep(1.5)                  # the SSD writer's tick: the journal's table is current
    sigkill(srv, SEED, "with the older version on the SSD, the newer in NVM")
    with open(ssd, "rb") as f:
        assert old in f.read(), "the older copy is not on the SSD for the scan to find"

    monkeypatch.setenv("TAC_DEBUG_SCAN_NO_JOURNAL", "1")
    monkeypatch.setenv("TAC_DEBUG_SCAN_DELAY_MS", "1500")
    srv2 = restart(server, srv, args)
    monkeypatch.delenv("TAC_DEBUG_SCAN_NO_JOURNAL")
    monkeypatch.delenv("TAC_DEBUG_SCAN_DELAY_MS")
    if "the crash scan asks the journal nothing" not in srv2.stderr_text():
        pytest.skip("needs the test hooks: ./configure --enable-debug-hooks (sanitizer builds have them)")
    c2 = srv2.connect()
    deadline = time.time() + 10
    while tier_of(c2, key) != "nvm":
        assert time.time() < deadline, "the scan never linked the NVM copy"
        time.sleep(0.02)
    assert c2.stats(b"tac")["recovery_state"] == "running", "the scan ended before the SSD pages"
    # Damage the newer copy where the server maps it; the read unlinks it.
    with open(nvm, "r+b") as f:
        data = f.read()
        at = data.find(new)
        assert at > 0 and data.find(new, at + 1) < 0, "the newer copy is not in the NVM file once"
        f.seek(at + len(new) // 2)
        f.write(b"#")
    assert c2.get(b"get %s\r\n" % key) == b"END\r\n"
    assert int(c2.stats(b"tiers")["tuple_checksum_failures"]) == 1
    c3, rs = wait_crash_recovered(srv2, SEED, "after the scan")
    assert c3.stats(b"tac")["recovery_state"] == "done"
    got = c3.get(b"get %s\r\n" % key)
    assert got == b"END\r\n", "the older version came back after the newer one was unlinked: %r" % got[:80]
    # The rest of what was recovered is intact.
    for j in range(0, n, 97):
        raw = c3.get(b"get %s\r\n" % fill_key(j))
        assert raw == b"END\r\n" or raw.split(b"\r\n")[1] == fill_value(j), j


def test_a_recovery_under_load_keeps_what_a_quiet_one_keeps(server, tier_files, monkeypatch):  # noqa: F811
    """Issue 37, recovery under load.  The files a SIGKILL left are copied;
    one recovery of them runs quiet, and the same files recover again with
    two CPU hogs beside the server and a client writing new keys and
    overwriting old ones while the scan and the DRAM log replay run.  Every
    key the quiet recovery brought back and the writer did not touch comes
    back the same under load, and every write of the writer is there.  With
    the test hooks each SSD page of the scan is held back 300 ms, so that the
    writes land while it runs."""
    srv, c, nvm, ssd, args = small_tiers(server, tier_files, 8, 48, ",dram_log=on")
    n = 7500

    def val(i, ver):
        return (b"%05d:%d:" % (i, ver)) * (120 + i % 250)

    for ver in range(2):
        for i in range(ver * 3, n, 1 + ver * 3):   # a third of the keys twice
            v = val(i, ver)
            c.send(b"set r%05d %d 0 %d noreply\r\n%s\r\n" % (i, i % 11, len(v), v))
        assert c.line(b"mn\r\n") == b"MN\r\n"
    sigkill(srv, SEED, "after the load")
    files = [p for d, base in (os.path.split(nvm), os.path.split(ssd))
             for p in (os.path.join(d, f) for f in os.listdir(d))
             if os.path.basename(p) == base or os.path.basename(p).startswith(base + ".")]
    saved = {p: open(p, "rb").read() for p in files}

    def read_all(cc):
        got = {}
        for i in range(n):
            raw = cc.get(b"get r%05d\r\n" % i)
            if raw != b"END\r\n":
                got[i] = raw
        return got

    monkeypatch.setenv("TAC_DEBUG_SCAN_DELAY_MS", "300")
    quiet = restart(server, srv, args)
    cq, rs_quiet = wait_crash_recovered(quiet, SEED, "the quiet recovery")
    kept = read_all(cq)
    assert len(kept) > n * 0.99, "the quiet recovery kept %d of %d keys (%s)" % (len(kept), n, rs_quiet)
    sigkill(quiet, SEED, "after the quiet recovery")

    for d in {os.path.dirname(p) for p in files}:
        for f in os.listdir(d):
            p = os.path.join(d, f)
            if any(f == os.path.basename(q) or f.startswith(os.path.basename(q) + ".") for q in (nvm, ssd)):
                os.unlink(p)
    for p, data in saved.items():
        with open(p, "wb") as f:
            f.write(data)
        os.chmod(p, 0o600)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        loaded = restart(server, quiet, args)
        hooks = "debug hook" in loaded.stderr_text()
        w = loaded.connect()
        wrote, during = {}, 0
        rng = random.Random(SEED)
        for step in range(1500):
            if step % 2:
                i = rng.randrange(n)
                k, v = b"r%05d" % i, val(i, 7)
            else:
                k, v = b"w%05d" % step, val(step, 9)
            assert w.line(b"set %s 5 0 %d\r\n%s\r\n" % (k, len(v), v)) == b"STORED\r\n"
            wrote[k] = v
            if step % 50 == 0:
                during += w.stats(b"tac")["recovery_state"] == "running"
        cl, rs_loaded = wait_crash_recovered(loaded, SEED, "the recovery under load")
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    if hooks:
        assert during >= 10, "the writes did not overlap the recovery (%d samples during it)" % during
    under = read_all(cl)
    lost = [i for i in kept if b"r%05d" % i not in wrote and under.get(i) != kept[i]]
    assert not lost, "%d keys the quiet recovery kept came back otherwise under load: %s (quiet %s, loaded %s)" % (
        len(lost), lost[:5], rs_quiet, rs_loaded)
    for k, v in wrote.items():
        assert cl.get(b"get %s\r\n" % k) == b"VALUE %s 5 %d\r\n%s\r\nEND\r\n" % (k, len(v), v), k
    print("quiet kept %d keys; under load %d writes (%d samples during the recovery), %d keys checked" % (
        len(kept), len(wrote), during, len(kept)))


@pytest.mark.parametrize("no_room", [False, True], ids=["room", "no-room"])
def test_a_replayed_write_that_finds_no_room_loses_its_key_never_serves_an_older_one(
        server, tier_files, monkeypatch, no_room):  # noqa: F811
    """Issue item 5.  With dram_log=on a key's older version lies on the SSD and
    its newer one only in DRAM and the log when the server is killed.  The
    crash scan links the older copy (the scan asks the journal nothing here,
    TAC_DEBUG_SCAN_NO_JOURNAL, as if the record that marks it dead were
    lost), then the log replay reaches the newer record, unlinks the older
    copy and links the newer one.  When that link finds no room
    (TAC_DEBUG_REPLAY_NO_ROOM, as when no tier frees any for 2 s), the key
    is lost and counted dropped: never served at the older version.  With
    room, the newer version comes back."""
    srv, c, nvm, ssd, args = small_tiers(server, tier_files, 4, 64, ",dram_log=on,temp_sample_interval=0")
    key = b"a-replay-without-room-loses-the-key:0123456789"
    old, new = two_versions(key)
    assert c.line(b"set %s 3 0 %d\r\n%s\r\n" % (key, len(old), old)) == b"STORED\r\n"
    fill_until(c, key, "ssd")
    time.sleep(1.5)                  # the SSD writer's tick: the journal's table is current
    assert c.line(b"set %s 4 0 %d\r\n%s\r\n" % (key, len(new), new)) == b"STORED\r\n"
    assert tier_of(c, key) == "dram"
    sigkill(srv, SEED, "with the older version on the SSD, the newer in DRAM and the log")
    with open(ssd, "rb") as f:
        assert old in f.read(), "the older copy is not in the SSD file"

    monkeypatch.setenv("TAC_DEBUG_SCAN_NO_JOURNAL", "1")
    if no_room:
        monkeypatch.setenv("TAC_DEBUG_REPLAY_NO_ROOM", key.decode())
    srv2 = restart(server, srv, args)
    monkeypatch.delenv("TAC_DEBUG_SCAN_NO_JOURNAL")
    monkeypatch.delenv("TAC_DEBUG_REPLAY_NO_ROOM", raising=False)
    if "the crash scan asks the journal nothing" not in srv2.stderr_text():
        pytest.skip("needs the test hooks: ./configure --enable-debug-hooks (sanitizer builds have them)")
    c2, rs = wait_crash_recovered(srv2, SEED, "after the replay")
    got = c2.get(b"get %s\r\n" % key)
    if no_room:
        assert got == b"END\r\n", "the key came back without room for its newer version: %r" % got[:80]
        assert rs["dropped"] >= 1, rs
    else:
        assert got == b"VALUE %s 4 %d\r\n%s\r\nEND\r\n" % (key, len(new), new), got[:80]


def test_a_stale_mark_stays_when_reads_warm_an_ssd_item(server, tier_files):  # noqa: F811
    """`md <key> I` marks an SSD-resident item stale.  Reads of it then
    warm it, and a warm SSD item is fetched up to NVM; the copy written up
    must keep the mark, or the value is served fresh (this lost the mark
    before a graceful restart in the crash-point matrix).  Here the item
    is not moved up at all: every read answers it stale (X), and a crash
    after that does not bring it back fresh."""
    srv, c, nvm, ssd, args = small_tiers(server, tier_files, 4, 64, ",temp_sample_interval=0")
    key = b"a-stale-ssd-item-stays-stale:0123456789abcdefgh"
    old, _new = two_versions(key)
    assert c.line(b"set %s 3 0 %d\r\n%s\r\n" % (key, len(old), old)) == b"STORED\r\n"
    fill_until(c, key, "ssd")
    assert c.line(b"md %s I\r\n" % key) == b"HD\r\n"
    def read_value(cc):
        cc.sock.sendall(b"mg %s s v\r\n" % key)
        rd = Reader(cc.sock)
        ln = rd.line()
        if ln.startswith(b"VA "):
            assert rd.exact(int(ln.split()[1]) + 2)[:-2] == old
        return ln

    for i in range(12):
        ln = read_value(c)
        assert ln.startswith(b"VA") and b"X" in ln.split()[2:], "read %d: %r" % (i, ln)
        time.sleep(0.05)
    time.sleep(0.5)                  # the fetchers have had their turn
    ln = read_value(c)
    assert ln.startswith(b"VA") and b"X" in ln.split()[2:], "after the fetchers: %r (%s)" % (ln, tier_of(c, key))
    assert tier_of(c, key) == "ssd"
    time.sleep(1.5)
    sigkill(srv, SEED, "with a stale-marked SSD item read warm")
    srv2 = restart(server, srv, args)
    c2, _rs = wait_crash_recovered(srv2, SEED, "after the crash")
    got = read_value(c2)
    assert got == b"EN" or b"X" in got.split()[2:], "back fresh after a crash: %r" % got
