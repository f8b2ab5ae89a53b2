#!/usr/bin/env python3
"""Writes the man page doc/tac-memcached.1 from what the server says about itself.

    scripts/gen-man.py [--server ./tac-memcached] [--stats doc/stats.md] [-o doc/tac-memcached.1]
    scripts/gen-man.py --check      # exit 1 (and say what differs) when the page is stale

Sources:
  * OPTIONS and EXTENDED OPTIONS: `tac-memcached -h`, every entry (the option table in
    base/options.c prints it, so the page lists exactly the options the binary takes);
  * TIER STATISTICS: doc/stats.md.  The rule: every statistic memcached 1.6 does not have,
    that is every name of the `stats tac` table (tac-memcached's own general lines), any
    name of the `stats` table that memcached 1.6.18's `stats` does not print
    (MEMCACHED_STATS below, taken from memcached 1.6.18 running with an extstore file), and
    every name of the `stats tiers`, `stats nvm` and `stats temperature` tables, four
    commands memcached lacks.  (`stats settings` lines mirror the options.)
The rest of the page (description, signals, exit status, files) is written here.

The page is committed (a tarball build needs no Python and no server binary to install
it); tests/integration/test_packaging.py fails when it is older than -h or doc/stats.md:
regenerate it with this script (or `make update-man`) and commit it.
"""
import argparse
import difflib
import os
import re
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# memcached 1.6.18's `stats` names (started with -o ext_path=..., so the extstore names
# are in).  A name of doc/stats.md's `stats` table outside this set is tac-memcached's own.
MEMCACHED_STATS = frozenset("""
pid uptime time version libevent pointer_size rusage_user rusage_system max_connections
curr_connections total_connections rejected_connections connection_structures
response_obj_oom response_obj_count response_obj_bytes read_buf_count read_buf_bytes
read_buf_bytes_free read_buf_oom reserved_fds cmd_get cmd_set cmd_flush cmd_touch cmd_meta
get_hits get_misses get_expired get_flushed get_extstore get_aborted_extstore
get_oom_extstore recache_from_extstore miss_from_extstore badcrc_from_extstore delete_misses
delete_hits incr_misses incr_hits decr_misses decr_hits cas_misses cas_hits cas_badval
touch_hits touch_misses store_too_large store_no_memory auth_cmds auth_errors bytes_read
bytes_written limit_maxbytes accepting_conns listen_disabled_num time_in_listen_disabled_us
threads conn_yields hash_power_level hash_bytes hash_is_expanding slab_reassign_rescues
slab_reassign_chunk_rescues slab_reassign_evictions_nomem slab_reassign_inline_reclaim
slab_reassign_busy_items slab_reassign_busy_deletes slab_reassign_running slabs_moved
lru_crawler_running lru_crawler_starts lru_maintainer_juggles malloc_fails log_worker_dropped
log_worker_written log_watcher_skipped log_watcher_sent log_watchers extstore_compact_lost
extstore_compact_rescues extstore_compact_skipped extstore_page_allocs
extstore_page_evictions extstore_page_reclaims extstore_pages_free extstore_pages_used
extstore_objects_evicted extstore_objects_read extstore_objects_written extstore_objects_used
extstore_bytes_evicted extstore_bytes_written extstore_bytes_read extstore_bytes_used
extstore_bytes_fragmented extstore_limit_maxbytes extstore_io_queue unexpected_napi_ids
round_robin_fallback bytes curr_items total_items slab_global_page_pool expired_unfetched
evicted_unfetched evicted_active evictions reclaimed crawler_reclaimed crawler_items_checked
lrutail_reflocked moves_to_cold moves_to_warm moves_within_lru direct_reclaims
lru_bumps_dropped
""".split())

# The tac-only sub-commands whose every line is a tier statistic.
TIER_COMMANDS = ("stats tiers", "stats nvm", "stats temperature")


# ---- -h ------------------------------------------------------------------------------

