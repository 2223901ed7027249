# Shared by the benchmark scripts: the setups they compare (builds and
# `weft up` arguments) and starting a `weft up`. Source it from the
# repository's root.

# parse_setups NAME OUT SETUP...: fills the arrays labels, bins and args
# from SETUPs of the form LABEL=BIN[:WEFT-UP-ARGS]; BIN "." builds this
# tree's weft into OUT. NAME prefixes the error messages.
parse_setups() {
	local name=$1 out=$2 s label rest bin up
	shift 2
	labels=() bins=() args=()
	for s in "$@"; do
		label=${s%%=*} rest=${s#*=}
		bin=${rest%%:*} up=
		[ "$rest" != "$bin" ] && up=${rest#*:}
		if [ "$bin" = . ]; then
			bin=$out/weft
			[ -x "$bin" ] || go build -o "$bin" ./cmd/weft
		fi
		[ -x "$bin" ] || { echo "$name: $bin: not an executable" >&2; exit 2; }
		labels+=("$label") bins+=("$bin") args+=("$up")
	done
}

# wait_up NAME LOG PID: returns once the `weft up` of process PID, writing
# to LOG, says it is up; exits the script (showing LOG) if it exits first
# or is not up after 300 s. NAME prefixes the error messages.
wait_up() {
	local name=$1 log=$2 pid=$3
	for _ in $(seq 600); do
		grep -qs "weft is up" "$log" && return 0
		kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; echo "$name: weft up exited (log above: $log)" >&2; exit 1; }
		sleep 0.5
	done
	echo "$name: weft up is not up after 300 s (see $log)" >&2
	exit 1
}

# start_up NAME BIN RUN BASE_PORT [WEFT-UP-ARGS...]: starts `BIN up` with
# its data in RUN/data and its mount on RUN/mnt (RUN made anew), waits
# until it is up, and sets up_pid, and names and pids of the processes it
# started (space-separated, in the same order).
start_up() {
	local name=$1 bin=$2 run=$3 port=$4
	shift 4
	rm -rf "$run"
	mkdir -p "$run/mnt"
	"$bin" up --data "$run/data" --mount "$run/mnt" --base-port "$port" --log-level warn "$@" >"$run/up.log" 2>&1 &
	up_pid=$!
	wait_up "$name" "$run/up.log" "$up_pid"
	# weft up prints "  started meta-2     pid 1234    log ..." for each
	# process it starts.
	names=$(awk '$1 == "started" {print $2}' "$run/up.log" | paste -sd' ')
	pids=$(awk '$1 == "started" {print $4}' "$run/up.log" | paste -sd' ')
}
