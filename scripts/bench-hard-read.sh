#!/usr/bin/env bash
# mdtest-hard's read (issue 12: >= 0.8 of the FUSE ceiling) against what
# the disk allows, measured in one run: --procs python processes each
# write --files files of 3,901 bytes into one shared directory (as
# mdtest-hard does), then, with the page cache dropped (as the issue
# measures), each opens, reads and closes its files. Systems:
#
#   disk         a directory in --disk-dir (ext4 or whatever it is)
#   ceilingdisk  the go-fuse loopback (internal/tools/ceilingmount,
#                GOMAXPROCS=8) over a directory in --disk-dir: the
#                thinnest FUSE file system over this disk
#   ceiling      the same loopback over tmpfs: the FUSE ceiling
#   weft         a default `weft up` (its data under --out), plus --up
#
# --data random (the default) fills every file with bytes of its own from
# os.urandom, which nothing can compress (weft's metadata service keeps
# small files' copies in pebble, whose tables compress); --data x writes
# 3,901 'x' bytes, as the script did before session 26. --restart stops
# and starts weft (the same data) before each of its read rounds, so its
# daemons read with empty caches of their own, as the other systems do
# after the page cache is dropped.
#
# Per system and round: files read per second, disk reads and KiB read per file (from
# /proc/diskstats, the device holding --disk-dir), the machine's CPU per
# file (all of /proc/stat) and how idle it was; then the medians and
# weft's ratios to the ceiling and to ceilingdisk. weft's data goes in
# --disk-dir too, so its disk reads are counted. docs/performance.md, "mdtest-hard's read against
# the disk it reads", is made with it.
#
#   scripts/bench-hard-read.sh [--rounds 2] [--procs 4] [--files 2000]
#                              [--disk-dir /var/tmp] [--base-port 7800]
#                              [--weft BIN] [--up "ARGS"] [--out DIR]
#                              [--data random|x] [--restart]
#
# Run as root (dropping the page cache and mounting need it).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/bench.sh
. scripts/lib/bench.sh

rounds=2
procs=4
files=2000
disk_dir=/var/tmp
base_port=7800
weft=
up_args=
out=/tmp/weft-bench-hard-read
data=random
restart=false
usage="usage: bench-hard-read.sh [--rounds N] [--procs N] [--files N] [--disk-dir DIR] [--base-port P] [--weft BIN] [--up ARGS] [--out DIR] [--data random|x] [--restart]"
while [ $# -gt 0 ]; do
	case "$1" in
	--rounds) rounds=$2; shift 2 ;;
	--procs) procs=$2; shift 2 ;;
	--files) files=$2; shift 2 ;;
	--disk-dir) disk_dir=$2; shift 2 ;;
	--base-port) base_port=$2; shift 2 ;;
	--weft) weft=$2; shift 2 ;;
	--up) up_args=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--data) data=$2; shift 2 ;;
	--restart) restart=true; shift ;;
	*) echo "$usage" >&2; exit 2 ;;
	esac
done
command -v python3 >/dev/null || { echo "bench-hard-read: python3 is needed" >&2; exit 1; }
case "$data" in random | x) ;; *) echo "$usage" >&2; exit 2 ;; esac

rm -rf "$out"
mkdir -p "$out"
if [ -z "$weft" ]; then
	weft=$out/weft
	go build -o "$weft" ./cmd/weft
fi
go build -o "$out/ceilingmount" ./internal/tools/ceilingmount
# The disk's device as /proc/diskstats names it.
dev=$(basename "$(df --output=source "$disk_dir" | tail -1)")
grep -q " $dev " /proc/diskstats || { echo "bench-hard-read: no /proc/diskstats line for $dev ($disk_dir)" >&2; exit 1; }

