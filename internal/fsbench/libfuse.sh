#!/usr/bin/env bash
# Builds libfuse's example/passthrough_hp (the FUSE floor fsbench compares
# cairn with) from the pinned source archive in ../shared/peers, into a cache
# directory outside the repository, and prints the server's path. Idempotent:
# a second run only prints the path. Installs its build tools with apt-get
# only when they are missing.
#
#   internal/fsbench/libfuse.sh [ARCHIVE]
set -euo pipefail

archive=${1:-${CAIRN_PEERS:-$(cd "$(dirname "$0")/../../.." && pwd)/shared/peers}/libfuse.tar.gz}
# Pinned: github.com/libfuse/libfuse e8d407ce93bf, 3.19.0-rc0 (see ../shared/peers/README.md).
sha256=d3a17987c7b4e05cf1b595aa17e8dd9d692a27f816540f9c33fa17a1778133de
version=3.19.0-rc0

[ -r "$archive" ] || { echo "libfuse.sh: no archive at $archive (pass its path)" >&2; exit 1; }
got=$(sha256sum "$archive" | cut -d' ' -f1)
if [ "$got" != "$sha256" ]; then
	echo "libfuse.sh: $archive has sha256 $got, pinned $sha256: update the pin and the version together" >&2
	exit 1
fi

dir=${XDG_CACHE_HOME:-$HOME/.cache}/cairn-peers/libfuse-$version-${sha256:0:12}
bin=$dir/build/example/passthrough_hp
if [ -x "$bin" ] && [ -e "$dir/.built" ]; then
	echo "$bin"
	exit 0
fi

missing=""
for pc in meson:meson ninja-build:ninja pkg-config:pkg-config g++:g++ liburing-dev:/usr/include/liburing.h; do
	c=${pc#*:}
	if [ "${c:0:1}" = / ]; then [ -e "$c" ] || missing="$missing ${pc%%:*}"
	else command -v "$c" >/dev/null || missing="$missing ${pc%%:*}"; fi
done
if [ -n "$missing" ]; then
	echo "libfuse.sh: apt-get install$missing" >&2
	apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >&2
fi

rm -rf "$dir"
mkdir -p "$dir"
tar -xzf "$archive" -C "$dir" --strip-components=1
(
	cd "$dir"
	meson setup build -Dexamples=true -Dtests=false -Dutils=false -Denable-io-uring=true >&2
	ninja -C build example/passthrough_hp >&2
)
[ -x "$bin" ] || { echo "libfuse.sh: the build made no $bin" >&2; exit 1; }
touch "$dir/.built"
echo "$bin"
