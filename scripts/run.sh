#!/usr/bin/env bash
# Build if needed, then run the server in the foreground on 127.0.0.1:11211 with all three
# tiers: DRAM (-m), NVM (a plain file that emulates NVM) and SSD (a plain file), both tier
# files in <checkout>/run-data.  Stop it with Ctrl-C: a graceful stop that keeps the cache
# for the next run.
#
# What it touches: the checkout (the build) and its data directory, nothing else.  It
# installs the Debian packages the build needs when they are missing (with sudo unless
# root; the test tool chains are scripts/setup.sh's business), never stops or disables
# another server by itself: if the port is taken it asks before stopping the service that
# holds it, and without a terminal it takes the next free port instead (or, for a port
# given with -p, exits).
#
# Environment (default in brackets):
#   TAC_PORT       TCP port [11211]
#   TAC_MEM        DRAM in megabytes (-m) [256]
#   TAC_NVM        NVM size, e.g. 512m; 0 or off: no NVM tier [512m]
#   TAC_NVM_PATH   NVM file, directory, /dev/daxX.Y or numa:N [$TAC_DATA_DIR/nvm.dat]
#                  (a PMem DAX mount or device is used only when named here: its contents
#                  are overwritten)
#   TAC_SSD        SSD size, e.g. 1g; 0 or off: no SSD tier [1g; a whole block device]
#   TAC_SSD_PATH   SSD file or block device [$TAC_DATA_DIR/ssd.dat]
#   TAC_DATA_DIR   directory of the tier files, on a disk file system (not tmpfs: the SSD
#                  file is opened O_DIRECT) [run-data/ in the checkout]
#   TAC_DRY_RUN=1  print the tiers and the command, then exit (no build, nothing created)
# Arguments are passed to the server after the script's options (a later option wins);
# an -m, -p, nvm_path= or ssd_path= among them replaces the script's setting.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
DRY=${TAC_DRY_RUN:-0}
[ "$DRY" = 0 ] || [ "$DRY" = 1 ] || { echo "run.sh: TAC_DRY_RUN must be 0 or 1" >&2; exit 1; }

say() { echo "run.sh: $*" >&2; }
die() { say "$*"; exit 1; }
loud() {
    echo "run.sh: ******************************************************************" >&2
    local l; for l in "$@"; do echo "run.sh: * $l" >&2; done
    echo "run.sh: ******************************************************************" >&2
}

# "4g" -> bytes (k/m/g/t are powers of 1024, as the server reads them).
to_bytes() {
    awk -v s="$1" 'BEGIN {
        if (s !~ /^[0-9]+(\.[0-9]+)?[kKmMgGtT]?$/) exit 1
        n = s + 0; u = tolower(substr(s, length(s)))
        if (u == "k") n *= 1024; else if (u == "m") n *= 1048576
        else if (u == "g") n *= 1073741824; else if (u == "t") n *= 1099511627776
        printf "%.0f\n", n }'
}
# File system type of a path, or of its nearest existing parent.
fs_type() {
    local p=$1
    while [ ! -e "$p" ]; do p=$(dirname "$p"); done
    stat -f -c %T "$p"
}
# Free bytes on the file system holding a path (or its nearest existing parent).
fs_avail() {
    local p=$1
    while [ ! -e "$p" ]; do p=$(dirname "$p"); done
    df -P -B1 "$p" | awk 'NR == 2 { print $4 }'
}
mkdir_for() { [ "$DRY" = 1 ] || mkdir -p "$(dirname "$1")"; }
is_off() { case "$1" in 0|off|none|no) return 0 ;; *) return 1 ;; esac; }
interactive() { [ -t 0 ]; }

# What the caller already set on the command line.
user_mem=0 user_nvm=0 user_ssd=0 user_port= user_sock=0 user_listen=
prev=
for a in "$@"; do
    case "$prev" in
        -p|--port) user_port=$a ;;
        -l|--listen) user_listen=$a ;;
    esac
    case "$a" in
        -m|-m*|--memory-limit|--memory-limit=*) user_mem=1 ;;
        -p?*) user_port=${a#-p} ;;
        --port=*) user_port=${a#--port=} ;;
        -s|-s*|--unix-socket|--unix-socket=*) user_sock=1 ;;
        -l?*) user_listen=${a#-l} ;;
        --listen=*) user_listen=${a#--listen=} ;;
    esac
    case "$a" in *nvm_path=*) user_nvm=1 ;; esac
    case "$a" in *ssd_path=*|*ext_path=*) user_ssd=1 ;; esac
    prev=$a
done

