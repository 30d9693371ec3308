#!/usr/bin/env bash
# Builds the ziti CLI at $ZITI_VERSION once and prints the path of the cached binary.
# The ziti module has a replace directive, so `go install ...@version` refuses it: the module
# is downloaded, copied to a writable directory and built inside it.
set -euo pipefail

GO=${GO:-go}
version=${ZITI_VERSION:-v1.7.2}
cache=${ZMESH_INTEROP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/zmesh-interop}
bin=$cache/ziti-$version

if [[ -x $bin ]] && "$bin" version >/dev/null 2>&1; then
	echo "$bin"
	exit 0
fi

mkdir -p "$cache"
dir=$("$GO" mod download -json "github.com/openziti/ziti@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
if [[ -z $dir || ! -d $dir ]]; then
	echo "build-ziti: go mod download gave no directory for github.com/openziti/ziti@$version" >&2
	exit 1
fi

work=$(mktemp -d "$cache/build.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
cp -R "$dir/." "$work/src"
chmod -R u+w "$work/src"
echo "build-ziti: building the ziti CLI $version (once; cached as $bin)" >&2
(cd "$work/src" && GOFLAGS=-mod=mod nice -n 10 "$GO" build -trimpath -o "$work/ziti" ./ziti) >&2
mv "$work/ziti" "$bin"
echo "$bin"
