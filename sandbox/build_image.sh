#!/usr/bin/env bash
# Build the spade-ray sandbox image locally (no registry needed) and print its
# image ID (sha256:...) as the last line of stdout. All progress goes to stderr.
#
#   rootfs: debootstrap --variant=minbase --include=python3 bookworm, stripped,
#           cached in $SPADE_CACHE/sandbox-rootfs (rebuilt only if missing/stale)
#   image:  rootfs + /opt/spade-sandbox/{harness,spawner,pump,child,cleanup,grader,recording,
#           canonical,framing}.py + /work,
#           via `docker import`
#   tag:    spade-ray-sandbox:<12 hex of sha256(those files, in that order, + this script)>;
#           if that tag exists, its ID is printed and nothing is rebuilt.
#
# Environment (all optional):
#   SPADE_CACHE          cache root (default ~/.cache/spade-ray)
#   SPADE_DEBIAN_MIRROR  Debian mirror URL (default: read from the host's apt sources)
# Run it like (a bare --tmpfs /work is root-owned 0755, so give it to the uid):
#   docker run --rm --read-only --network none --cap-drop ALL \
#     --security-opt no-new-privileges --user 65534:65534 \
#     --tmpfs /work:size=64m,uid=65534,gid=65534 IMAGE python3 /opt/spade-sandbox/harness.py
# Needs root for the build steps (debootstrap, reading root-only files); the
# no-op path (tag already present) only needs access to docker.
set -euo pipefail
# dockerd, debootstrap, chroot live in sbin, which a non-login root PATH may lack.
export PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin

SELF=$(readlink -f "${BASH_SOURCE[0]}")
HERE=$(dirname "$SELF")
# What runs in the jail, in this order (docker_engine.image_tag hashes the same files).
JAIL_FILES=("$HERE/harness.py" "$HERE/spawner.py" "$HERE/pump.py" "$HERE/child.py"
            "$HERE/cleanup.py" "$HERE/grader.py" "$HERE/recording.py" "$HERE/canonical.py"
            "$HERE/framing.py")
CACHE=${SPADE_CACHE:-${HOME:?HOME is unset; set SPADE_CACHE}/.cache/spade-ray}
ROOTFS=$CACHE/sandbox-rootfs
SUITE=bookworm
IMAGE_REPO=spade-ray-sandbox
SANDBOX_UID=65534   # Debian's nobody:nogroup, reused as the sandbox user
# Bump RECIPE when the rootfs recipe below changes, so cached rootfs are rebuilt.
RECIPE="v1 $SUITE minbase include=python3 strip=docs,man,locale,apt-lists"
STAMP=.spade-rootfs-recipe   # lives in the rootfs dir, excluded from the image

log() { echo "build_image: $*" >&2; }
die() { echo "build_image: ERROR: $*" >&2; exit 1; }

need_root() { [[ $(id -u) -eq 0 ]] || die "$1 needs root (run as root or via sudo)"; }

apt_install() {
    command -v apt-get >/dev/null 2>&1 || die "apt-get not available to install: $*"
    need_root "installing $*"
    log "installing $* with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >&2 || die "apt-get update failed"
    apt-get install -y -q --no-install-recommends "$@" >&2 || die "apt-get install $* failed"
}

# Debian mirror for $SUITE from the host's apt config (deb822 first, then the
# one-line format). Never hard-code a host: CI machines use their own mirror.
find_mirror() {
    local f uri
    if [[ -n ${SPADE_DEBIAN_MIRROR:-} ]]; then echo "$SPADE_DEBIAN_MIRROR"; return; fi
    for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list.d/*.sources; do
        [[ -r $f ]] || continue
        # Paragraph mode: first URI of the first "deb" stanza whose Suites has $SUITE.
        uri=$(awk -v suite="$SUITE" 'BEGIN { RS = ""; FS = "\n" }
            { types = ""; uris = ""; suites = ""
              for (i = 1; i <= NF; i++) {
                if ($i ~ /^Types:/)  { types = $i;  sub(/^Types:[ \t]*/, "", types) }
                if ($i ~ /^URIs:/)   { uris = $i;   sub(/^URIs:[ \t]*/, "", uris) }
                if ($i ~ /^Suites:/) { suites = $i; sub(/^Suites:[ \t]*/, "", suites) }
              }
              if ((" " types " ") !~ / deb /) next
              n = split(suites, s, /[ \t]+/)
              for (j = 1; j <= n; j++) if (s[j] == suite) { split(uris, u, /[ \t]+/); print u[1]; exit }
            }' "$f")
        if [[ -n $uri ]]; then echo "$uri"; return; fi
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -r $f ]] || continue
        # deb [opts] URI SUITE components...
        uri=$(awk -v suite="$SUITE" '$1 == "deb" { i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
                                                   if ($(i + 1) == suite) { print $i; exit } }' "$f")
        if [[ -n $uri ]]; then echo "$uri"; return; fi
    done
    return 1
}

