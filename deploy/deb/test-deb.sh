#!/bin/sh
# test-deb.sh DEB VERSION installs the zmesh package DEB with dpkg on this machine, checks what
# it installed (the binary's version is VERSION, the Makefile's), removes it and checks that
# only the configuration and the state remain, purges it and checks that only the state and
# the user remain, then removes those too: the machine is left as it was found.
# test-deb.sh --check-machine only checks that the machine has no zmesh the test could
# disturb. Run by `make test-deb`, as root.
set -u

# Traces of a zmesh already on this machine (`make install`, an earlier package, a unit).
traces() {
	if ! command -v dpkg >/dev/null; then echo "dpkg is not installed"; fi
	st=$(dpkg-query -W -f='${db:Status-Status}' zmesh 2>/dev/null || true)
	if [ -n "$st" ] && [ "$st" != not-installed ]; then echo "the package zmesh is known to dpkg ($st)"; fi
	for f in /usr/local/bin/zmesh /usr/bin/zmesh /etc/zmesh /var/lib/zmesh /usr/share/zmesh /usr/local/share/zmesh; do
		if [ -e "$f" ] || [ -L "$f" ]; then echo "$f exists"; fi
	done
	for d in /etc/systemd/system /usr/local/lib/systemd/system /usr/lib/systemd/system /lib/systemd/system; do
		for u in zmesh-router.service zmesh-controller.service zmesh-router.service.d; do
			if [ -e "$d/$u" ] || [ -L "$d/$u" ]; then echo "$d/$u exists"; fi
		done
	done
	if p=$(command -v zmesh); then echo "zmesh is in PATH: $p"; fi
	if getent passwd zmesh >/dev/null; then echo "the user zmesh exists"; fi
	if getent group zmesh >/dev/null; then echo "the group zmesh exists"; fi
}

refuse_if_traces() {
	found=$(traces)
	if [ -n "$found" ]; then
		echo "test-deb: this machine has a zmesh already; the test would change it, so it does not run:" >&2
		printf '%s\n' "$found" | sed 's/^/  /' >&2
		echo "(make uninstall, dpkg --purge zmesh, or a machine without zmesh)" >&2
		exit 1
	fi
}

if [ "$(id -u)" != 0 ]; then
	echo "test-deb: installs a package with dpkg: run it as root" >&2
	exit 1
fi
if [ "${1:-}" = --check-machine ]; then
	refuse_if_traces
	exit 0
