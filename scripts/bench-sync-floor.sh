#!/usr/bin/env bash
# What the durability contract leaves for one process's creates and
# deletes (issue 12's mdtest-easy lines), measured in one run: the FUSE
# ceiling (go-fuse loopback over tmpfs, internal/tools/ceilingmount) and
# its tmpfs directly, creating and unlinking files from one process, and
# the fastest durable small write of the disk weft keeps its metadata on
# (internal/tools/syncfloor). With one process each create waits for its
# reply before the next starts, and weft may reply only once the create is
# on disk (README "Durability"; issue 8: on a majority of members, whose
# writes can at best run side by side), so one create takes at least the
# ceiling's FUSE round trips (the ceiling's time less its tmpfs work) plus
# one durable write. The script prints that bound as a fraction of the
# ceiling's rate, beside weft's own (a default `weft up`, unless
# --no-weft), medians of --rounds. docs/performance.md, "One process's
# creates against the durability floor", is made with it.
#
# It also runs mdtest-hard's write and delete (syncfloor shared: files of
# 3,901 bytes created, then unlinked, in one shared directory) with 1 and
# 4 processes on each system. In one directory the kernel holds the
# directory's lock through every create's lookup and create and through
# every unlink, whatever the file system and however many processes, and
# weft may answer them only once they are durable: so the creates, and
# the unlinks, of one directory follow one another at best at the
# ceiling's FUSE part of that call (its time with one process less
# tmpfs's) plus one durable write each, and with replicated metadata
# (issue 8: acknowledged once on disk on a majority) plus at least one
# round trip to another member (the least p50 of a bare TCP echo between
# two processes here, transport BenchmarkRoundTrip/bare=1, three runs).
# The script prints those bounds against the ceiling's rates
# ("mdtest-hard create and delete against the directory's lock",
# docs/performance.md).
#
#   scripts/bench-sync-floor.sh [--rounds 3] [--files 5000] [--writes 2000]
#                               [--disk-dir /var/tmp] [--base-port 7850]
#                               [--no-weft] [--out DIR]
#                               [--ceiling-gomaxprocs 8]
#
# The ceiling runs with GOMAXPROCS=8 (--ceiling-gomaxprocs), its best
# setting here and the weft mount's (bench-cpu-floor.sh).
#
# --disk-dir must be on the disk weft's data goes on (weft up --data puts
# it under --out, so the default --out and --disk-dir should share a disk).
# Run as root (the mounts need it).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3
files=5000
writes=2000
disk_dir=/var/tmp
base_port=7850
with_weft=1
out=/tmp/weft-bench-sync-floor
ceiling_gomaxprocs=8
while [ $# -gt 0 ]; do
	case "$1" in
	--rounds) rounds=$2; shift 2 ;;
	--files) files=$2; shift 2 ;;
	--writes) writes=$2; shift 2 ;;
	--disk-dir) disk_dir=$2; shift 2 ;;
	--base-port) base_port=$2; shift 2 ;;
	--no-weft) with_weft=0; shift ;;
	--out) out=$2; shift 2 ;;
	--ceiling-gomaxprocs) ceiling_gomaxprocs=$2; shift 2 ;;
	*) echo "usage: bench-sync-floor.sh [--rounds N] [--files N] [--writes N] [--disk-dir DIR] [--base-port P] [--no-weft] [--out DIR] [--ceiling-gomaxprocs N]" >&2; exit 2 ;;
	esac
done

rm -rf "$out"
mkdir -p "$out/ceiling-mnt" "$out/weft-mnt"
go build -o "$out/" ./cmd/weft ./internal/tools/ceilingmount ./internal/tools/syncfloor
tmpfs=$(mktemp -d /dev/shm/weft-sync-floor.XXXXXX)

ceiling_pid= up_pid=
cleanup() {
	if [ -n "$up_pid" ] && kill -0 "$up_pid" 2>/dev/null; then
		kill -TERM "$up_pid"
		wait "$up_pid" || true
	fi
	if [ -n "$ceiling_pid" ] && kill -0 "$ceiling_pid" 2>/dev/null; then
		kill -TERM "$ceiling_pid"
		wait "$ceiling_pid" || true
	fi
	umount -l "$out/ceiling-mnt" 2>/dev/null || true
	umount -l "$out/weft-mnt" 2>/dev/null || true
	rm -rf "$tmpfs"
}
trap cleanup EXIT

# shellcheck source=lib/bench.sh
. scripts/lib/bench.sh

GOMAXPROCS=$ceiling_gomaxprocs "$out/ceilingmount" "$tmpfs" "$out/ceiling-mnt" >"$out/ceiling.log" 2>&1 &
ceiling_pid=$!
wait_for bench-sync-floor "the ceiling mount" "$out/ceiling.log" mounted "$ceiling_pid"
if [ "$with_weft" = 1 ]; then
	"$out/weft" up --data "$out/weft-data" --mount "$out/weft-mnt" --base-port "$base_port" --log-level warn >"$out/up.log" 2>&1 &
	up_pid=$!
	wait_up bench-sync-floor "$out/up.log" "$up_pid"
fi

