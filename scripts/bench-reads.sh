#!/usr/bin/env bash
# Reads (issue 12), measured side by side in one run: the local disk, the
# FUSE ceiling (go-fuse loopback over tmpfs, passthrough off:
# internal/tools/ceilingmount), the same loopback over a directory on the
# disk ("ceilingdisk": the thinnest FUSE file system on this disk, so the
# most any FUSE file system reads from it; run with GOMAXPROCS=8, as the
# weft mount runs, its best setting here) and weft on the default cluster of `weft up`
# (3 metadata replicas, 3 storage servers, 4 targets, mirror 2; data on
# the same disk as the local-disk run). docs/performance.md, "Reads,
# issue 12", is made with it.
#
# For each system and round, with fio (direct I/O, psync):
#   write1   1 job writes f0 (--size, 1 MiB blocks, fsync at the end)
#            (the other jobs' files f1..f3 are then written, not measured)
#   read1    page cache dropped, 1 job reads f0 (1 MiB blocks)
#   read4    page cache dropped, 4 jobs read f0..f3, one file each
#   rand4w   page cache dropped, 4 jobs read 4 KiB at random offsets of
#            f0..f3 (one file each) for --rand-time, right after the
#            system's own writes and sequential reads
# and then, once every system of the round is done with those:
#   rand4    the same random reads side by side: --rand-slices slices of
#            --rand-time / slices each, the systems in turn slice by slice,
#            the page cache dropped before each slice. A burst of writes
#            leaves this disk slower for some seconds whoever reads
#            (docs/performance.md, "Random reads right after writing"),
#            and the systems write different amounts (weft's mirror two
#            copies), so only reads taken in turn compare their read
#            paths under one state of the disk.
# and, for weft and the ceiling, the CPU time (user+system, /proc/PID/stat)
# of the daemons meanwhile: every weft process of the cluster (metadata,
# storage, mount), the ceiling's one process. It prints each figure's
# median over the rounds, weft's ratio to the local disk, and CPU-s per GiB
# read (per 100,000 random reads).
#
#   scripts/bench-reads.sh [--rounds 3] [--size 1GiB] [--rand-time 10s] [--rand-slices 4]
#                          [--out DIR] [--base-port 7800] [--up "ARGS"]
#                          [--systems "disk ceiling ceilingdisk weft"] [--weft BIN]
#                          [--base BIN] [--base-up "ARGS"]
#
# --weft runs a weft binary built elsewhere instead of building this
# tree's. --base BIN adds the system "base": a second cluster of its own
# (base port +25) run by another build (main's, for before and after in
# one run), measured in turn with the others. --base-up passes more
# arguments to the base cluster's weft up (instead of --up's): with --base
# set to this tree's build, `--base-up "--no-local-reads"` compares reads
# with and without short-circuit local reads in one run.
# --up passes more arguments to weft up (e.g. --pprof-port 7830). Run as
# root (dropping the page cache needs it). Needs fio.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3
size=1GiB
rand_time=10s
rand_slices=4
out=/tmp/weft-bench-reads
base_port=7800
up_extra=
systems="disk ceiling ceilingdisk weft"
weft_bin=
base_bin=
base_up=
base_up_set=
while [ $# -gt 0 ]; do
	case "$1" in
	--rounds) rounds=$2; shift 2 ;;
	--size) size=$2; shift 2 ;;
	--rand-time) rand_time=$2; shift 2 ;;
	--rand-slices) rand_slices=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--base-port) base_port=$2; shift 2 ;;
	--up) up_extra=$2; shift 2 ;;
	--systems) systems=$2; shift 2 ;;
	--weft) weft_bin=$(realpath "$2"); shift 2 ;;
	--base) base_bin=$(realpath "$2"); shift 2 ;;
	--base-up) base_up=$2; base_up_set=1; shift 2 ;;
	*) echo "usage: bench-reads.sh [--rounds N] [--size SIZE] [--rand-time DUR] [--rand-slices N] [--out DIR] [--base-port P] [--up ARGS] [--systems LIST] [--weft BIN] [--base BIN] [--base-up ARGS]" >&2; exit 2 ;;
	esac
done
# fio's runtime of one side-by-side slice, in ms.
case $rand_time in
*ms) rand_ms=${rand_time%ms} ;;
*s) rand_ms=$((${rand_time%s} * 1000)) ;;
*m) rand_ms=$((${rand_time%m} * 60000)) ;;
*) rand_ms=$((rand_time * 1000)) ;;
esac
[ "$rand_slices" -ge 1 ] 2>/dev/null || { echo "bench-reads: --rand-slices must be a positive number" >&2; exit 2; }
slice_ms=$((rand_ms / rand_slices))
command -v fio >/dev/null || { echo "bench-reads: fio is needed (apt-get install fio)" >&2; exit 1; }