fi
if [ $# -ne 2 ] || [ ! -f "$1" ]; then
	echo "usage: test-deb.sh DEB VERSION | --check-machine" >&2
	exit 2
fi
deb=$1 version=$2
refuse_if_traces

passed=0 failed=0
check() { # check DESCRIPTION COMMAND...: counts whether COMMAND succeeds
	what=$1
	shift
	if "$@"; then passed=$((passed + 1)); else failed=$((failed + 1)); echo "FAIL: $what"; fi
}
equal() { [ "$1" = "$2" ] || { echo "  got:  $1"; echo "  want: $2"; return 1; }; }
status() { dpkg-query -W -f='${db:Status-Status}' zmesh 2>/dev/null || true; }
mode() { stat -c '%U:%G %a' "$1" 2>/dev/null; }

# Whatever happens, the machine is left without zmesh: the package purged, the state
# directory and the user (all absent before: refuse_if_traces) removed.
cleanup() {
	if [ -n "$(status)" ] && [ "$(status)" != not-installed ]; then dpkg --purge zmesh >/dev/null 2>&1 || true; fi
	rm -rf /var/lib/zmesh /etc/zmesh
	if getent passwd zmesh >/dev/null; then userdel zmesh; fi
	if getent group zmesh >/dev/null; then groupdel zmesh; fi
	left=$(traces)
	if [ -n "$left" ]; then
		echo "FAIL: the machine is not as found:"
		printf '%s\n' "$left" | sed 's/^/  /'
		failed=$((failed + 1))
	fi
	echo "test-deb: $passed passed, $failed failed"
	[ "$failed" -eq 0 ]
}
trap 'cleanup; exit $?' EXIT
trap 'exit 1' INT TERM HUP

debversion=$(dpkg-deb -f "$deb" Version)
echo "test-deb: $deb (version $debversion, zmesh $version)"

# The package as built: its control fields and what it contains.
check "the package's version comes from VERSION" equal "$debversion" "$(deploy/deb/version.sh "$version")"
contents=$(dpkg-deb -c "$deb" | awk '{print $6}')
for f in ./usr/bin/zmesh ./usr/lib/systemd/system/zmesh-router.service ./usr/lib/systemd/system/zmesh-controller.service \
	./usr/share/zmesh/zmesh-router-controller.conf ./usr/share/bash-completion/completions/zmesh \
	./usr/share/zsh/vendor-completions/_zmesh ./usr/share/fish/vendor_completions.d/zmesh.fish \
	./usr/share/man/man1/zmesh.1.gz ./usr/share/man/man1/zmesh-router-run.1.gz; do
	check "the package contains $f" sh -c 'printf "%s\n" "$1" | grep -qx "$2"' - "$contents" "$f"
done
check "the package ships nothing in /etc" sh -c '! printf "%s\n" "$1" | grep -q "^\./etc"' - "$contents"

# Install.
if ! dpkg -i "$deb"; then
	echo "FAIL: dpkg -i $deb"
	failed=$((failed + 1))
	exit 1
fi
check "dpkg says zmesh is installed" equal "$(status)" installed
echo "installed: $(zmesh version 2>&1)"
check "zmesh is /usr/bin/zmesh in PATH" equal "$(command -v zmesh)" /usr/bin/zmesh
want="zmesh $version ("
check "zmesh version prints $want..." sh -c 'out=$(zmesh version) && case $out in "$1"*) ;; *) echo "  got: $out"; exit 1;; esac' - "$want"
check "zmesh --version prints $want..." sh -c 'out=$(zmesh --version) && case $out in "$1"*) ;; *) echo "  got: $out"; exit 1;; esac' - "$want"
check "the router unit runs /usr/bin/zmesh" grep -qx 'ExecStart=/usr/bin/zmesh router run /etc/zmesh/router.yml' /usr/lib/systemd/system/zmesh-router.service
check "the controller unit runs /usr/bin/zmesh" grep -q '^ExecStart=/usr/bin/zmesh controller run ' /usr/lib/systemd/system/zmesh-controller.service
check "the drop-in runs /usr/bin/zmesh" grep -q '^ExecStart=/usr/bin/zmesh router run .* --controller ' /usr/share/zmesh/zmesh-router-controller.conf
check "no installed unit names /usr/local" sh -c '! grep -l /usr/local /usr/lib/systemd/system/zmesh-*.service /usr/share/zmesh/zmesh-router-controller.conf'
check "no unit enabled" sh -c '! find /etc/systemd/system -name "zmesh-*.service" -path "*.wants/*" | grep -q .'
if [ -d /run/systemd/system ]; then
	for u in zmesh-router.service zmesh-controller.service; do
		check "$u not started" sh -c '! systemctl is-active --quiet "$1"' - "$u"
	done
fi
# The man page: where man finds it if man-db is installed, else the file itself. A dpkg
# configured to drop man pages (path-exclude, as in some container images) installs none.
if dpkg -L zmesh | grep -qx /usr/share/man/man1/zmesh.1.gz; then
	check "the man page zmesh(1) is a roff page" sh -c 'gzip -dc /usr/share/man/man1/zmesh.1.gz | grep -q "^\.TH \"ZMESH\" \"1\""'
	check "the man page zmesh-router-run(1) is installed" test -f /usr/share/man/man1/zmesh-router-run.1.gz
	if command -v man >/dev/null; then
		check "man -w zmesh finds the page" equal "$(man -w zmesh 2>&1)" /usr/share/man/man1/zmesh.1.gz
	fi
else
	echo "note: dpkg's configuration excludes /usr/share/man: the pages are checked in the package only"
fi
check "the user zmesh is a system user with no login" sh -c 'e=$(getent passwd zmesh) && [ "$(echo "$e" | cut -d: -f3)" -lt 1000 ] && [ "$(echo "$e" | cut -d: -f6-7)" = /var/lib/zmesh:/usr/sbin/nologin ]'
check "the group zmesh exists" sh -c 'getent group zmesh >/dev/null'
check "/etc/zmesh is root:zmesh 0750" equal "$(mode /etc/zmesh)" "root:zmesh 750"
check "/var/lib/zmesh is zmesh:zmesh 0750" equal "$(mode /var/lib/zmesh)" "zmesh:zmesh 750"

# What an administrator would add: a configuration and a key.
install -m 0640 -o root -g zmesh /dev/null /etc/zmesh/router.yml
install -m 0600 -o zmesh -g zmesh /dev/null /var/lib/zmesh/router.key

# Installed again (postinst's path on an upgrade): the user is kept, files and modes stay.
check "dpkg -i over the installed package" sh -c 'dpkg -i "$1" >/dev/null' - "$deb"
check "reinstall keeps the configuration and the state" test -f /etc/zmesh/router.yml -a -f /var/lib/zmesh/router.key
check "reinstall keeps /etc/zmesh root:zmesh 0750" equal "$(mode /etc/zmesh)" "root:zmesh 750"
check "reinstall keeps one user zmesh" equal "$(getent passwd | grep -c '^zmesh:')" 1
listed=$(dpkg -L zmesh)

# Remove: every file the package listed is gone, and each directory it listed unless another
# package's files keep it; the configuration, the state and the user stay.
check "dpkg -r zmesh" dpkg -r zmesh
check "dpkg keeps zmesh's configuration state after remove" equal "$(status)" config-files
kept=$(printf '%s\n' "$listed" | while read -r p; do
	case $p in /etc/zmesh | /etc/zmesh/* | /var/lib/zmesh | /var/lib/zmesh/*) continue ;; esac
	if [ -d "$p" ] && [ ! -L "$p" ]; then
		[ -n "$(ls -A "$p")" ] || echo "$p (empty directory)"
	elif [ -e "$p" ] || [ -L "$p" ]; then
		echo "$p"
	fi
done)
check "remove leaves nothing the package listed" equal "$kept" ""
check "remove keeps /etc/zmesh and its file" test -f /etc/zmesh/router.yml
check "remove keeps /etc/zmesh root:zmesh 0750" equal "$(mode /etc/zmesh)" "root:zmesh 750"
check "remove keeps the state" test -f /var/lib/zmesh/router.key
check "remove keeps the user" sh -c 'getent passwd zmesh >/dev/null'
check "zmesh is gone from PATH" sh -c '! command -v zmesh'

# Purge: the configuration goes; the state (keys, the controller's store) and the user stay.
check "dpkg --purge zmesh" dpkg --purge zmesh
check "dpkg forgets zmesh after purge" sh -c '[ -z "$1" ] || [ "$1" = not-installed ]' - "$(status)"
check "purge removes /etc/zmesh" sh -c '! [ -e /etc/zmesh ]'
check "purge keeps the state" test -f /var/lib/zmesh/router.key
check "purge keeps the user" sh -c 'getent passwd zmesh >/dev/null'
