#!/bin/sh
# version_test.sh checks version.sh: the mapping of each form git describe gives, the refusals,
# and, where dpkg is installed, that the Debian versions sort as the releases do.
set -u
cd "$(dirname "$0")"
ZMESH_VERSION_SH_LIB=1 . ./version.sh

passed=0 failed=0
ok() { passed=$((passed + 1)); }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }

while read -r in want; do
	if got=$(deb_version "$in" 2>/dev/null) && [ "$got" = "$want" ]; then ok; else fail "$in -> ${got:-(refused)}, want $want"; fi
done <<'TABLE'
v0.1.0 0.1.0
0.1.0 0.1.0
v1.22.333 1.22.333
v0.1.0-dirty 0.1.0+dirty
v0.1.0-3-gabc1234 0.1.0+3.gabc1234
v0.1.0-3-gabc1234-dirty 0.1.0+3.gabc1234.dirty
v0.2.0-rc.1 0.2.0~rc.1
v0.2.0-rc.1-dirty 0.2.0~rc.1+dirty
v0.2.0-rc.1-3-gabc1234 0.2.0~rc.1+3.gabc1234
v0.2.0-beta2-12-g0123456789ab 0.2.0~beta2+12.g0123456789ab
abc1234 0.0.0+gabc1234
abc1234-dirty 0.0.0+gabc1234.dirty
dev 0.0.0+dev
TABLE

for in in '' release-1 v1.x v0.1.0_2 'v0.1.0 extra' v0.1.0-rc/1 -dirty ABC1234; do
	if got=$(deb_version "$in" 2>/dev/null); then fail "$in -> $got, want a refusal"; else ok; fi
done

if command -v dpkg >/dev/null; then
	# Each version sorts before the next.
	prev=
	for v in 0.0.0+dev 0.0.0+gabc1234 0.1.0 0.1.0+3.gabc1234 0.1.0+10.g0123456 0.2.0~rc.1 \
		0.2.0~rc.1+3.gabc1234 0.2.0~rc.2 0.2.0 1.0.0; do
		if [ -n "$prev" ]; then
			if dpkg --compare-versions "$prev" lt "$v"; then ok; else fail "$prev does not sort before $v"; fi
		fi
		prev=$v
	done
else
	echo "no dpkg: the ordering checks are skipped"
fi

echo "version mapping: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