def parse_help(text):
    """-h text -> dict(version, options, extended, ignored).

    options:  [(short, long, arg or None, help)]
    extended: [(name, arg or None, help)]
    ignored:  [name]  (memcached tuning names accepted with no effect)
    Anything it does not recognise stops it: a new layout must be taught here."""
    lines = text.rstrip("\n").split("\n")
    version = lines[0].strip()
    if not version.startswith("tac-memcached "):
        raise SystemExit("gen-man: -h does not start with the version line: %r" % lines[0])
    options, extended, ignored_text = [], [], None
    cur = None          # the help list being extended by continuation lines
    for line in lines[1:]:
        m = re.match(r"^-(\w), --([\w-]+)(?:=(\S+))?(?:\s+(.*))?$", line)
        e = re.match(r"^   - (\w+)(?:=(<[^>]*>|[^\s:]+))?:(?:\s+(.*))?$", line)
        if m:
            cur = [m.group(4) or ""]
            options.append((m.group(1), m.group(2), m.group(3), cur))
        elif e:
            cur = [e.group(3) or ""]
            extended.append((e.group(1), e.group(2), cur))
        elif line.startswith(" " * 26) and cur is not None:
            cur.append(line.strip())
        elif line.startswith("   memcached tuning options, accepted and ignored:"):
            ignored_text = [line.split(":", 1)[1].strip()]
            cur = ignored_text
        elif line.startswith("   ") and cur is ignored_text and cur is not None:
            cur.append(line.strip())
        elif line == "" or line.startswith("Extended options (-o "):
            cur = None
        else:
            raise SystemExit("gen-man: cannot read this line of -h: %r" % line)
    def joined(parts):
        return " ".join(p for p in parts if p)
    return {
        "version": version,
        "options": [(s, l, a, joined(h)) for s, l, a, h in options],
        "extended": [(n, a, joined(h)) for n, a, h in extended],
        "ignored": re.split(r"[,\s]+", joined(ignored_text or []).strip()) if ignored_text else [],
    }


# ---- doc/stats.md --------------------------------------------------------------------

def md_sections(text):
    """'## `stats tiers`' headings -> {'stats tiers': body}."""
    out = {}
    for m in re.finditer(r"^## `([^`]+)`\n(.*?)(?=^## |\Z)", text, re.M | re.S):
        out[m.group(1)] = m.group(2)
    return out


def md_table(body):
    """The first table of a section -> [(names, [other cells])]; a cell 'a, b' names two."""
    rows = []
    for line in body.splitlines():
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if cells[0] in ("name", "") or set(cells[0]) <= set("-|: "):
            continue
        names = [n.strip() for n in cells[0].split(",")]
        rows.append((names, cells[1:]))
    return rows


def tier_stats(stats_md):
    """doc/stats.md -> [(command, [(names, kind or None, meaning)])], by the rule above."""
    secs = md_sections(stats_md)
    groups = []
    for cmd in ("stats", "stats tac"):
        if cmd not in secs:
            raise SystemExit("gen-man: doc/stats.md has no `%s` section" % cmd)
    own = []
    for cmd in ("stats", "stats tac"):
        for names, cells in md_table(secs[cmd]):
            names = [n for n in names if cmd == "stats tac" or n not in MEMCACHED_STATS]
            if names:
                own.append((names, cells[0], cells[-1]))
    groups.append(("stats tac", own))
    for cmd in TIER_COMMANDS:
        if cmd not in secs:
            raise SystemExit("gen-man: doc/stats.md has no `%s` section" % cmd)
        groups.append((cmd, [(names, None, cells[-1]) for names, cells in md_table(secs[cmd])]))
    return groups


# ---- roff ----------------------------------------------------------------------------

def esc(s):
    """Plain text -> roff text: backslashes, hyphens as minus signs (options copy and paste
    as typed), a leading dot or quote made harmless."""
    s = s.replace("\\", "\\e").replace("-", "\\-")
    return "".join(c if ord(c) < 128 else "\\[u%04X]" % ord(c) for c in s)


