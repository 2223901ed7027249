#!/usr/bin/env bash
# measure-memory.sh: measure the resident memory of weft's processes
# (docs/performance.md, section "Memory").
#
#   scripts/measure-memory.sh [client|client-small|servers|all]   (default all)
#
#   client        weft up (default --cache-limit 1GiB on the mount), then
#                 weft bench io500 on the mount; the mount's VmRSS is sampled
#                 every 0.5 s and the peak of each phase is printed with the
#                 mount's VmHWM at the end.
#   client-small  the same with the pieces started by hand and the mount
#                 given --cache-limit 256MiB, the smallest allowed (weft up has no flag for it).
#   servers       meta + 2 storage servers (4 targets), no mount; mdload
#                 creates FILES files in DIRS directories through the meta
#                 RPCs and writes one OBJSIZE object for each of the first
#                 OBJECTS files; meta and storage RSS/HWM and the meta
#                 directory's size are printed at 0, 1/4, 1/2, 3/4 and all.
#
# Environment: OUT (default /tmp/mm: binaries, data, mountpoint, logs,
# results), PORT (default 7900), PROCS (4), STONEWALL (10s), FILES
# (1000000), DIRS (1000), OBJECTS (100000), OBJSIZE (4KiB), WORKERS (64);
# GCTRACE=1 runs the client-small mount with GODEBUG=gctrace=1 (Go heap
# sizes at every GC, in OUT/d/logs/mount.log).
# Every process started is stopped on exit, and the mount is checked to be
# gone (lazily unmounted if not).
set -euo pipefail

MODE=${1:-all}
OUT=${OUT:-/tmp/mm}
PORT=${PORT:-7900}
PROCS=${PROCS:-4}
STONEWALL=${STONEWALL:-10s}
FILES=${FILES:-1000000}
DIRS=${DIRS:-1000}
OBJECTS=${OBJECTS:-100000}
OBJSIZE=${OBJSIZE:-4KiB}
WORKERS=${WORKERS:-64}

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$OUT/bin
MNT=$OUT/m
PIDS=() # everything we started, stopped in reverse order on exit

log() { printf 'measure-memory: %s\n' "$*" >&2; }

mounted() { grep -qF " $MNT " /proc/self/mountinfo; }

cleanup() {
	local i
	for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
		kill -TERM "${PIDS[i]}" 2>/dev/null || true
	done
	for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
		wait "${PIDS[i]}" 2>/dev/null || true
	done
	PIDS=()
	local n=0
	while mounted && ((n < 20)); do sleep 0.5; n=$((n + 1)); done
	if mounted; then
		log "mount $MNT still there after stop; detaching it"
		fusermount3 -u -z "$MNT" || true
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

build() {
	mkdir -p "$BIN"
	(cd "$ROOT" && go build -o "$BIN/weft" ./cmd/weft)
	case $MODE in servers | all) (cd "$ROOT" && go build -o "$BIN/mdload" ./internal/tools/mdload) ;; esac
}

# rss PID -> "VmRSS VmHWM" in KiB
rss() { awk '/^VmRSS/{r=$2} /^VmHWM/{h=$2} END{print r, h}' "/proc/$1/status"; }

# sample PID FILE: append "epoch-seconds VmRSS-KiB" every 0.5 s while PID lives.
sample() {
	local pid=$1 file=$2 r
	while r=$(awk '/^VmRSS/{print $2}' "/proc/$pid/status" 2>/dev/null) && [ -n "$r" ]; do
		printf '%s %s\n' "$EPOCHREALTIME" "$r" >>"$file"
		sleep 0.5
	done
}

# stamp: prefix each line of stdin with the epoch time.
stamp() { while IFS= read -r l; do printf '%s %s\n' "$EPOCHREALTIME" "$l"; done; }

listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

targets_up() { # targets_up N: at least N targets of the mount are up
	(($("$BIN/weft" df --json "$MNT" 2>/dev/null | grep -o '"up": *true' | wc -l) >= $1))
}

wait_for() { # wait_for SECONDS CMD...: poll until CMD succeeds
	local t=$1 n=0
	shift
	until "$@"; do
		n=$((n + 1))
		if ((n > t * 5)); then
			log "timed out waiting for: $*"
			return 1
		fi
		sleep 0.2
	done
}

# start_servers DATA: weft meta on PORT and 2 storage servers (4 targets) on PORT+10, +11.
start_servers() {
	local d=$1
	mkdir -p "$d/meta" "$d/logs" "$d"/target-{0,1,2,3}
	[ -d "$d/keys" ] || "$BIN/weft" keygen --out "$d/keys" >/dev/null
	"$BIN/weft" meta --listen "127.0.0.1:$PORT" --data "$d/meta" --keys "$d/keys/meta" >"$d/logs/meta.log" 2>&1 &
	PIDS+=($!)
	META_PID=$!
	local s
	STORAGE_PIDS=()
	for s in 0 1; do
		"$BIN/weft" storage --listen "127.0.0.1:$((PORT + 10 + s))" --meta "127.0.0.1:$PORT" --keys "$d/keys/storage" \
			--target "$d/target-$s" --target "$d/target-$((s + 2))" >"$d/logs/storage-$s.log" 2>&1 &
		PIDS+=($!)
		STORAGE_PIDS+=($!)
	done
}

