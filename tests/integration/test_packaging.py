"""Packaging for operators: `make install` (binary, man page, systemd unit), the man page
agreeing with -h, README.md and doc/stats.md, and scripts/run.sh staying inside the
checkout and leaving a taken port alone."""
import importlib.util
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from mcserver import REPO, SERVER_BIN, base_args, free_port

pytestmark = pytest.mark.tac_only

MAN_SRC = os.path.join(REPO, "doc", "tac-memcached.1")
GEN_MAN = os.path.join(REPO, "scripts", "gen-man.py")
RUN_SH = os.path.join(REPO, "scripts", "run.sh")


def _env(**extra):
    """The environment for a nested make or script: no jobserver or make flags of an
    enclosing `make check`."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "DESTDIR")}
    env.update(extra)
    return env


def _gen_man_module():
    spec = importlib.util.spec_from_file_location("gen_man", GEN_MAN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---- make install -------------------------------------------------------------------

@pytest.fixture(scope="module")
def installed():
    """`make install DESTDIR=<tmp>` in the checkout -> {dest, bin, man, unit, default}."""
    if not os.path.exists(os.path.join(REPO, "Makefile")):
        pytest.skip("the checkout is not configured (run scripts/setup.sh)")
    dest = tempfile.mkdtemp(prefix="tac-install-")
    try:
        r = subprocess.run(["make", "-s", "install", "DESTDIR=" + dest], cwd=REPO, env=_env(),
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=600)
        assert r.returncode == 0, "make install DESTDIR=%s failed:\n%s%s" % (
            dest, r.stdout.decode()[-2000:], r.stderr.decode()[-2000:])
        found = {}
        for root, _dirs, files in os.walk(dest):
            for f in files:
                p = os.path.join(root, f)
                rel = p[len(dest):]
                if f == "tac-memcached" and os.path.basename(root) == "bin":
                    found["bin"] = p
                elif f == "tac-memcached.1" and root.endswith("/man1"):
                    found["man"] = p
                elif f == "tac-memcached.service":
                    found["unit"] = p
                elif f == "tac-memcached" and rel.endswith("/default/tac-memcached"):
                    found["default"] = p
        found["dest"] = dest
        yield found
    finally:
        shutil.rmtree(dest, ignore_errors=True)


def test_install_layout(installed):
    for what in ("bin", "man", "unit", "default"):
        assert what in installed, "make install put no %s in %s (found: %s)" % (
            what, installed["dest"], sorted(installed))
    b = installed["bin"]
    assert os.access(b, os.X_OK), "%s is not executable" % b
    v = subprocess.run([b, "-V"], capture_output=True, timeout=10)
    assert v.returncode == 0 and v.stdout.startswith(b"tac-memcached "), v
    with open(installed["man"]) as a, open(MAN_SRC) as c:
        assert a.read() == c.read(), "the installed man page differs from doc/tac-memcached.1"
    # Section 1: <mandir>/man1, and the unit's ExecStart names the installed binary.
    assert installed["man"].endswith("/man1/tac-memcached.1")
    unit = open(installed["unit"]).read()
    bindir = os.path.dirname(b)[len(installed["dest"]):]
    m = re.search(r"^ExecStart=(\S+)", unit, re.M)
    assert m, "the unit has no ExecStart="
    assert m.group(1) == bindir + "/tac-memcached", \
        "ExecStart=%s, but make install put the binary in %s" % (m.group(1), bindir)
    assert "@" not in unit.replace("@.service", ""), "unsubstituted @...@ left in the unit"
    sysconf = os.path.dirname(os.path.dirname(installed["default"]))[len(installed["dest"]):]
    assert "EnvironmentFile=-%s/default/tac-memcached" % sysconf in unit, \
        "the unit does not read the installed %s/default/tac-memcached" % sysconf


def test_unit_directives(installed):
    unit = open(installed["unit"]).read()
    keys = {}
    for line in unit.splitlines():
        m = re.match(r"^(\w+)=(.*)$", line)
        if m:
            keys.setdefault(m.group(1), []).append(m.group(2))
    def one(k):
        assert k in keys, "the unit lacks %s=" % k
        return keys[k][-1]
    assert one("User") == "tac-memcached"
    assert one("ProtectSystem") in ("strict", "full")
    assert one("PrivateTmp") == "yes"
    assert one("StateDirectory") == "tac-memcached"
    execstart = one("ExecStart")
    for opt in ("nvm_path=/var/lib/tac-memcached/", "ssd_path=/var/lib/tac-memcached/"):
        assert opt in execstart, "ExecStart does not put %s...: %s" % (opt, execstart)
    assert int(one("LimitNOFILE")) >= 8192
    assert int(one("TimeoutStopSec")) >= 120
    assert one("Restart") == "on-failure"
    prevent = one("RestartPreventExitStatus").split()
    assert "78" in prevent, "RestartPreventExitStatus= lacks 78 (a refused tier file)"


def test_refused_tier_file_exits_78():
    """The exit status the unit's RestartPreventExitStatus= names: a tier file that holds
    something else is refused with 78 (EX_CONFIG), every time."""
    d = tempfile.mkdtemp(prefix="tac-pkg-")
    try:
        junk = os.path.join(d, "nvm.dat")
        with open(junk, "wb") as f:
            f.write(os.urandom(1 << 20) * 8)
        r = subprocess.run([SERVER_BIN] + base_args() + ["-l", "127.0.0.1", "-p", "0",
                            "-o", "nvm_path=%s:8m" % junk],
                           capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
        assert r.returncode == 78, "a refused tier file exited %d, not 78: %s" % (
            r.returncode, r.stderr.decode()[-500:])
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_unit_verifies(installed):
    sa = shutil.which("systemd-analyze")
    if not sa:
        pytest.skip("systemd-analyze absent (Debian package: systemd)")
    # The installed unit, its ExecStart pointed at the binary under DESTDIR (verify checks
    # that the command is executable); MANPATH lets it find Documentation=man:tac-memcached(1).
    d = tempfile.mkdtemp(prefix="tac-unit-")
    try:
        unit = open(installed["unit"]).read()
        bindir = os.path.dirname(installed["bin"])[len(installed["dest"]):]
        unit = unit.replace("ExecStart=%s/" % bindir,
                            "ExecStart=%s%s/" % (installed["dest"], bindir))
        path = os.path.join(d, "tac-memcached.service")
        with open(path, "w") as f:
            f.write(unit)
        mandir = os.path.dirname(os.path.dirname(installed["man"]))
        r = subprocess.run([sa, "verify", path], capture_output=True, timeout=60,
                           env=_env(MANPATH=mandir, SYSTEMD_LOG_COLOR="0"))
        out = (r.stdout + r.stderr).decode()
        # verify exits 0 on unknown keys and bad values, with a warning: any output fails.
        assert r.returncode == 0 and not out.strip(), \
            "systemd-analyze verify rejects the unit:\n%s" % out
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_man_page_renders(installed):
    groff = shutil.which("groff")
    if not groff:
        pytest.skip("groff absent (Debian package: groff-base)")
    r = subprocess.run([groff, "-man", "-Tutf8", "-ww", "-z", installed["man"]],
                       capture_output=True, timeout=60)
    assert r.returncode == 0 and not r.stderr.strip(), \
        "groff warns about the man page:\n%s" % r.stderr.decode()
    r = subprocess.run([groff, "-man", "-Tutf8", installed["man"]], capture_output=True, timeout=60)
    text = re.sub(r".\x08", "", r.stdout.decode())
    for section in ("NAME", "SYNOPSIS", "OPTIONS", "EXTENDED OPTIONS", "TIER STATISTICS",
                    "EXIT STATUS", "FILES"):
        assert re.search(r"^%s$" % section, text, re.M), "the man page lacks a %s section" % section


# ---- the man page, -h, README.md and doc/stats.md agree ---------------------------

def test_man_page_is_current():
    r = subprocess.run([sys.executable, GEN_MAN, "--check", "--server", SERVER_BIN],
                       capture_output=True, timeout=60)
    assert r.returncode == 0, \
        "doc/tac-memcached.1 is not what scripts/gen-man.py makes of -h and doc/stats.md " \
        "(run scripts/gen-man.py and commit the page):\n%s%s" % (
            r.stdout.decode()[-3000:], r.stderr.decode()[-1000:])


def help_options(text):
    """-h -> (shorts, longs, extended names, ignored tuning names)."""
    shorts, longs, ext = set(), set(), set()
    for line in text.splitlines():
        m = re.match(r"^-(\w), --([\w-]+)", line)
        if m:
            shorts.add(m.group(1))
            longs.add(m.group(2))
        e = re.match(r"^   - (\w+)[=:]", line)
        if e:
            ext.add(e.group(1))
    t = re.search(r"memcached tuning options, accepted and ignored: ([\w,\s]+)", text)
    ignored = set(re.split(r"[,\s]+", t.group(1).strip())) if t else set()
    return shorts, longs, ext, ignored


def deroff(src):
    """roff source -> plain text good enough to find names in: no comments, no macro
    names, no font changes, escapes resolved."""
    out = []
    for line in src.splitlines():
        if line.startswith('.\\"'):
            continue
        if line.startswith("."):
            parts = line.split(None, 1)
            line = parts[1] if len(parts) > 1 else ""
            line = line.replace('"', "")
        line = re.sub(r"\\f[BIRP]", "", line)
        line = re.sub(r"\\\[u([0-9A-F]{4})\]", lambda m: chr(int(m.group(1), 16)), line)
        line = (line.replace("\\-", "-").replace("\\&", "").replace("\\(aq", "'")
                .replace("\\~", " ").replace("\\e", "\\"))
        out.append(line)
    return "\n".join(out)


def readme_options():
    text = open(os.path.join(REPO, "README.md")).read()
    text = text[text.index("\n## Options\n"):]
    text = text[text.index("```\n") + 4:]
    return text[:text.index("```\n")]


def man_sections(plain):
    """SH name -> text (from the de-roffed page, where a .SH line became its title)."""
    src = open(MAN_SRC).read()
    titles = re.findall(r"^\.SH (.+)$", src, re.M)
    secs, cur = {}, None
    for line in plain.splitlines():
        if line in titles:
            cur = line
            secs[cur] = []
        elif cur:
            secs[cur].append(line)
    return {k: "\n".join(v) for k, v in secs.items()}


def test_options_agree_in_help_readme_and_man_page():
    out = subprocess.run([SERVER_BIN, "-h"], capture_output=True, timeout=10).stdout.decode()
    shorts, longs, ext, ignored = help_options(out)
    assert len(shorts) > 20 and "nvm_path" in ext, "cannot read -h:\n" + out[:500]
    readme = readme_options()
    src = open(MAN_SRC).read()
    man = deroff(src)

    # Every option of -h, in README.md's list and in the man page.
    r_shorts, r_longs, r_ext, r_ignored = help_options(readme)
    for what, have, want in (("short options", r_shorts, shorts), ("long options", r_longs, longs),
                             ("-o options", r_ext, ext), ("ignored -o names", r_ignored, ignored)):
        missing = sorted(want - have)
        assert not missing, "README.md's Options block lacks these %s of -h: %s" % (what, missing)
    man_opts = set(re.findall(r"^-(\w), --([\w-]+)", man, re.M))
    missing = sorted("-%s/--%s" % (s, l) for s, l in
                     set(re.findall(r"^-(\w), --([\w-]+)", out, re.M)) - man_opts)
    assert not missing, "the man page's OPTIONS lack: %s" % missing
    # -o options: the .TP headings of EXTENDED OPTIONS.
    ext_sec = src[src.index(".SH EXTENDED OPTIONS"):src.index(".SH TIER STATISTICS")]
    man_ext = set(re.findall(r"^\.TP\n\\fB(\w+)\\fR", ext_sec, re.M))
    missing = sorted(ext - man_ext)
    assert not missing, "the man page's EXTENDED OPTIONS lack: %s" % ["-o " + n for n in missing]
    ext_plain = deroff(ext_sec)
    missing = sorted(n for n in ignored if not re.search(r"\b%s\b" % re.escape(n), ext_plain))
    assert not missing, "the man page does not list these ignored memcached -o names: %s" % missing

    # And the man page names no option -h lacks.
    extra = sorted(man_ext - ext)
    assert not extra, "the man page documents -o options that -h does not have: %s" % extra
    bad = set()
    for m in re.finditer(r"(?<![\w-])--([a-z][\w-]*)", man):
        if m.group(1) not in longs:
            bad.add("--" + m.group(1))
    for m in re.finditer(r"(?<![\w\-/.])-([A-Za-z])(?![\w-])", man):
        if m.group(1) not in shorts:
            bad.add("-" + m.group(1))
    for m in re.finditer(r"(?<![\w-])-o ([a-z_]+)", man):
        if m.group(1) not in ext and m.group(1) not in ignored:
            bad.add("-o " + m.group(1))
    assert not bad, "the man page names options that -h does not have: %s" % sorted(bad)


def test_every_tier_stat_is_in_the_man_page():
    gen = _gen_man_module()
    stats_md = open(os.path.join(REPO, "doc", "stats.md")).read()
    # The rule (stated in the page): every name of the `stats tac` table, the `stats`
    # table's names that memcached's `stats` lacks (listed under `stats tac` too), and
    # every name of the `stats tiers`, `stats nvm` and `stats temperature` tables.
    want = []
    for cmd, body in re.findall(r"^## `([^`]+)`\n(.*?)(?=^## |\Z)", stats_md, re.M | re.S):
        if cmd not in ("stats", "stats tac") + gen.TIER_COMMANDS:
            continue
        for row in re.findall(r"^\| ([^|]+?) \|", body, re.M):
            if row == "name" or set(row) <= set("-: "):
                continue
            for name in (n.strip() for n in row.split(",")):
                if cmd == "stats" and name not in gen.MEMCACHED_STATS:
                    want.append(("stats tac", name))
                elif cmd != "stats":
                    want.append((cmd, name))
    assert len(want) > 100, "found only %d tier stats in doc/stats.md" % len(want)
    assert any(n.startswith("nvm_") for _, n in want) and any(n.startswith("ssd_") for _, n in want)
    assert ("stats tac", "recovery_state") in want and ("stats tac", "store_waits") in want
    src = open(MAN_SRC).read()
    sec = src[src.index(".SH TIER STATISTICS"):]
    sec = sec[:sec.index("\n.SH ", 1)]
    subsecs = {m.group(1): m.group(2) for m in
               re.finditer(r"^\.SS ([^\n]+)\n(.*?)(?=^\.SS |\Z)", sec, re.M | re.S)}
    missing = []
    for cmd, name in want:
        body = subsecs.get(cmd, "")
        if not re.search(r"\\fB%s\\fR" % re.escape(gen.esc(name)), body):
            missing.append("%s: %s" % (cmd, name))
    assert not missing, "the man page's TIER STATISTICS lack: %s" % missing


# ---- scripts/run.sh -----------------------------------------------------------------

def _holder(port):
    """A separate process listening on 127.0.0.1:port, as another server would."""
    code = ("import socket, sys, time\n"
            "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            "s.bind(('127.0.0.1', %d)); s.listen(16); print('ready', flush=True)\n"
            "while True:\n"
            "    c, _ = s.accept(); c.sendall(b'holder\\n'); c.close()\n" % port)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                         stdin=subprocess.DEVNULL)
    assert p.stdout.readline().strip() == b"ready"
    return p


def _holder_answers(port):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        return s.recv(100) == b"holder\n"


@pytest.fixture
def run_env():
    """No terminal, an empty HOME and TMPDIR outside the checkout (which must stay empty),
    a data directory of its own inside the checkout."""
    home = tempfile.mkdtemp(prefix="tac-run-home-")
    data = os.path.join(REPO, "run-data", "pytest-%d" % os.getpid())
    shm_before = os.path.exists("/dev/shm/tac-memcached")
    env = _env(HOME=home, TMPDIR=home, TAC_DATA_DIR=data, TAC_MEM="64", TAC_NVM="64m",
               TAC_SSD="64m")
    for k in ("TAC_PORT", "TAC_NVM_PATH", "TAC_SSD_PATH", "TAC_DRY_RUN"):
        env.pop(k, None)
    yield env, data
    try:
        assert os.listdir(home) == [], "run.sh wrote into HOME: %s" % os.listdir(home)
        assert os.path.exists("/dev/shm/tac-memcached") == shm_before, \
            "run.sh created /dev/shm/tac-memcached"
    finally:
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(data, ignore_errors=True)
        try:
            os.rmdir(os.path.join(REPO, "run-data"))    # only when nothing else is in it
        except OSError:
            pass


def test_run_sh_dry_run_stays_in_the_checkout(run_env):
    env, _data = run_env
    for k in ("TAC_DATA_DIR", "TAC_MEM", "TAC_NVM", "TAC_SSD"):
        env.pop(k)
    env["TAC_DRY_RUN"] = "1"
    existed = os.path.exists(os.path.join(REPO, "run-data"))
    r = subprocess.run([RUN_SH], env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    err = r.stderr.decode()
    assert r.returncode == 0, err
    cmd = r.stdout.decode()
    data = os.path.join(REPO, "run-data")
    m = re.search(r"nvm_path=(\S+?):(\w+)", cmd)
    s = re.search(r"ssd_path=(\S+?):(\w+)", cmd)
    assert m and s, "run.sh's command has no NVM or SSD tier: " + cmd
    assert m.group(1) == data + "/nvm.dat" and s.group(1) == data + "/ssd.dat", cmd
    gb = lambda v: float(v[:-1]) / {"k": 1 << 20, "m": 1 << 10, "g": 1}[v[-1]]
    assert gb(m.group(2)) <= 1 and gb(s.group(2)) <= 2, "tier sizes are not modest: " + cmd
    assert "/dev/shm" not in cmd
    assert "tier files: %s/nvm.dat %s/ssd.dat" % (data, data) in err, err
    assert "rm -rf %s" % data in err, "run.sh does not say how to remove its tier files:\n" + err
    assert os.path.exists(data) == existed, "a dry run created %s" % data


def _port_pair_below_ephemeral():
    """A port p with p and p + 1 free, below the kernel's ephemeral range: run.sh moves to
    p + 1 when p is taken, and an ephemeral port can be taken by any client's connection
    between run.sh's check and the server's bind."""
    lo = 32768
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo = int(f.read().split()[0])
    except (OSError, ValueError):
        pass
    rng = random.Random()
    for _ in range(200):
        p = rng.randrange(max(1024, lo - 12000), lo - 2)
        socks = []
        try:
            for q in (p, p + 1):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", q))
            return p
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    return free_port()


def test_run_sh_leaves_a_taken_port_alone(run_env):
    env, data = run_env
    port = _port_pair_below_ephemeral()
    holder = _holder(port)
    proc = None
    try:
        # A port given with -p that is taken: a clear refusal, the holder untouched.
        r = subprocess.run([RUN_SH, "-p", str(port)], env=env, stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=60)
        err = r.stderr.decode()
        assert r.returncode != 0, err
        assert "port %d" % port in err and "in use" in err, err
        assert holder.poll() is None and _holder_answers(port)

        # The script's own port taken: no question without a terminal, another port.
        env["TAC_PORT"] = str(port)
        log = tempfile.TemporaryFile()
        try:
            proc = subprocess.Popen([RUN_SH], env=env, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            deadline = time.time() + 300        # a build would take this long; normally ~1 s
            text = ""
            while time.time() < deadline:
                log.seek(0)
                text = log.read().decode(errors="replace")
                if "starting:" in text or proc.poll() is not None:
                    break
                time.sleep(0.1)
        finally:
            log.close()
        assert "starting:" in text, "run.sh did not start the server:\n" + text[-3000:]
        m = re.search(r"starting: \S+ .*-p (\d+)", text)
        assert m, text
        new_port = int(m.group(1))
        assert new_port != port, "run.sh asked the server for the taken port:\n" + text
        assert "port %d is taken" % port in text, text
        assert "[y/N]" not in text, "run.sh asked a question without a terminal:\n" + text
        assert "tier files: %s/nvm.dat %s/ssd.dat" % (data, data) in text, text
        assert re.search(r"to remove them.*: rm -r?f ", text), text
        # The server answers on the other port; the holder still answers on its own.
        deadline = time.time() + 120      # it makes a 512m and a 1g tier file first
        while True:
            try:
                with socket.create_connection(("127.0.0.1", new_port), timeout=5) as s:
                    s.sendall(b"version\r\n")
                    assert s.recv(100).startswith(b"VERSION ")
                break
            except OSError as e:
                assert time.time() < deadline and proc.poll() is None, \
                    "no answer on port %d (%s; run.sh exit %s):\n%s" % (
                        new_port, e, proc.poll(), text[-3000:])
                time.sleep(0.1)
        assert holder.poll() is None and _holder_answers(port), "the port's holder was stopped"
        assert os.path.exists(os.path.join(data, "nvm.dat"))
        assert os.path.exists(os.path.join(data, "ssd.dat"))
        # run.sh execs the server: SIGTERM is its graceful stop.
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        proc = None
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        holder.kill()
        holder.wait()
