"""`-o metrics_port=N`: the stats, the tier stats included, in Prometheus text format at
/metrics, read with prometheus_client's own parser."""
import http.client
import random
import socket
import threading
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mcserver import free_port
from test_ssd import nvm_file, ssd_dir, ssd_server  # noqa: F401  (fixtures)

pytestmark = pytest.mark.tac_only


def scrape(port, method="GET", path="/metrics"):
    h = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    h.request(method, path)
    r = h.getresponse()
    body = r.read().decode()
    h.close()
    return r.status, r.getheader("Content-Type"), body


def families(port):
    status, ctype, body = scrape(port)
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4"), (status, ctype)
    fams = {f.name: f for f in text_string_to_metric_families(body)}
    names = [f for f in fams]
    assert len(names) == len(set(names)), "a family appears twice"
    return fams


def value(fams, name, labels=None):
    """A sample's value by sample name (a counter's samples end in _total, its family not)."""
    for f in fams.values():
        for s in f.samples:
            if s.name == name and (labels is None or
                                   all(s.labels.get(k) == v for k, v in labels.items())):
                return s.value
    raise KeyError((name, labels))


def sample_names(fams):
    return {s.name for f in fams.values() for s in f.samples}


def test_metrics_endpoint_serves_every_stat_and_tier(server, ssd_dir, nvm_file):  # noqa: F811
    port = free_port()
    srv = ssd_server(server, ssd_dir, "64m", mem=8, nvm="%s:4m" % nvm_file(),
                     opts=["metrics_port=%d" % port])
    c = srv.connect()
    rng = random.Random(5)
    n = 3000
    for i in range(n):
        key = b"metrics:%06d:" % i + b"m" * rng.randint(17, 45)
        val = b"%06d" % i * rng.choice((100, 500, 2000))   # 600 B to 12 KB
        assert c.line(b"set %s 0 0 %d\r\n%s\r\n" % (key, len(val), val)) == b"STORED\r\n"
    for i in range(0, n, 10):
        key = b"metrics:%06d:" % i
        assert c.get(b"get %s\r\n" % key) == b"END\r\n"     # a prefix only: a miss
    # The evictors move items down a little after the last set: let them finish, so that
    # the scrape's sections agree with each other.
    last, still = None, 0
    deadline = time.time() + 30
    while still < 3 and time.time() < deadline:
        now = c.stats(b"tiers")
        key = (now["dram_items"], now["nvm_items"], now["ssd_items"])
        still = still + 1 if key == last else 0
        last = key
        time.sleep(0.2)
    st = c.stats()
    tiers = c.stats(b"tiers")
    fams = families(port)

    # Plain stats: every numeric line is a sample, counters typed as such.
    served = sample_names(fams)
    for name, val in st.items():
        try:
            float(val)
        except ValueError:
            continue
        assert "tac_" + name in served or "tac_%s_total" % name in served, \
            "stat %s is not served" % name
    assert fams["tac_get_misses"].type == "counter"
    assert fams["tac_curr_items"].type == "gauge"
    # A cache may evict (a slow sanitizer build at -m 8 did, once): the endpoint must say
    # what `stats` says, and nothing may be missing that was not evicted.
    items = int(st["curr_items"])
    assert value(fams, "tac_curr_items") == items
    assert items + int(st["evictions"]) == n, (items, st["evictions"], {
        k: v for k, v in tiers.items() if "drop" in k or "evict" in k or "fail" in k})
    assert value(fams, "tac_cmd_set_total") == n
    assert value(fams, "tac_get_misses_total") == n // 10
    assert value(fams, "tac_version_info", {"version": st["version"]}) == 1

    # The tiers: where the items are, and they add up.
    dram, nvm, ssd = (value(fams, "tac_tier_%s_items" % t) for t in ("dram", "nvm", "ssd"))
    assert nvm > 0 and ssd > 0, "the load did not reach NVM and SSD: %r" % ((dram, nvm, ssd),)
    assert dram + nvm + ssd == items
    assert value(fams, "tac_tier_ssd_capacity") == int(tiers["ssd_capacity"])
    assert value(fams, "tac_extstore_objects_used") == ssd

    # Per class, labelled by class.
    per_class = sum(s.value for s in fams["tac_items_number"].samples)
    assert per_class > 0 and len(fams["tac_items_number"].samples) > 1
    assert all("slab_class" in s.labels for s in fams["tac_slab_chunk_size"].samples)
    assert value(fams, "tac_setting_maxbytes") == 8 << 20


def test_metrics_endpoint_refuses_what_it_does_not_serve(server):
    port = free_port()
    s = server(["-o", "metrics_port=%d" % port])
    assert scrape(port, path="/")[0] == 404
    assert scrape(port, path="/metrics/x")[0] == 404
    assert scrape(port, method="POST")[0] == 405
    # Garbage on the socket closes that connection only.
    g = socket.create_connection(("127.0.0.1", port))
    g.sendall(b"\x00\xff" * 600 + b"\r\n\r\n")
    g.settimeout(5)
    try:
        while g.recv(4096):
            pass
    except (ConnectionResetError, socket.timeout):
        pass
    g.close()
    assert scrape(port)[0] == 200
    assert s.connect().line(b"version\r\n").startswith(b"VERSION ")


def test_metrics_scrapes_during_writes(server):
    """Scrapes while two writers fill the cache: each parses, and the counters only grow."""
    port = free_port()
    srv = server(["-m", "8", "-t", "2", "-o", "metrics_port=%d" % port])
    stop = threading.Event()
    errors = []

    def writer(w):
        c = srv.connect()
        i = 0
        while not stop.is_set():
            key = b"w%d:%08d:" % (w, i) + b"x" * 30
            if c.line(b"set %s 0 0 500\r\n%s\r\n" % (key, b"v" * 500)) != b"STORED\r\n":
                errors.append(key)
            i += 1

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    try:
        last = 0
        for _ in range(20):
            sets = value(families(port), "tac_cmd_set_total")
            assert sets >= last
            last = sets
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert not errors and last > 0


def test_metrics_port_in_use_refuses_the_start(server):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    s = server(["-o", "metrics_port=%d" % port], wait=False)
    s.expect_exit = True
    assert s.proc.wait(timeout=10) != 0
    assert "metrics_port" in s.stderr_text()
    busy.close()
