#!/usr/bin/env bash
# Build the vLLM CPU engine image without pulling anything from a container registry.
#
#   build.sh [--force] [TAG]        (TAG defaults to wharf/vllm-cpu:0.32.0)
#
# No base image can be pulled here, so the image is a Debian bookworm root filesystem made
# with debootstrap (its python3 is 3.11, the ABI of our wheels), with vLLM installed into
# /opt/vllm by install_venv.sh running inside a chroot, then imported with `docker import`.
# Needs root (debootstrap, chroot, mount) and a running dockerd. Takes a few minutes.
set -euo pipefail

FORCE=0
if [[ ${1:-} == --force ]]; then
    FORCE=1
    shift
fi
TAG=${1:-wharf/vllm-cpu:0.32.0}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
START=$SECONDS
step() { echo "==> [$((SECONDS - START))s] $*"; }

if [[ $FORCE == 0 ]] && docker image inspect "$TAG" >/dev/null 2>&1; then
    echo "$TAG already exists (use --force to rebuild)"
    exit 0
fi
if [[ $EUID != 0 ]]; then
    echo "build.sh must run as root (debootstrap and chroot need it)" >&2
    exit 1
fi
if ! command -v debootstrap >/dev/null; then
    step "installing debootstrap"
    apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null
fi

# shellcheck source=images/debian_mirror.sh
source "$HERE/../../images/debian_mirror.sh"
MIRROR=$(debian_mirror)
if [[ -z $MIRROR ]]; then
    echo "cannot find a Debian mirror in this machine's apt sources" >&2
    exit 1
fi

# On disk, not in /tmp (which may be a small tmpfs): the tree grows to ~4 GB.
ROOTFS=$(mktemp -d /var/tmp/wharf-vllm-rootfs.XXXXXX)
cleanup() {
    # Unmount everything under the tree first (our /proc, or what a failed debootstrap left
    # mounted), deepest first: rm must never descend into the host's /proc or /sys.
    awk -v root="$ROOTFS/" 'index($2, root) == 1 { print $2 }' /proc/mounts | sort -r |
        while read -r m; do umount -l "$m" || true; done
    rm -rf --one-file-system "$ROOTFS" "$ROOTFS.debootstrap.log"
}
trap cleanup EXIT

step "debootstrap bookworm from $MIRROR into $ROOTFS"
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,libnuma1,libgomp1 \
    bookworm "$ROOTFS" "$MIRROR" >"$ROOTFS.debootstrap.log" 2>&1 ||
    { tail -20 "$ROOTFS.debootstrap.log" >&2; exit 1; }

# The host's resolver and CA bundle: pip inside the chroot must reach PyPI the way the host
# does (the host bundle may hold a proxy's CA that Debian's does not). The bundle is only
# used for the build and removed afterwards; docker supplies resolv.conf at run time.
cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf"
mkdir -p "$ROOTFS/tmp/wharf/wheels"
cp /etc/ssl/certs/ca-certificates.crt "$ROOTFS/tmp/wharf/host-ca.crt"
cp "$HERE/install_venv.sh" "$HERE/requirements.lock" "$ROOTFS/tmp/wharf/"

step "fetching the torch CPU wheel with the host's pip settings"
# PyPI has only CUDA torch; the +cpu wheel is in the host's configured wheel folder.
python3 -m pip download --quiet --no-deps --dest "$ROOTFS/tmp/wharf/wheels" "torch==2.13.0+cpu"

step "installing vLLM into /opt/vllm inside the chroot"
mount -t proc proc "$ROOTFS/proc"
# A clean environment: the host's PIP_* settings point at folders the chroot does not have.
CHROOT_ENV=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
    PIP_CERT=/tmp/wharf/host-ca.crt PIP_FIND_LINKS=/tmp/wharf/wheels PIP_NO_CACHE_DIR=1
    PIP_DEFAULT_TIMEOUT=180 PIP_PROGRESS_BAR=off)
for var in PIP_INDEX_URL HTTP_PROXY HTTPS_PROXY NO_PROXY http_proxy https_proxy no_proxy; do
    if [[ -n ${!var:-} ]]; then CHROOT_ENV+=("$var=${!var}"); fi
done
chroot "$ROOTFS" /usr/bin/env -i "${CHROOT_ENV[@]}" \
    bash /tmp/wharf/install_venv.sh /opt/vllm /usr/bin/python3
umount "$ROOTFS/proc"

step "cleaning caches"
rm -rf "${ROOTFS:?}"/tmp/* "$ROOTFS"/root/.cache "$ROOTFS"/var/cache/apt/archives/*.deb \
    "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/log/*.log
: >"$ROOTFS/etc/resolv.conf"

step "importing the root filesystem as $TAG"
# HF_HUB_OFFLINE: models are mounted, never downloaded. VLLM_NO_USAGE_STATS/DO_NOT_TRACK:
# vLLM otherwise phones home from a background thread. VLLM_CPU_KVCACHE_SPACE=1 (GiB of KV
# cache) keeps the default small; deployments override it with -e.
tar -C "$ROOTFS" --numeric-owner -c . | docker import \
    -c 'ENV PATH=/opt/vllm/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c 'ENV LANG=C.UTF-8' \
    -c 'ENV VLLM_CPU_KVCACHE_SPACE=1' \
    -c 'ENV HF_HUB_OFFLINE=1' \
    -c 'ENV VLLM_NO_USAGE_STATS=1' \
    -c 'ENV DO_NOT_TRACK=1' \
    -c 'LABEL org.wharf.engine=vllm-cpu org.wharf.engine.version=0.32.0' \
    -c 'EXPOSE 8000' \
    -c 'CMD ["python", "-m", "vllm.entrypoints.openai.api_server", "--host", "0.0.0.0", "--port", "8000", "--enforce-eager", "--model", "/models/model"]' \
    - "$TAG" >/dev/null

step "built $TAG ($(docker image inspect -f '{{.Size}}' "$TAG" | awk '{ printf "%.1f GB", $1 / 1e9 }')) in $((SECONDS - START))s"
