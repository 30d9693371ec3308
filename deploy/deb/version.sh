#!/bin/sh
# version.sh VERSION prints the Debian version of a zmesh version, as
# `git describe --tags --always --dirty` gives it (the Makefile's VERSION):
#
#   v0.1.0                   0.1.0
#   v0.1.0-3-gabc1234        0.1.0+3.gabc1234        3 commits after v0.1.0: sorts after it
#   v0.2.0-rc.1              0.2.0~rc.1              a pre-release: sorts before 0.2.0
#   v0.2.0-rc.1-3-gabc1234   0.2.0~rc.1+3.gabc1234
#   abc1234                  0.0.0+gabc1234          no tag yet: sorts before any release
#   dev                      0.0.0+dev               no git at all
#   ...-dirty                ...+dirty, or .dirty after a +part
#
# Anything else (a tag that is not vX.Y.Z[-PRERELEASE]) is refused, with status 1.
set -eu

deb_version() {
	v=$1 dirty=
	case $v in *-dirty) dirty=dirty v=${v%-dirty} ;; esac
	tag='v?([0-9]+(\.[0-9]+)*)(-([0-9A-Za-z.]+))?'
	if printf '%s\n' "$v" | grep -Eqx '[0-9a-f]{7,40}'; then
		out=0.0.0+g$v
	elif [ "$v" = dev ]; then
		out=0.0.0+dev
	elif printf '%s\n' "$v" | grep -Eqx "$tag-([0-9]+)-g([0-9a-f]+)"; then
		out=$(printf '%s\n' "$v" | sed -E "s/^$tag-([0-9]+)-g([0-9a-f]+)\$/\1~\4+\5.g\6/; s/~\+/+/")
	elif printf '%s\n' "$v" | grep -Eqx "$tag"; then
		out=$(printf '%s\n' "$v" | sed -E "s/^$tag\$/\1~\4/; s/~\$//")
	else
		echo "version.sh: $1 is not vX.Y.Z[-PRERELEASE], nor what git describe makes of such a tag, nor a commit" >&2
		return 1
	fi
	if [ -n "$dirty" ]; then
		case $out in *+*) out=$out.$dirty ;; *) out=$out+$dirty ;; esac
	fi
	printf '%s\n' "$out"
}

# Sourced by version_test.sh (ZMESH_VERSION_SH_LIB=1) for the function alone.
if [ -z "${ZMESH_VERSION_SH_LIB:-}" ]; then
	if [ $# -ne 1 ]; then
		echo "usage: version.sh VERSION" >&2
		exit 2
	fi
	deb_version "$1"
fi
