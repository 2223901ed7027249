#!/usr/bin/env bash
# Short runs of every fuzz target (each decoder of bytes that come off the
# network or the disk). `go test` alone runs only their seed corpora; this
# runs the fuzzing engine on each for FUZZTIME inputs (default 100000x), so
# CI keeps exploring new inputs on every run. FUZZTIME is a count, not a
# duration: `go test -fuzz` with a short duration can fail with "context
# deadline exceeded" on a busy machine before it has fuzzed anything. A
# crash fails the script and leaves the failing input under the package's
# testdata/fuzz/ to be committed as a seed.
#
# Each package's test binary is built once, with the fuzzing engine's
# coverage instrumentation (`go test -c -fuzz=.`), and then run once per
# target, in the package's directory (where its testdata/fuzz seeds are),
# with the cache directory `go test -fuzz` would use: the same fuzzing as
# `go test -fuzz X` per target, without relinking the binary for each of
# them (storage/storagerpc alone has 10 targets).
#
#   scripts/fuzz.sh                  every target, 100,000 inputs each
#   FUZZTIME=2000000x scripts/fuzz.sh longer
#   FUZZPARALLEL=1 scripts/fuzz.sh   one fuzzing worker (default: one per CPU);
#                                    scripts/test.sh runs it so, beside the tests
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-100000x}
parallel=()
[ -z "${FUZZPARALLEL:-}" ] || parallel=(-test.parallel="$FUZZPARALLEL")
module=$(go list -m)
cache=$(go env GOCACHE)/fuzz
bins=$(mktemp -d)
trap 'rm -rf "$bins"' EXIT

# Every "func FuzzX(" in a _test.go file, as "package-dir target".
mapfile -t targets < <(grep -rl --include='*_test.go' '^func Fuzz' . |
	while read -r f; do
		dir=$(dirname "$f")
		grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed "s|^func |$dir |"
	done | sort)

[ "${#targets[@]}" -gt 0 ] || { echo "fuzz.sh: no fuzz targets found" >&2; exit 1; }
built=""
start=$SECONDS
for t in "${targets[@]}"; do
	read -r dir name <<<"$t"
	pkg=$module/${dir#./}
	bin=$bins/$(echo "${dir#./}" | tr / _).test
	if [ "$dir" != "$built" ]; then
		b=$SECONDS
		go test -c -fuzz=. -o "$bin" "$dir"
		built=$dir
		echo "--- built $dir ($((SECONDS - b))s)"
	fi
	echo "--- fuzz $dir $name ($fuzztime)"
	f=$SECONDS
	(cd "$dir" && "$bin" -test.run='^$' -test.fuzz="^${name}\$" -test.fuzztime="$fuzztime" \
		-test.fuzzcachedir="$cache/$pkg" "${parallel[@]}")
	echo "--- fuzzed $dir $name ($((SECONDS - f))s)"
done
echo "fuzzed ${#targets[@]} targets in $((SECONDS - start))s"
