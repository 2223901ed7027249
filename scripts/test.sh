#!/usr/bin/env bash
# THE test command: installs what the tests need, then vets, checks
# formatting, builds and runs every test. Exits non-zero on any failure.
#
#   scripts/test.sh                 everything
#   scripts/test.sh ./client/...    only these packages (deps, vet, build still run)
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n=== %s\n' "$*"; }

step "install dependencies"
scripts/install-deps.sh
export PATH="$PATH:/usr/local/go/bin:$HOME/.cargo/bin:$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin"

step "go vet"
go vet ./...

step "gofmt"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
	echo "not gofmt-ed (run gofmt -w on them):"
	echo "$unformatted"
	exit 1
fi

step "go build"
go build ./...
mkdir -p bin
go build -buildvcs=auto -o bin/weft ./cmd/weft

step "go test"
pkgs=("$@")
if [ "${#pkgs[@]}" -gt 0 ]; then
	go test -count=1 -timeout 90m "${pkgs[@]}"
	step "all tests passed"
	exit 0
fi

# The integration tests (./tests) take most of the time, and most of it is
# spent waiting: on FUSE round trips (fsx, pjdfstest, the model test, tar
# and rsync), on
# synced creates, on timeouts and elections. So the slow ones among them
# run in parallel (t.Parallel, 4 at a time: each has a cluster of its own),
# and the fuzzers run alongside them with one worker each (the same inputs,
# on the CPU the waiting leaves idle). No test has a time limit of its own:
# the timeout is a hang guard only.
fuzzlog=$(mktemp)
FUZZPARALLEL=1 scripts/fuzz.sh >"$fuzzlog" 2>&1 &
fuzzpid=$!
trap 'kill "$fuzzpid" 2>/dev/null || true; rm -f "$fuzzlog"' EXIT
testrc=0
go test -count=1 -timeout 90m -parallel 4 ./... || testrc=$?

step "fuzz (short runs, alongside the tests)"
fuzzrc=0
wait "$fuzzpid" || fuzzrc=$?
cat "$fuzzlog"
if [ "$testrc" -ne 0 ] || [ "$fuzzrc" -ne 0 ]; then
	echo "FAILED: go test exit $testrc, fuzz exit $fuzzrc"
	exit 1
fi

step "all tests passed"
