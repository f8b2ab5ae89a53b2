"""Prometheus through memcached_exporter (built by scripts/setup.sh into
tools/bin): the exporter scrapes tac-memcached with DRAM, NVM and SSD tiers,
and stock memcached 1.6 with extstore, both loaded with the same data.  Every
metric family the exporter makes of stock memcached must come out of
tac-memcached too, and a few values must match the data loaded.

On each scrape the exporter opens a connection and sends `stats`, `stats
slabs`, `stats items` and `stats settings`, in that order (no `stats conns`
nor any other); a CLIENT_ERROR or an unparsable value of a stat it reads sets
memcached_up to 0, a stat that is absent just leaves its metric out."""
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest
from pymemcache.client.base import Client

from mcserver import REPO, base_args, free_port

try:
    from prometheus_client import parser as prometheus_parser
except ImportError:
    prometheus_parser = None

EXPORTER = os.environ.get("TAC_MEMCACHED_EXPORTER") or os.path.join(REPO, "tools", "bin", "memcached_exporter")
STOCK = "/usr/bin/memcached"

# Checks tac-memcached against stock memcached: nothing to compare when the
# server under test is stock memcached itself.
pytestmark = pytest.mark.tac_only

N_KEYS = 5000
VALUE_SIZES = (40, 300, 1500, 6000, 20000)      # ~28 MB in all: more than -m 8 and the NVM tier
N_GET_HITS = 300
N_GET_MISSES = 50


@pytest.fixture
def exporter_bin():
    """The exporter; its absence skips the test, except under CI where it fails."""
    msg = None
    if not os.access(EXPORTER, os.X_OK):
        msg = "memcached_exporter is not built at %s (scripts/setup.sh builds it)" % EXPORTER
    elif prometheus_parser is None:
        msg = "prometheus_client is not installed in this Python (scripts/setup.sh installs it in .venv)"
    if msg:
        if os.environ.get("CI"):
            pytest.fail(msg + "; under CI it must be there", pytrace=False)
        pytest.skip(msg)
    return EXPORTER


def wait_port(port, proc, what, log_path, timeout=15.0):
    deadline = time.time() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError("%s exited during start-up (rc=%s):\n%s" % (what, proc.returncode, read_log(log_path)))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.time() > deadline:
                raise RuntimeError("%s does not listen on %d after %ss:\n%s"
                                   % (what, port, timeout, read_log(log_path)))
            time.sleep(0.05)


