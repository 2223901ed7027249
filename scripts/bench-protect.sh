#!/usr/bin/env bash
# Data protection's cost, measured in one run beside RAID-0 on one cluster
# (issue 9's benchmark targets; docs/performance.md, "Mirror 2 and EC 4+2
# beside RAID-0"). Each round starts a fresh `weft up` with 6 storage
# servers and 12 targets (two per server), makes three directories with
# the same data width of 4 columns and 1 MiB units:
#
#   raid0   setstripe --raid0 -c 4          4 objects
#   mirror  setstripe --mirror 2 -c 4       4 stripes x 2 copies = 8 objects
#           (placement never puts two objects of a file on one target and
#           takes its copy pairs greedily in rank order: with 8 targets on
#           6 servers the last two free targets can share a server, and the
#           file gets 3 stripes; with two targets on each server 4 always fit)
#   ec      setstripe --ec 4+2 -c 1         4 data + 2 parity shards on the
#           6 servers
#
# It checks that every file got its 4 data columns before measuring it.
# and measures, with direct I/O (internal/tools/iobench), in a rotating
# order of layouts: sequential 1 MiB writes of --size (page cache dropped
# before, fsync before the clock stops), page cache dropped, sequential 1 MiB reads, and --jobs
# concurrent 4 KiB random readers for --rand-time. Then it SIGKILLs the
# storage server holding the EC file's first data shard (it also holds one
# or two of the mirror file's copies), waits until it is gone, drops the
# page cache and reads the mirror and EC files again (degraded). The
# cluster is stopped and removed after each round. It prints every
# figure's median over the rounds and its ratio to RAID-0's (degraded
# reads against RAID-0's healthy read), and the CPU time the cluster's
# processes (metadata, storage, mount) spent per GiB moved (per 100,000
# random reads): on a shared machine that figure moves less with the load
# than the rates do.
#
#   scripts/bench-protect.sh [--rounds 3] [--size 2GiB] [--jobs 4]
#                            [--rand-time 10s] [--out DIR]
#                            [--base-port 7800] [--up "ARGS"]
#
# --up passes more arguments to weft up (e.g. --pprof-port 7870). Run as
# root (dropping the page cache needs it; without it the reads are marked).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3
size=2GiB
jobs=4
rand_time=10s
out=/tmp/weft-bench-protect
base_port=7800
up_extra=
while [ $# -gt 0 ]; do
	case "$1" in
	--rounds) rounds=$2; shift 2 ;;
	--size) size=$2; shift 2 ;;
	--jobs) jobs=$2; shift 2 ;;
	--rand-time) rand_time=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--base-port) base_port=$2; shift 2 ;;
	--up) up_extra=$2; shift 2 ;;
	*) echo "usage: bench-protect.sh [--rounds N] [--size SIZE] [--jobs N] [--rand-time DUR] [--out DIR] [--base-port P] [--up ARGS]" >&2; exit 2 ;;
	esac
done

rm -rf "$out"
mkdir -p "$out"
go build -o "$out/weft" ./cmd/weft
go build -o "$out/iobench" ./internal/tools/iobench
weft=$out/weft
mnt=$out/mnt
data=$out/data
results=$out/results.jsonl
: >"$results"

up_pid=
stop_up() {
	if [ -n "$up_pid" ] && kill -0 "$up_pid" 2>/dev/null; then
		kill -TERM "$up_pid"
		wait "$up_pid" || true
	fi
	up_pid=
	if grep -qs " $mnt fuse" /proc/mounts; then
		fusermount3 -u -z "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
	fi
}
trap 'stop_up' EXIT

# wait_for WHAT SECONDS CMD...: run CMD every 0.2 s until it succeeds; fail
# after SECONDS (only against hangs: a slow machine just takes longer).
wait_for() {
	local what=$1 secs=$2
	shift 2
	local deadline=$((SECONDS + secs))
	until "$@"; do
		if [ $SECONDS -ge $deadline ]; then
			echo "bench-protect: gave up waiting for $what" >&2
			return 1
		fi
		sleep 0.2
	done
}