# Remove a (possibly half-built) rootfs dir. debootstrap mounts /proc and /sys
# inside the target; if it was killed they may still be mounted, so unmount and
# never let rm cross into another filesystem.
remove_tree() {
    local d=$1 m
    [[ -e $d ]] || return 0
    while read -r m; do
        umount -l "$m" 2>/dev/null || true
    done < <(awk -v p="$d/" 'index($2, p) == 1 { print $2 }' /proc/self/mounts | sort -r)
    rm -rf --one-file-system "$d"
}

# Make the rootfs small: nothing here is needed to run python3 + its stdlib.
strip_rootfs() {
    local r=$1
    rm -rf "${r:?}"/var/lib/apt/lists/* "${r:?}"/var/cache/apt/* "${r:?}"/var/cache/debconf/*-old \
        "${r:?}"/var/lib/dpkg/*-old "${r:?}"/usr/share/doc/* "${r:?}"/usr/share/man/* \
        "${r:?}"/usr/share/info/* "${r:?}"/usr/share/locale/* "${r:?}"/usr/share/lintian/* \
        "${r:?}"/dev/* "${r:?}"/tmp/* "${r:?}"/var/tmp/* "${r:?}"/root/.[!.]*
    mkdir -p "$r"/var/lib/apt/lists/partial
    find "$r"/var/log -type f -delete
    # Host identity leaked by debootstrap; docker bind-mounts its own at run time.
    : >"$r"/etc/resolv.conf
    : >"$r"/etc/hostname
    # Keep docs/man/locales out if someone later apt-installs into a derived image.
    cat >"$r"/etc/dpkg/dpkg.cfg.d/01-spade-nodoc <<'EOF'
path-exclude /usr/share/doc/*
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
EOF
}

build_rootfs() {
    local mirror tmp
    need_root "debootstrap"
    command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap debian-archive-keyring gpgv wget
    mirror=$(find_mirror) || die "no Debian $SUITE mirror found in /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list; set SPADE_DEBIAN_MIRROR=http://..."
    # Same filesystem as $ROOTFS so the final rename is atomic.
    tmp=$(mktemp -d "$ROOTFS.tmp.XXXXXX")
    TMP_ROOTFS=$tmp   # for the EXIT trap
    chmod 0755 "$tmp" # mktemp makes it 0700; it becomes the image's "/"
    log "debootstrap $SUITE from $mirror into $tmp (about a minute)"
    if ! debootstrap --variant=minbase --include=python3 "$SUITE" "$tmp" "$mirror" >&2; then
        [[ -r $tmp/debootstrap/debootstrap.log ]] && tail -n 20 "$tmp/debootstrap/debootstrap.log" >&2
        die "debootstrap failed (mirror $mirror)"
    fi
    chroot "$tmp" /usr/bin/python3 -c 'import json, ssl, sqlite3, ctypes' \
        || die "python3 in the fresh rootfs is broken"
    strip_rootfs "$tmp"
    echo "$RECIPE" >"$tmp/$STAMP"
    # Swap in atomically; a stale cached rootfs is moved aside first.
    if [[ -e $ROOTFS ]]; then
        local old
        old=$(mktemp -d "$ROOTFS.old.XXXXXX")
        mv -T "$ROOTFS" "$old/rootfs"
        mv -T "$tmp" "$ROOTFS"
        remove_tree "$old"
    else
        mv -T "$tmp" "$ROOTFS"
    fi
    TMP_ROOTFS=
    log "cached rootfs at $ROOTFS ($(du -sh --one-file-system "$ROOTFS" | cut -f1))"
}

cleanup() {
    [[ -n ${TMP_ROOTFS:-} ]] && remove_tree "$TMP_ROOTFS"
    [[ -n ${STAGE:-} ]] && rm -rf "$STAGE"
    return 0
}
trap cleanup EXIT

# ---------------------------------------------------------------------------
for f in "${JAIL_FILES[@]}"; do [[ -r $f ]] || die "jail file $f not found"; done
HASH=$(cat "${JAIL_FILES[@]}" "$SELF" | sha256sum | cut -c1-12)
TAG=$IMAGE_REPO:$HASH

if ! docker info >/dev/null 2>&1; then
    log "docker engine not reachable; running start_dockerd.sh"
    "$HERE/start_dockerd.sh" >&2 || die "no docker engine (start_dockerd.sh failed)"
fi

# Fast path: this exact harness + script was built already.
if id=$(docker image inspect --format '{{.Id}}' "$TAG" 2>/dev/null); then
    log "$TAG already exists"
    echo "$id"
    exit 0
fi

need_root "building the image"
mkdir -p "$CACHE"
# One build at a time per cache (rootfs build and import).
exec 9>"$CACHE/.build.lock"
flock -w 900 9 || die "timed out waiting for another build_image.sh (lock $CACHE/.build.lock)"
if id=$(docker image inspect --format '{{.Id}}' "$TAG" 2>/dev/null); then
    log "$TAG was built by a concurrent run"
    echo "$id"
    exit 0
fi

# Leftovers of interrupted builds (we hold the lock, so nobody is using them).
for d in "$ROOTFS".tmp.* "$ROOTFS".old.*; do
    if [[ -e $d ]]; then
        log "removing leftover $d"
        remove_tree "$d"
    fi
done

if [[ -r $ROOTFS/$STAMP && $(cat "$ROOTFS/$STAMP") == "$RECIPE" ]]; then
    log "using cached rootfs $ROOTFS"
else
    build_rootfs
fi

# Overlay with the harness, staged separately so the cached rootfs is never modified.
STAGE=$(mktemp -d)
install -d -m 0755 -o 0 -g 0 "$STAGE/opt/spade-sandbox"
install -m 0644 -o 0 -g 0 "${JAIL_FILES[@]}" "$STAGE/opt/spade-sandbox/"
install -d -m 0755 -o "$SANDBOX_UID" -g "$SANDBOX_UID" "$STAGE/work"

log "importing $TAG"
id=$(tar --numeric-owner --exclude="./$STAMP" -C "$ROOTFS" -c . -C "$STAGE" ./opt/spade-sandbox ./work |
    docker import \
        --change "USER $SANDBOX_UID:$SANDBOX_UID" \
        --change 'WORKDIR /work' \
        --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
        --change 'ENV HOME=/work' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'ENV PYTHONDONTWRITEBYTECODE=1' \
        --change "LABEL org.spade-ray.sandbox.hash=$HASH" \
        --change 'CMD ["python3"]' \
        --message "spade-ray sandbox ($SUITE minbase + python3, harness $HASH)" \
        - "$TAG") || die "docker import failed"
id=$(docker image inspect --format '{{.Id}}' "$TAG") || die "image $TAG missing after import ($id)"

# Smoke test under the same lockdown the sandbox uses; drop a broken image.
if ! docker run --rm --read-only --network none --cap-drop ALL \
    --security-opt no-new-privileges --tmpfs "/work:size=64m,uid=$SANDBOX_UID,gid=$SANDBOX_UID" \
    --user "$SANDBOX_UID:$SANDBOX_UID" "$TAG" python3 -c '
import json, struct, select, resource, signal, os, sys, traceback, io, base64, ctypes
assert os.getuid() == 65534 and os.getgid() == 65534, (os.getuid(), os.getgid())
for name in ("harness", "pump", "child", "cleanup", "grader", "canonical"):
    open(f"/opt/spade-sandbox/{name}.py", "rb").read()
open("/work/probe", "w").write("ok")' >&2; then
    docker rmi "$TAG" >/dev/null 2>&1 || true
    die "smoke test of $TAG failed; image removed"
fi

log "built $TAG ($(docker image inspect --format '{{.Size}}' "$TAG" | awk '{ printf "%.1f MB", $1 / 1e6 }'))"
echo "$id"
