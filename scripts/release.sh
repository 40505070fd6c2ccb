#!/usr/bin/env bash
# A release's artifacts from one command, into dist/<version>/ (RELEASING.md):
#
#   gcounter-rls-<version>-x86_64-linux-gnu        the binary, stripped (glibc 2.36 or later)
#   gcounter-rls-<version>-x86_64-linux-gnu.debug  its debug info, split off (.gnu_debuglink)
#   gcounter-rls-<version>.oci.tar                 the image, an OCI archive (gcounter-rls:<version>)
#   gcounter-rls-<version>.cdx.json                SBOM of the binary's crates (CycloneDX)
#   THIRD-PARTY-LICENSES.md                        every dependency's license text
#   SHA256SUMS                                     sha256sum -c SHA256SUMS checks the above
#
# The binary is the one in the image: built by the Dockerfile (`cargo build --release
# --locked`, then split and stripped), copied out of its builder stage. The license check
# (about.toml's accepted licenses) runs first: a dependency under another license stops it.
#
#   bash scripts/release.sh                    # real bases (rust:1.95-slim-bookworm, distroless)
#   bash scripts/release.sh --stand-in-bases   # bases built here (integration/container/)
#
# Needs podman (integration/container/podman.sh runs it), cargo-about and cargo-cyclonedx
# (`cargo install --locked --features cli cargo-about`, `cargo install --locked
# cargo-cyclonedx`). Refuses a dirty work tree: the artifacts name a commit, and must be what
# it holds.
set -euo pipefail
cd "$(dirname "$0")/.."

bases=real
case "${1:-}" in
    "") ;;
    --stand-in-bases) bases=stand-in ;;
    *)
        echo "usage: scripts/release.sh [--stand-in-bases]" >&2
        exit 2
        ;;
esac

log() { printf '\n== %s\n' "$*" >&2; }
podman() { bash integration/container/podman.sh "$@"; }

for tool in "cargo-about --features cli" cargo-cyclonedx; do
    if ! command -v "${tool%% *}" >/dev/null 2>&1; then
        echo "release.sh: ${tool%% *} is missing: cargo install --locked $tool" >&2
        exit 1
    fi
done
if [[ -n "$(git status --porcelain)" ]]; then
    echo "release.sh: the work tree has changes; commit or stash them first" >&2
    git status --short >&2
    exit 1
fi

version="$(cargo metadata --format-version 1 --no-deps \
    | python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "gcounter-rls"))')"
commit="$(git rev-parse --short HEAD)"
out="dist/$version"
name="gcounter-rls-$version-x86_64-linux-gnu"
rm -rf "$out"
mkdir -p "$out"

log "license check and license texts (about.toml)"
cargo about generate --locked --fail about.hbs --output-file "$out/THIRD-PARTY-LICENSES.md"

log "SBOM (CycloneDX) of the binary's crates"
cargo cyclonedx --manifest-path Cargo.toml --format json --spec-version 1.5 \
    --override-filename sbom >&2
mv sbom.json "$out/gcounter-rls-$version.cdx.json"
# cargo-cyclonedx writes one next to every workspace member's manifest: only the binary's
# package is released.
git ls-files --others --exclude-standard -- '*sbom.json' | xargs -r rm -f

log "image ($bases bases)"
build_args=(--build-arg "RLS_BUILD_COMMIT=$commit")
pull=()
if [[ "$bases" == stand-in ]]; then
    mapfile -t stand_in < <(bash integration/container/stand-in-bases.sh)
    build_args+=(--build-arg "BUILDER_IMAGE=${stand_in[0]}" --build-arg "RUNTIME_IMAGE=${stand_in[1]}")
    pull=(--pull=never)
fi
# Kubernetes reads `gcounter-rls:<version>` as docker.io/library/gcounter-rls:<version>: the
# archive carries that full name, so `kind load image-archive` gives the node the image a
# Deployment naming `gcounter-rls:<version>` finds (podman would name it localhost/...).
image="docker.io/library/gcounter-rls:$version"
# The images these names held before, removed once the names move (unless still used).
replaced=()
for ref in "$image" localhost/gcounter-rls:dev; do
    replaced+=($(podman image inspect --format '{{.Id}}' "$ref" 2>/dev/null || true))
done
# No intermediate images (--layers=false): the Dockerfile's cache mounts keep the build fast.
podman build --layers=false ${pull[@]+"${pull[@]}"} "${build_args[@]}" \
    --tag "$image" --tag gcounter-rls:dev .
podman build --layers=false ${pull[@]+"${pull[@]}"} "${build_args[@]}" --target builder \
    --tag "localhost/gcounter-rls-builder:$version" . >/dev/null
podman save --format oci-archive --output "$out/gcounter-rls-$version.oci.tar" "$image"

log "binary and debug info, from the builder stage"
container="$(podman create "localhost/gcounter-rls-builder:$version")"
podman cp "$container:/usr/local/bin/gcounter-rls" "$out/$name"
podman cp "$container:/usr/local/bin/gcounter-rls.debug" "$out/$name.debug"
podman rm "$container" >/dev/null
podman rmi "localhost/gcounter-rls-builder:$version" >/dev/null
current="$(podman image inspect --format '{{.Id}}' "$image")"
for id in ${replaced[@]+"${replaced[@]}"}; do
    [[ "$id" == "$current" ]] || podman rmi "$id" >/dev/null 2>&1 || true
done
"$out/$name" --version | grep -q "$commit" || {
    echo "release.sh: $name --version does not name $commit" >&2
    exit 1
}

log "checksums"
(cd "$out" && sha256sum -- * >SHA256SUMS && sha256sum -c --quiet SHA256SUMS)
ls -l "$out" >&2
echo "$out"
