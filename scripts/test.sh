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
[ "${#pkgs[@]}" -gt 0 ] || pkgs=(./...)
# The tests package runs fsx three times (RAID-0, mirror, EC); no test has
# a time limit of its own: the timeout is a hang guard only.
go test -count=1 -timeout 90m "${pkgs[@]}"

if [ "$#" -eq 0 ]; then
	step "fuzz (short runs)"
	scripts/fuzz.sh
fi

step "all tests passed"