def read_log(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")[-5000:]
    except OSError:
        return ""


class Procs:
    """Processes started by the test, stopped (and their logs shown on failure) at the end."""

    def __init__(self, tmpdir):
        self.tmpdir = tmpdir
        self.procs = []

    def start(self, name, cmd, port):
        for attempt in range(3):        # a free port may be taken by someone else meanwhile
            log = os.path.join(self.tmpdir, "%s-%d.log" % (name, attempt))
            with open(log, "wb") as out:
                p = subprocess.Popen(cmd(port), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            self.procs.append((name, p, log))
            try:
                wait_port(port, p, name, log)
                return port
            except RuntimeError as e:
                if "in use" not in str(e) or attempt == 2:
                    raise
                port = free_port()

    def stop(self, show_logs):
        for name, p, log in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            if show_logs:
                print("---- %s log ----\n%s" % (name, read_log(log)))


@pytest.fixture
def procs(request):
    tmpdir = tempfile.mkdtemp(prefix="tacprom-")
    nvm = "/dev/shm/tac-test-prom-%d-%d" % (os.getpid(), random.randrange(1 << 30))
    p = Procs(tmpdir)
    p.nvm = nvm
    yield p
    rep = getattr(request.node, "rep_call", None)
    p.stop(show_logs=bool(rep and rep.failed))
    d, base = os.path.split(nvm)
    for name in os.listdir(d):
        if name == base or name.startswith(base + "."):
            os.unlink(os.path.join(d, name))
    shutil.rmtree(tmpdir, ignore_errors=True)


def load(port):
    """Sets N_KEYS keys of 30 to 60 bytes with values of several sizes, then
    gets N_GET_HITS of them and N_GET_MISSES keys never set.  Returns how many
    of those gets missed: a cache may evict under pressure (tac-memcached at
    -m 8 sometimes drops an NVM tuple it could not give a DRAM meta tuple on
    SSD), and the counts the exporter reports must say so."""
    rnd = random.Random(4711)
    c = Client(("127.0.0.1", port), connect_timeout=5, timeout=30)
    keys = []
    for i in range(N_KEYS):
        klen = rnd.randrange(30, 61)
        k = ("prom:%06d:" % i).encode()
        keys.append(k + b"k" * (klen - len(k)))
    batch = {}
    for i, k in enumerate(keys):
        size = VALUE_SIZES[i % len(VALUE_SIZES)]
        batch[k] = (k * (size // len(k) + 1))[:size]
        if len(batch) == 100 or i == len(keys) - 1:
            failed = c.set_many(batch, noreply=False)
            assert not failed, "sets failed on port %d: %r" % (port, failed[:3])
            batch = {}
    lost = sum(c.get(k) is None for k in keys[:N_GET_HITS])
    evicted = int(c.stats()[b"evictions"])
    assert lost <= evicted, "%d of the first %d keys missing, %d evictions" % (
        lost, N_GET_HITS, evicted)
    for i in range(N_GET_MISSES):
        assert c.get(b"prom:absent:%036d" % i) is None
    c.close()
    return lost


def scrape(port):
    deadline = time.time() + 10
    while True:
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
                text = r.read().decode()
            break
        except (urllib.error.URLError, ConnectionError):
            if time.time() > deadline:
                raise
            time.sleep(0.1)
    # The parser names a counter family without its _total: keep the name the exporter writes.
    return {f.name + ("_total" if f.type == "counter" else ""): f
            for f in prometheus_parser.text_string_to_metric_families(text)}


def sample(families, family, **labels):
    """The value of the one sample of `family` whose labels include `labels`."""
    assert family in families, "no %s family in the exporter's answer" % family
    hits = [s for s in families[family].samples if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(hits) == 1, "%s%r: %r" % (family, labels, hits)
    return hits[0].value


def exporter_cmd(exporter_bin, mc_port):
    return lambda port: [exporter_bin, "--memcached.address=127.0.0.1:%d" % mc_port,
                         "--web.listen-address=127.0.0.1:%d" % port, "--log.level=warn"]


def value_problems(families, lost=0):
    """What differs from the data loaded (less what the same scrape says was evicted), as
    a list of strings."""
    try:
        evicted = int(sample(families, "memcached_items_evicted_total"))
    except AssertionError as e:
        return [str(e).split("\n")[0]]
    want = [
        ("memcached_up", {}, 1),
        ("memcached_current_items", {}, N_KEYS - evicted),
        ("memcached_commands_total", {"command": "set", "status": "hit"}, N_KEYS),
        ("memcached_commands_total", {"command": "get", "status": "hit"}, N_GET_HITS - lost),
        ("memcached_commands_total", {"command": "get", "status": "miss"}, N_GET_MISSES + lost),
    ]
    out = []
    for family, labels, value in want:
        try:
            got = sample(families, family, **labels)
        except AssertionError as e:
            out.append(str(e).split("\n")[0])
            continue
        if got != value:
            out.append("%s%s is %s, not %s" % (family, labels or "", got, value))
    # memcached_items_total (total_items) counts links: stock memcached's
    # extstore flushes count too, and so may tac-memcached's tier moves.
    try:
        if sample(families, "memcached_items_total") < N_KEYS:
            out.append("memcached_items_total is %s, less than the %d keys set"
                       % (sample(families, "memcached_items_total"), N_KEYS))
    except AssertionError as e:
        out.append(str(e).split("\n")[0])
    return out


def test_exporter_families_match_stock(exporter_bin, procs, server):
    if not os.access(STOCK, os.X_OK):
        pytest.fail("stock memcached (%s) is missing: scripts/setup.sh installs it" % STOCK, pytrace=False)
    t0 = time.time()

    # tac-memcached with DRAM, NVM and SSD tiers.
    ssd = os.path.join(procs.tmpdir, "ssd")
    tac = server(["-t", "2", "-m", "8", "-o", "nvm_path=%s:16m,ssd_path=%s:64m" % (procs.nvm, ssd)])
    tac_lost = load(tac.port)
    c = tac.connect()
    deadline = time.time() + 5          # the evictors may still be moving items down
    while True:
        tiers = c.stats(b"tiers")
        if tiers.get("ssd_items", "0") != "0" or time.time() > deadline:
            break
        time.sleep(0.1)
    print("tac-memcached tiers after the load: %s" % {k: v for k, v in tiers.items() if k.endswith("_items")})

    # Stock memcached with extstore, the same data.
    ext = os.path.join(procs.tmpdir, "ext")
    stock_port = procs.start("memcached", lambda port: [STOCK] + base_args() + [
        "-l", "127.0.0.1", "-p", str(port), "-U", "0", "-t", "2", "-m", "64",
        "-o", "ext_page_size=8,ext_wbuf_size=8,ext_path=%s:64m" % ext], free_port())
    stock_lost = load(stock_port)

    tac_exp = procs.start("exporter-tac", exporter_cmd(exporter_bin, tac.port), free_port())
    stock_exp = procs.start("exporter-stock", exporter_cmd(exporter_bin, stock_port), free_port())
    stock_fams = scrape(stock_exp)
    tac_fams = scrape(tac_exp)

    bad = value_problems(stock_fams, stock_lost)   # the reference: checks the test itself
    assert not bad, "stock memcached: %s" % "; ".join(bad)
    assert "memcached_extstore_pages_free" in stock_fams, "stock memcached runs without extstore?"

    missing = sorted(set(stock_fams) - set(tac_fams))
    extra = sorted(set(tac_fams) - set(stock_fams))
    print("families: stock %d, tac-memcached %d; only tac-memcached's: %s" % (len(stock_fams), len(tac_fams), extra))
    for name in sorted(set(stock_fams) & set(tac_fams)):
        want = {tuple(sorted(x.labels)) for x in stock_fams[name].samples}
        got = {tuple(sorted(x.labels)) for x in tac_fams[name].samples}
        if want != got:
            print("%s: label names %s for stock memcached, %s for tac-memcached" % (name, want, got))
    problems = value_problems(tac_fams, tac_lost)
    if missing:
        problems.insert(0, "%d metric families the exporter gives for stock memcached are missing: %s"
                        % (len(missing), " ".join(missing)))
    assert not problems, "tac-memcached through memcached_exporter: " + "; ".join(problems)
    print("took %.1fs" % (time.time() - t0))
