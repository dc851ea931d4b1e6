#!/usr/bin/env bash
# Build the image of Wharf itself (API, gateway, worker) without pulling from any registry.
#
#   build.sh [--force] [TAG]     (TAG defaults to wharf/wharf:<version in pyproject.toml>)
#
# As engine_images/vllm-cpu/build.sh does: a Debian bookworm minbase root filesystem made with
# debootstrap (its python3 is 3.11), the runtime lock (requirements.txt, hashes checked) pip-
# installed into /opt/wharf/venv inside a chroot, Wharf's source in /opt/wharf/app, then
# `docker import`. The image runs `api` (default), `gateway`, `worker` or `migrate` (see
# entrypoint.sh), as user wharf; the worker needs root for dockerd's socket and the node's
# cards: run it with `--user root`.
#
# Idempotent: the image is labelled with a digest of what went into it (source, lock, this
# script), and an existing TAG with the same digest is kept. A changed source is rebuilt under
# the same tag, so an image never runs older code than its checkout. --force rebuilds anyway.
# Needs root (debootstrap, chroot, mount) and a running dockerd; about a minute.
set -euo pipefail

FORCE=0
if [[ ${1:-} == --force ]]; then
    FORCE=1
    shift
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
START=$SECONDS
step() { echo "==> [$((SECONDS - START))s] $*"; }

VERSION=$(python3 -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' \
    "$REPO/pyproject.toml")
TAG=${1:-wharf/wharf:$VERSION}

# What the image holds of the checkout: the product, not its tests, benchmarks, engine images
# or deployment files. Files git does not ignore, committed or not (a build of a working tree
# holds what it runs), and the console's browser code that npm installed (ignored by git);
# outside a git checkout, every file but the usual caches.
EXCLUDED='^(tests|benchmarks|engine_images|images|deploy|test-artifacts|\.ci)/|^requirements-dev\.|^\.git'
VENDOR=frontend/static/frontend/vendor
source_files() {
    if git -C "$REPO" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git -C "$REPO" ls-files --cached --others --exclude-standard
        if [[ -d $REPO/$VENDOR ]]; then (cd "$REPO" && find "$VENDOR" -type f); fi
    else
        (cd "$REPO" && find . -type f ! -path './.venv/*' ! -path './.wharf/*' \
            ! -path '*/node_modules/*' ! -name '*.pyc' ! -path '*/__pycache__/*' | sed 's|^\./||')
    fi | grep -Ev "$EXCLUDED" | while read -r f; do
        if [[ -f $REPO/$f ]]; then echo "$f"; fi # listed by git, deleted since
    done | LC_ALL=C sort -u
}
FILES=$(mktemp /tmp/wharf-image-files.XXXXXX)
source_files >"$FILES"
# Content only (names, bytes, modes): the same checkout gives the same digest anywhere.
DIGEST=$({
    tar -C "$REPO" -c --no-recursion --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
        -T "$FILES"
    cat "$HERE/build.sh" "$HERE/entrypoint.sh"
} | sha256sum | cut -c1-16)

if [[ $FORCE == 0 ]] &&
    [[ $(docker image inspect -f '{{index .Config.Labels "org.wharf.source"}}' "$TAG" 2>/dev/null) == "$DIGEST" ]]; then
    echo "$TAG is up to date (source $DIGEST; use --force to rebuild)"
    rm -f "$FILES"
    exit 0
fi
if [[ $EUID != 0 ]]; then
    echo "build.sh must run as root (debootstrap and chroot need it)" >&2
    rm -f "$FILES"
    exit 1
fi
if ! command -v debootstrap >/dev/null; then
    step "installing debootstrap"
    apt-get update -qq && apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

# shellcheck source=images/debian_mirror.sh
source "$HERE/../debian_mirror.sh"
MIRROR=$(debian_mirror)
if [[ -z $MIRROR ]]; then
    echo "cannot find a Debian mirror in this machine's apt sources" >&2
    exit 1
fi

# On disk, not in /tmp (which may be a small tmpfs).
ROOTFS=$(mktemp -d /var/tmp/wharf-image-rootfs.XXXXXX)
cleanup() {
    # Unmount everything under the tree first (our /proc, or what a failed debootstrap left
    # mounted), deepest first: rm must never descend into the host's /proc or /sys.
    awk -v root="$ROOTFS/" 'index($2, root) == 1 { print $2 }' /proc/mounts | sort -r |
        while read -r m; do umount -l "$m" || true; done
    rm -rf --one-file-system "$ROOTFS" "$ROOTFS.debootstrap.log" "$FILES"
}
trap cleanup EXIT

step "debootstrap bookworm (minbase) from $MIRROR"
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$ROOTFS" "$MIRROR" >"$ROOTFS.debootstrap.log" 2>&1 ||
    { tail -20 "$ROOTFS.debootstrap.log" >&2; exit 1; }

# pip inside the chroot reaches the package index the way the host's pip does: the host's
# resolver, CA bundle (it may hold a proxy's CA that Debian's does not) and effective pip
# configuration (every config file merged; the PIP_* and proxy variables are passed below).
# All three are used for the build only and removed before the import.
cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf"
mkdir -p "$ROOTFS/tmp/wharf"
cp /etc/ssl/certs/ca-certificates.crt "$ROOTFS/tmp/wharf/host-ca.crt"
cp "$REPO/requirements.txt" "$ROOTFS/tmp/wharf/"
python3 - "$ROOTFS/tmp/wharf/pip.conf" <<'EOF'
import ast, configparser, subprocess, sys
listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                         capture_output=True, text=True, check=True).stdout
config = configparser.ConfigParser(interpolation=None)
for line in listing.splitlines():
    key, _, value = line.partition("=")
    section, _, name = key.partition(".")
    # ":env:" entries are passed as variables; local paths (find-links folders, file://
    # indexes, the host's cert) are not in the chroot.
    remote = [v for v in ast.literal_eval(value or "''").split() if not v.startswith(("/", "file:"))]
    if section and name and not section.startswith(":") and remote:
        config.setdefault(section, {})[name] = " ".join(remote)