work= shm= up_pid= cd_pid= t_pid=
unmount() {
	if mountpoint -q "$1" 2>/dev/null; then
		fusermount3 -u -z "$1" 2>/dev/null || umount -l "$1" 2>/dev/null || true
	fi
}
stop_weft() {
	if [ -n "$up_pid" ]; then
		kill -TERM "$up_pid" 2>/dev/null || true
		wait "$up_pid" 2>/dev/null || true
		up_pid=
	fi
	unmount "$out/wmnt"
}
cleanup() {
	set +e
	for p in $cd_pid $t_pid; do kill -TERM "$p" 2>/dev/null || true; done
	unmount "$out/cmnt"
	unmount "$out/tmnt"
	stop_weft
	for p in $cd_pid $t_pid; do wait "$p" 2>/dev/null || true; done
	[ -z "$work" ] || rm -rf "$work"
	[ -z "$shm" ] || rm -rf "$shm"
}
trap cleanup EXIT
# weft's data goes on the measured disk too (its reads are counted there).
work=$(mktemp -d "$disk_dir/weft-hard-read.XXXXXX")
shm=$(mktemp -d /dev/shm/weft-hard-read.XXXXXX)
mkdir -p "$work/disk" "$work/cdata" "$out/cmnt" "$shm/data" "$out/tmnt" "$out/wmnt"

GOMAXPROCS=8 "$out/ceilingmount" "$work/cdata" "$out/cmnt" >"$out/ceilingdisk.log" 2>&1 &
cd_pid=$!
GOMAXPROCS=8 "$out/ceilingmount" "$shm/data" "$out/tmnt" >"$out/ceiling.log" 2>&1 &
t_pid=$!
start_weft() {
	# shellcheck disable=SC2086 # --up is a list of arguments
	"$weft" up --data "$work/weft" --mount "$out/wmnt" --base-port "$base_port" --log-level warn $up_args >"$out/up.log" 2>&1 &
	up_pid=$!
	wait_up bench-hard-read "$out/up.log" "$up_pid"
}
start_weft
for m in "$out/cmnt" "$out/tmnt" "$out/wmnt"; do
	mountpoint -q "$m" || { echo "bench-hard-read: $m is not mounted (see $out/*.log)" >&2; exit 1; }
done

cat >"$out/hard.py" <<'PY'
import os, sys
d, mode, n, rank = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
if mode == "write":
    for i in range(n):
        data = os.urandom(3901) if sys.argv[5] == "random" else b"x" * 3901
        fd = os.open(f"{d}/f{rank}.{i}", os.O_CREAT | os.O_WRONLY, 0o644)
        os.write(fd, data)
        os.close(fd)
else:
    for i in range(n):
        fd = os.open(f"{d}/f{rank}.{i}", os.O_RDONLY)
        got = os.read(fd, 3901)
        os.close(fd)
        if len(got) != 3901:
            sys.exit(f"{d}/f{rank}.{i}: read {len(got)} bytes, want 3901")
print(n)
PY

declare -A dirs=([disk]="$work/disk" [ceilingdisk]="$out/cmnt" [ceiling]="$out/tmnt" [weft]="$out/wmnt")
systems="disk ceilingdisk ceiling weft"

# run SYSTEM MODE: every process runs hard.py in SYSTEM's directory.
run() {
	local d=${dirs[$1]}/hard lp="" i
	mkdir -p "$d"
	for i in $(seq "$procs"); do
		python3 "$out/hard.py" "$d" "$2" "$files" "$i" "$data" >"$out/$1.$2.$i" &
		lp="$lp $!"
	done
	for i in $lp; do
		wait "$i" || { echo "bench-hard-read: a $2 process on $1 failed" >&2; exit 1; }
	done
}

