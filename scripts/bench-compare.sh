#!/usr/bin/env bash
# Runs `weft bench io500` on the local disk, on the FUSE ceiling (go-fuse
# loopback over tmpfs, passthrough off) and on a weft cluster started with
# `weft up` (4 targets, 2 storage servers), with 1 and 4 processes, in one
# session, and prints a table of every phase plus weft's ratio to the
# ceiling. This is how the table in docs/performance.md is made.
#
#   scripts/bench-compare.sh [--stonewall 10s] [--out DIR] [--targets-on-tmpfs] [--direct]
#                            [--max-data 4GiB]
#
# --max-data caps each process's ior-easy data (ior-hard gets half) on
# every system: with a cap every system reaches within the stonewall, all
# read the same amount back (this virtual disk reads faster the less was
# written: 2.2 GiB/s for 2.8 GB against 1.2 GiB/s for 8 GiB).
#
# --direct opens the ior-easy and ior-rnd4K files with O_DIRECT everywhere, so
# no run reads from the kernel's page cache (FACTS.md's ceiling numbers are
# O_DIRECT); without it, weft keeps a file's page cache across unchanged
# opens and the ceiling (go-fuse loopback) does not, which flatters weft's
# re-reads.
#
# By default weft's targets live on the same disk as the local-disk run;
# with --targets-on-tmpfs they live in /dev/shm, like the ceiling's data.
set -euo pipefail
cd "$(dirname "$0")/.."

stonewall=10s
out=/tmp/weft-bench-compare
tmpfs_targets=false
direct=()
max_data=4GiB
while [ $# -gt 0 ]; do
	case "$1" in
	--stonewall) stonewall=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--targets-on-tmpfs) tmpfs_targets=true; shift ;;
	--direct) direct=(--direct); shift ;;
	--max-data) max_data=$2; shift 2 ;;
	*) echo "bench-compare: unknown argument $1" >&2; exit 2 ;;
	esac
done

go build -o bin/weft ./cmd/weft
weft=$PWD/bin/weft
rm -rf "$out"
mkdir -p "$out/disk" "$out/mnt"
data=$out/data
$tmpfs_targets && data=/dev/shm/weft-bench-compare-data
rm -rf "$data"

common=(--stonewall "$stonewall" --max-data "$max_data" --max-files 100000 ${direct[@]+"${direct[@]}"})

up_pid=
cleanup() {
	if [ -n "$up_pid" ] && kill -0 "$up_pid" 2>/dev/null; then
		kill -TERM "$up_pid"
		wait "$up_pid" || true
	fi
	fusermount3 -u -z "$out/mnt" 2>/dev/null || true
	$tmpfs_targets && rm -rf "$data"
	return 0
}
trap cleanup EXIT

"$weft" up --data "$data" --mount "$out/mnt" --base-port 7450 --log-level warn >"$out/up.log" 2>&1 &
up_pid=$!
for _ in $(seq 120); do
	grep -q "weft is up" "$out/up.log" && break
	kill -0 "$up_pid" 2>/dev/null || { cat "$out/up.log"; exit 1; }
	sleep 0.5
done
grep -q "weft is up" "$out/up.log" || { echo "weft up did not come up"; cat "$out/up.log"; exit 1; }

for procs in 1 4; do
	echo "== $procs process(es): local disk" >&2
	"$weft" bench io500 --procs "$procs" "${common[@]}" --json "$out/disk-$procs.json" "$out/disk" >"$out/disk-$procs.txt"
	echo "== $procs process(es): FUSE ceiling" >&2
	"$weft" bench fuse-ceiling --procs "$procs" "${common[@]}" --json "$out/ceiling-$procs.json" >"$out/ceiling-$procs.txt"
	echo "== $procs process(es): weft" >&2
	"$weft" bench io500 --procs "$procs" "${common[@]}" --json "$out/weft-$procs.json" "$out/mnt" >"$out/weft-$procs.txt"
done

python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
phases = ["ior-easy-write", "ior-easy-read", "ior-hard-write", "ior-hard-read", "ior-rnd4K-easy-read",
          "mdtest-easy-write", "mdtest-easy-stat", "mdtest-easy-delete", "mdtest-hard-write",
          "mdtest-hard-stat", "mdtest-hard-read", "mdtest-hard-delete", "find"]
def load(name):
    with open(f"{out}/{name}.json") as f:
        return json.load(f)
for procs in (1, 4):
    r = {k: load(f"{k}-{procs}") for k in ("disk", "ceiling", "weft")}
    print(f"\n{procs} process(es)\n")
    print("| phase | unit | local disk | FUSE ceiling | weft | weft / ceiling |")
    print("|---|---|---|---|---|---|")
    for p in phases:
        v = {k: r[k]["phases"].get(p, {}) for k in r}
        unit = v["weft"].get("unit", "")
        cells = []
        for k in ("disk", "ceiling", "weft"):
            x = v[k].get("value")
            mark = " (c)" if v[k].get("capped") else ""
            cells.append("-" if x is None else f"{x:.3f}{mark}")
        c, w = v["ceiling"].get("value"), v["weft"].get("value")
        ratio = f"{100*w/c:.0f} %" if c and w else "-"
        print(f"| {p} | {unit} | " + " | ".join(cells) + f" | {ratio} |")
    for s in ("bandwidth", "metadata", "total"):
        vals = [r[k]["score"][s] for k in ("disk", "ceiling", "weft")]
        ratio = f"{100*vals[2]/vals[1]:.0f} %" if vals[1] else "-"
        print(f"| score: {s} | | " + " | ".join(f"{x:.3f}" for x in vals) + f" | {ratio} |")
PY
