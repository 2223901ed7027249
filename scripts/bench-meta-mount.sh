#!/usr/bin/env bash
# Creates and unlinks through the mount, and the CPU each process spends on
# them: for each setup, a fresh `weft up`, then --procs python processes
# each create empty files in a directory of their own for --secs seconds
# (os.open O_CREAT, close), then each unlinks its files (one listdir, then
# os.unlink). Per phase it prints operations per second, how idle the
# machine was, the machine's CPU per operation (all of /proc/stat: every
# process and the kernel) and each weft process's (utime+stime from
# /proc/PID/stat), in µs. Setups run in turn, round after round, so they
# see the same machine; the summary gives each setup's medians.
#
#   scripts/bench-meta-mount.sh [--rounds 2] [--procs 4] [--secs 8]
#                               [--base-port 7800] [--out DIR]
#                               SETUP [SETUP...]
#
# SETUP is LABEL=BIN[:WEFT-UP-ARGS], for example
#   r1=/tmp/weft:--meta-replicas 1 --mirror 1
#   r3=/tmp/weft:--meta-replicas 3 --mirror 1
# BIN "." builds this tree's weft. Run as root (weft up mounts). Experiment
# switches read from the environment by a build reach every process weft up
# starts (set them on this script's command line).
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=2
procs=4
secs=8
base_port=7800
out=/tmp/weft-bench-meta-mount
usage="usage: bench-meta-mount.sh [--rounds N] [--procs N] [--secs S] [--base-port P] [--out DIR] LABEL=BIN[:UP-ARGS]..."
while [ $# -gt 0 ]; do
	case "$1" in
	--rounds) rounds=$2; shift 2 ;;
	--procs) procs=$2; shift 2 ;;
	--secs) secs=$2; shift 2 ;;
	--base-port) base_port=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--*) echo "$usage" >&2; exit 2 ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || { echo "$usage" >&2; exit 2; }
# shellcheck source=lib/bench.sh
. scripts/lib/bench.sh
begin_setups bench-meta-mount "$out" "$@"
pids= names=

machine() { awk '/^cpu /{print $5+$6, $2+$3+$4+$5+$6+$7+$8}' /proc/stat; }
# cpu_of: utime+stime (ticks) of each of $pids.
cpu_of() { for p in $pids; do awk '{print $14+$15}' "/proc/$p/stat" 2>/dev/null || echo 0; done | paste -sd' '; }

# phase LABEL ROUND NAME [ARGS]: run `metaload.py NAME DIR ARGS` in every
# process's directory (NAME create or unlink), then print and record the phase's figures (the cluster's
# processes: $pids, named $names).
phase() {
	local label=$1 round=$2 name=$3
	local c0 c1 i0 m0 i1 m1 t0 t1 lp="" i
	c0=$(cpu_of)
	read -r i0 m0 < <(machine)
	t0=$(date +%s.%N)
	for i in $(seq "$procs"); do
		# shellcheck disable=SC2086 # metaload.py's arguments
		python3 scripts/metaload.py "$name" "$run/mnt/d$i" ${4:-} >"$run/$name.$i" &
		lp="$lp $!"
	done
	# shellcheck disable=SC2086 # a list of pids
	wait $lp
	t1=$(date +%s.%N)
	read -r i1 m1 < <(machine)
	c1=$(cpu_of)
	python3 - "$label" "$round" "$name" "$t0" "$t1" "$i0" "$m0" "$i1" "$m1" "$(getconf CLK_TCK)" "$names" "$c0" "$c1" "$run" "$procs" >>"$out/results.jsonl" <<'PY'
import json, sys
label, rnd, name, t0, t1, i0, m0, i1, m1, hz, names, c0, c1, run, procs = sys.argv[1:]
n = sum(int(open(f"{run}/{name}.{i}").read()) for i in range(1, int(procs) + 1))
tick_us = 1e6 / int(hz)
per = {p: (int(b) - int(a)) * tick_us / n for p, a, b in zip(names.split(), c0.split(), c1.split())}
busy = (int(m1) - int(m0)) - (int(i1) - int(i0))
print(json.dumps({"setup": label, "round": int(rnd), "phase": name, "ops": n,
                  "rate": n / (float(t1) - float(t0)),
                  "idle": (int(i1) - int(i0)) / (int(m1) - int(m0)),
                  "machine_us": busy * tick_us / n, "proc_us": per}))
PY
	tail -1 "$out/results.jsonl" | python3 -c '
import json, sys
r = json.load(sys.stdin)
procs = " ".join("%s %.0f" % (k, v) for k, v in r["proc_us"].items() if v >= 1)
print("  %s %s: %s/s, idle %.2f, machine %.0f µs/op; %s" % (r["setup"], r["phase"], format(round(r["rate"]), ","), r["idle"], r["machine_us"], procs))' >&2
}

for r in $(seq "$rounds"); do
	echo "== round $r (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
	for k in "${!labels[@]}"; do
		run=$out/run
		# shellcheck disable=SC2086 # the setup's weft up arguments
		start_up bench-meta-mount "${bins[$k]}" "$run" "$base_port" ${args[$k]}
		phase "${labels[$k]}" "$r" create "$secs"
		sleep 2
		phase "${labels[$k]}" "$r" unlink
		stop_up
	done
done

python3 - "$out/results.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
setups = list(dict.fromkeys(r["setup"] for r in rows))
print("\nmedians over rounds (µs of CPU per operation)\n")
print("| setup | phase | ops/s (runs) | idle | machine µs | weft processes µs |")
print("|---|---|---|---|---|---|")
for s in setups:
    for ph in ("create", "unlink"):
        rs = [r for r in rows if r["setup"] == s and r["phase"] == ph]
        if not rs:
            continue
        keys = list(dict.fromkeys(k for r in rs for k in r["proc_us"]))
        procs = ", ".join(f"{k} {statistics.median(r['proc_us'].get(k, 0) for r in rs):.0f}" for k in keys
                          if statistics.median(r["proc_us"].get(k, 0) for r in rs) >= 1)
        runs = ", ".join(format(round(r["rate"]), ",") for r in rs)
        print("| %s | %s | %s (%s) | %.2f | %.0f | %s |" % (s, ph, format(round(statistics.median(r["rate"] for r in rs)), ","), runs,
              statistics.median(r["idle"] for r in rs), statistics.median(r["machine_us"] for r in rs), procs))
PY