def line_safe(s):
    return "\\&" + s if s[:1] in (".", "'") else s


def md_inline(s):
    """A markdown table cell -> roff: `code` bold, *word* italic, [text](link) text."""
    s = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", s)
    out = []
    for i, part in enumerate(re.split(r"(`[^`]*`)", s)):
        if part.startswith("`") and part.endswith("`") and len(part) >= 2:
            out.append("\\fB" + esc(part[1:-1]) + "\\fR")
        else:
            part = esc(part)
            part = re.sub(r"(?<![\w*])\*(\w[^*]*?)\*(?![\w*])", r"\\fI\1\\fR", part)
            out.append(part)
    return "".join(out)


def option_heading(short, long_, arg):
    h = "\\fB\\-%s\\fR, \\fB\\-\\-%s\\fR" % (short, esc(long_))
    if arg:
        h += "=\\fI%s\\fR" % esc(arg.strip("<>"))
    return h


def ext_heading(name, arg):
    h = "\\fB%s\\fR" % esc(name)
    if arg:
        h += "=\\fI%s\\fR" % esc(arg.strip("<>"))
    return h


HEAD = r""".\" Generated by scripts/gen-man.py from `tac-memcached -h` and doc/stats.md.
.\" Do not edit: change the option table (base/options.c), doc/stats.md or the script, then
.\" run scripts/gen-man.py (or make update-man).
.TH TAC-MEMCACHED 1 "" "%(version)s" "User Commands"
.\" No hyphenation: option and statistic names must read as typed.
.nh
.ad l
.SH NAME
tac-memcached \- memcached-compatible cache server with DRAM, NVM and SSD tiers
.SH SYNOPSIS
.B tac-memcached
.RI [ option ...]
.SH DESCRIPTION
.B tac-memcached
is a key-value cache that clients use exactly as they use memcached: it speaks the text
protocol (classic and meta commands) and the binary protocol, answers the
.B stats
family with memcached's names, and takes memcached's command line.
Clients see it as memcached 1.6.18.
.PP
Its difference is what happens when memory runs out.
Items live in up to three tiers: DRAM (the item memory set by
.BR \-m ),
an optional NVM tier
.RB ( "\-o nvm_path" :
persistent memory through a DAX file system or a device\-DAX device, CXL or other
memory on a NUMA node, or an ordinary file that stands in for NVM) and an optional
SSD tier
.RB ( "\-o ssd_path" :
a file on a disk file system or a whole block device).
Where memcached would evict an item, tac\-memcached moves it one tier down; items that
are read often move back up.
Every key keeps a small entry in DRAM, so
.B \-m
must leave room for the index of the lower tiers.
.PP
The server runs in the foreground unless
.B \-d
is given, and logs to standard error.
Started as root it refuses to run without
.BR \-u .
It listens on 127.0.0.1 unless
.B \-l
says otherwise.
TLS
.RB ( \-Z ),
SASL
.RB ( \-S )
and ASCII authentication
.RB ( \-Y )
work as in memcached; without one of them, anyone who reaches the port can read and
change the cache.
memcached's syscall sandbox option (drop_privileges) is not built: asking for it stops
the start with a message.
.PP
Sizes take a suffix
.BR k ,
.BR m ,
.B g
or
.B t
(powers of 1024), as in
.B 64k
or
.BR 1.5g .
.SH OPTIONS
This list is what
.B tac\-memcached \-h
prints.
Options marked (ignored) are accepted so that memcached command lines keep working;
each one given prints a line saying it has no effect.
"""

EXT_HEAD = r""".SH EXTENDED OPTIONS
Extended options are given to
.B \-o
as a comma\-separated list of
.IB name = value
pairs (a switch without a value is given by its name), and
.B \-o
may be repeated.
"""

IGNORED_HEAD = r""".SS memcached tuning options
These memcached names are accepted with
.B \-o
and have no effect (each one given prints a note): %s.
"""