rm -rf "$out"
mkdir -p "$out"
if [ -n "$weft_bin" ]; then
	cp "$weft_bin" "$out/weft"
else
	go build -o "$out/weft" ./cmd/weft
fi
if [ -n "$base_bin" ]; then
	# Another name than weft's, so that its processes are told apart.
	mkdir -p "$out/base"
	cp "$base_bin" "$out/base/weft"
	systems="$systems base"
fi
go build -o "$out/ceilingmount" ./internal/tools/ceilingmount
weft=$out/weft
results=$out/results.jsonl
: >"$results"
declare -A data=([weft]=$out/data [base]=$out/base-data)
declare -A mnt=([weft]=$out/mnt [base]=$out/base-mnt)
declare -A bin=([weft]=$out/weft [base]=$out/base/weft)
declare -A port=([weft]=$base_port [base]=$((base_port + 25)))
declare -A up_pid=()
declare -A pids=()
disk=$out/disk
cmnt=$out/ceiling-mnt
cdata=$(mktemp -d /dev/shm/weft-bench-reads-XXXXXX)
dmnt=$out/ceilingdisk-mnt
ddata=$out/ceilingdisk-data
mkdir -p "${mnt[weft]}" "${mnt[base]}" "$disk" "$cmnt" "$dmnt" "$ddata"

ceiling_pid=
ceilingdisk_pid=
cleanup() {
	local p
	for p in "${up_pid[@]}"; do
		if kill -0 "$p" 2>/dev/null; then
			kill -TERM "$p"
			wait "$p" || true
		fi
	done
	for p in "$ceiling_pid" "$ceilingdisk_pid"; do
		if [ -n "$p" ] && kill -0 "$p" 2>/dev/null; then
			kill -TERM "$p"
			wait "$p" || true
		fi
	done
	for m in "${mnt[weft]}" "${mnt[base]}" "$cmnt" "$dmnt"; do
		if grep -qs " $m fuse" /proc/mounts; then
			fusermount3 -u -z "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
		fi
	done
	rm -rf "$cdata" "${data[weft]}" "${data[base]}" "$disk" "$ddata"
}
trap cleanup EXIT

wait_for() {
	local what=$1 secs=$2
	shift 2
	local deadline=$((SECONDS + secs))
	until "$@"; do
		if [ $SECONDS -ge $deadline ]; then
			echo "bench-reads: gave up waiting for $what" >&2
			return 1
		fi
		sleep 0.2
	done
}

drop_caches() {
	sync
	echo 3 >/proc/sys/vm/drop_caches
}

# cluster_pids SYSTEM: the cluster's processes, found by /proc/*/comm
# first (reading the command line of a process blocked in FUSE can hang;
# none is yet).
cluster_pids() {
	local p
	for p in /proc/[0-9]*; do
		[ "$(cat "$p/comm" 2>/dev/null)" = weft ] || continue
		if tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -q -- " --[a-z]* ${data[$1]}/"; then
			basename "$p"
		fi
	done
}

# steal_ticks: CPU time the hypervisor took from this machine's CPUs
# (/proc/stat "steal"), in clock ticks. On this VM it follows a burst of
# writes for some seconds, and slows every reader alike.
steal_ticks() {
	awk '/^cpu /{print $9; exit}' /proc/stat
}

cpu_ticks() {
	local p t=0 v
	for p in $1; do
		v=$(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null) || continue
		t=$((t + ${v:-0}))
	done
	echo "$t"
}

up_ready() { grep -qs "weft is up" "$out/up-$1.log" || { kill -0 "${up_pid[$1]}" 2>/dev/null || { cat "$out/up-$1.log" >&2; exit 1; }; false; }; }
ceiling_ready() { grep -qs mounted "$out/$1.log" || { kill -0 "$2" 2>/dev/null || { cat "$out/$1.log" >&2; exit 1; }; false; }; }

