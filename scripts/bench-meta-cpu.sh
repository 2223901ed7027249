#!/usr/bin/env bash
# What replicating the metadata costs: creates per second and the metadata
# members' CPU per 1,000 creates, one replica against three, interleaved on
# this machine (R=1, R=3, R=1, R=3, ...) and summarised as medians. Each
# run is a fresh `weft up --meta-replicas R --mirror 1 --servers 1
# --targets 1`, loaded with internal/tools/mdload straight at the metadata
# service (no FUSE); the CPU is utime+stime of each `weft meta` process
# (from /proc/PID/stat, pids as weft up printed them) over the mdload run.
# CPU-seconds per 1,000 creates is steady on a noisy machine; creates/s is
# not, so compare the two sides of one run only (docs/performance.md,
# "What three replicas cost").
#
#   scripts/bench-meta-cpu.sh [--rounds 2] [--replicas "1 3"] [--files 20000]
#                             [--workers 16] [--base-port 7750] [--bin DIR]
#                             [--tmpfs] [--pprof-port P] [--perf] [--out DIR]
#
# --bin DIR uses DIR/weft and DIR/mdload instead of building them from the
# working tree. --tmpfs puts the data directories on /dev/shm (fsync costs
# nothing there: what is left is CPU). --pprof-port P profiles each run's
# members (weft up --pprof-port): a 10 s CPU profile of every metadata
# member is saved in OUT as cpu-R<r>-<round>-meta<i>.pprof
# (go tool pprof -top FILE). --perf counts each member's fdatasync, write
# and writev calls, futex waits and context switches over the mdload run
# (perf stat; needs perf and its syscall tracepoints), per 1,000 creates.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=2
replicas="1 3"
files=20000
workers=16
base_port=7750
bin=
tmpfs=0
pprof_port=0
perf=0
out=/tmp/weft-bench-meta-cpu
while [ $# -gt 0 ]; do
	case "$1" in
	--rounds) rounds=$2; shift 2 ;;
	--replicas) replicas=$2; shift 2 ;;
	--files) files=$2; shift 2 ;;
	--workers) workers=$2; shift 2 ;;
	--base-port) base_port=$2; shift 2 ;;
	--bin) bin=$2; shift 2 ;;
	--tmpfs) tmpfs=1; shift ;;
	--pprof-port) pprof_port=$2; shift 2 ;;
	--perf) perf=1; shift ;;
	--out) out=$2; shift 2 ;;
	*) echo "usage: bench-meta-cpu.sh [--rounds N] [--replicas \"1 3\"] [--files N] [--workers N] [--base-port P] [--bin DIR] [--tmpfs] [--pprof-port P] [--perf] [--out DIR]" >&2; exit 2 ;;
	esac
done

rm -rf "$out"
mkdir -p "$out"
if [ -z "$bin" ]; then
	bin=$out/bin
	go build -o "$bin/" ./cmd/weft ./internal/tools/mdload
fi
root=$out
if [ "$tmpfs" = 1 ]; then
	root=$(mktemp -d /dev/shm/weft-bench-meta-cpu.XXXXXX)
fi
up_pid=
cleanup() {
	if [ -n "$up_pid" ]; then
		kill -INT "$up_pid" 2>/dev/null || true
		wait "$up_pid" 2>/dev/null || true
	fi
	if [ "$tmpfs" = 1 ]; then rm -rf "$root"; fi
}
trap cleanup EXIT

tck=$(getconf CLK_TCK)
ticks() { # ticks PID: utime+stime of PID in clock ticks
	local s
	read -r -a s < <(cut -d' ' -f14,15 "/proc/$1/stat")
	echo $((s[0] + s[1]))
}