machine() { awk '/^cpu /{print $5+$6, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }
# reads: requests completed and sectors (512 bytes) read.
reads() { awk -v d="$dev" '$3==d {print $4, $6}' /proc/diskstats; }

for s in $systems; do
	read -r i0 m0 < <(machine)
	t0=$(date +%s.%N)
	run "$s" write
	t1=$(date +%s.%N)
	read -r i1 m1 < <(machine)
	python3 - "$s" "$t0" "$t1" "$i0" "$m0" "$i1" "$m1" "$((procs * files))" "$(getconf CLK_TCK)" >>"$out/writes.jsonl" <<'PY'
import json, sys
s, t0, t1, i0, m0, i1, m1, n, hz = sys.argv[1:]
n = int(n)
busy = (int(m1) - int(m0)) - (int(i1) - int(i0))
print(json.dumps({"system": s, "rate": n / (float(t1) - float(t0)), "machine_us": busy * 1e6 / int(hz) / n}))
PY
	tail -1 "$out/writes.jsonl" | python3 -c '
import json, sys
r = json.load(sys.stdin)
print("== wrote %s files/s on %s (create, write 3,901 bytes, close), machine %.0f µs per file" % (format(round(r["rate"]), ","), r["system"], r["machine_us"]))' >&2
done
for round in $(seq "$rounds"); do
	for s in $systems; do
		if [ "$s" = weft ] && $restart; then
			stop_weft
			start_weft
		fi
		sync
		echo 3 >/proc/sys/vm/drop_caches
		read -r i0 m0 < <(machine)
		read -r r0 k0 < <(reads)
		t0=$(date +%s.%N)
		run "$s" read
		t1=$(date +%s.%N)
		read -r r1 k1 < <(reads)
		read -r i1 m1 < <(machine)
		python3 - "$s" "$round" "$t0" "$t1" "$r0" "$r1" "$k0" "$k1" "$i0" "$m0" "$i1" "$m1" "$((procs * files))" "$(getconf CLK_TCK)" >>"$out/results.jsonl" <<'PY'
import json, sys
s, rnd, t0, t1, r0, r1, k0, k1, i0, m0, i1, m1, n, hz = sys.argv[1:]
n = int(n)
busy = (int(m1) - int(m0)) - (int(i1) - int(i0))
print(json.dumps({"system": s, "round": int(rnd), "files": n, "rate": n / (float(t1) - float(t0)),
                  "disk_reads": (int(r1) - int(r0)) / n, "disk_kib": (int(k1) - int(k0)) / 2 / n, "machine_us": busy * 1e6 / int(hz) / n,
                  "idle": (int(i1) - int(i0)) / (int(m1) - int(m0))}))
PY
		tail -1 "$out/results.jsonl" | python3 -c '
import json, sys
r = json.load(sys.stdin)
print("  round %d %s: %s files/s, %.2f disk reads and %.1f KiB read per file, machine %.0f µs per file, idle %.2f" % (r["round"], r["system"], format(round(r["rate"]), ","), r["disk_reads"], r["disk_kib"], r["machine_us"], r["idle"]))' >&2
	done
done

python3 - "$out/results.jsonl" "$out/writes.jsonl" <<'PY'
import json, statistics, sys
rs = [json.loads(l) for l in open(sys.argv[1])]
med = lambda s, k: statistics.median(r[k] for r in rs if r["system"] == s)
print("\nmedians of the rounds\n")
print("| system | files/s (runs) | disk reads per file | KiB read per file | machine µs per file | idle |")
print("|---|---|---|---|---|---|")
for s in ("disk", "ceilingdisk", "ceiling", "weft"):
    runs = ", ".join(format(round(r["rate"]), ",") for r in rs if r["system"] == s)
    print(f"| {s} | {med(s, 'rate'):,.0f} ({runs}) | {med(s, 'disk_reads'):.2f} | {med(s, 'disk_kib'):.1f} | {med(s, 'machine_us'):.0f} | {med(s, 'idle'):.2f} |")
ws = {json.loads(l)["system"]: json.loads(l) for l in open(sys.argv[2])}
print("\nwrites (once per system, before the reads)\n")
print("| system | files/s | machine µs per file |")
print("|---|---|---|")
for s, r in ws.items():
    print(f"| {s} | {r['rate']:,.0f} | {r['machine_us']:.0f} |")
print(f"\nwrites: weft / ceiling {ws['weft']['rate'] / ws['ceiling']['rate']:.2f}, weft / ceilingdisk {ws['weft']['rate'] / ws['ceilingdisk']['rate']:.2f}")
w = med("weft", "rate")
print(f"\nreads: weft / ceiling {w / med('ceiling', 'rate'):.2f}, weft / ceilingdisk {w / med('ceilingdisk', 'rate'):.2f}, ceilingdisk / ceiling {med('ceilingdisk', 'rate') / med('ceiling', 'rate'):.2f}")
PY
