#!/usr/bin/env bash
# A/B comparison of two weft builds on this machine: builds `weft` at two git
# revisions, then alternates `weft up` + `weft bench io500` on each (A, B, A,
# B, ...) so both see the same machine, and prints every phase's median and
# B/A ratio. This is how a change's cost is measured (docs/performance.md):
# the phases of one build are never compared with a run made at another time.
#
#   scripts/bench-ab.sh [--rounds 3] [--procs 4] [--stonewall 10s] [--out DIR]
#                       [--base-port 7470] [--up-a "ARGS"] [--up-b "ARGS"]
#                       [--tags-a TAGS] [--tags-b TAGS] [--fresh-fs SIZE]
#                       REV_A REV_B
#
# REV_A or REV_B may be "." for the working tree (both "." with different
# --up-a/--up-b compares settings, e.g. --up-b --encrypt; or different
# build tags: --tags-b weft_nocheck measures what permission and capability
# checks cost, internal/checks). Each side gets a
# fresh `weft up` (its own data directory, that build's defaults plus its
# --up-* arguments) per round. The sides take turns going first (A then B
# in odd rounds, B then A in even ones): on this machine the first cluster
# of a round wrote small files faster than those after it in a check of
# six builds (mdtest-hard-write by up to a third), so a fixed order
# favours one side (docs/performance.md, "Which cluster runs first").
#
# --fresh-fs SIZE puts each cluster's data on an ext4 file system (with
# its journal) made for it in a SIZE loop file under --out and removed
# after the run. This machine's root file system has no journal, and
# there ext4 makes every file created within minutes of a mass deletion
# cost hundreds of µs (its inode allocator skips recently freed inodes:
# docs/performance.md, "Creates after deletes on this disk"): each
# cluster would pay for the deletions of the one before it.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=3
procs=4
stonewall=10s
out=/tmp/weft-bench-ab
up_a=
up_b=
tags_a=
tags_b=
base_port=7470
fresh_fs=
while [ $# -gt 2 ]; do
	case "$1" in
	--rounds) rounds=$2; shift 2 ;;
	--procs) procs=$2; shift 2 ;;
	--stonewall) stonewall=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--up-a) up_a=$2; shift 2 ;;
	--up-b) up_b=$2; shift 2 ;;
	--base-port) base_port=$2; shift 2 ;;
	--tags-a) tags_a=$2; shift 2 ;;
	--tags-b) tags_b=$2; shift 2 ;;
	--fresh-fs) fresh_fs=$2; shift 2 ;;
	*) echo "bench-ab: unknown argument $1" >&2; exit 2 ;;
	esac
done
[ $# -eq 2 ] || { echo "usage: bench-ab.sh [options] REV_A REV_B" >&2; exit 2; }
rev_a=$1 rev_b=$2

rm -rf "$out"
mkdir -p "$out"

build() { # build REV NAME TAGS: bin/weft of REV into $out/NAME
	if [ "$1" = . ]; then
		go build -tags "$3" -o "$out/$2" ./cmd/weft
		return
	fi
	local src=$out/src-$2
	git worktree add -q --detach "$src" "$1"
	(cd "$src" && go build -tags "$3" -o "$out/$2" ./cmd/weft)
	git worktree remove --force "$src"
}
build "$rev_a" weft-a "$tags_a"
build "$rev_b" weft-b "$tags_b"

up_pid=
stop_up() {
	if [ -n "$up_pid" ] && kill -0 "$up_pid" 2>/dev/null; then
		kill -TERM "$up_pid"
		wait "$up_pid" || true
	fi
	up_pid=
}
fs_dir=$out/fs
loop_dev=
drop_fs() {
	if mountpoint -q "$fs_dir" 2>/dev/null; then
		umount "$fs_dir" || umount -l "$fs_dir" || true
	fi
	if [ -n "$loop_dev" ]; then
		losetup -d "$loop_dev" || true
		loop_dev=
	fi
	rm -f "$out/fs.img"
}
make_fs() { # a fresh journaled ext4 at $fs_dir
	drop_fs
	truncate -s "$fresh_fs" "$out/fs.img"
	mkfs.ext4 -q -F "$out/fs.img"
	# Direct I/O to the image: no second page cache under the file
	# system's own, so dropping the page cache still sends reads to the
	# disk.
	loop_dev=$(losetup --find --show --direct-io=on "$out/fs.img")
	mkdir -p "$fs_dir"
	mount "$loop_dev" "$fs_dir"
}
trap 'set +e; stop_up; fusermount3 -u -z "$out/mnt" 2>/dev/null; [ -z "$fresh_fs" ] || drop_fs' EXIT

run() { # run SIDE ROUND
	local bin=$out/weft-$1 data=$out/data-$1 log=$out/up-$1-$2.log extra
	if [ "$1" = a ]; then extra=$up_a; else extra=$up_b; fi
	if [ -n "$fresh_fs" ]; then
		make_fs
		data=$fs_dir/data-$1
	fi
	rm -rf "$data"
	mkdir -p "$out/mnt"
	"$bin" up --data "$data" --mount "$out/mnt" --base-port "$base_port" --log-level warn $extra >"$log" 2>&1 &
	up_pid=$!
	for _ in $(seq 240); do
		grep -q "weft is up" "$log" && break
		kill -0 "$up_pid" 2>/dev/null || { cat "$log"; exit 1; }
		sleep 0.5
	done
	grep -q "weft is up" "$log" || { echo "bench-ab: weft up ($1) did not come up"; cat "$log"; exit 1; }
	echo "== round $2: $1" >&2
	"$bin" bench io500 --procs "$procs" --stonewall "$stonewall" --max-data 4GiB --max-files 100000 --direct \
		--json "$out/$1-$2.json" "$out/mnt" >"$out/$1-$2.txt"
	stop_up
	rm -rf "$data"
	[ -z "$fresh_fs" ] || drop_fs
}

for r in $(seq "$rounds"); do
	if [ $((r % 2)) -eq 1 ]; then
		run a "$r"
		run b "$r"
	else
		run b "$r"
		run a "$r"
	fi
done

python3 - "$out" "$rounds" "$rev_a${tags_a:+ -tags $tags_a} $up_a" "$rev_b${tags_b:+ -tags $tags_b} $up_b" <<'PY'
import json, statistics, sys
out, rounds, ra, rb = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
phases = ["ior-easy-write", "ior-easy-read", "ior-hard-write", "ior-hard-read", "ior-rnd4K-easy-read",
          "mdtest-easy-write", "mdtest-easy-stat", "mdtest-easy-delete", "mdtest-hard-write",
          "mdtest-hard-stat", "mdtest-hard-read", "mdtest-hard-delete", "find"]
runs = {s: [json.load(open(f"{out}/{s}-{r}.json")) for r in range(1, rounds + 1)] for s in "ab"}
print(f"A = {ra}, B = {rb}; medians of {rounds} interleaved runs\n")
print("| phase | unit | A | B | B / A | A runs | B runs |")
print("|---|---|---|---|---|---|---|")
for p in phases:
    vals = {s: [x["phases"][p]["value"] for x in runs[s] if p in x["phases"]] for s in "ab"}
    if not vals["a"] or not vals["b"]:
        continue
    unit = runs["a"][0]["phases"][p].get("unit", "")
    ma, mb = statistics.median(vals["a"]), statistics.median(vals["b"])
    fmt = lambda v: ", ".join(f"{x:.3f}" for x in v)
    print(f"| {p} | {unit} | {ma:.3f} | {mb:.3f} | {100*mb/ma:.1f} % | {fmt(vals['a'])} | {fmt(vals['b'])} |")
PY
