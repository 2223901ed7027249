#!/usr/bin/env bash
# Two weft builds' read paths on warm storage caches, side by side: a
# `weft up` (defaults) of each, one 1 GiB file written and read once on
# each (so the storage servers' page cache holds it), then ROUNDS rounds,
# alternating A and B, of: one fio job reading the file twice (1 MiB,
# direct I/O), and 4 fio jobs of 4 KiB random reads of it for 5 s. It
# prints the daemons' CPU (all of a cluster's weft processes, from
# /proc/PID/stat) per GiB and per 100,000 random reads, and the rates. No
# disk and no page-cache drop in the loop, so a shared machine's noise
# moves these figures less than bench-reads.sh's (docs/performance.md,
# "Reads, issue 12").
#
#   scripts/bench-reads-warm.sh [--rounds 4] [--out DIR] [--base-port 7800] WEFT_A WEFT_B
set -euo pipefail
# shellcheck source=lib/bench.sh
. "$(dirname "$0")/lib/bench.sh"

rounds=4
out=/tmp/weft-bench-reads-warm
base_port=7800
while [ $# -gt 2 ]; do
	case "$1" in
	--rounds) rounds=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--base-port) base_port=$2; shift 2 ;;
	*) echo "usage: bench-reads-warm.sh [--rounds N] [--out DIR] [--base-port P] WEFT_A WEFT_B" >&2; exit 2 ;;
	esac
done
[ $# -eq 2 ] || { echo "usage: bench-reads-warm.sh [--rounds N] [--out DIR] [--base-port P] WEFT_A WEFT_B" >&2; exit 2; }
command -v fio >/dev/null || { echo "bench-reads-warm: fio is needed" >&2; exit 1; }

rm -rf "$out"
declare -A up_pid=() pids=()
cleanup() {
	local s
	for s in "${!up_pid[@]}"; do
		kill -TERM "${up_pid[$s]}" 2>/dev/null && wait "${up_pid[$s]}" || true
		if grep -qs " $out/$s/mnt fuse" /proc/mounts; then
			fusermount3 -u -z "$out/$s/mnt" 2>/dev/null || umount -l "$out/$s/mnt" 2>/dev/null || true
		fi
	done
	rm -rf "$out/a/data" "$out/b/data"
}
trap cleanup EXIT

i=0
for s in a b; do
	mkdir -p "$out/$s/mnt" "$out/$s/bin"
	if [ $s = a ]; then cp "$1" "$out/a/bin/weft"; else cp "$2" "$out/b/bin/weft"; fi
	"$out/$s/bin/weft" up --data "$out/$s/data" --mount "$out/$s/mnt" --base-port $((base_port + 25 * i)) --log-level warn >"$out/$s/up.log" 2>&1 &
	up_pid[$s]=$!
	i=$((i + 1))
done
for s in a b; do
	wait_up "bench-reads-warm ($s)" "$out/$s/up.log" "${up_pid[$s]}"
	f=$out/$s/mnt/f0
	fio --ioengine=psync --direct=1 --rw=write --bs=1M --size=1g --end_fsync=1 --name=w --filename="$f" --output-format=terse >/dev/null
	fio --ioengine=psync --direct=1 --rw=read --bs=1M --name=r --filename="$f" --output-format=terse >/dev/null
	# The cluster's processes, by /proc/*/comm first (a process blocked in
	# FUSE can hang a read of its command line; none is now).
	for p in /proc/[0-9]*; do
		[ "$(cat "$p/comm" 2>/dev/null)" = weft ] || continue
		tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -q -- " --[a-z]* $out/$s/data/" && pids[$s]+="$(basename "$p") "
	done
done

ticks() {
	local p t=0 v
	for p in ${pids[$1]}; do
		v=$(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null) || continue
		t=$((t + ${v:-0}))
	done
	echo "$t"
}
hz=$(getconf CLK_TCK)
for r in $(seq "$rounds"); do
	for s in a b; do
		f=$out/$s/mnt/f0
		t0=$(ticks $s)
		seq=$(fio --output-format=json --ioengine=psync --direct=1 --rw=read --bs=1M --loops=2 --name=r --filename="$f")
		t1=$(ticks $s)
		rnd=$(fio --output-format=json --group_reporting --ioengine=psync --direct=1 --rw=randread --bs=4k --time_based --runtime=5 --numjobs=4 --name=r --filename="$f")
		t2=$(ticks $s)
		python3 - "$s" "$r" "$t0" "$t1" "$t2" "$hz" "$seq" "$rnd" <<'PY'
import json, sys
s, r, t0, t1, t2, hz = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
seq = json.loads(sys.argv[7])["jobs"][0]["read"]
rnd = json.loads(sys.argv[8])["jobs"][0]["read"]
print(f"{s} round {r}: seq {seq['bw_bytes'] / 2**20:,.0f} MiB/s, {(t1 - t0) / hz / (seq['io_bytes'] / 2**30):.2f} CPU-s/GiB; "
      f"random {rnd['iops']:,.0f} IOPS, {(t2 - t1) / hz / (rnd['total_ios'] / 1e5):.1f} CPU-s/100k reads")
PY
	done
done