DATA_DIR=${TAC_DATA_DIR:-$REPO/run-data}
case "$DATA_DIR" in /*) ;; *) DATA_DIR=$REPO/$DATA_DIR ;; esac
DATA_DIR=${DATA_DIR%/}

args=()

# ---- port ----
# Something already accepts connections on 127.0.0.1 (or the first -l address) at $1.
listen_host=${user_listen:-127.0.0.1}
listen_host=${listen_host%%,*}
case "$listen_host" in 0.0.0.0|'') listen_host=127.0.0.1 ;; esac
port_taken() {
    if command -v ss >/dev/null 2>&1 && [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; then
        return 0
    fi
    (exec 3<>"/dev/tcp/$listen_host/$1") 2>/dev/null
}
# Any TCP socket, listening or connected, holds local port $1 (a port to move to must
# not be one a client connection holds either: the server's bind would fail).
port_used() {
    port_taken "$1" && return 0
    command -v ss >/dev/null 2>&1 && [ -n "$(ss -Hatn "sport = :$1" 2>/dev/null)" ]
}
# "memcached.service (pid 123)" for the process listening on $1, when ss can tell.
port_holder_pid() {
    command -v ss >/dev/null 2>&1 || return 1
    ss -Hltnp "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2
}
port_holder_unit() {
    local pid=$1 unit
    [ -r "/proc/$pid/cgroup" ] || return 1
    unit=$(grep -o '[^/]*\.service' "/proc/$pid/cgroup" | tail -1) || return 1
    [ -n "$unit" ] && echo "$unit"
}
# Asks (only on a terminal) to stop the systemd service holding port $1.  Returns 0 when
# the port is free afterwards.  Stops nothing without a "y"; never kills a process.
offer_to_stop() {
    local port=$1 pid unit ans i
    pid=$(port_holder_pid "$port") || pid=
    unit=
    [ -z "$pid" ] || unit=$(port_holder_unit "$pid") || unit=
    if [ -n "$pid" ]; then
        say "port $port is taken by $(tr '\0\n' '  ' < "/proc/$pid/cmdline" 2>/dev/null | cut -c1-80 || echo "pid $pid")${unit:+ ($unit)}"
    else
        say "port $port is taken by another program"
    fi
    if [ -z "$unit" ] || ! command -v systemctl >/dev/null 2>&1 || [ ! -d /run/systemd/system ]; then
        return 1        # nothing this script could stop by asking a service manager
    fi
    if ! interactive; then
        say "not a terminal: leaving $unit alone"
        return 1
    fi
    read -r -p "run.sh: stop $unit for now (systemctl stop; it stays enabled and starts again at boot)? [y/N] " ans || ans=
    case "$ans" in y|Y|yes|YES) ;; *) say "leaving $unit alone"; return 1 ;; esac
    local sudo=()
    [ "$(id -u)" -eq 0 ] || sudo=(sudo)
    "${sudo[@]}" systemctl stop "$unit" || return 1
    say "stopped $unit; start it again with: ${sudo[*]:+${sudo[*]} }systemctl start $unit"
    for i in 1 2 3 4 5 6 7 8 9 10; do
        port_taken "$port" || return 0
        sleep 0.5
    done
    return 1
}

if [ $user_sock = 1 ]; then
    say "port: a unix socket (-s) from the arguments"
elif [ -n "$user_port" ]; then
    if [ "$user_port" != 0 ] && port_taken "$user_port"; then
        offer_to_stop "$user_port" \
            || die "port $user_port (-p from the arguments) is in use; pick another -p, or stop what holds it"
    fi
else
    port=${TAC_PORT:-11211}
    [[ "$port" =~ ^[0-9]+$ ]] && [ "$port" -gt 0 ] && [ "$port" -lt 65536 ] \
        || die "TAC_PORT=$port: expected a TCP port number"
    if port_taken "$port" && ! offer_to_stop "$port"; then
        want=$port
        for ((p = want + 1; p < want + 200 && p < 65536; p++)); do
            port_used "$p" || { port=$p; break; }
        done
        [ "$port" != "$want" ] || die "port $want is taken and so are the next 200; set TAC_PORT=<free port>"
        loud "port $want is taken: serving on port $port instead" \
             "(set TAC_PORT=<port> to choose; clients must use 127.0.0.1:$port)"
    fi
    [ -n "$user_listen" ] || args+=(-l 127.0.0.1)
    args+=(-p "$port")
    say "port: $port (set TAC_PORT=<port> to change)"
fi

# ---- DRAM ----
TAC_MEM=${TAC_MEM:-256}
if [ $user_mem = 1 ]; then
    say "DRAM: -m from the arguments"
else
    [[ "$TAC_MEM" =~ ^[0-9]+$ ]] && [ "$TAC_MEM" -gt 0 ] || die "TAC_MEM=$TAC_MEM: expected megabytes, e.g. 256"
    args+=(-m "$TAC_MEM")
    say "DRAM: ${TAC_MEM} MB (set TAC_MEM=<megabytes> to change)"
fi

# Real PMem is never picked on its own: naming it is the operator's call.
pmem_hint() {
    local dev mnt fstype opts rest d
    while read -r dev mnt fstype opts rest; do
        case ",$opts," in *,dax,*|*,dax=always,*) ;; *) continue ;; esac
        echo "$(printf '%b' "$mnt") (a DAX file system: TAC_NVM_PATH=$(printf '%b' "$mnt")/tac-nvm.dat)"
        return 0
    done < /proc/mounts
    for d in /dev/dax*.*; do
        [ -c "$d" ] && { echo "$d (device-dax, overwritten whole: TAC_NVM_PATH=$d)"; return 0; }
    done
    return 1
}

tier_files=()           # files this run may create, for the removal hint
# ---- NVM ----
nvm_spec=
if [ $user_nvm = 1 ]; then
    say "NVM: nvm_path from the arguments"
elif is_off "${TAC_NVM:-512m}"; then
    say "NVM: off (TAC_NVM=${TAC_NVM})"
else
    nvm_size=${TAC_NVM:-512m}
    to_bytes "$nvm_size" >/dev/null || die "TAC_NVM=$nvm_size: expected a size such as 512m"
    if [ -n "${TAC_NVM_PATH:-}" ]; then
        nvm_file=$TAC_NVM_PATH
        [ -d "$nvm_file" ] && nvm_file=${nvm_file%/}/nvm.dat
        how="TAC_NVM_PATH"
    else
        nvm_file=$DATA_DIR/nvm.dat
        how="a plain file that emulates NVM; set TAC_NVM_PATH for real PMem"
        if found=$(pmem_hint); then how="$how, e.g. $found"; fi
    fi
    case "$nvm_file" in
        numa:*) ;;
        *)
            if [ -c "$nvm_file" ]; then
                [ -n "${TAC_NVM:-}" ] || nvm_size=0       # 0: map the whole device
            else
                case "$nvm_file" in /*) ;; *) nvm_file=$REPO/$nvm_file ;; esac
                mkdir_for "$nvm_file"
                tier_files+=("$nvm_file")
                if [ "$(fs_type "$nvm_file")" = tmpfs ]; then
                    avail=$(fs_avail "$nvm_file")
                    if [ "$avail" -lt "$(to_bytes "$nvm_size")" ]; then
                        say "warning: $(dirname "$nvm_file") has $((avail >> 20)) MB free, less than TAC_NVM=$nvm_size"
                    fi
                    case "$nvm_file" in
                        "$DATA_DIR"/*) ;;
                        *) loud "the NVM file $nvm_file is on tmpfs: it holds up to $nvm_size of RAM" \
                                "until it is removed, also after the server stops and after this" \
                                "script exits. Remove it with: rm -f $nvm_file $nvm_file.dramlog" ;;
                    esac
                fi
            fi ;;
    esac
    nvm_spec="$nvm_file:$nvm_size"
    [ "$nvm_size" = 0 ] && shown="whole device" || shown=$nvm_size
    say "NVM: $nvm_file, $shown ($how)"
fi

# ---- SSD ----
ssd_spec=
if [ $user_ssd = 1 ]; then
    say "SSD: ssd_path from the arguments"
elif is_off "${TAC_SSD:-1g}"; then
    say "SSD: off (TAC_SSD=${TAC_SSD})"
else
    ssd_size=${TAC_SSD:-1g}
    to_bytes "$ssd_size" >/dev/null || die "TAC_SSD=$ssd_size: expected a size such as 1g"
    if [ -n "${TAC_SSD_PATH:-}" ]; then
        ssd_file=$TAC_SSD_PATH
        case "$ssd_file" in /*) ;; *) ssd_file=$REPO/$ssd_file ;; esac
        how="TAC_SSD_PATH"
    else
        ssd_file=$DATA_DIR/ssd.dat
        how="set TAC_DATA_DIR=<dir> to move it, TAC_SSD_PATH=/dev/nvme1n1 to use a whole device"
    fi
    if [ -b "$ssd_file" ]; then
        if [ -z "${TAC_SSD:-}" ]; then                # the whole device
            ssd_size=$(blockdev --getsize64 "$ssd_file" 2>/dev/null) \
                || ssd_size=$(( $(cat "/sys/class/block/$(basename "$(readlink -f "$ssd_file")")/size") * 512 ))
        fi
        how="block device; one that holds other data needs -o tier_reformat=yes once"
    else
        case "$(fs_type "$ssd_file")" in
            tmpfs|ramfs) die "SSD: $ssd_file is on $(fs_type "$ssd_file"), which cannot do O_DIRECT; set TAC_DATA_DIR or TAC_SSD_PATH to a place on a disk file system" ;;
        esac
        have=0
        [ -f "$ssd_file" ] && have=$(stat -c %s "$ssd_file")
        need=$(( $(to_bytes "$ssd_size") - have ))
        avail=$(fs_avail "$ssd_file")
        if [ "$need" -gt "$avail" ]; then
            die "SSD: $ssd_file needs $((need >> 20)) MB more but its file system has $((avail >> 20)) MB free; set TAC_SSD to a smaller size or TAC_DATA_DIR elsewhere"
        fi
        mkdir_for "$ssd_file"
        tier_files+=("$ssd_file")
    fi
    ssd_spec="$ssd_file:$ssd_size"
    [ -b "$ssd_file" ] && [ -z "${TAC_SSD:-}" ] && shown="whole device" || shown=$ssd_size
    say "SSD: $ssd_file, $shown ($how)"
fi

# Where the files are and how to remove them.  The server keeps beside a tier file its
# restart state (<ssd file>.state, else <nvm file>.state), the state's journal
# (.state.journal) and, with -o dram_log=on, <nvm file>.dramlog.
if [ ${#tier_files[@]} -gt 0 ]; then
    say "tier files: ${tier_files[*]} (and .state, .state.journal, .dramlog files beside them)"
    rm_files=()
    for f in "${tier_files[@]}"; do
        case "$f" in "$REPO/run-data"/*) ;; *) rm_files+=("$f" "$f.state" "$f.state.journal" "$f.dramlog") ;; esac
    done
    if [ ${#rm_files[@]} -eq 0 ]; then
        say "to remove them (and the cache in them), once the server has stopped: rm -rf $REPO/run-data"
    else
        say "to remove them (and the cache in them), once the server has stopped: rm -f ${rm_files[*]}"
    fi
fi
# The /dev/shm file an earlier run.sh made (it emulated NVM there) holds RAM until removed.
if [ -d /dev/shm/tac-memcached ]; then
    loud "/dev/shm/tac-memcached, left by an earlier scripts/run.sh, holds $(du -sm /dev/shm/tac-memcached 2>/dev/null | cut -f1) MB of RAM;" \
         "this run does not use it. Remove it with: rm -rf /dev/shm/tac-memcached"
fi

ext=
[ -z "$nvm_spec" ] || ext=nvm_path=$nvm_spec
[ -z "$ssd_spec" ] || ext=${ext:+$ext,}ssd_path=$ssd_spec
[ -z "$ext" ] || args+=(-o "$ext")
args+=("$@")
if [ "$(id -u)" -eq 0 ]; then
    case " ${args[*]} " in *" -u "*|*" --user"*) ;; *) args=(-u root "${args[@]}") ;; esac
fi

if [ "$DRY" = 1 ]; then
    out=./tac-memcached
    for a in "${args[@]}"; do
        case "$a" in *[!A-Za-z0-9_.,:=/+@%-]*|'') out+=" $(printf '%q' "$a")" ;; *) out+=" $a" ;; esac
    done
    echo "$out"
    exit 0
fi

# ---- build: the server's own dependencies only ----
PKGS=(build-essential autoconf automake pkg-config libevent-dev libjemalloc-dev libpmem-dev
      liburing-dev libnuma-dev libsasl2-dev libsasl2-modules libssl-dev)
missing=()
if command -v dpkg-query >/dev/null 2>&1; then
    for p in "${PKGS[@]}"; do
        st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
        [ "$st" = "install ok installed" ] || missing+=("$p")
    done
fi
if [ ${#missing[@]} -gt 0 ]; then
    sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 \
            || die "the build needs ${missing[*]}; run as root or install them (apt-get install ${missing[*]})"
        sudo=(sudo)
        interactive || sudo+=(-n)
    fi
    say "installing what the build needs: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -q >&2 \
        && "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 \
        || die "could not install ${missing[*]} (apt-get install ${missing[*]} as root)"
fi
if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt configure ] \
   || [ ! -f Makefile.in ] || [ Makefile.am -nt Makefile.in ]; then
    say "autoreconf"
    autoreconf -fi >&2
fi
if [ ! -f Makefile ] || [ configure -nt config.status ]; then
    say "configure"
    ./configure -q >&2
fi
make -j2 tac-memcached >&2 || die "the build failed"

say "starting: ./tac-memcached ${args[*]}"
say "stop it with Ctrl-C (or SIGTERM): a graceful stop saves the cache for the next run"
exec ./tac-memcached "${args[@]}"
