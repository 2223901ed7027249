#!/usr/bin/env bash
# The first command on a new machine: install what weft needs, build it, and
# run a whole weft here (meta, storage servers, a mount) in the foreground.
# Arguments go to `weft up` (see: bin/weft up --help). Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --run
export PATH="$PATH:/usr/local/go/bin"
go build -buildvcs=auto -o bin/weft ./cmd/weft
exec bin/weft up "$@"