drop_caches() {
	sync
	if [ -w /proc/sys/vm/drop_caches ]; then
		echo 3 >/proc/sys/vm/drop_caches
		cached=1
	else
		cached=0
	fi
}

# cluster_pids: the processes of this round's cluster (their command lines
# name $data), read once after weft up is up, while nothing is blocked in
# FUSE; cpu_ticks reads only their /proc/PID/stat from then on.
cluster_pids() {
	local p
	for p in /proc/[0-9]*; do
		[ "$(cat "$p/comm" 2>/dev/null)" = weft ] || continue
		if tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -q -- " --[a-z]* $data/"; then
			basename "$p"
		fi
	done
}

# cpu_ticks: user+system clock ticks of the cluster's processes so far (a
# process that is gone counts nothing).
cpu_ticks() {
	local p t=0 v
	for p in $pids; do
		v=$(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null) || continue
		t=$((t + ${v:-0}))
	done
	echo "$t"
}

# measure ROUND LAYOUT PHASE IOBENCH-ARGS...: run iobench, record its line
# and the CPU time the cluster's processes spent meanwhile.
measure() {
	local r=$1 l=$2 phase=$3 j t0 t1
	shift 3
	t0=$(cpu_ticks)
	j=$("$out/iobench" "$@")
	t1=$(cpu_ticks)
	j=$(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); r["cpu_s"]=(int(sys.argv[3])-int(sys.argv[2]))/int(sys.argv[4]); print(json.dumps(r))' "$j" "$t0" "$t1" "$(getconf CLK_TCK)")
	record "$r" "$l" "$phase" "$j"
}

# record ROUND LAYOUT PHASE JSON: one line of results.
record() {
	python3 -c 'import json,sys; r=json.loads(sys.argv[4]); r.update(round=int(sys.argv[1]), layout=sys.argv[2], phase=sys.argv[3], dropped=bool(int(sys.argv[5]))); print(json.dumps(r))' \
		"$1" "$2" "$3" "$4" "$cached" >>"$results"
	echo "  $2 $3: $(python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("%.0f MiB/s, %.0f IOPS, cluster CPU %.1f s" % (r["mib_s"], r["iops"], r["cpu_s"]))' "$4")" >&2
}

# pid_listening ADDR: the weft process started with --listen ADDR (found by
# /proc/*/comm first: reading the command line of a process blocked in
# FUSE can hang, and no weft server is).
pid_listening() {
	local p
	for p in /proc/[0-9]*; do
		[ "$(cat "$p/comm" 2>/dev/null)" = weft ] || continue
		if tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -q -- "--listen $1 "; then
			basename "$p"
			return 0
		fi
	done
	return 1
}

gone() { ! kill -0 "$1" 2>/dev/null; }
up_ready() { grep -qs "weft is up" "$out/up-$1.log" || { kill -0 "$up_pid" 2>/dev/null || { cat "$out/up-$1.log" >&2; exit 1; }; false; }; }

layouts=(raid0 mirror ec)
declare -A stripe=([raid0]="--raid0 -c 4" [mirror]="--mirror 2 -c 4" [ec]="--ec 4+2 -c 1")

