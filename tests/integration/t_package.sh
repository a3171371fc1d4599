#!/usr/bin/env bash
# Installing: what cmake --install and cpack put where, and what the units run and the programs
# read, agree, all chosen when idemd is configured. At the default prefix (/usr/local) and at
# -DCMAKE_INSTALL_PREFIX=/usr, an installation into a DESTDIR and the package's contents each
# hold a unit whose ExecStart runs the installed idemd with the installed configuration (and
# systemd-analyze verify accepts it), and idemd and idemctl read that configuration by default;
# cmake --install --prefix with another prefix is refused (it could not move what was
# configured). Then the Debian package of the /usr build: dpkg -i installs it cleanly, the
# installed idemd checks the shipped example configuration, the installed idemctl migrates a
# database with the SQL compiled into it (no source tree needed), and the installed units pass
# systemd-analyze verify. The package is removed again at the end.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lib.sh"

idem_tmp_init
if [ "$(id -u)" -eq 0 ]; then
	asroot=()
else
	asroot=(sudo -n)
fi
if dpkg-query -W -f='${Status}' idemd 2>/dev/null | grep -q "install ok installed"; then
	idem_fail "an idemd package is already installed on this machine; not touching it"
fi

# systemd-analyze comes with the systemd package (tests/install-deps.sh installs it): without it
# the unit would go unchecked, so its absence is a failure, not a skip.
command -v systemd-analyze >/dev/null ||
	idem_fail "systemd-analyze not found: install the systemd package (tests/install-deps.sh)"

# build DIR [CMAKE_ARGS...]: configure and build idemd and idemctl (Release) in $IDEM_TMP/DIR.
build() {
	local dir=$IDEM_TMP/$1
	shift
	idem_log "building $(basename "$dir") $*"
	cmake -S "$IDEM_SRC" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF "$@" \
		>>"$IDEM_TMP/cmake.log"
	cmake --build "$dir" -j"$(nproc)" --target idemd idemctl >>"$IDEM_TMP/cmake.log"
}

# check_installed WHAT ROOT BINDIR CONFDIR UNITDIR: under ROOT (a DESTDIR, an unpacked package),
# BINDIR holds idemd and idemctl, CONFDIR idemd.yaml, UNITDIR the units, which run BINDIR/idemd
# with CONFDIR's configuration; idemd and idemctl read CONFDIR/idemd.yaml by default. The unit
# is verified with the paths it names inside the installation moved under ROOT.
check_installed() {
	local what=$1 root=$2 bindir=$3 confdir=$4 unitdir=$5 out
	for f in "$bindir/idemd" "$bindir/idemctl"; do
		[ -x "$root$f" ] || idem_fail "$what: $f is not installed"
	done
	[ -f "$root$confdir/idemd.yaml" ] || idem_fail "$what: $confdir/idemd.yaml is not installed"
	idem_assert_eq "$what: idemd.service ExecStart" \
		"ExecStart=$bindir/idemd --config $confdir/idemd.yaml" \
		"$(grep '^ExecStart=' "$root$unitdir/idemd.service")"
	idem_assert_eq "$what: idemd.service EnvironmentFile" "EnvironmentFile=-$confdir/idemd.env" \
		"$(grep '^EnvironmentFile=' "$root$unitdir/idemd.service")"
	idem_assert_eq "$what: idemd@.service ExecStart" \
		"ExecStart=$bindir/idemd --config $confdir/%i.yaml" \
		"$(grep '^ExecStart=' "$root$unitdir/idemd@.service")"
	! grep -n '@[A-Z_]*@' "$root$unitdir"/idemd*.service ||
		idem_fail "$what: a unit has a variable left unconfigured"
	grep -qF "configuration file (default $confdir/idemd.yaml)" <<<"$("$root$bindir/idemd" --help)" ||
		idem_fail "$what: idemd --help names another default configuration: $("$root$bindir/idemd" --help | grep default)"
	grep -qF "configuration file (default $confdir/idemd.yaml, which" <<<"$("$root$bindir/idemctl" --help)" ||
		idem_fail "$what: idemctl --help names another default configuration: $("$root$bindir/idemctl" --help | grep default | head -1)"
	idem_assert_eq "$what: the installed configuration checks" "configuration OK" \
		"$("$root$bindir/idemd" --check-config "$root$confdir/idemd.yaml")"
	mkdir -p "$IDEM_TMP/verify"
	sed -e "s#$bindir/#$root$bindir/#g" -e "s#$confdir/#$root$confdir/#g" \
		"$root$unitdir/idemd.service" >"$IDEM_TMP/verify/idemd.service"
	# The unit's man: pages are staged here, not installed: the package's check below looks them up.
	out=$(systemd-analyze verify --man=no "$IDEM_TMP/verify/idemd.service" 2>&1 || true)
	[ -z "$out" ] || idem_fail "$what: systemd-analyze verify idemd.service: $out"
	idem_log "$what: $bindir/idemd --config $confdir/idemd.yaml from $unitdir"
}

