#!/usr/bin/env bash
# Install what weft needs to build, run and be tested on Debian/Ubuntu.
# Idempotent: each step checks first and does nothing when already done.
#
#   scripts/install-deps.sh --run   what building and running weft needs:
#       FUSE 3 (fusermount3, /dev/fuse), fs.pipe-max-size = 2 MiB (so 1 MiB
#       FUSE reads can be spliced), user_allow_other in /etc/fuse.conf, and
#       a Go toolchain. scripts/up.sh runs this.
#   scripts/install-deps.sh         all that, and what the tests need:
#       iproute2 (ip netns, ss), psmisc (fuser), python3 with its sqlite3
#       module (the lock tests' helpers), rsync (the timestamp test),
#       nftables (the firewall
#       test), chromium (the dashboard test, headless), a user and a group
#       named "tests" (pjdfstest runs as them), pjdfstest and fsx (cargo).
#       scripts/test.sh runs this.
#
# Runs as root, or as a user with sudo. Set WEFT_SKIP_CARGO=1 to skip the
# Rust tools (the integration tests that need them then fail, loudly).
set -euo pipefail

MODE=test
case "${1:-}" in
--run) MODE=run ;;
"") ;;
*)
	echo "usage: $0 [--run]" >&2
	exit 2
	;;
esac

PJDFSTEST_VERSION=0.2.2
FSX_VERSION=0.3.2
GO_MIN_MINOR=21 # go >= 1.21 fetches the toolchain that go.mod asks for by itself
GO_FALLBACK_VERSION=1.26.8

say() { printf 'install-deps: %s\n' "$*"; }

if [ "$(id -u)" -eq 0 ]; then
	SUDO=()
elif command -v sudo >/dev/null 2>&1; then
	SUDO=(sudo)
else
	say "not root and no sudo: run me as root"
	exit 1
fi

# --- Debian packages ---------------------------------------------------------
need=()
pkgs=(fuse3 ca-certificates curl)
if [ "$MODE" = test ]; then
	pkgs+=(iproute2 psmisc nftables chromium python3 rsync)
fi
for pkg in "${pkgs[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
		need+=("$pkg")
	fi
done
if [ "${#need[@]}" -gt 0 ]; then
	say "apt-get install ${need[*]}"
	"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

if [ ! -e /dev/fuse ]; then
	"${SUDO[@]}" modprobe fuse 2>/dev/null || true
fi
if [ ! -e /dev/fuse ]; then
	say "warning: /dev/fuse is missing (in a container, start it with --device /dev/fuse --cap-add SYS_ADMIN)"
fi

# --- fusectl: lets `weft mount` abort a FUSE connection that outlives it ------
if [ -d /sys/fs/fuse/connections ] && ! grep -q " /sys/fs/fuse/connections fusectl " /proc/mounts; then
	if "${SUDO[@]}" mount -t fusectl none /sys/fs/fuse/connections 2>/dev/null; then
		say "mounted fusectl on /sys/fs/fuse/connections"
	else
		say "note: cannot mount fusectl; weft mount cannot abort a FUSE connection held elsewhere at shutdown"
	fi
fi

# --- sysctl: splice for 1 MiB reads needs pipes of 2 MiB ----------------------
want_pipe=$((2 << 20))
cur_pipe=$(cat /proc/sys/fs/pipe-max-size 2>/dev/null || echo 0)
if [ "$cur_pipe" -lt "$want_pipe" ]; then
	if "${SUDO[@]}" sysctl -q -w fs.pipe-max-size="$want_pipe" 2>/dev/null; then
		say "fs.pipe-max-size = $want_pipe"
		if [ -d /etc/sysctl.d ] && [ ! -e /etc/sysctl.d/60-weft.conf ]; then
			echo "fs.pipe-max-size = $want_pipe" | "${SUDO[@]}" tee /etc/sysctl.d/60-weft.conf >/dev/null || true
		fi
	else
		say "note: cannot raise fs.pipe-max-size (not allowed here); large reads will copy instead of splice"
	fi
fi

# --- FUSE: let users mount with allow_other ----------------------------------
if [ -f /etc/fuse.conf ] && ! grep -qx 'user_allow_other' /etc/fuse.conf; then
	echo user_allow_other | "${SUDO[@]}" tee -a /etc/fuse.conf >/dev/null
	say "enabled user_allow_other in /etc/fuse.conf"
fi

# --- the "tests" user and group that pjdfstest switches to -------------------
if [ "$MODE" = test ] && ! getent group tests >/dev/null; then
	"${SUDO[@]}" groupadd tests
	say "created group tests"
fi
if [ "$MODE" = test ] && ! getent passwd tests >/dev/null; then
	"${SUDO[@]}" useradd -g tests -M -d /nonexistent -s /usr/sbin/nologin tests
	say "created user tests"
fi

# --- Go ----------------------------------------------------------------------
export PATH="$PATH:/usr/local/go/bin"
go_ok=false
if command -v go >/dev/null 2>&1; then
	minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
	if [ "${minor:-0}" -ge "$GO_MIN_MINOR" ]; then
		go_ok=true
	fi
fi
if ! $go_ok; then
	arch=$(dpkg --print-architecture)
	say "installing Go $GO_FALLBACK_VERSION into /usr/local/go"
	curl -fsSL "https://go.dev/dl/go${GO_FALLBACK_VERSION}.linux-${arch}.tar.gz" -o /tmp/go.tgz
	"${SUDO[@]}" rm -rf /usr/local/go
	"${SUDO[@]}" tar -C /usr/local -xzf /tmp/go.tgz
	rm -f /tmp/go.tgz
fi

# --- pjdfstest and fsx (Rust) ------------------------------------------------
if [ "$MODE" = test ] && [ "${WEFT_SKIP_CARGO:-0}" != 1 ]; then
	export PATH="$PATH:$HOME/.cargo/bin"
	if ! command -v cargo >/dev/null 2>&1; then
		say "cargo is missing: install Rust (https://rustup.rs) or set WEFT_SKIP_CARGO=1"
		exit 1
	fi
	installed=$(cargo install --list 2>/dev/null || true)
	for spec in "pjdfstest $PJDFSTEST_VERSION" "fsx $FSX_VERSION"; do
		set -- $spec
		if printf '%s\n' "$installed" | grep -q "^$1 v$2:"; then
			continue
		fi
		say "cargo install $1 --version $2 (takes a couple of minutes)"
		cargo install --quiet --locked "$1" --version "$2" ||
			cargo install --quiet "$1" --version "$2"
	done
fi

say "ok"