for r in $(seq "$rounds"); do
	echo "== round $r (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
	rm -rf "$data"
	mkdir -p "$mnt"
	# shellcheck disable=SC2086 # $up_extra is a list of arguments
	"$weft" up --data "$data" --mount "$mnt" --base-port "$base_port" --targets 12 --servers 6 \
		--mirror 1 --meta-replicas 1 --log-level warn $up_extra >"$out/up-$r.log" 2>&1 &
	up_pid=$!
	wait_for "weft up" 300 up_ready "$r"
	pids=$(cluster_pids)
	# Rotate the order each round so no layout always runs first.
	order=("${layouts[@]:$(((r - 1) % 3))}" "${layouts[@]:0:$(((r - 1) % 3))}")
	for l in "${layouts[@]}"; do
		mkdir "$mnt/$l"
		# shellcheck disable=SC2086 # ${stripe[$l]} is a list of arguments
		"$weft" setstripe ${stripe[$l]} -S 1MiB "$mnt/$l"
	done
	for l in "${order[@]}"; do
		# Each write starts with nothing dirty and the same free memory:
		# else the first writer of a round (its page cache empty) ran up
		# to twice as fast as the others.
		drop_caches
		measure "$r" "$l" write write "$mnt/$l/f" --size "$size"
		"$weft" getstripe --json "$mnt/$l/f" >"$out/layout-$l-$r.json"
		python3 -c '
import json, sys
l = json.load(open(sys.argv[1]))
cols = l["stripe_count"] * (l["ec_k"] if l["kind"] == "ec" else 1)
if cols != 4:
    sys.exit("bench-protect: %s has %d data columns, not 4: %s" % (l["path"], cols, l))' "$out/layout-$l-$r.json"
	done
	for l in "${order[@]}"; do
		drop_caches
		measure "$r" "$l" read read "$mnt/$l/f"
	done
	for l in "${order[@]}"; do
		drop_caches
		measure "$r" "$l" randread randread "$mnt/$l/f" --jobs "$jobs" --time "$rand_time"
	done
	# Degraded: kill the server of the EC file's first data shard.
	victim=$(python3 -c '
import json, sys
ec = json.load(open(sys.argv[1]))
df = json.load(open(sys.argv[2]))
t = ec["stripes"][0]["targets"][0]
print(next(x["addr"] for x in df["targets"] if x["id"] == t))' "$out/layout-ec-$r.json" <("$weft" df --json "$mnt"))
	pid=$(pid_listening "$victim")
	echo "  killing the storage server at $victim (pid $pid)" >&2
	kill -KILL "$pid"
	wait_for "storage server $pid to exit" 60 gone "$pid"
	for l in "${order[@]}"; do
		[ "$l" = raid0 ] && continue
		drop_caches
		measure "$r" "$l" degraded read "$mnt/$l/f"
	done
	stop_up
	rm -rf "$data"
done

python3 - "$results" "$rounds" "$size" "$jobs" <<'PY'
import json, statistics, sys
path, rounds, size, jobs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
rows = [json.loads(l) for l in open(path)]
def vals(layout, phase, key):
    return [r[key] for r in rows if r["layout"] == layout and r["phase"] == phase]
print(f"medians of {rounds} rounds; {size} per file, 1 MiB requests, {jobs} random readers of 4 KiB, direct I/O")
if not all(r["dropped"] for r in rows):
    print("(page cache NOT dropped before reads: not root)")
print()
print("| layout | figure | median | of RAID-0 | rounds | cluster CPU-s per GiB (random: per 100k reads) |")
print("|---|---|---|---|---|---|")
phases = [("write", "mib_s", "seq write MiB/s"), ("read", "mib_s", "seq read MiB/s"),
          ("randread", "iops", "4 KiB random read IOPS"), ("degraded", "mib_s", "degraded seq read MiB/s")]
for layout in ["raid0", "mirror", "ec"]:
    for phase, key, name in phases:
        v = vals(layout, phase, key)
        if not v:
            continue
        base = vals("raid0", "read" if phase == "degraded" else phase, key)
        m = statistics.median(v)
        ratio = "" if layout == "raid0" else f"{100 * m / statistics.median(base):.0f} %"
        per = [r["cpu_s"] / (r["bytes"] / 2**30 if key == "mib_s" else r["ops"] / 1e5)
               for r in rows if r["layout"] == layout and r["phase"] == phase]
        print(f"| {layout} | {name} | {m:,.0f} | {ratio} | {', '.join(f'{x:,.0f}' for x in v)} | {statistics.median(per):.2f} |")
PY
