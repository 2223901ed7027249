#!/usr/bin/env bash
# What this machine's CPUs leave for weft's creates and deletes with
# several processes (issue 12's mdtest-easy lines for 4 processes: >= 0.8
# of the FUSE ceiling), measured in one run. With several processes a
# create is not bound by one create's latency (bench-sync-floor.sh's
# bound for one process) but by the CPU all of them share: weft must do
# at least what the ceiling does, less the ceiling's work in tmpfs, plus
# what replicated metadata cannot skip. The script measures
#
#   the ceiling (go-fuse loopback over tmpfs, internal/tools/ceilingmount)
#     and tmpfs directly: --procs python processes, a directory each,
#     create empty files (on the ceiling for --secs seconds; on tmpfs,
#     which makes hundreds of thousands a second, about as many as on the
#     ceiling), then unlink them: rate, how busy the machine was, and the
#     machine's CPU per operation (all of /proc/stat: every process and
#     the kernel);
#   the floors of what weft adds, from its Go benchmarks: the CPU of a
#     round trip between two processes over a bare TCP echo with --procs
#     callers (transport BenchmarkRoundTrip/bare=N: no framing, no
#     goroutine hand-off), and of applying a create and an unlink to the
#     state machine (meta BenchmarkApplyCreate/wal=false,
#     BenchmarkApplyUnlink: a small store, warm caches); the least of
#     three runs each;
#   the CPU of the cheapest durable write of the disk in --disk-dir
#     (internal/tools/syncfloor durable: the least cpu_us of its durable
#     writes, this process's CPU only);
#
# and prints, for --replicas metadata members, the floor of the machine's
# CPU per operation,
#
#   ceiling - tmpfs + replicas x (round trip / procs + apply)
#                   + majority x durable write / procs
#
# (the mount sends each operation to the leader, which sends it to every
# other member: at best one round trip per --procs operations each, the
# processes' operations batched; every member applies it; a majority
# makes it durable before the reply, at best one write for --procs
# operations), and how many CPUs that floor needs at --target times the
# ceiling's rate. Generous to weft on purpose: tmpfs's figure includes
# python's own work, which weft must do too; no raft, no log write, no
# follower's reply and no FUSE work beyond the ceiling's is counted. More
# CPUs needed than the machine has: the target cannot be met on this
# machine. The ceiling runs with GOMAXPROCS=8 (CEILING_PROCS), as weft's
# mount does: its best setting here. docs/performance.md, "Four processes'
# creates against the machine's CPUs", is made with it.
#
#   scripts/bench-cpu-floor.sh [--rounds 3] [--procs 4] [--secs 8]
#                              [--replicas 3] [--target 0.8]
#                              [--disk-dir /var/tmp] [--out DIR]
#
# Run as root (the ceiling's mount needs it).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3
procs=4
secs=8
replicas=3
target=0.8
disk_dir=/var/tmp
out=/tmp/weft-bench-cpu-floor
usage="usage: bench-cpu-floor.sh [--rounds N] [--procs N] [--secs S] [--replicas R] [--target F] [--disk-dir DIR] [--out DIR]"
while [ $# -gt 0 ]; do
	case "$1" in
	--rounds) rounds=$2; shift 2 ;;
	--procs) procs=$2; shift 2 ;;
	--secs) secs=$2; shift 2 ;;
	--replicas) replicas=$2; shift 2 ;;
	--target) target=$2; shift 2 ;;
	--disk-dir) disk_dir=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	*) echo "$usage" >&2; exit 2 ;;
	esac
done
command -v python3 >/dev/null || { echo "bench-cpu-floor: python3 is needed" >&2; exit 1; }
case $procs in
1 | 4 | 16) ;; # the caller counts BenchmarkRoundTrip/bare=N runs
*) echo "bench-cpu-floor: --procs must be 1, 4 or 16 (BenchmarkRoundTrip's caller counts)" >&2; exit 2 ;;
esac

