#!/usr/bin/env bash
# Build the base image smr's image starts FROM, without any registry: a minimal Debian root
# file system made by debootstrap from Debian's packages (Python 3.11, a Java 17 runtime for
# Spark, iproute2 and iptables for the fault CLI), imported with `docker import`.
#
# Usage: compose/base/build.sh [TAG]   (default smr-base:bookworm)
# Cached: an image already tagged TAG is kept (remove it to rebuild). Needs root (debootstrap
# makes device nodes and sets owners) and a running Docker engine.
set -euo pipefail

tag="${1:-smr-base:bookworm}"
suite=bookworm
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
packages=python3,python3-venv,openjdk-17-jre-headless,iproute2,iptables,procps,ca-certificates

fail() { echo "compose/base/build.sh: $*" >&2; exit 1; }

command -v docker >/dev/null || fail "docker is not installed: the image needs a Docker engine"
docker info >/dev/null 2>&1 || fail "the Docker engine is not running (docker info failed)"
if docker image inspect "$tag" >/dev/null 2>&1; then
    echo "$tag is already built (docker image rm $tag to rebuild)"
    exit 0
fi
[ "$(id -u)" = 0 ] || fail "debootstrap needs root to build the base image"
if ! command -v debootstrap >/dev/null; then
    command -v apt-get >/dev/null || fail "debootstrap is missing and there is no apt-get to install it"
    echo "installing debootstrap from Debian's packages"
    apt-get install -y -q debootstrap >/dev/null
fi

root="$(mktemp -d /tmp/smr-base.XXXXXX)"
trap 'rm -rf "$root"' EXIT
started=$(date +%s)
echo "debootstrap $suite into $root (a few minutes)"
debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" >"$root.log" 2>&1 \
    || { tail -20 "$root.log" >&2; fail "debootstrap failed (the log's end is above)"; }
rm -f "$root.log"
# Nothing cached in the image: the package lists and archives are not needed to run.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import \
    --change "ENV LANG=C.UTF-8 JAVA_HOME=/usr/lib/jvm/java-17-openjdk-$(dpkg --print-architecture)" \
    --change 'CMD ["/bin/bash"]' - "$tag" >/dev/null
echo "built $tag in $(( $(date +%s) - started )) s: $(docker image inspect "$tag" --format '{{.Size}}' | awk '{printf "%.0f MB", $1 / 1e6}')"
