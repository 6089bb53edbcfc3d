#!/usr/bin/env bash
# Build the product image from the repository's Dockerfile into an OCI image archive, without a docker
# daemon or a registry: `make image` runs this.
#
#   1. a base root from Debian's packages (mmdebstrap: python3, python3-venv, ca-certificates, passwd),
#      cached as a tar keyed by its package list, imported into buildah's storage as a local image;
#   2. `buildah bud` of ./Dockerfile with --build-arg PYTHON_IMAGE=<that image> (overlay storage, or vfs
#      where overlay cannot mount; chroot isolation; layers cached), this machine's pip configuration
#      and CA bundle mounted read-only into the RUN steps only (tools/image/pip_mounts.py);
#   3. `buildah push` to an OCI archive, named for containerd (tools/image/oci.py name);
#   4. a check of the archive itself: its config (user, entrypoint) and `lockstep [operator|sidecar]
#      --help` run in its unpacked root as the image's user; only then is it moved to $OUT.
#
# Environment: IMAGE (default: the chart's repository and appVersion), OUT (dist/lockstep-oci.tar),
# LOCKSTEP_IMAGE_CACHE (~/.cache/lockstep-image: base tars, buildah's storage), SUITE (bookworm),
# LOCKSTEP_IMAGE_DRIVER (overlay or vfs; default: overlay if it works here).
# Needs root (mmdebstrap, chroot); installs buildah and mmdebstrap with apt-get when they are missing.
set -euo pipefail

cd "$(dirname "$0")/../.."
HERE=tools/image
SUITE=${SUITE:-bookworm}
CACHE=${LOCKSTEP_IMAGE_CACHE:-$HOME/.cache/lockstep-image}
OUT=${OUT:-dist/lockstep-oci.tar}
PYTHON=${PYTHON:-python3}
if [ -z "${IMAGE:-}" ]; then
    repository=$(sed -n 's/^  repository: *//p' charts/lockstep/values.yaml | head -n1)
    version=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/lockstep/Chart.yaml)
    IMAGE=$repository:$version
fi
started=$(date +%s)
say() { echo "image: $*"; }

if [ "$(id -u)" != 0 ]; then
    echo "image: run as root: mmdebstrap makes the base root and the check chroots into the image" >&2
    exit 1
fi
missing=()
command -v buildah >/dev/null || missing+=(buildah)
command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]} (apt-get)"
    apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null 2>&1 || {
        apt-get update >/dev/null && apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; } || {
        echo "image: could not install ${missing[*]}: apt-get install -y --no-install-recommends ${missing[*]}" >&2
        exit 1; }
fi

mkdir -p "$CACHE" "$(dirname "$OUT")"
# buildah's storage: overlay where the kernel lets buildah mount it here (a layer costs only what it
# changes), else vfs (every layer a full copy of a root: slower, works anywhere). LOCKSTEP_IMAGE_DRIVER
# chooses.
storage() { echo buildah --root "$CACHE/storage-$1" --runroot "$CACHE/run-$1" --storage-driver "$1"; }
DRIVER=${LOCKSTEP_IMAGE_DRIVER:-}
if [ -z "$DRIVER" ]; then
    DRIVER=vfs
    if grep -qw overlay /proc/filesystems; then
        read -r -a probe <<<"$(storage overlay)"
        if ctr=$("${probe[@]}" from scratch 2>/dev/null); then
            "${probe[@]}" mount "$ctr" >/dev/null 2>&1 && DRIVER=overlay
            "${probe[@]}" rm "$ctr" >/dev/null 2>&1 || true
        fi
    fi
fi
read -r -a BUILDAH <<<"$(storage "$DRIVER")"

# 1. The base: Debian's python3 (3.11 in bookworm), no apt, no docs. The "essential" variant has no
#    apt; the merged-usr hook avoids the usrmerge package (which pulls in perl).
PACKAGES=python3,python3-venv,ca-certificates,passwd
MMDEBSTRAP_OPTIONS=(--format=tar --variant=essential --include="$PACKAGES"
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/doc/*'
    --dpkgopt='path-include=/usr/share/doc/*/copyright'
    --skip=output/dev --customize-hook='rm -f "$1"/var/cache/debconf/*-old "$1"/var/log/dpkg.log')