# run R ROUND: one weft up, one mdload; appends "R rate cpu-per-1000 member-cpus" to $out/results.
run() {
	local r=$1 round=$2 d=$root/r$1-$2
	mkdir -p "$d"
	: >"$d/up.log" # exists before the wait below reads it
	local args=(up --data "$d/data" --mount "$d/mnt" --meta-replicas "$r" --mirror 1
		--servers 1 --targets 1 --base-port "$base_port")
	if [ "$pprof_port" != 0 ]; then args+=(--pprof-port "$pprof_port"); fi
	"$bin/weft" "${args[@]}" >"$d/up.log" 2>&1 &
	up_pid=$!
	for _ in $(seq 1 180); do
		grep -q "^weft is up" "$d/up.log" && break
		kill -0 "$up_pid" 2>/dev/null || { cat "$d/up.log" >&2; exit 1; }
		sleep 1
	done
	grep -q "^weft is up" "$d/up.log" || { echo "bench-meta-cpu: weft up did not come up" >&2; cat "$d/up.log" >&2; exit 1; }
	# weft up prints "started meta-2    pid 1234    log ...".
	local pids
	pids=$(awk '$1 == "started" && $2 ~ /^meta/ {print $4}' "$d/up.log")
	local -A c0
	for p in $pids; do c0[$p]=$(ticks "$p"); done
	local addrs
	addrs=$(seq -s, -f "127.0.0.1:%g" "$base_port" $((base_port + r - 1)))
	local prof=()
	if [ "$pprof_port" != 0 ]; then
		for i in $(seq 1 "$r"); do
			(sleep 2; curl -s -o "$out/cpu-R$r-$round-meta$i.pprof" \
				"http://127.0.0.1:$((pprof_port + i - 1))/debug/pprof/profile?seconds=10") &
			prof+=($!)
		done
	fi
	local perfs=() events=syscalls:sys_enter_fdatasync,syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_futex,context-switches
	if [ "$perf" = 1 ]; then
		local i=0
		for p in $pids; do
			i=$((i + 1))
			perf stat -x, -e "$events" -p "$p" -o "$d/perf-$i.csv" &
			perfs+=($!)
		done
		sleep 0.5
	fi
	"$bin/mdload" --meta "$addrs" --keys "$d/data/keys/client" --files "$files" --dirs 100 \
		--workers "$workers" --targets 1 >"$d/mdload.out" 2>&1 || { cat "$d/mdload.out" >&2; exit 1; }
	local total=0 members=""
	for p in $pids; do
		local c=$(($(ticks "$p") - c0[$p]))
		total=$((total + c))
		members="$members $(echo "scale=2; $c/$tck" | bc)"
	done
	for p in "${prof[@]}"; do wait "$p" || true; done
	if [ "$perf" = 1 ]; then
		for p in "${perfs[@]}"; do kill -INT "$p"; wait "$p" || true; done
		for f in "$d"/perf-*.csv; do
			# One line per member: each event's count per 1,000 creates.
			awk -F, -v files="$files" -v m="$(basename "$f" .csv)" \
				'$1 ~ /^[0-9]+$/ {sub(/^syscalls:sys_enter_/, "", $3); printf "%s%s %.0f", (n++ ? ", " : m ": "), $3, $1 * 1000 / files} END {print ""}' \
				"$f" | tee -a "$out/perf"
		done
	fi
	kill -INT "$up_pid"
	wait "$up_pid" 2>/dev/null || true
	up_pid=
	rm -rf "$d/data"
	local rate
	rate=$(tail -1 "$d/mdload.out" | awk '{print $3}')
	local per
	per=$(echo "scale=4; $total*1000/$tck/$files" | bc)
	echo "R=$r round=$round creates/s=$rate cpu-s/1000=$per members-cpu-s:$members" | tee -a "$out/results"
}

echo "bench-meta-cpu: $files creates, $workers workers, replicas $replicas, $rounds rounds, data in $root" >&2
for round in $(seq 1 "$rounds"); do
	for r in $replicas; do run "$r" "$round"; done
done

median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
echo "--- medians"
declare -A rate
for r in $replicas; do
	rate[$r]=$(grep "^R=$r " "$out/results" | sed 's/.*creates\/s=\([0-9.]*\).*/\1/' | median)
	cpu=$(grep "^R=$r " "$out/results" | sed 's/.*cpu-s\/1000=\([0-9.]*\).*/\1/' | median)
	echo "R=$r creates/s ${rate[$r]} meta cpu-s per 1000 creates $cpu"
done
first=${replicas%% *}
for r in $replicas; do
	[ "$r" = "$first" ] && continue
	echo "R=$r / R=$first creates/s: $(echo "scale=1; 100*${rate[$r]}/${rate[$first]}" | bc) %"
done