STATS_HEAD = r""".SH TIER STATISTICS
Every statistic of memcached keeps its name and meaning.
This section lists the statistics memcached 1.6 does not have:
every line of
.BR "stats tac" ,
.BR "stats tiers" ,
.B "stats nvm"
and
.BR "stats temperature" ,
four commands memcached lacks.
Plain
.B stats
prints exactly memcached 1.6.18's names.
Most are about the tiers; a few are about tac\-memcached's own LRU, restart
and limits.
(\fBstats settings\fR adds one line per option above.)
A
.I counter
grows from 0 and is cleared by
.BR "stats reset" ;
a
.I gauge
shows the current state; a
.I constant
or
.I string
is fixed while the server runs.
\fIdoc/stats.md\fR in the source tree describes every statistic.
"""

STATS_INTRO = {
    "stats tac": "tac\\-memcached's own general lines, with their kind:",
    "stats tiers": "One group of lines per tier, then the tier policy's counters:",
    "stats nvm": ("The NVM slot classes, one group \\fIclass\\fB:\\fIname\\fR per class "
                  "that has held a page, then \\fBactive_classes\\fR and \\fBfree_pages\\fR:"),
    "stats temperature": ("The temperature thresholds and the samples that set them "
                          "(\\fIN\\fR = 0 is the newest sample):"),
}

TAIL = r""".SH SIGNALS
.TP
.BR SIGTERM ", " SIGINT ", " SIGUSR1
A graceful stop (so is the
.B shutdown
command, with
.BR \-A ):
the server stops accepting, stops its threads, writes out what is still
buffered for the SSD, saves the restart state (below), closes the tier files clean,
removes the pid file and exits 0.
With a large
.B \-m
or NVM tier this takes time: give a service manager enough of it before it sends
SIGKILL.
.TP
.B SIGHUP
Ignored.
.SH RESTART
A graceful stop saves a restart state: every DRAM item whole, and for every NVM and SSD
item where it lies.
It goes to the
.B \-e
file if one is given, else beside the SSD tier file
.RI ( file .state),
else beside the NVM tier file.
The next start with the same options serves at once and brings the items back in the
background
.RB ( recovery_state
in
.BR "stats tac" );
the state file is deleted once it has been read.
After a crash the server scans the tier files instead, guided by a journal beside the
state file; with
.B \-o dram_log=on
items that lived only in DRAM come back too.
.B \-o recovery=off
starts empty.
.PP
A tier file that holds anything but a tier of this format and size (another format
version or size, a damaged header, other data, a mistyped path) stops the start with a
message naming it, exit status 78, and nothing written to it.
To give such a file to the server, discarding what it holds, start once with
.BR "\-o tier_reformat=yes" .
.SH EXIT STATUS
.TP
.B 0
A graceful stop, or
.BR \-h ,
.B \-V
or
.BR \-i .
.TP
.B 64
A bad option or value, or a start as root without
.B \-u
(EX_USAGE).
.TP
.B 67
The user named by
.B \-u
does not exist (EX_NOUSER).
.TP
.B 71
The system refused a resource: the port is taken or cannot be bound, the open file
limit cannot be raised to cover
.BR \-c ,
a switch to the
.B \-u
user failed (EX_OSERR).
.TP
.B 78
A tier could not be opened: a tier file that holds something else, a path that cannot
be created, a device or NUMA node that is not there (EX_CONFIG).
Starting again with the same options fails the same way, so a service manager should
not restart on it.
.TP
.B 1
Any other failure to start.
.SH FILES
.TP
.I tac\-memcached.service
The systemd unit that
.B make install
puts in
.I PREFIX/lib/systemd/system
(or the unit directory chosen when the build was configured).
It runs the server as a dedicated user with its tier files in
.IR /var/lib/tac\-memcached ,
stops it gracefully and does not restart it when a tier file is refused.
.TP
.I /etc/default/tac\-memcached
Settings of that unit: address, port, memory, connections, tier sizes and further
options (in
.IR SYSCONFDIR /default,
.I /usr/local/etc/default
for a default build).
.TP
.IR /var/lib/tac\-memcached/nvm.dat ", " /var/lib/tac\-memcached/ssd.dat
The unit's NVM tier file (an ordinary file standing in for NVM; point
.B nvm_path
at a DAX file system for real persistent memory) and SSD tier file.
Beside them: the restart state
.RI ( ssd.dat.state ),
its journal
.RI ( ssd.dat.state.journal )
and, with
.BR "\-o dram_log=on" ,
the DRAM log
.RI ( nvm.dat.dramlog ).
.SH EXAMPLES
A DRAM cache, as memcached:
.PP
.RS
tac\-memcached \-u nobody \-m 1024
.RE
.PP
All three tiers, persistent memory on a DAX file system and a whole NVMe device:
.PP
.RS
.nf
tac\-memcached \-u nobody \-m 4096 \e
    \-o nvm_path=/mnt/pmem0/tac\-nvm:64g,ssd_path=/dev/nvme1n1:800g
.fi
.RE
.PP
Per\-tier counters of a running server:
.PP
.RS
printf \(aqstats tiers\er\enquit\er\en\(aq | nc 127.0.0.1 11211
.RE
.SH SEE ALSO
.BR memcached (1),
.BR memcstat (1),
.BR systemd.exec (5),
.BR systemd.service (5)
.PP
README.md, doc/stats.md and doc/design.md in the source tree.
"""