rm -rf "$out"
mkdir -p "$out"
tmp=$(mktemp -d /dev/shm/weft-cpu-floor.XXXXXX)
mnt=$out/mnt
cm_pid=
cleanup() {
	if [ -n "$cm_pid" ]; then
		kill -TERM "$cm_pid" 2>/dev/null || true
	fi
	if mountpoint -q "$mnt" 2>/dev/null; then
		fusermount3 -u -z "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
	fi
	if [ -n "$cm_pid" ]; then
		wait "$cm_pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT

echo "== floors from the Go benchmarks" >&2
go build -o "$out/ceilingmount" ./internal/tools/ceilingmount
go test -run '^$' -bench "RoundTrip/^bare=$procs\$" -benchtime 20000x -count 3 ./transport >"$out/rtt.txt"
go test -run '^$' -bench 'ApplyCreate/wal=false$|ApplyUnlink$' -benchtime 20000x -count 3 ./meta >"$out/apply.txt"
# The least of the runs (a floor): a round trip's CPU on both sides, an
# apply's.
rtt=$(awk '/^BenchmarkRoundTrip/ {c=0; k=0; for (i=1;i<NF;i++) if ($(i+1) ~ /cpu-µs\/call/) {c+=$i; k++}; if (k==2 && (m=="" || c<m)) m=c} END {print m}' "$out/rtt.txt")
apply_create=$(awk '/^BenchmarkApplyCreate/ {for (i=1;i<NF;i++) if ($(i+1)=="cpu-µs/op" && (m=="" || $i<m)) m=$i} END {print m}' "$out/apply.txt")
apply_unlink=$(awk '/^BenchmarkApplyUnlink/ {for (i=1;i<NF;i++) if ($(i+1)=="cpu-µs/op" && (m=="" || $i<m)) m=$i} END {print m}' "$out/apply.txt")
go build -o "$out/syncfloor" ./internal/tools/syncfloor
"$out/syncfloor" durable "$disk_dir" --n 2000 >"$out/durable.jsonl"
durable=$(python3 -c '
import json, sys
print(min(json.loads(l)["cpu_us"] for l in open(sys.argv[1]) if json.loads(l)["what"] != "fdatasync-nothing-dirty"))' "$out/durable.jsonl")
[ -n "$rtt" ] && [ -n "$apply_create" ] && [ -n "$apply_unlink" ] || { echo "bench-cpu-floor: a benchmark gave no figure (see $out/*.txt)" >&2; exit 1; }
echo "  round trip ($procs callers, both sides) $rtt µs, apply create $apply_create µs, apply unlink $apply_unlink µs, durable write $durable µs" >&2

machine() { awk '/^cpu /{print $5+$6, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }

# phase SYSTEM ROUND NAME DIR [ARGS]: run `metaload.py NAME D ARGS` in a
# directory D of DIR per process (NAME create or unlink), then record the phase's rate, idle fraction and
# machine CPU per operation.
phase() {
	local sys=$1 round=$2 name=$3 dir=$4 i0 m0 i1 m1 t0 t1 lp="" i
	read -r i0 m0 < <(machine)
	t0=$(date +%s.%N)
	for i in $(seq "$procs"); do
		# shellcheck disable=SC2086 # metaload.py's arguments
		python3 scripts/metaload.py "$name" "$dir/d$i" ${5:-} >"$out/$name.$i" &
		lp="$lp $!"
	done
	for i in $lp; do
		wait "$i" || { echo "bench-cpu-floor: a $name process on $sys failed" >&2; exit 1; }
	done
	t1=$(date +%s.%N)
	read -r i1 m1 < <(machine)
	python3 - "$sys" "$round" "$name" "$t0" "$t1" "$i0" "$m0" "$i1" "$m1" "$(getconf CLK_TCK)" "$out" "$procs" >>"$out/results.jsonl" <<'PY'
import json, sys
sysname, rnd, name, t0, t1, i0, m0, i1, m1, hz, out, procs = sys.argv[1:]
n = sum(int(open(f"{out}/{name}.{i}").read()) for i in range(1, int(procs) + 1))
busy = (int(m1) - int(m0)) - (int(i1) - int(i0))
print(json.dumps({"system": sysname, "round": int(rnd), "phase": name, "ops": n,
                  "rate": n / (float(t1) - float(t0)),
                  "idle": (int(i1) - int(i0)) / (int(m1) - int(m0)),
                  "machine_us": busy * 1e6 / int(hz) / n}))
PY
	tail -1 "$out/results.jsonl" | python3 -c '
import json, sys
r = json.load(sys.stdin)
print("  %s %s: %s/s, idle %.2f, machine %.0f µs/op" % (r["system"], r["phase"], format(round(r["rate"]), ","), r["idle"], r["machine_us"]))' >&2
}

for round in $(seq "$rounds"); do
	echo "== round $round (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
	mkdir -p "$tmp/data" "$mnt"
	GOMAXPROCS=${CEILING_PROCS:-8} "$out/ceilingmount" "$tmp/data" "$mnt" >"$out/ceiling.log" 2>&1 &
	cm_pid=$!
	for _ in $(seq 100); do
		mountpoint -q "$mnt" && break
		sleep 0.1
	done
	mountpoint -q "$mnt" || { echo "bench-cpu-floor: the ceiling did not mount (see $out/ceiling.log)" >&2; exit 1; }
	phase ceiling "$round" create "$mnt" "$secs"
	phase ceiling "$round" unlink "$mnt"
	kill -TERM "$cm_pid" 2>/dev/null || true
	fusermount3 -u -z "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
	wait "$cm_pid" 2>/dev/null || true
	cm_pid=
	rm -rf "$tmp/data"
	mkdir -p "$tmp/direct"
	# As many files as the ceiling's processes made (tmpfs makes hundreds
	# of thousands a second: --secs would fill its inodes).
	phase tmpfs "$round" create "$tmp/direct" "600 $(cat "$out/create.1")"
	phase tmpfs "$round" unlink "$tmp/direct"
	rm -rf "$tmp/direct"
done

python3 - "$out/results.jsonl" "$rtt" "$apply_create" "$apply_unlink" "$durable" "$procs" "$replicas" "$target" "$(nproc)" <<'PY'
import json, statistics, sys
path, rtt, ac, au, dw, procs, reps, target, cpus = sys.argv[1:]
rtt, ac, au, dw, procs, reps, target, cpus = float(rtt), float(ac), float(au), float(dw), int(procs), int(reps), float(target), int(cpus)
rs = [json.loads(l) for l in open(path)]
def med(sysname, phase, key):
    return statistics.median(r[key] for r in rs if r["system"] == sysname and r["phase"] == phase)
print(f"\nmedians of the rounds; floors: round trip {rtt:.1f} µs ({procs} callers), apply create {ac:.1f}, unlink {au:.1f}, durable write {dw:.1f}\n")
print("| phase | ceiling ops/s | ceiling idle | ceiling µs/op | tmpfs µs/op | weft floor µs/op (replicas) | CPUs the floor needs at %.1f of the ceiling | of |" % target)
print("|---|---|---|---|---|---|---|---|")
for phase, apply in (("create", ac), ("unlink", au)):
    rate, idle = med("ceiling", phase, "rate"), med("ceiling", phase, "idle")
    c, t = med("ceiling", phase, "machine_us"), med("tmpfs", phase, "machine_us")
    for r in sorted({1, reps}):
        floor = c - t + r * (rtt / procs + apply) + (r // 2 + 1) * dw / procs
        need = target * rate * floor / 1e6
        print(f"| {phase} | {rate:,.0f} | {idle:.2f} | {c:.0f} | {t:.0f} | {floor:.0f} ({r}) | {need:.2f} | {cpus} |")
PY
