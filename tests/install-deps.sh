#!/usr/bin/env bash
# Installs what building and testing idemd needs on Debian 12, if anything is missing.
# Works as root, or as a user with sudo.
set -euo pipefail

pkgs=(
	build-essential cmake pkg-config
	librdkafka-dev libpq-dev libyaml-dev libjson-c-dev libssl-dev
	libcmocka-dev libmicrohttpd-dev libavro-dev libcurl4-openssl-dev python3-avro
	libprotobuf-dev libprotoc-dev protobuf-compiler python3-protobuf postgresql clang clang-format libclang-rt-14-dev curl
	prometheus dpkg-dev python3
	systemd # systemd-analyze, for t_package's unit check (a container may lack it)
	gdb     # a failed test prints the stacks of the idemd it left running (lib.sh)
	groff-base man-db # tests/check_docs.sh renders the manual pages
)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing: ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
	sudo=()
elif command -v sudo >/dev/null; then
	sudo=(sudo)
else
	echo "install-deps: need root or sudo to install: ${missing[*]}" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The tests start their own throwaway clusters; the packaged one is not needed.
if command -v systemctl >/dev/null && systemctl is-active -q postgresql 2>/dev/null; then
	"${sudo[@]}" systemctl stop postgresql || true
fi
