#!/usr/bin/env bash
# One process's creates and unlinks in one directory, each timed: what one
# replicated mutation costs when nothing else waits (mdtest-hard's create
# and delete run at this pace: the kernel serializes a directory's creates
# and unlinks). For each setup, a fresh `weft up`, then one python process
# creates --files empty files with O_CREAT|O_EXCL, waits a second and
# unlinks them, timing each `open` and `unlink`. Setups run in turn, round
# after round; it prints each run's p50 and p90 and each setup's medians
# of the p50s. docs/performance.md, "Where a replicated mutation waits",
# is made with it.
#
#   scripts/bench-meta-latency.sh [--rounds 2] [--files 1500]
#                                 [--base-port 7800] [--out DIR]
#                                 SETUP [SETUP...]
#
# SETUP is LABEL=BIN[:WEFT-UP-ARGS], for example
#   r1=/tmp/weft:--meta-replicas 1 --mirror 1
#   r3=/tmp/weft:--meta-replicas 3 --mirror 1
# BIN "." builds this tree's weft. Run as root (weft up mounts).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=2
files=1500
base_port=7800
out=/tmp/weft-bench-meta-latency
usage="usage: bench-meta-latency.sh [--rounds N] [--files N] [--base-port P] [--out DIR] LABEL=BIN[:UP-ARGS]..."
while [ $# -gt 0 ]; do
	case "$1" in
	--rounds) rounds=$2; shift 2 ;;
	--files) files=$2; shift 2 ;;
	--base-port) base_port=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--*) echo "$usage" >&2; exit 2 ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
# shellcheck source=lib/bench.sh
. scripts/lib/bench.sh
begin_setups bench-meta-latency "$out" "$@"

for r in $(seq "$rounds"); do
	for k in "${!labels[@]}"; do
		run=$out/run
		# shellcheck disable=SC2086 # the setup's weft up arguments
		start_up bench-meta-latency "${bins[$k]}" "$run" "$base_port" ${args[$k]}
		mkdir "$run/mnt/d"
		python3 - "$run/mnt/d" "$files" "${labels[$k]}" "$r" >>"$out/results.jsonl" <<'PY'
import json, os, sys, time
d, n, label, rnd = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
create, unlink = [], []
for i in range(n):
    t = time.perf_counter()
    fd = os.open(f"{d}/f{i}", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
    create.append(time.perf_counter() - t)
    os.close(fd)
time.sleep(1)
for i in range(n):
    t = time.perf_counter()
    os.unlink(f"{d}/f{i}")
    unlink.append(time.perf_counter() - t)
pct = lambda v, p: sorted(v)[len(v) * p // 100] * 1e6
print(json.dumps({"setup": label, "round": rnd, "create_p50": pct(create, 50), "create_p90": pct(create, 90),
                  "unlink_p50": pct(unlink, 50), "unlink_p90": pct(unlink, 90)}))
PY
		tail -1 "$out/results.jsonl" | python3 -c '
import json, sys
r = json.load(sys.stdin)
print("  %s round %d: create p50 %.0f p90 %.0f µs, unlink p50 %.0f p90 %.0f µs" % (r["setup"], r["round"], r["create_p50"], r["create_p90"], r["unlink_p50"], r["unlink_p90"]))' >&2
		stop_up
	done
done

python3 - "$out/results.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("\n| setup | create p50 µs (runs) | unlink p50 µs (runs) |")
print("|---|---|---|")
for s in dict.fromkeys(r["setup"] for r in rows):
    rs = [r for r in rows if r["setup"] == s]
    f = lambda k: "%.0f (%s)" % (statistics.median(r[k] for r in rs), ", ".join("%.0f" % r[k] for r in rs))
    print("| %s | %s | %s |" % (s, f("create_p50"), f("unlink_p50")))
PY