with open(sys.argv[1], "w") as out:
    config.write(out)
EOF

step "installing requirements.txt into /opt/wharf/venv inside the chroot"
mount -t proc proc "$ROOTFS/proc"
CHROOT_ENV=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8
    PIP_CONFIG_FILE=/tmp/wharf/pip.conf PIP_CERT=/tmp/wharf/host-ca.crt PIP_NO_CACHE_DIR=1
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=180 PIP_PROGRESS_BAR=off)
for var in PIP_INDEX_URL PIP_EXTRA_INDEX_URL HTTP_PROXY HTTPS_PROXY NO_PROXY http_proxy https_proxy no_proxy; do
    if [[ -n ${!var:-} ]]; then CHROOT_ENV+=("$var=${!var}"); fi
done
# Wheels only: the image has no compiler, and the lock's hashes are checked for every file.
chroot "$ROOTFS" /usr/bin/env -i "${CHROOT_ENV[@]}" bash -euc '
    python3 -m venv /opt/wharf/venv
    /opt/wharf/venv/bin/pip install --quiet --require-hashes --only-binary=:all: \
        -r /tmp/wharf/requirements.txt
'

step "copying Wharf's source ($(wc -l <"$FILES") files) into /opt/wharf/app"
mkdir -p "$ROOTFS/opt/wharf/app"
tar -C "$REPO" -c --no-recursion -T "$FILES" | tar -C "$ROOTFS/opt/wharf/app" -x --no-same-owner
install -m 0755 "$HERE/entrypoint.sh" "$ROOTFS/opt/wharf/entrypoint.sh"
chmod -R u=rwX,go=rX "$ROOTFS/opt/wharf/app"
# The `wharf` command line (pyproject's console script), built by the locked setuptools.
chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 \
    /opt/wharf/venv/bin/pip install --quiet --no-index --no-deps --no-build-isolation \
    --disable-pip-version-check -e /opt/wharf/app
chroot "$ROOTFS" /opt/wharf/venv/bin/python -m compileall -q /opt/wharf/app >/dev/null
# Fail here, not at the first start, if the image cannot load the product.
chroot "$ROOTFS" /usr/bin/env -i PATH=/opt/wharf/venv/bin:/usr/bin:/bin LANG=C.UTF-8 \
    WHARF_HOME=/tmp/wharf/check DJANGO_SETTINGS_MODULE=controlplane.settings bash -euc '
    cd /opt/wharf/app
    python manage.py check >/dev/null
    python -c "import gateway.app, workers.celery, workers.tasks"
'
# The user the API, gateway and migrations run as; its home is WHARF_HOME.
echo 'wharf:x:10001:10001:Wharf:/var/lib/wharf:/usr/sbin/nologin' >>"$ROOTFS/etc/passwd"
echo 'wharf:x:10001:' >>"$ROOTFS/etc/group"
install -d -m 0700 -o 10001 -g 10001 "$ROOTFS/var/lib/wharf"
umount "$ROOTFS/proc"

step "trimming"
rm -rf "${ROOTFS:?}"/tmp/* "$ROOTFS"/root/.cache "$ROOTFS"/var/cache/apt/archives/*.deb \
    "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/log/*.log "$ROOTFS"/usr/share/doc/* \
    "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/* "$ROOTFS"/usr/share/locale/*
: >"$ROOTFS/etc/resolv.conf"

step "importing the root filesystem as $TAG"
PREVIOUS=$(docker image inspect -f '{{.Id}}' "$TAG" 2>/dev/null || true)
tar -C "$ROOTFS" --numeric-owner -c . | docker import \
    -c 'ENV PATH=/opt/wharf/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c 'ENV LANG=C.UTF-8' \
    -c 'ENV PYTHONUNBUFFERED=1' \
    -c 'ENV DJANGO_SETTINGS_MODULE=controlplane.settings' \
    -c 'ENV WHARF_HOME=/var/lib/wharf' \
    -c 'WORKDIR /opt/wharf/app' \
    -c 'USER wharf' \
    -c 'EXPOSE 8000 9000' \
    -c "LABEL org.wharf.version=$VERSION org.wharf.source=$DIGEST" \
    -c 'ENTRYPOINT ["/opt/wharf/entrypoint.sh"]' \
    -c 'CMD ["api"]' \
    - "$TAG" >/dev/null

# The image this one replaces under the tag, unless something still uses it.
if [[ -n $PREVIOUS && $PREVIOUS != $(docker image inspect -f '{{.Id}}' "$TAG") ]]; then
    docker image rm "$PREVIOUS" >/dev/null 2>&1 || true
fi
step "built $TAG ($(docker image inspect -f '{{.Size}}' "$TAG" | awk '{ printf "%.0f MB", $1 / 1e6 }'), source $DIGEST) in $((SECONDS - START))s"
