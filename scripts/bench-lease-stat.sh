#!/usr/bin/env bash
# Stats through a weft mount with metadata leases (this tree) against a
# baseline build (default: main, without them), interleaved on this machine
# (base, new, base, new, ...), with 1 and with 4 processes. Each run is a
# fresh default `weft up` (3 metadata replicas, mirror 2, 3 storage
# servers, 4 targets); P processes create F empty files each in a
# directory of their own, the kernel's dentry and inode caches are
# dropped and its 1 s attribute timeout waited out, then P processes stat
# every file once (stats/s: each stat a LOOKUP to the mount, which the
# baseline sends to the metadata leader and this tree answers from what
# the mount holds under lease). Prints every run and the medians.
# With --io500, each run is instead `weft bench io500 --stonewall 5s
# --max-data 256MiB --max-files F` through the mount, and the stat phases
# (mdtest-easy-stat, mdtest-hard-stat, kIOPS) are what is compared.
#
#   scripts/bench-lease-stat.sh [--rounds 3] [--files 5000] [--base REV]
#                               [--base-port 7850] [--out DIR] [--io500]
#                               [--hard]
#
# --hard makes the files as mdtest-hard does: 3,901 bytes each, all
# processes in one shared directory.
#
# Run as root (dropping the kernel's caches needs it).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3
files=5000
base=main
base_port=7850
out=/tmp/weft-bench-lease-stat
io500=
hard=0
while [ $# -gt 0 ]; do
	case "$1" in
	--rounds) rounds=$2; shift 2 ;;
	--files) files=$2; shift 2 ;;
	--base) base=$2; shift 2 ;;
	--base-port) base_port=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--io500) io500=1; shift ;;
	--hard) hard=1; shift ;;
	*) echo "bench-lease-stat: unknown argument $1" >&2; exit 2 ;;
	esac
done

rm -rf "$out"
mkdir -p "$out/src-base"
git archive "$base" | tar -x -C "$out/src-base"
(cd "$out/src-base" && go build -o "$out/weft-base" ./cmd/weft)
go build -o "$out/weft-new" ./cmd/weft

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

run() { # run BIN PROCS ROUND: one cluster, one create and one stat pass
	local bin=$1 procs=$2 round=$3 d=$out/$1-p$2-$3
	mnt=$d/mnt
	mkdir -p "$mnt"
	"$out/weft-$bin" up --data "$d/data" --mount "$mnt" --base-port "$base_port" --log-level info >"$d/up.log" 2>&1 &
	up_pid=$!
	local deadline=$((SECONDS + 300))
	until grep -qs "weft is up" "$d/up.log"; do
		if ! kill -0 "$up_pid" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
			cat "$d/up.log" >&2
			exit 1
		fi
		sleep 0.2
	done
	if [ -n "$io500" ]; then
		"$out/weft-$bin" bench io500 --procs "$procs" --stonewall 5s --max-data 256MiB --max-files "$files" \
			--json "$d/io500.json" "$mnt" >"$d/io500.log" 2>&1
		python3 - "$d/io500.json" "$mnt" <<'PY'
import json, os, sys
p = json.load(open(sys.argv[1]))["phases"]
try:
    leases = os.getxattr(sys.argv[2], "user.weft.leases").decode()
except OSError:
    leases = "-"
print("%.3f %.3f %s" % (p["mdtest-easy-stat"]["value"], p["mdtest-hard-stat"]["value"], leases))
PY
		stop_up
		mv "$d/data/logs" "$d/logs"
		rm -rf "$d/data"
		return
	fi
	python3 scripts/statload.py "$mnt" "$files" "$procs" "$hard"
	stop_up
	mv "$d/data/logs" "$d/logs"
	rm -rf "$d/data"
}

declare -A creates stats
echo "bench-lease-stat: base $base ($(git rev-parse --short "$base")) vs this tree, $files files per process, $rounds rounds" >&2
for round in $(seq "$rounds"); do
	for procs in 1 4; do
		for bin in base new; do
			# $(...) waits for the run to end (its cluster stopped).
			res=$(run "$bin" "$procs" "$round")
			read -r c s l <<<"$res"
			if [ -n "$io500" ]; then
				echo "$bin procs=$procs round=$round mdtest-easy-stat=$c mdtest-hard-stat=$s kIOPS leases=$l"
			else
				echo "$bin procs=$procs round=$round creates/s=$c stats/s=$s leases=$l"
			fi
			creates[$bin$procs]+="$c "
			stats[$bin$procs]+="$s "
		done
	done
done
median() { tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
echo "--- medians"
for procs in 1 4; do
	for bin in base new; do
		if [ -n "$io500" ]; then
			echo "$bin procs=$procs mdtest-easy-stat $(echo "${creates[$bin$procs]}" | median) mdtest-hard-stat $(echo "${stats[$bin$procs]}" | median) kIOPS"
		else
			echo "$bin procs=$procs creates/s $(echo "${creates[$bin$procs]}" | median) stats/s $(echo "${stats[$bin$procs]}" | median)"
		fi
	done
	sb=$(echo "${stats[base$procs]}" | median) sn=$(echo "${stats[new$procs]}" | median)
	cb=$(echo "${creates[base$procs]}" | median) cn=$(echo "${creates[new$procs]}" | median)
	if [ -n "$io500" ]; then
		echo "procs=$procs new / base: mdtest-easy-stat $(echo "scale=2; $cn/$cb" | bc)x, mdtest-hard-stat $(echo "scale=2; $sn/$sb" | bc)x"
	else
		echo "procs=$procs new / base: stats $(echo "scale=2; $sn/$sb" | bc)x, creates $(echo "scale=2; $cn/$cb" | bc)x"
	fi
done
