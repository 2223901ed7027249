#!/usr/bin/env bash
# Short runs of every fuzz target (each decoder of bytes that come off the
# network or the disk). `go test` alone runs only their seed corpora; this
# runs the fuzzing engine on each for FUZZTIME inputs (default 100000x), so
# CI keeps exploring new inputs on every run. FUZZTIME is a count, not a
# duration: `go test -fuzz` with a short duration can fail with "context
# deadline exceeded" on a busy machine before it has fuzzed anything. A crash fails the script and leaves the
# failing input under the package's testdata/fuzz/ to be committed as a seed.
#
#   scripts/fuzz.sh                  every target, 100,000 inputs each
#   FUZZTIME=2000000x scripts/fuzz.sh longer
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-100000x}

# Every "func FuzzX(" in a _test.go file, as "package-dir target".
mapfile -t targets < <(grep -rl --include='*_test.go' '^func Fuzz' . |
	while read -r f; do
		dir=$(dirname "$f")
		grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed "s|^func |$dir |"
	done | sort)

[ "${#targets[@]}" -gt 0 ] || { echo "fuzz.sh: no fuzz targets found" >&2; exit 1; }
for t in "${targets[@]}"; do
	read -r dir name <<<"$t"
	echo "--- fuzz $dir $name ($fuzztime)"
	go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$dir"
done
echo "fuzzed ${#targets[@]} targets"