def render(helptext, stats_md):
    h = parse_help(helptext)
    out = [HEAD % {"version": h["version"]}]
    for short, long_, arg, text in h["options"]:
        out += [".TP", option_heading(short, long_, arg), line_safe(esc(text))]
    out.append(EXT_HEAD.rstrip("\n"))
    for name, arg, text in h["extended"]:
        out += [".TP", ext_heading(name, arg), line_safe(esc(text))]
    if h["ignored"]:
        out.append((IGNORED_HEAD % ", ".join("\\fB%s\\fR" % esc(n) for n in h["ignored"])).rstrip("\n"))
    out.append(STATS_HEAD.rstrip("\n"))
    for cmd, rows in tier_stats(stats_md):
        out += [".SS %s" % cmd, STATS_INTRO[cmd]]
        for names, kind, meaning in rows:
            out.append(".TP")
            out.append(", ".join("\\fB%s\\fR" % esc(n) for n in names))
            text = md_inline(meaning)
            if kind:
                text = "\\fI%s\\fR: %s" % (esc(kind), text)
            out.append(line_safe(text))
    out.append(TAIL.rstrip("\n"))
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default=os.path.join(REPO, "tac-memcached"),
                    help="the binary whose -h is read (default: ./tac-memcached)")
    ap.add_argument("--stats", default=os.path.join(REPO, "doc", "stats.md"))
    ap.add_argument("-o", "--output", default=os.path.join(REPO, "doc", "tac-memcached.1"))
    ap.add_argument("--check", action="store_true",
                    help="do not write: exit 1 when the output file differs from what would be written")
    a = ap.parse_args()
    helptext = subprocess.run([a.server, "-h"], capture_output=True, check=True,
                              timeout=30).stdout.decode()
    with open(a.stats, encoding="utf-8") as f:
        page = render(helptext, f.read())
    if a.check:
        try:
            with open(a.output, encoding="utf-8") as f:
                old = f.read()
        except FileNotFoundError:
            old = ""
        if old != page:
            diff = difflib.unified_diff(old.splitlines(), page.splitlines(),
                                        a.output + " (committed)", "regenerated", lineterm="", n=1)
            sys.stdout.write("\n".join(list(diff)[:80]) + "\n")
            sys.stdout.write("%s is stale: run scripts/gen-man.py and commit it\n" % a.output)
            return 1
        return 0
    tmp = a.output + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(page)
    os.replace(tmp, a.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