for s in $systems; do
	case $s in
	weft | base)
		args=$up_extra
		if [ "$s" = base ] && [ -n "$base_up_set" ]; then
			args=$base_up
		fi
		# shellcheck disable=SC2086 # $args is a list of arguments
		"${bin[$s]}" up --data "${data[$s]}" --mount "${mnt[$s]}" --base-port "${port[$s]}" --log-level warn $args >"$out/up-$s.log" 2>&1 &
		up_pid[$s]=$!
		wait_for "weft up ($s)" 300 up_ready "$s"
		pids[$s]=$(cluster_pids "$s")
		echo "weft up ($s): processes" ${pids[$s]} >&2
		;;
	ceiling)
		"$out/ceilingmount" "$cdata" "$cmnt" >"$out/ceiling.log" 2>&1 &
		ceiling_pid=$!
		wait_for "the ceiling mount" 60 ceiling_ready ceiling "$ceiling_pid"
		;;
	ceilingdisk)
		GOMAXPROCS=8 "$out/ceilingmount" "$ddata" "$dmnt" >"$out/ceilingdisk.log" 2>&1 &
		ceilingdisk_pid=$!
		wait_for "the ceiling mount over the disk" 60 ceiling_ready ceilingdisk "$ceilingdisk_pid"
		;;
	disk) ;;
	*) echo "bench-reads: unknown system $s" >&2; exit 2 ;;
	esac
done

dir_of() {
	case $1 in
	disk) echo "$disk" ;;
	ceiling) echo "$cmnt" ;;
	ceilingdisk) echo "$dmnt" ;;
	*) echo "${mnt[$1]}" ;;
	esac
}
pids_of() {
	case $1 in
	disk) echo "" ;;
	ceiling) echo "$ceiling_pid" ;;
	ceilingdisk) echo "$ceilingdisk_pid" ;;
	*) echo "${pids[$1]}" ;;
	esac
}

# jobs_for DIR N: fio job sections, job i on DIR/f<i>.
jobs_for() {
	local i
	for i in $(seq 0 $(($2 - 1))); do
		echo "--name=j$i" "--filename=$1/f$i"
	done
}

# measure ROUND SYSTEM PHASE FIO-ARGS...: run fio, record its figures and
# the daemons' CPU time meanwhile. Rows of one phase, system and round
# (the slices of rand4) are added up.
measure() {
	local r=$1 s=$2 phase=$3 t0 t1 procs
	shift 3
	procs=$(pids_of "$s")
	t0=$(cpu_ticks "$procs")
	s0=$(steal_ticks)
	fio --output-format=json --group_reporting --ioengine=psync --direct=1 "$@" >"$out/fio-$s-$phase-$r.json"
	t1=$(cpu_ticks "$procs")
	s1=$(steal_ticks)
	python3 - "$out/fio-$s-$phase-$r.json" "$r" "$s" "$phase" "$t0" "$t1" "$(getconf CLK_TCK)" "$((s1 - s0))" >>"$results" <<'PY'
import json, sys
f, r, s, phase, t0, t1, hz, steal = sys.argv[1:]
j = json.load(open(f))["jobs"][0]
d = j["write"] if phase.startswith("write") else j["read"]
print(json.dumps({"round": int(r), "system": s, "phase": phase, "mib_s": d["bw_bytes"] / 2**20,
                  "iops": d["iops"], "bytes": d["io_bytes"], "ops": d["total_ios"], "runtime_ms": d["runtime"],
                  "cpu_s": (int(t1) - int(t0)) / int(hz), "steal_s": int(steal) / int(hz)}))
PY
	tail -1 "$results" | python3 -c 'import json,sys; r=json.load(sys.stdin); print("  %(system)s %(phase)s: %(mib_s).0f MiB/s, %(iops).0f IOPS, daemon CPU %(cpu_s).1f s, CPU stolen by the host %(steal_s).2f s" % r)' >&2
}