# run_bench NAME MOUNT_PID: io500 on the mount with the mount's RSS sampled;
# prints the peak RSS per phase and the mount's VmHWM.
run_bench() {
	local name=$1 pid=$2 res=$OUT/results/$1
	mkdir -p "$res"
	rm -f "$res/rss" "$res/bench.err"
	sample "$pid" "$res/rss" &
	local sampler=$!
	"$BIN/weft" bench io500 --procs "$PROCS" --stonewall "$STONEWALL" --json "$res/bench.json" "$MNT" \
		2> >(stamp >"$res/bench.err") | tee "$res/bench.out"
	sleep 1
	read -r _ hwm < <(rss "$pid")
	kill "$sampler" 2>/dev/null || true
	wait "$sampler" 2>/dev/null || true
	echo "== $name: peak VmRSS of the mount per phase (from the previous result line to this one)"
	# A phase's samples are those between the previous result line and its
	# own, plus the one just before (a phase shorter than 0.5 s has no other).
	awk -v hwm="$hwm" '
		FNR == NR { t[n] = $1; r[n] = $2; n++; next }
		$2 == "io500:" && $3 == "[RESULT]" {
			peak = 0
			for (i = 0; i < n; i++) if (t[i] > prev - 0.6 && t[i] <= $1 && r[i] > peak) peak = r[i]
			printf "  %-22s %8.1f MiB\n", $4, peak / 1024
			prev = $1
		}
		END {
			all = 0
			for (i = 0; i < n; i++) if (r[i] > all) all = r[i]
			printf "  %-22s %8.1f MiB\n  %-22s %8.1f MiB\n", "peak of all samples", all / 1024, "VmHWM at the end", hwm / 1024
		}' "$res/rss" "$res/bench.err" | tee "$res/summary"
}

client() {
	local d=$OUT/d
	cleanup_dirs
	mkdir -p "$MNT"
	"$BIN/weft" up --data "$d" --mount "$MNT" --base-port "$PORT" >"$OUT/up.log" 2>&1 &
	PIDS+=($!)
	wait_for 60 grep -q "weft is up" "$OUT/up.log"
	local pid
	pid=$(pgrep -f "^$BIN/weft mount .*$MNT\$")
	log "client: weft up pid ${PIDS[-1]}, mount pid $pid (default --cache-limit 1GiB)"
	run_bench client "$pid"
	cleanup
}

client_small() {
	local d=$OUT/d
	cleanup_dirs
	mkdir -p "$MNT"
	start_servers "$d"
	# weft mount waits up to its --timeout for meta; waiting here keeps
	# that wait out of the measurement
	wait_for 30 listening "$PORT"
	env ${GCTRACE:+GODEBUG=gctrace=1} "$BIN/weft" mount --meta "127.0.0.1:$PORT" --keys "$d/keys/client" --cache-limit 256MiB --allow-other=false "$MNT" >"$d/logs/mount.log" 2>&1 &
	PIDS+=($!)
	local pid=$!
	wait_for 30 mounted
	# targets register with their first heartbeat
	wait_for 30 targets_up 4
	log "client-small: mount pid $pid (--cache-limit 256MiB)"
	run_bench client-small "$pid"
	if [ -n "${GCTRACE:-}" ]; then
		cp "$d/logs/mount.log" "$OUT/results/client-small/mount.log"
	fi
	cleanup
}

servers() {
	local d=$OUT/d res=$OUT/results/servers
	cleanup_dirs
	mkdir -p "$res"
	start_servers "$d"
	log "servers: meta pid $META_PID, storage pids ${STORAGE_PIDS[*]}"
	"$BIN/mdload" --meta "127.0.0.1:$PORT" --keys "$d/keys/client" --files "$FILES" --dirs "$DIRS" --workers "$WORKERS" \
		--objects "$OBJECTS" --object-size "$OBJSIZE" --targets 4 \
		--watch "meta=$META_PID,storage-0=${STORAGE_PIDS[0]},storage-1=${STORAGE_PIDS[1]}" \
		--du "meta=$d/meta,all=$d" | tee "$res/mdload.out"
	cleanup
}

cleanup_dirs() {
	if mounted; then
		log "$MNT is mounted; refusing to remove $OUT/d"
		exit 1
	fi
	rm -rf "$OUT/d"
}

build
case $MODE in
client) client ;;
client-small) client_small ;;
servers) servers ;;
all)
	client
	client_small
	servers
	;;
*)
	echo "usage: $0 [client|client-small|servers|all]" >&2
	exit 2
	;;
esac
