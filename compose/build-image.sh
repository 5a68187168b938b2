#!/usr/bin/env bash
# Build smr's image (tag smr:latest) for the compose cluster, reaching no registry:
#   1. the base image (compose/base/build.sh: debootstrap + docker import; cached);
#   2. the dependencies' image smr-deps:<hash of pyproject.toml>: wheels of smr's
#      dependencies with the Spark and Docker extras (the provisioner runs in a container), built on the host by PYTHON's pip (which trusts the
#      host's certificates: no build step reaches a package index), installed in a venv on
#      the base (compose/Dockerfile.deps); built once per pyproject.toml;
#   3. smr's own wheel and the example jobs on top (compose/Dockerfile): a small context,
#      so a rebuild after a change to smr takes seconds.
# Usage: compose/build-image.sh PYTHON   (make image passes the project's venv)
set -euo pipefail
cd "$(dirname "$0")/.."
python="${1:?usage: compose/build-image.sh PYTHON}"
build=compose/.build
started=$(date +%s)

compose/base/build.sh
rm -rf "$build/smr" && mkdir -p "$build/smr"
"$python" -m pip wheel -q --no-deps -w "$build/smr" .
wheel=$(ls "$build"/smr/smr-*.whl)
deps="smr-deps:$(cksum pyproject.toml | cut -d' ' -f1)"
if ! docker image inspect "$deps" >/dev/null 2>&1; then
    rm -rf "$build/deps" && mkdir -p "$build/deps"
    "$python" -m pip wheel -q -w "$build/deps" "$wheel[spark,docker]"
    rm -f "$build"/deps/smr-*.whl
    docker build -q -t "$deps" -f compose/Dockerfile.deps "$build/deps" >/dev/null
    rm -rf "$build/deps"
fi
cp -r examples "$build/smr/examples"
docker build -q --build-arg "DEPS=$deps" -t smr:latest -f compose/Dockerfile "$build/smr" >/dev/null
echo "built smr:latest in $(( $(date +%s) - started )) s: $(docker image inspect smr:latest --format '{{.Size}}' | awk '{printf "%.0f MB", $1 / 1e6}')"