# check_deb WHAT DEB BINDIR CONFDIR UNITDIR: the package's contents, unpacked, as above; its
# configuration is a conffile.
check_deb() {
	local what=$1 deb=$2 root=$IDEM_TMP/unpacked-${1// /-}
	dpkg-deb -x "$deb" "$root"
	dpkg-deb -e "$deb" "$root/DEBIAN"
	check_installed "$what" "$root" "$3" "$4" "$5"
	idem_assert_eq "$what: conffiles" "$4/idemd.yaml" "$(cat "$root/DEBIAN/conffiles")"
}

# The default prefix: /usr/local, the configuration in /usr/local/etc/idemd.
build build-default
DESTDIR=$IDEM_TMP/root-default cmake --install "$IDEM_TMP/build-default" >>"$IDEM_TMP/cmake.log"
check_installed "default prefix" "$IDEM_TMP/root-default" /usr/local/bin /usr/local/etc/idemd \
	/usr/local/lib/systemd/system
(cd "$IDEM_TMP/build-default" && cpack -G DEB >>"$IDEM_TMP/cmake.log")
check_deb "default-prefix package" "$(ls "$IDEM_TMP"/build-default/idemd_*_*.deb)" \
	/usr/local/bin /usr/local/etc/idemd /usr/local/lib/systemd/system

# The prefix /usr: the configuration in /etc/idemd (GNUInstallDirs), as the package has it.
build build -DCMAKE_INSTALL_PREFIX=/usr
DESTDIR=$IDEM_TMP/root-usr cmake --install "$IDEM_TMP/build" >>"$IDEM_TMP/cmake.log"
check_installed "prefix /usr" "$IDEM_TMP/root-usr" /usr/bin /etc/idemd /usr/lib/systemd/system

# Another prefix at install time is refused, and installs nothing (into a DESTDIR all the same).
if DESTDIR=$IDEM_TMP/root-moved cmake --install "$IDEM_TMP/build" --prefix /usr/local \
	>"$IDEM_TMP/moved.log" 2>&1; then
	idem_fail "cmake --install --prefix /usr/local of a /usr build was not refused"
fi
# (CMake folds the message's lines.)
grep -q "configure again with -DCMAKE_INSTALL_PREFIX=/usr/local" <<<"$(tr -s ' \n' ' ' <"$IDEM_TMP/moved.log")" ||
	idem_fail "cmake --install --prefix: unexpected message: $(cat "$IDEM_TMP/moved.log")"
[ -z "$(find "$IDEM_TMP/root-moved" -type f 2>/dev/null)" ] ||
	idem_fail "cmake --install --prefix /usr/local installed files: $(find "$IDEM_TMP/root-moved" -type f)"

idem_log "building the package"
(cd "$IDEM_TMP/build" && cpack -G DEB >>"$IDEM_TMP/cmake.log")
deb=$(ls "$IDEM_TMP"/build/idemd_*_*.deb)
check_deb "package" "$deb" /usr/bin /etc/idemd /usr/lib/systemd/system

IDEM_CLEANUP_HOOKS+=("${asroot[*]} dpkg --purge idemd >/dev/null 2>&1")
"${asroot[@]}" dpkg -i "$deb" >"$IDEM_TMP/dpkg.log"
idem_assert_eq "package status" "install ok installed" "$(dpkg-query -W -f='${Status}' idemd)"

version=$(sed -n 's/^project(idemd VERSION \([0-9.]*\).*/\1/p' "$IDEM_SRC/CMakeLists.txt")
idem_assert_eq "installed idemd --version" "idemd $version" "$(/usr/bin/idemd --version)"
idem_assert_eq "shipped example configuration" "configuration OK" \
	"$(/usr/bin/idemd --check-config /etc/idemd/idemd.yaml)"
for page in man8/idemd.8 man8/idemctl.8 man5/idemd.yaml.5; do
	[ -f "/usr/share/man/$page" ] || idem_fail "the package did not install /usr/share/man/$page"
done

# idemctl migrate from an empty directory: the schema comes from the binary.
idem_pg_start
cat >"$IDEM_TMP/idemd.yaml" <<YAML
kafka: { brokers: "127.0.0.1:9", group_id: pkg }
postgres: { conninfo: "$IDEM_CONNINFO" }
routes:
  - name: r
    topics: [t]
    business_key: key
    handler: { sql: "SELECT 1", params: [] }
YAML
latest=$(find "$IDEM_SRC/sql" -maxdepth 1 -name '[0-9][0-9][0-9][0-9]_*.sql' -printf '%f\n' | sort | tail -1 | cut -c1-4)
latest=$((10#$latest))
(cd "$IDEM_TMP" && /usr/bin/idemctl -c "$IDEM_TMP/idemd.yaml" migrate)
idem_assert_eq "schema version after migrate" "$latest" "$(idem_psql -c 'SELECT max(version) FROM idem.schema_migrations')"
idem_assert_eq "second migrate is a no-op" "schema is up to date (version $latest)" \
	"$(/usr/bin/idemctl -c "$IDEM_TMP/idemd.yaml" migrate)"

out=$(systemd-analyze verify /usr/lib/systemd/system/idemd.service 2>&1 || true)
[ -z "$out" ] || idem_fail "systemd-analyze verify idemd.service: $out"
idem_assert_eq "the installed unit's ExecStart" "ExecStart=/usr/bin/idemd --config /etc/idemd/idemd.yaml" \
	"$(grep '^ExecStart=' /usr/lib/systemd/system/idemd.service)"

"${asroot[@]}" dpkg --purge idemd >/dev/null
[ ! -e /usr/bin/idemd ] || idem_fail "dpkg --purge left /usr/bin/idemd behind"
echo "ok: the default prefix and /usr (installed and packaged) each run and read what they installed; $(basename "$deb") installs, checks its configuration, migrates, verifies, purges"
