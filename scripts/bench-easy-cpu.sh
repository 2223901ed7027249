#!/usr/bin/env bash
# Issue 12's CPU-per-operation line as the issue measured it: the daemon
# CPU-seconds of an mdtest-easy run with one process (5,000 files: create,
# stat, read, remove; 20,000 operations), against the 11.9 CPU-seconds
# weft 80ed97e spent (../shared/FACTS.md; the line is half of that).
#
# For each setup and round: a fresh `weft up`, then one python process does
# mdtest-easy's file phases in one directory, as mdtest -F -n 5000 does
# (create: open O_CREAT|O_WRONLY and close; stat; read: open O_RDONLY, read,
# close; remove: unlink). Per phase it prints operations per second and
# every weft process's CPU (utime+stime from /proc/PID/stat) per
# operation; per round the daemons' CPU-seconds of the whole run. Setups
# run in turn, the order alternating from round to round, so they see the
# same machine; the summary gives each setup's medians.
#
#   scripts/bench-easy-cpu.sh [--rounds 5] [--files 5000] [--base-port 7800]
#                             [--baseline 11.9] [--out DIR] SETUP [SETUP...]
#
# SETUP is LABEL=BIN[:WEFT-UP-ARGS], as for bench-meta-mount.sh; BIN "."
# builds this tree's weft. Without a SETUP: default=. (the default
# cluster of `weft up`). Run as root (weft up mounts).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=5
files=5000
base_port=7800
baseline=11.9
out=/tmp/weft-bench-easy-cpu
usage="usage: bench-easy-cpu.sh [--rounds N] [--files N] [--base-port P] [--baseline CPU-S] [--out DIR] [LABEL=BIN[:UP-ARGS]...]"
while [ $# -gt 0 ]; do
	case "$1" in
	--rounds) rounds=$2; shift 2 ;;
	--files) files=$2; shift 2 ;;
	--base-port) base_port=$2; shift 2 ;;
	--baseline) baseline=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--*) echo "$usage" >&2; exit 2 ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || set -- default=.
# shellcheck source=lib/bench.sh
. scripts/lib/bench.sh
begin_setups bench-easy-cpu "$out" "$@"

cat >"$out/easy.py" <<'PY'
# easy.py DIR PHASE N: one of mdtest-easy's file phases over N files.
import os, sys
d, phase, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for i in range(n):
    p = f"{d}/file.mdtest.0.{i}"
    if phase == "create":
        os.close(os.open(p, os.O_CREAT | os.O_WRONLY, 0o644))
    elif phase == "stat":
        os.stat(p)
    elif phase == "read":
        fd = os.open(p, os.O_RDONLY)
        os.read(fd, 1)
        os.close(fd)
    else:
        os.unlink(p)
PY

cpu_of() { for p in $pids; do awk '{print $14+$15}' "/proc/$p/stat" 2>/dev/null || echo 0; done | paste -sd' '; }

for r in $(seq "$rounds"); do
	echo "== round $r (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
	order=$(seq 0 $((${#labels[@]} - 1)))
	[ $((r % 2)) -eq 0 ] && order=$(echo "$order" | tac)
	for k in $order; do
		run=$out/run
		# shellcheck disable=SC2086 # the setup's weft up arguments
		start_up bench-easy-cpu "${bins[$k]}" "$run" "$base_port" ${args[$k]}
		mkdir "$run/mnt/easy"
		for phase in create stat read remove; do
			c0=$(cpu_of)
			t0=$(date +%s.%N)
			python3 "$out/easy.py" "$run/mnt/easy" "$phase" "$files"
			t1=$(date +%s.%N)
			c1=$(cpu_of)
			python3 - "${labels[$k]}" "$r" "$phase" "$files" "$t0" "$t1" "$names" "$c0" "$c1" "$(getconf CLK_TCK)" >>"$out/results.jsonl" <<'PY'
import json, sys
label, rnd, phase, n, t0, t1, names, c0, c1, hz = sys.argv[1:]
n, tick = int(n), 1 / int(hz)
per = {p: (int(b) - int(a)) * tick for p, a, b in zip(names.split(), c0.split(), c1.split())}
print(json.dumps({"setup": label, "round": int(rnd), "phase": phase, "ops": n,
                  "rate": n / (float(t1) - float(t0)), "cpu_s": per}))
PY
			tail -1 "$out/results.jsonl" | python3 -c '
import json, sys
r = json.load(sys.stdin)
procs = " ".join("%s %.0f" % (k, v * 1e6 / r["ops"]) for k, v in r["cpu_s"].items() if v * 1e6 / r["ops"] >= 1)
print("  %s %s: %s/s, daemons %.2f CPU-s (µs per op: %s)" % (r["setup"], r["phase"], format(round(r["rate"]), ","), sum(r["cpu_s"].values()), procs))' >&2
		done
		stop_up
		run=
	done
done

python3 - "$out/results.jsonl" "$baseline" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
baseline = float(sys.argv[2])
setups = list(dict.fromkeys(r["setup"] for r in rows))
phases = ["create", "stat", "read", "remove"]
print("\nmedians over rounds: daemon CPU-seconds per phase and in all (the issue's figure: %.1f, the line %.2f)\n" % (baseline, baseline / 2))
print("| setup | " + " | ".join(phases) + " | all phases (runs) | ÷ %.1f |" % baseline)
print("|---|" + "---|" * (len(phases) + 2))
for s in setups:
    rs = [r for r in rows if r["setup"] == s]
    cells = []
    for ph in phases:
        v = [sum(r["cpu_s"].values()) for r in rs if r["phase"] == ph]
        rate = [r["rate"] for r in rs if r["phase"] == ph]
        cells.append("%.2f (%s/s)" % (statistics.median(v), format(round(statistics.median(rate)), ",")))
    totals = [sum(sum(r["cpu_s"].values()) for r in rs if r["round"] == rnd) for rnd in sorted({r["round"] for r in rs})]
    med = statistics.median(totals)
    print("| %s | %s | %.2f (%s) | %.2f |" % (s, " | ".join(cells), med, ", ".join("%.2f" % t for t in totals), med / baseline))
PY
