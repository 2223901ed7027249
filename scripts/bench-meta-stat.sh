#!/usr/bin/env bash
# Stats and creates through a weft mount with one metadata replica against
# three (issue 8: "stats at >= 95 % of 1 replica"), interleaved on this
# machine (R=1, R=3, R=1, ...). Each run is a fresh `weft up --meta-replicas
# R --mirror 1 --servers 1 --targets 1`; 4 processes create 5,000 empty
# files each in a directory of their own (creates/s), the kernel's dentry
# and inode caches are dropped and its 1 s attribute timeout waited out,
# then 4 processes stat every file once (stats/s: each stat a LOOKUP the
# metadata service answers). Longer than IO500's stat phases (well under a
# second here), so one run says more. Prints every run and the medians.
#
#   scripts/bench-meta-stat.sh [--rounds 3] [--files 5000] [--procs 4]
#                              [--base-port 7600] [--out DIR]
#
# Run as root (dropping the kernel's caches needs it).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3
files=5000
procs=4
base_port=7600
out=/tmp/weft-bench-meta-stat
while [ $# -gt 0 ]; do
	case "$1" in
	--rounds) rounds=$2; shift 2 ;;
	--files) files=$2; shift 2 ;;
	--procs) procs=$2; shift 2 ;;
	--base-port) base_port=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	*) echo "bench-meta-stat: unknown argument $1" >&2; exit 2 ;;
	esac
done

rm -rf "$out"
mkdir -p "$out"
go build -o "$out/weft" ./cmd/weft

up_pid=
mnt=
stop_up() {
	if [ -n "$up_pid" ] && kill -0 "$up_pid" 2>/dev/null; then
		kill -INT "$up_pid"
		wait "$up_pid" || true
	fi
	up_pid=
	if [ -n "$mnt" ] && grep -qs " $mnt fuse" /proc/mounts; then
		fusermount3 -u -z "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
	fi
}
trap stop_up EXIT

run() { # run R ROUND: one cluster, one create and one stat pass
	local r=$1 round=$2 d=$out/r$1-$2
	mnt=$d/mnt
	mkdir -p "$mnt"
	"$out/weft" up --data "$d/data" --mount "$mnt" --meta-replicas "$r" --mirror 1 --servers 1 --targets 1 \
		--base-port "$base_port" --log-level warn >"$d/up.log" 2>&1 &
	up_pid=$!
	local deadline=$((SECONDS + 300))
	until grep -qs "weft is up" "$d/up.log"; do
		if ! kill -0 "$up_pid" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
			cat "$d/up.log" >&2
			exit 1
		fi
		sleep 0.2
	done
	python3 scripts/statload.py "$mnt" "$files" "$procs" 0
	stop_up
	rm -rf "$d/data"
}

declare -A creates stats
echo "bench-meta-stat: $procs procs x $files files, $rounds rounds" >&2
for round in $(seq "$rounds"); do
	for r in 1 3; do
		# $(...) waits for the run to end (its cluster stopped); a process
		# substitution would let the next run start beside it.
		res=$(run "$r" "$round")
		read -r c s _ <<<"$res"
		echo "R=$r round=$round creates/s=$c stats/s=$s"
		creates[$r]+="$c "
		stats[$r]+="$s "
	done
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "--- medians"
for r in 1 3; do
	echo "R=$r creates/s $(echo "${creates[$r]}" | median) stats/s $(echo "${stats[$r]}" | median)"
done
c1=$(echo "${creates[1]}" | median) c3=$(echo "${creates[3]}" | median)
s1=$(echo "${stats[1]}" | median) s3=$(echo "${stats[3]}" | median)
echo "R=3 / R=1: creates $(echo "scale=1; 100*$c3/$c1" | bc) %, stats $(echo "scale=1; 100*$s3/$s1" | bc) %"
