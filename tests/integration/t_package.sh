#!/usr/bin/env bash
# The Debian package: cpack -G DEB builds it, dpkg -i installs it cleanly, the installed
# idemd checks the shipped example configuration, the installed idemctl migrates a database
# with the SQL compiled into it (no source tree needed), and the installed units pass
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

idem_log "building the package"
cmake -S "$IDEM_SRC" -B "$IDEM_TMP/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
	-DBUILD_TESTING=OFF >"$IDEM_TMP/cmake.log"
cmake --build "$IDEM_TMP/build" -j"$(nproc)" --target idemd idemctl >>"$IDEM_TMP/cmake.log"
(cd "$IDEM_TMP/build" && cpack -G DEB >>"$IDEM_TMP/cmake.log")
deb=$(ls "$IDEM_TMP"/build/idemd_*_*.deb)

IDEM_CLEANUP_HOOKS+=("${asroot[*]} dpkg --purge idemd >/dev/null 2>&1")
"${asroot[@]}" dpkg -i "$deb" >"$IDEM_TMP/dpkg.log"
idem_assert_eq "package status" "install ok installed" "$(dpkg-query -W -f='${Status}' idemd)"

version=$(sed -n 's/^project(idemd VERSION \([0-9.]*\).*/\1/p' "$IDEM_SRC/CMakeLists.txt")
idem_assert_eq "installed idemd --version" "idemd $version" "$(/usr/bin/idemd --version)"
idem_assert_eq "shipped example configuration" "configuration OK" \
	"$(/usr/bin/idemd --check-config /etc/idemd/idemd.yaml)"

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

# systemd-analyze comes with the systemd package (tests/install-deps.sh installs it): without it
# the unit would go unchecked, so its absence is a failure, not a skip.
command -v systemd-analyze >/dev/null ||
	idem_fail "systemd-analyze not found: install the systemd package (tests/install-deps.sh)"
out=$(systemd-analyze verify /usr/lib/systemd/system/idemd.service 2>&1 || true)
[ -z "$out" ] || idem_fail "systemd-analyze verify idemd.service: $out"
grep -q '^ExecStart=/usr/bin/idemd ' /usr/lib/systemd/system/idemd.service ||
	idem_fail "the installed unit does not run /usr/bin/idemd"

"${asroot[@]}" dpkg --purge idemd >/dev/null
[ ! -e /usr/bin/idemd ] || idem_fail "dpkg --purge left /usr/bin/idemd behind"
echo "ok: $(basename "$deb") installs, checks its configuration, migrates, verifies, purges"
