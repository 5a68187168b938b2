#!/usr/bin/env bash
# Build smr's image (tag smr:latest) for the compose cluster, reaching no registry:
#   1. the base image (compose/base/build.sh: debootstrap + docker import; cached), and
#      smr-prometheus:latest on it (Debian's Prometheus, for the metrics profile; cached);
#   2. the dependencies' image smr-deps:<hash of pyproject.toml>: wheels of smr's
#      dependencies with the Spark and Docker extras (the provisioner runs in a container), built on the host by PYTHON's pip (which trusts the
#      host's certificates: no build step reaches a package index), installed in a venv on
#      the base (compose/Dockerfile.deps); built once per pyproject.toml;
#   3. smr's own wheel (with smr._native, compiled here by cargo from native/: the host needs
#      a Rust toolchain, the image does not) and the example jobs on top (compose/Dockerfile):
#      a small context, so a rebuild after a change to smr takes seconds.
# Usage: compose/build-image.sh PYTHON   (make image passes the project's venv)
set -euo pipefail
cd "$(dirname "$0")/.."
python="${1:?usage: compose/build-image.sh PYTHON}"
build=compose/.build
started=$(date +%s)

compose/base/build.sh
# The metrics profile's Prometheus: the binary of Debian's package, downloaded by the host's
# apt (Debian's packages are reachable; no registry is), on the same base. Built once.
if ! docker image inspect smr-prometheus:latest >/dev/null 2>&1; then
    rm -rf "$build/prometheus" && mkdir -p "$build/prometheus"
    (cd "$build/prometheus" && apt-get download -q prometheus >/dev/null 2>&1) \
        || { apt-get update -q >/dev/null && (cd "$build/prometheus" && apt-get download -q prometheus >/dev/null); }
    dpkg-deb -x "$build"/prometheus/prometheus_*.deb "$build/prometheus/root"
    cp "$build/prometheus/root/usr/bin/prometheus" "$build/prometheus/prometheus"
    rm -rf "$build/prometheus/root" "$build"/prometheus/*.deb
    docker build -q -t smr-prometheus:latest -f compose/Dockerfile.prometheus "$build/prometheus" >/dev/null
    rm -rf "$build/prometheus"
    echo "built smr-prometheus:latest (Debian's Prometheus)"
fi
deps="smr-deps:$(cksum pyproject.toml | cut -d' ' -f1)"
# smr's own layer is cached by the contents of what goes into it (the sources, the example
# jobs, the packaging: git's hashes of them, any change not committed, any new file) and the
# dependencies' image it sits on: unchanged, nothing is built. Outside a git work tree it is
# always built.
sources_sum() {
    local paths=(smr ring checkpoint examples native/src native/Cargo.toml native/Cargo.lock
                 pyproject.toml MANIFEST.in compose/Dockerfile)
    if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        date +%s%N
        return
    fi
    { git ls-files -s -- "${paths[@]}"
      git diff HEAD -- "${paths[@]}"
      git ls-files -z --others --exclude-standard -- "${paths[@]}" | xargs -0 -r cat
      echo "$deps"; } | cksum | cut -d' ' -f1
}
sources=$(sources_sum)
if [ "$(docker image inspect smr:latest --format '{{index .Config.Labels "smr.sources"}}' 2>/dev/null)" = "$sources" ] \
    && docker image inspect "$deps" >/dev/null 2>&1; then
    echo "smr:latest is up to date (sources $sources)"
    exit 0
fi
rm -rf "$build/smr" && mkdir -p "$build/smr"
command -v cargo >/dev/null || { echo "compose/build-image.sh: cargo is missing: smr's wheel compiles smr._native (native/, Rust); install a Rust toolchain" >&2; exit 2; }
"$python" -m pip wheel -q --no-deps -w "$build/smr" .
wheel=$(ls "$build"/smr/smr_ring-*.whl)
if ! docker image inspect "$deps" >/dev/null 2>&1; then
    rm -rf "$build/deps" && mkdir -p "$build/deps"
    "$python" -m pip wheel -q -w "$build/deps" "$wheel[spark,docker]"
    rm -f "$build"/deps/smr_ring-*.whl
    docker build -q -t "$deps" -f compose/Dockerfile.deps "$build/deps" >/dev/null
    rm -rf "$build/deps"
fi
cp -r examples "$build/smr/examples"
docker build -q --build-arg "DEPS=$deps" --label "smr.sources=$sources" -t smr:latest \
    -f compose/Dockerfile "$build/smr" >/dev/null
echo "built smr:latest in $(( $(date +%s) - started )) s: $(docker image inspect smr:latest --format '{{.Size}}' | awk '{printf "%.0f MB", $1 / 1e6}')"
