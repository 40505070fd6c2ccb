#!/usr/bin/env bash
# Builds the two base images the Containerfile names by build arguments, when the real ones
# (docker.io/library/rust:1.95-slim-bookworm, gcr.io/distroless/cc-debian12:nonroot) cannot be
# pulled: both from a debootstrapped Debian 12 (bookworm) root, imported with `podman import`.
#
#   builder: Debian 12 with gcc and libc6-dev, and this machine's Rust toolchain (rustc and
#            cargo only) at /usr/local/rust, CARGO_HOME=/usr/local/cargo as in rust:*-slim;
#   runtime: what distroless/cc has that the service uses: glibc, libgcc_s, libssl3, CA
#            certificates, tzdata, /etc/passwd with root and nonroot (65532), a 1777 /tmp,
#            and NO shell or package manager; USER 65532.
#
# Each image is tagged by a hash of this script and of the toolchain's version, and built
# only when missing: a rerun costs nothing. Prints two lines on stdout, the builder's and
# the runtime's reference, for `--build-arg BUILDER_IMAGE=... --build-arg RUNTIME_IMAGE=...`.
# Everything else goes to stderr. Runs as root (debootstrap, and podman's own storage).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
podman() { "$here/podman.sh" "$@"; }
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

for tool in debootstrap podman; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "stand-in-bases.sh: $tool is not installed (apt-get install podman runc buildah debootstrap; .ci/run installs them)" >&2
        exit 1
    fi
done
sysroot="$(rustc --print sysroot)"
rust_version="$(rustc --version)"
# Certificate authorities this machine adds to Debian's (a TLS-intercepting proxy's): the
# builder fetches crates through the same network, so it trusts them too.
local_cas=(/usr/local/share/ca-certificates/*.crt)
[[ -e "${local_cas[0]}" ]] || local_cas=()
tag="$(cat "${BASH_SOURCE[0]}" <(echo "$rust_version") ${local_cas[@]+"${local_cas[@]}"} | sha256sum | cut -c1-16)"
builder="localhost/gcounter-rls-standin-builder:$tag"
runtime="localhost/gcounter-rls-standin-runtime:$tag"

if podman image exists "$builder" && podman image exists "$runtime"; then
    echo "$builder"
    echo "$runtime"
    exit 0
fi

work="$(mktemp -d "${TMPDIR:-/var/tmp}/gcounter-rls-bases.XXXXXX")"
trap 'rm -rf "$work"' EXIT
root="$work/debian"
echo "stand-in-bases.sh: debootstrap bookworm from $MIRROR (a few minutes)" >&2
debootstrap --variant=minbase --include=gcc,libc6-dev,ca-certificates,tzdata,libssl3 \
    bookworm "$root" "$MIRROR" >"$work/debootstrap.log" 2>&1 || {
    tail -30 "$work/debootstrap.log" >&2
    echo "stand-in-bases.sh: debootstrap failed (is $MIRROR reachable?)" >&2
    exit 1
}
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*

# The runtime: the files of the packages distroless/cc-debian12 is made of, from the root
# above, and no others (no shell, no coreutils, no dpkg).
rt="$work/runtime"
mkdir -p "$rt"
for pkg in libc6 libgcc-s1 libssl3 ca-certificates tzdata netbase base-files; do
    chroot "$root" dpkg-query -L "$pkg" 2>/dev/null || true
done | sort -u | while IFS= read -r path; do
    [[ -n "$path" && ! -d "$root$path" ]] || continue
    case "$path" in
        */bin/* | */sbin/* | /usr/share/doc/* | /usr/share/man/* | /usr/share/lintian/* | /usr/share/locale/*) continue ;;
    esac
    [[ -e "$root$path" || -L "$root$path" ]] || continue
    mkdir -p "$rt$(dirname "$path")"
    cp -a "$root$path" "$rt$path"
done
# The certificates `update-ca-certificates` generated (not in any package's file list).
mkdir -p "$rt/etc/ssl"
cp -a "$root/etc/ssl/certs" "$rt/etc/ssl/"
# usrmerge: /lib, /lib64 are links into /usr as in Debian 12.
for link in lib lib64; do
    [[ -L "$root/$link" ]] && cp -a "$root/$link" "$rt/$link"
done
cat >"$rt/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
PASSWD
cat >"$rt/etc/group" <<'GROUP'
root:x:0:
nobody:x:65534:
nonroot:x:65532:
GROUP
mkdir -p "$rt/tmp" "$rt/home/nonroot" "$rt/root"
chmod 1777 "$rt/tmp"
chown 65532:65532 "$rt/home/nonroot"
chmod 700 "$rt/root"
if [[ -e "$rt/bin/sh" || -e "$rt/usr/bin/sh" ]]; then
    echo "stand-in-bases.sh: the runtime root has a shell" >&2
    exit 1
fi

# The builder: the whole root plus the toolchain's bin/ and lib/ (not its docs), trusting
# this machine's added certificate authorities.
if [[ ${#local_cas[@]} -gt 0 ]]; then
    cp "${local_cas[@]}" "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >&2
fi
mkdir -p "$root/usr/local/rust" "$root/usr/local/cargo/bin"
cp -a "$sysroot/bin" "$sysroot/lib" "$root/usr/local/rust/"
for tool in cargo rustc rustdoc; do
    ln -s "../../rust/bin/$tool" "$root/usr/local/cargo/bin/$tool"
done

echo "stand-in-bases.sh: importing $builder and $runtime" >&2
tar -C "$root" -c . | podman import \
    --change 'ENV PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV CARGO_HOME=/usr/local/cargo' \
    --change 'CMD ["bash"]' \
    - "$builder" >&2
tar -C "$rt" -c . | podman import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    --change 'USER 65532:65532' \
    --change 'WORKDIR /home/nonroot' \
    - "$runtime" >&2
# Stand-ins of an older recipe or toolchain are of no further use.
podman images --format '{{.Repository}}:{{.Tag}}' \
    | grep -E '^localhost/gcounter-rls-standin-(builder|runtime):' \
    | grep -v ":$tag\$" | xargs -r podman rmi >&2 || true
echo "$builder"
echo "$runtime"
