#!/usr/bin/env bash
# Failover time of a replicated metadata group (docs/performance.md,
# "Replicated metadata"): runs three `weft meta` members, one storage
# server and a mount on this machine, then, TRIALS times: finds the leader
# (the member whose log names the highest term it led), SIGKILLs it, and
# times how long a create through the mount (`touch`, which blocks while
# the mount follows the group to the new leader) takes from the kill until
# it succeeds; the killed member is started again and given time to catch
# up before the next trial. Prints every trial and the p50 and max.
#
#   scripts/failover.sh [--trials 20] [--raft-tick 100ms] [--election-ticks 10]
#                       [--base-port 7560] [--out DIR]
set -euo pipefail
cd "$(dirname "$0")/.."

trials=20
tick=100ms
eticks=10
base=7560
out=/tmp/weft-failover
while [ $# -gt 0 ]; do
	case "$1" in
	--trials) trials=$2; shift 2 ;;
	--raft-tick) tick=$2; shift 2 ;;
	--election-ticks) eticks=$2; shift 2 ;;
	--base-port) base=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	*) echo "failover: unknown argument $1" >&2; exit 2 ;;
	esac
done

rm -rf "$out"
mkdir -p "$out/logs" "$out/mnt" "$out/target"
bin=$out/weft
go build -o "$bin" ./cmd/weft
"$bin" keygen --out "$out/keys" >/dev/null

peers="1=127.0.0.1:$base,2=127.0.0.1:$((base + 1)),3=127.0.0.1:$((base + 2))"
metas="127.0.0.1:$base,127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2))"
declare -A pid
others=()
cleanup() {
	fusermount3 -u -z "$out/mnt" 2>/dev/null || true
	for p in "${pid[@]}" "${others[@]}"; do kill -9 "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

start_meta() { # start_meta ID
	mkdir -p "$out/meta-$1"
	"$bin" meta --id "$1" --peers "$peers" --data "$out/meta-$1" --keys "$out/keys/meta" \
		--raft-tick "$tick" --election-ticks "$eticks" --log-level info >>"$out/logs/meta-$1.log" 2>&1 &
	pid[$1]=$!
}
for i in 1 2 3; do start_meta "$i"; done
"$bin" storage --listen "127.0.0.1:$((base + 10))" --meta "$metas" --keys "$out/keys/storage" \
	--target "$out/target" >"$out/logs/storage.log" 2>&1 &
others+=($!)
sleep 1
"$bin" mount --meta "$metas" --keys "$out/keys/client" --timeout 60s "$out/mnt" >"$out/logs/mount.log" 2>&1 &
others+=($!)
for _ in $(seq 120); do
	[ "$(stat -f -c %T "$out/mnt" 2>/dev/null)" = fuseblk ] || [ "$(stat -f -c %t "$out/mnt" 2>/dev/null)" = 65735546 ] && break
	sleep 0.5
done
until touch "$out/mnt/ready" 2>/dev/null; do sleep 0.5; done

leader() { # the member that logged leadership of the highest term
	grep -h 'msg="meta: leader"' "$out"/logs/meta-*.log |
		sed -E 's/.* id=([0-9]+) term=([0-9]+).*/\2 \1/' | sort -n | tail -1 | cut -d' ' -f2
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }

times=()
for t in $(seq "$trials"); do
	l=$(leader)
	t0=$(now_ms)
	kill -9 "${pid[$l]}"
	wait "${pid[$l]}" 2>/dev/null || true
	if ! touch "$out/mnt/f-$t"; then
		echo "trial $t: the create failed" >&2
		exit 1
	fi
	ms=$(($(now_ms) - t0))
	times+=("$ms")
	echo "trial $t: killed leader meta-$l, first create after ${ms} ms, new leader meta-$(leader)"
	start_meta "$l"
	# Let it rejoin and catch up, and the group settle, before the next kill.
	sleep 3
done
printf '%s\n' "${times[@]}" | sort -n | awk -v tick="$tick" -v et="$eticks" '
	{ v[NR] = $1 } END { printf "failover (kill -9 leader -> first create done), %d trials, raft tick %s, election %s ticks: p50 %d ms, max %d ms\n", NR, tick, et, v[int((NR + 1) / 2)], v[NR] }'
