#!/usr/bin/env bash
# Build if needed, then run the server in the foreground (default 127.0.0.1:11211) with
# all three tiers: DRAM (-m), NVM (a DAX file system or /dev/daxX.Y if there is one, else
# a file in /dev/shm that emulates NVM) and SSD (a file in the data directory, or a
# block device).
#
# Environment (default in brackets):
#   TAC_MEM        DRAM in megabytes (-m) [1024]
#   TAC_NVM        NVM size, e.g. 4g; 0 or off: no NVM tier [4g; a whole /dev/dax device]
#   TAC_NVM_PATH   NVM file, directory, /dev/daxX.Y or numa:N [found as above]
#   TAC_SSD        SSD size, e.g. 16g; 0 or off: no SSD tier [16g; a whole block device]
#   TAC_SSD_PATH   SSD file or block device [$TAC_DATA_DIR/ssd.dat]
#   TAC_DATA_DIR   directory of the SSD file, on a disk file system [data/ in the repository]
#   TAC_DRY_RUN=1  print the tiers and the command, then exit (no build, nothing created)
# Arguments are passed to the server after the script's options (a later option wins);
# an -m, nvm_path= or ssd_path= among them replaces the script's DRAM, NVM or SSD setting.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
DRY=${TAC_DRY_RUN:-0}
[ "$DRY" = 0 ] || [ "$DRY" = 1 ] || { echo "run.sh: TAC_DRY_RUN must be 0 or 1" >&2; exit 1; }

say() { echo "run.sh: $*" >&2; }
die() { say "$*"; exit 1; }

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

# What the caller already set on the command line.
user_mem=0 user_nvm=0 user_ssd=0
for a in "$@"; do
    case "$a" in
        -m|-m*|--memory-limit|--memory-limit=*) user_mem=1 ;;
    esac
    case "$a" in *nvm_path=*) user_nvm=1 ;; esac
    case "$a" in *ssd_path=*) user_ssd=1 ;; esac
done

args=()
if [ $# -eq 0 ]; then
    args+=(-l 127.0.0.1 -p 11211)
fi

# ---- DRAM ----
TAC_MEM=${TAC_MEM:-1024}
if [ $user_mem = 1 ]; then
    say "DRAM: -m from the arguments"
else
    [[ "$TAC_MEM" =~ ^[0-9]+$ ]] && [ "$TAC_MEM" -gt 0 ] || die "TAC_MEM=$TAC_MEM: expected megabytes, e.g. 1024"
    args+=(-m "$TAC_MEM")
    say "DRAM: ${TAC_MEM} MB (set TAC_MEM=<megabytes> to change)"
fi

# ---- NVM ----
# A mounted file system with DAX always on, writable by us.
find_dax_mount() {
    local dev mnt fstype opts rest
    while read -r dev mnt fstype opts rest; do
        case ",$opts," in *,dax,*|*,dax=always,*) ;; *) continue ;; esac
        mnt=$(printf '%b' "$mnt")            # /proc/mounts writes a space as \040
        if [ -d "$mnt" ] && [ -w "$mnt" ]; then echo "$mnt"; return 0; fi
    done < /proc/mounts
    return 1
}
find_devdax() {
    local d
    for d in /dev/dax*.*; do
        if [ -c "$d" ] && [ -w "$d" ]; then echo "$d"; return 0; fi
    done
    return 1
}
nvm_spec=
if [ $user_nvm = 1 ]; then
    say "NVM: nvm_path from the arguments"
elif is_off "${TAC_NVM:-4g}"; then
    say "NVM: off (TAC_NVM=${TAC_NVM})"
else
    nvm_size=${TAC_NVM:-4g}
    to_bytes "$nvm_size" >/dev/null || die "TAC_NVM=$nvm_size: expected a size such as 4g"
    hint="set TAC_NVM_PATH=/mnt/pmem0/tac or /dev/dax0.0 for real PMem"
    if [ -n "${TAC_NVM_PATH:-}" ]; then
        nvm_file=$TAC_NVM_PATH
        [ -d "$nvm_file" ] && nvm_file=${nvm_file%/}/nvm.dat
        how="TAC_NVM_PATH"
    elif mnt=$(find_dax_mount); then
        nvm_file=${mnt%/}/tac-memcached/nvm.dat
        how="PMem: DAX file system at $mnt; set TAC_NVM_PATH to choose another"
    elif dev=$(find_devdax); then
        nvm_file=$dev
        how="PMem: device-dax, its contents are overwritten; set TAC_NVM_PATH to choose another"
    else
        nvm_file=/dev/shm/tac-memcached/nvm.dat
        how="emulated in DRAM; $hint"
    fi
    case "$nvm_file" in
        numa:*) ;;
        *)
            if [ -c "$nvm_file" ]; then
                [ -n "${TAC_NVM:-}" ] || nvm_size=0       # 0: map the whole device
            else
                mkdir_for "$nvm_file"
                if [ "$(fs_type "$nvm_file")" = tmpfs ] && [ -z "${TAC_NVM_PATH:-}" ]; then
                    avail=$(fs_avail "$nvm_file")
                    if [ "$avail" -lt "$(to_bytes "$nvm_size")" ]; then
                        say "warning: $(dirname "$nvm_file") has $((avail >> 20)) MB free, less than TAC_NVM=$nvm_size"
                    fi
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
elif is_off "${TAC_SSD:-16g}"; then
    say "SSD: off (TAC_SSD=${TAC_SSD})"
else
    ssd_size=${TAC_SSD:-16g}
    to_bytes "$ssd_size" >/dev/null || die "TAC_SSD=$ssd_size: expected a size such as 16g"
    if [ -n "${TAC_SSD_PATH:-}" ]; then
        ssd_file=$TAC_SSD_PATH
        how="TAC_SSD_PATH"
    else
        data_dir=${TAC_DATA_DIR:-$REPO/data}
        case "$data_dir" in /*) ;; *) data_dir=$REPO/$data_dir ;; esac
        ssd_file=${data_dir%/}/ssd.dat
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
    fi
    ssd_spec="$ssd_file:$ssd_size"
    [ -b "$ssd_file" ] && [ -z "${TAC_SSD:-}" ] && shown="whole device" || shown=$ssd_size
    say "SSD: $ssd_file, $shown ($how)"
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
./scripts/setup.sh >&2
say "starting: ./tac-memcached ${args[*]}"
exec ./tac-memcached "${args[@]}"