for r in $(seq "$rounds"); do
	echo "== round $r" >&2
	"$out/syncfloor" durable "$disk_dir" --n "$writes" | sed "s/^/durable $r /" >>"$out/results"
	"$out/syncfloor" namespace "$out/ceiling-mnt" --n "$files" | sed "s/^/ceiling $r /" >>"$out/results"
	"$out/syncfloor" namespace "$tmpfs" --n "$files" | sed "s/^/tmpfs $r /" >>"$out/results"
	if [ "$with_weft" = 1 ]; then
		"$out/syncfloor" namespace "$out/weft-mnt" --n "$files" | sed "s/^/weft $r /" >>"$out/results"
	fi
	for procs in 1 4; do
		"$out/syncfloor" shared "$out/ceiling-mnt" --n "$files" --procs "$procs" | sed "s/^/ceiling $r /" >>"$out/results"
		"$out/syncfloor" shared "$tmpfs" --n "$files" --procs "$procs" | sed "s/^/tmpfs $r /" >>"$out/results"
		if [ "$with_weft" = 1 ]; then
			"$out/syncfloor" shared "$out/weft-mnt" --n "$files" --procs "$procs" | sed "s/^/weft $r /" >>"$out/results"
		fi
	done
done

go test -run '^$' -bench 'RoundTrip/^bare=1$' -benchtime 20000x -count 3 ./transport >"$out/rtt.txt"
rtt=$(awk '/^BenchmarkRoundTrip/ {for (i=1;i<NF;i++) if ($(i+1) == "p50-µs" && (m=="" || $i<m)) m=$i} END {print m}' "$out/rtt.txt")
[ -n "$rtt" ] || { cat "$out/rtt.txt" >&2; echo "bench-sync-floor: no round trip measured" >&2; exit 1; }

python3 - "$out/results" "$rtt" <<'PY'
import json, statistics, sys
rows = {}
shared = {}  # (system, phase, procs) -> [(files/s, µs of the locked call)]
for line in open(sys.argv[1]):
    system, rnd, js = line.split(" ", 2)
    f = json.loads(js)
    if "procs" in f:
        shared.setdefault((system, f["what"], f["procs"]), []).append((f["per_s"], f["locked_call_us"]))
        continue
    # mean time per operation: what a rate is made of
    rows.setdefault((system, f["what"]), []).append(1e6 * f["total_s"] / f["n"])
med = {k: statistics.median(v) for k, v in rows.items()}
print("mean µs per operation (medians of the rounds):")
for (s, w), v in sorted(med.items()):
    print(f"  {s:8} {w:28} {v:8.1f}   runs: " + ", ".join(f"{x:.1f}" for x in rows[(s, w)]))
durable = {w: v for (s, w), v in med.items() if s == "durable" and w != "fdatasync-nothing-dirty"}
best_w, best = min(durable.items(), key=lambda kv: kv[1])
flush = med[("durable", "fdatasync-nothing-dirty")]
print(f"\nfastest durable write: {best_w}, {best:.1f} µs; a cache flush with nothing to write: {flush:.1f} µs")
print("\n| operation | ceiling /s | FUSE part µs | bound with the fastest write /s (÷ ceiling) | bound with a bare flush (÷ ceiling) | weft /s (÷ ceiling) |")
print("|---|---|---|---|---|---|")
for op in ("create-close", "unlink"):
    c, t = med[("ceiling", op)], med[("tmpfs", op)]
    fuse = c - t
    rate = lambda us: 1e6 / us
    line = f"| {op} | {rate(c):,.0f} | {fuse:.1f} | {rate(fuse + best):,.0f} ({(fuse + t) / (fuse + best):.2f}) | {rate(fuse + flush):,.0f} ({(fuse + t) / (fuse + flush):.2f}) |"
    if ("weft", op) in med:
        w = med[("weft", op)]
        line += f" {rate(w):,.0f} ({c / w:.2f}) |"
    else:
        line += " |"
    print(line)

if shared:
    print("\nmdtest-hard in one directory (syncfloor shared), medians of the rounds:")
    for (s, w, p), v in sorted(shared.items()):
        print(f"  {s:8} {w:12} {p} procs: {statistics.median(x[0] for x in v):9,.0f} files/s, locked call {statistics.median(x[1] for x in v):7.1f} µs   runs: " + ", ".join(f"{x[0]:,.0f}" for x in v))
    rtt = float(sys.argv[2])
    print(f"\nbare round trip between two processes (least p50 of 3 runs): {rtt:.0f} µs")
    print("\n| phase | locked call | ceiling µs (1 proc) | tmpfs µs | FUSE part µs | bound /s: 1e6 ÷ (FUSE part + fastest durable write) (÷ ceiling, 1 / 4 procs) | the same + one round trip (÷ ceiling) | ceiling /s, 1 / 4 procs | weft /s, 1 / 4 procs (÷ ceiling) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for w, call in (("hard-write", "the create's open"), ("hard-delete", "unlink")):
        m = lambda s, p, i: statistics.median(x[i] for x in shared[(s, w, p)])
        fuse = m("ceiling", 1, 1) - m("tmpfs", 1, 1)
        bound, rbound = 1e6 / (fuse + best), 1e6 / (fuse + best + rtt)
        c1, c4 = m("ceiling", 1, 0), m("ceiling", 4, 0)
        line = (f"| {w} | {call} | {m('ceiling', 1, 1):.1f} | {m('tmpfs', 1, 1):.1f} | {fuse:.1f} | {bound:,.0f} ({bound / c1:.2f} / {bound / c4:.2f}) "
                f"| {rbound:,.0f} ({rbound / c1:.2f} / {rbound / c4:.2f}) | {c1:,.0f} / {c4:,.0f} |")
        if ("weft", w, 1) in shared:
            w1, w4 = m("weft", 1, 0), m("weft", 4, 0)
            line += f" {w1:,.0f} / {w4:,.0f} ({w1 / c1:.2f} / {w4 / c4:.2f}) |"
        else:
            line += " |"
        print(line)
PY