sources=()
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && sources+=("$f")
done
key=$(printf '%s\n' "$SUITE" "${MMDEBSTRAP_OPTIONS[@]}" | cat - "${sources[@]}" | sha256sum | cut -c1-12)
BASE_TAR=$CACHE/base-$SUITE-$key.tar
BASE_IMAGE=localhost/lockstep-base:$SUITE-$key
if [ ! -f "$BASE_TAR" ]; then
    say "making the base root $BASE_TAR (mmdebstrap $SUITE: $PACKAGES)"
    mmdebstrap --quiet "${MMDEBSTRAP_OPTIONS[@]}" "$SUITE" "$BASE_TAR.tmp" "${sources[@]}"
    mv "$BASE_TAR.tmp" "$BASE_TAR"
fi
if ! "${BUILDAH[@]}" inspect --type image "$BASE_IMAGE" >/dev/null 2>&1; then
    say "importing the base as $BASE_IMAGE"
    ctr=$("${BUILDAH[@]}" from scratch)
    "${BUILDAH[@]}" add --quiet "$ctr" "$BASE_TAR" /
    "${BUILDAH[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --env LANG=C.UTF-8 --cmd python3 "$ctr"
    "${BUILDAH[@]}" commit --quiet --rm "$ctr" "$BASE_IMAGE" >/dev/null
fi

# 2. The Dockerfile, as written, on that base. Its cached layers make a re-run quick; past a bound
#    (LOCKSTEP_IMAGE_CACHE_MB; with vfs every layer is a full root) the untagged ones go first.
if [ "$(du -sm "$CACHE/storage-$DRIVER" 2>/dev/null | cut -f1)" -gt "${LOCKSTEP_IMAGE_CACHE_MB:-8000}" ]; then
    say "pruning buildah's layer cache in $CACHE/storage-$DRIVER"
    "${BUILDAH[@]}" rmi --prune >/dev/null 2>&1 || true
fi
mapfile -t PIP_MOUNTS < <("$PYTHON" "$HERE/pip_mounts.py" "$CACHE/pip")
say "building $IMAGE from ./Dockerfile (buildah bud, $DRIVER storage, base $BASE_IMAGE)"
"${BUILDAH[@]}" bud --isolation chroot --layers --force-rm --pull-never \
    --build-arg PYTHON_IMAGE="$BASE_IMAGE" "${PIP_MOUNTS[@]}" \
    -f Dockerfile -t "$IMAGE" .

# 3. The archive, named as containerd imports it.
# (written beside $OUT and moved into place once checked: a reader never sees half an archive)
ARCHIVE=$OUT.partial.tar
rm -f "$ARCHIVE"
"${BUILDAH[@]}" push --quiet "$IMAGE" "oci-archive:$ARCHIVE:$IMAGE"
"$PYTHON" "$HERE/oci.py" name "$ARCHIVE" "$IMAGE" >/dev/null

# 4. The archive itself: its config, then the entrypoint run in its unpacked root.
"$PYTHON" - "$ARCHIVE" "$IMAGE" <<'EOF'
import json, subprocess, sys
archive, image = sys.argv[1:]
inspected = subprocess.run([sys.executable, "tools/image/oci.py", "inspect", archive], capture_output=True, text=True)
if inspected.returncode:
    sys.exit(f"image: cannot read {archive}: {inspected.stderr.strip()}")
info = json.loads(inspected.stdout)
problems = [f"{key} is {info[key]!r}, expected {want!r}" for key, want in
            (("name", image), ("user", "65532:65532"), ("entrypoint", ["lockstep"])) if info[key] != want]
if problems:
    sys.exit("image: the archive's config: " + "; ".join(problems))
print(f"image: config ok: user {info['user']}, entrypoint {info['entrypoint']}, {info['layers']} layers")
EOF
root=$(mktemp -d "${TMPDIR:-/tmp}/lockstep-image.XXXXXX")
chmod 755 "$root"  # mktemp makes it 0700: the image's user could not walk its own /
trap 'rm -rf "$root" "$ARCHIVE"' EXIT
"$PYTHON" "$HERE/oci.py" unpack "$ARCHIVE" "$root"
unpacked=$(du -sm "$root" | cut -f1)
for command in "" operator sidecar; do
    # shellcheck disable=SC2086 # "" is the top-level help
    if ! help=$("$PYTHON" "$HERE/oci.py" run --root "$root" "$ARCHIVE" -- $command --help 2>&1) \
            || [[ $help != *Usage:* ]]; then
        echo "$help" >&2
        echo "image: \`lockstep $command --help\` failed in the image" >&2
        exit 1
    fi
done
say "smoke ok: \`lockstep [operator|sidecar] --help\` run in the unpacked image, as its user 65532:65532"
mv "$ARCHIVE" "$OUT"
say "$OUT: $IMAGE, $(( $(stat -c %s "$OUT") / 1000000 )) MB compressed, ${unpacked} MB unpacked, $(( $(date +%s) - started )) s"
