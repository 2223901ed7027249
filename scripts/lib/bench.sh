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

# begin_setups NAME OUT SETUP...: what a script comparing setups does
# before its first run: it needs python3, starts OUT afresh, fills labels,
# bins and args (parse_setups), and stops the weft up of an unfinished run
# (up_pid, run: start_up's) when it exits, however it exits.
begin_setups() {
	local name=$1 out=$2
	command -v python3 >/dev/null || { echo "$name: python3 is needed" >&2; exit 1; }
	rm -rf "$out"
	mkdir -p "$out"
	parse_setups "$@"
	up_pid= run=
	trap stop_up EXIT
}

# stop_up stops the weft up that start_up started ($up_pid) and unmounts
# its mount ($run/mnt) if it is still mounted; it clears up_pid, so it is
# safe to call again (from an EXIT trap after a run's own stop).
stop_up() {
	if [ -n "${up_pid:-}" ]; then
		kill -TERM "$up_pid" 2>/dev/null || true
		wait "$up_pid" 2>/dev/null || true
		up_pid=
	fi
	if [ -n "${run:-}" ] && mountpoint -q "$run/mnt" 2>/dev/null; then
		umount -l "$run/mnt" 2>/dev/null || true
	fi
}

# wait_for NAME WHAT LOG TEXT PID: returns once process PID (WHAT, for
# the messages) wrote TEXT to LOG; exits the script (showing LOG) if it
# exits first or has not written it after 300 s. NAME prefixes the error
# messages.
wait_for() {
	local name=$1 what=$2 log=$3 text=$4 pid=$5
	for _ in $(seq 600); do
		grep -qs "$text" "$log" && return 0
		kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; echo "$name: $what exited (log above: $log)" >&2; exit 1; }
		sleep 0.5
	done
	echo "$name: no \"$text\" from $what after 300 s (see $log)" >&2
	exit 1
}

# wait_up NAME LOG PID: wait_for the `weft up` of process PID to say it is
# up.
wait_up() { wait_for "$1" "weft up" "$2" "weft is up" "$3"; }

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
