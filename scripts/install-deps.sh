#!/bin/sh
# Installs the Debian packages trun needs to build, test and run its demo.
# Idempotent and quick when everything is present: apt-get runs only when a
# package is missing. Needs root (or sudo) for the install itself.
set -eu
pkgs="g++ cmake make ninja-build pkg-config libcli11-dev nlohmann-json3-dev libfmt-dev
libasio-dev libgtest-dev libgmock-dev libbenchmark-dev python3 python3-torch python3-pytest
procps iproute2 curl clang libclang-rt-14-dev llvm-14 libcurl4-openssl-dev etcd-server libyaml-cpp-dev libsodium-dev python3-yaml
slurmctld slurmd slurm-client munge debootstrap zsh tcsh python3-cloudpickle python3-setuptools
python3-pip openssh-server openssh-client python3-jsonschema openssl ccache
python3-pytest-xdist mypy gdb"
[ "${1:-}" = "--bench" ] && pkgs="$pkgs hyperfine"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "install-deps: installing$missing"
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# shellcheck disable=SC2086
$sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