read -r -a sys_list <<<"$systems"
n=${#sys_list[@]}
for r in $(seq "$rounds"); do
	echo "== round $r (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
	# Rotate the order each round so no system always runs first.
	order=("${sys_list[@]:$(((r - 1) % n))}" "${sys_list[@]:0:$(((r - 1) % n))}")
	for s in "${order[@]}"; do
		d=$(dir_of "$s")
		rm -f "$d"/f[0-9]
		drop_caches
		# shellcheck disable=SC2046 # jobs_for prints a list of arguments
		measure "$r" "$s" write1 --rw=write --bs=1M --size="$size" --end_fsync=1 $(jobs_for "$d" 1)
		# shellcheck disable=SC2046
		fio --output-format=terse --ioengine=psync --direct=1 --rw=write --bs=1M --size="$size" --end_fsync=1 \
			--name=j1 --filename="$d/f1" --name=j2 --filename="$d/f2" --name=j3 --filename="$d/f3" >/dev/null
		drop_caches
		# shellcheck disable=SC2046
		measure "$r" "$s" read1 --rw=read --bs=1M $(jobs_for "$d" 1)
		drop_caches
		# shellcheck disable=SC2046
		measure "$r" "$s" read4 --rw=read --bs=1M $(jobs_for "$d" 4)
		drop_caches
		# shellcheck disable=SC2046
		measure "$r" "$s" rand4w --rw=randread --bs=4k --time_based --runtime="$rand_time" $(jobs_for "$d" 4)
	done
	for k in $(seq "$rand_slices"); do
		for s in "${order[@]}"; do
			drop_caches
			# shellcheck disable=SC2046
			measure "$r" "$s" rand4 --rw=randread --bs=4k --time_based --runtime="${slice_ms}ms" $(jobs_for "$(dir_of "$s")" 4)
		done
	done
done

python3 - "$results" "$rounds" "$size" <<'PY'
import json, statistics, sys
path, rounds, size = sys.argv[1], int(sys.argv[2]), sys.argv[3]
by_key = {}  # (system, phase, round) -> row; the slices of rand4 add up to one
for l in open(path):
    r = json.loads(l)
    x = by_key.setdefault((r["system"], r["phase"], r["round"]), r)
    if x is not r:
        for k in ("bytes", "ops", "runtime_ms", "cpu_s", "steal_s"):
            x[k] += r[k]
        x["iops"] = x["ops"] / (x["runtime_ms"] / 1000)
        x["mib_s"] = x["bytes"] / 2**20 / (x["runtime_ms"] / 1000)
rows = list(by_key.values())
systems = [s for s in ("disk", "ceiling", "ceilingdisk", "base", "weft") if any(r["system"] == s for r in rows)]
phases = [("write1", "mib_s", "seq write 1 job, MiB/s"), ("read1", "mib_s", "seq read 1 job, MiB/s"),
          ("read4", "mib_s", "seq read 4 jobs, MiB/s"), ("rand4", "iops", "4 KiB random read 4 jobs, side by side, IOPS"),
          ("rand4w", "iops", "the same right after the system's own writes, IOPS")]
def med(s, p, k):
    v = [r[k] for r in rows if r["system"] == s and r["phase"] == p]
    return statistics.median(v) if v else None
print(f"medians of {rounds} rounds; {size} per file, fio direct I/O (psync)\n")
base = "base" in systems
cdisk = "ceilingdisk" in systems
print("| figure | " + " | ".join(systems) + " | weft / disk |" + (" weft / ceilingdisk |" if cdisk else "")
      + " weft daemon CPU-s per GiB (random: per 100k reads) |" + (" base's |" if base else ""))
print("|---|" + "---|" * (len(systems) + 2 + base + cdisk))
for p, k, name in phases:
    vals = [med(s, p, k) for s in systems]
    w, d = med("weft", p, k), med("disk", p, k)
    ratio = f"{w / d:.2f}" if w and d else "-"
    if cdisk:
        c = med("ceilingdisk", p, k)
        ratio += " | " + (f"{w / c:.2f}" if w and c else "-")
    def cpu(s):
        per = [r["cpu_s"] / (r["bytes"] / 2**30 if k == "mib_s" else r["ops"] / 1e5)
               for r in rows if r["system"] == s and r["phase"] == p]
        return f"{statistics.median(per):.2f}" if per else "-"
    print(f"| {name} | " + " | ".join("-" if v is None else f"{v:,.0f}" for v in vals) + f" | {ratio} | {cpu('weft')} |"
          + (f" {cpu('base')} |" if base else ""))
for p in ("rand4", "rand4w"):
    per = []
    for r in range(1, rounds + 1):
        w, c = by_key.get(("weft", p, r)), by_key.get(("ceilingdisk", p, r))
        if w and c:
            per.append(f"{w['iops'] / c['iops']:.2f}")
    steal = "; ".join(s + " " + ", ".join(f"{x['steal_s']:.2f}" for x in rows if x["system"] == s and x["phase"] == p) for s in systems)
    if any(x["phase"] == p for x in rows):
        print(f"\n{p}: weft / ceilingdisk per round " + (", ".join(per) or "-") + f"; CPU-s stolen by the host meanwhile, per round: {steal}")
for s in ("base", "weft"):
    c = [r["cpu_s"] for r in rows if r["system"] == s and r["phase"] == "read4"]
    if c:
        print(f"\n{s} daemon CPU-s during read4 (4 x {size}): " + ", ".join(f"{x:.1f}" for x in c))
PY
