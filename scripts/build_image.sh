#!/usr/bin/env bash
# Builds Tandem's image from the Dockerfile and smoke-tests it, on a Debian
# 12 machine that reaches Debian's archive but no image registry (a release
# runs this; CI keeps the Dockerfile's static check, tests/deploy).
#
#   scripts/build_image.sh [TAG]     # TAG default tandem:dev
#
# 1. base   the Dockerfile's FROM images, made with mmdebstrap from Debian's
#           archive (bookworm, -updates, -security): debian:12 (variant
#           apt) and debian:12-slim (the same without docs, man pages and
#           locales), tagged as docker.io/library/... in buildah's storage
# 2. build  buildah bud --pull=never --isolation chroot (no daemon, no
#           registry; the build stage's RUN lines reach Debian's archive)
# 3. smoke  the image's root file system mounted (buildah mount) and entered
#           with chroot as the image's user: its `tandem up` starts on the
#           default synthetic model, its `tandem-load` sends one request
#           and must get its tokens back, and on SIGTERM `tandem up` must
#           exit 0. Containers need kernel features a sandbox may lack;
#           chroot needs root only.
# Timings, the image's size and the smoke test's answer go to stdout and to
# build/image-report.txt. Needs root, mmdebstrap and buildah (installed here
# with apt-get when missing). Storage: buildah's vfs driver (no overlayfs
# needed), under /var/lib/containers.
set -euo pipefail
cd "$(dirname "$0")/.."
TAG="${1:-tandem:dev}"
WORK="$(pwd)/build/image"
REPORT="$(pwd)/build/image-report.txt"
export BUILDAH_ISOLATION=chroot
# Debian 12's buildah reads no STORAGE_DRIVER from the environment: the
# driver goes to every call as its global flag.
buildah() { command buildah --storage-driver vfs "$@"; }
mkdir -p "$WORK"
: > "$REPORT"
say() { echo "$*" | tee -a "$REPORT"; }

if [ "$(id -u)" != 0 ]; then echo "build_image: needs root (buildah, chroot)" >&2; exit 2; fi
if ! command -v mmdebstrap > /dev/null || ! command -v buildah > /dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q mmdebstrap buildah > /dev/null
fi

MIRRORS=("deb http://deb.debian.org/debian bookworm main"
         "deb http://deb.debian.org/debian bookworm-updates main"
         "deb http://deb.debian.org/debian-security bookworm-security main")
# What debian:12-slim leaves out.
SLIM=(--dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*'
      --dpkgopt='path-include=/usr/share/doc/*/copyright'
      --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*')

# A root file system tarball as an image named $2.
import_rootfs() {
  local ctr mnt
  ctr="$(buildah from scratch)"
  mnt="$(buildah mount "$ctr")"
  tar -C "$mnt" -xf "$1"
  buildah umount "$ctr" > /dev/null
  buildah config --cmd /bin/bash "$ctr"
  buildah commit -q "$ctr" "$2" > /dev/null
  buildah rm "$ctr" > /dev/null
}

start=$SECONDS
say "== build_image $(date -u '+%Y-%m-%d %H:%M:%S UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(nproc) cores"
mmdebstrap --quiet --variant=apt --format=tar bookworm "$WORK/debian12.tar" "${MIRRORS[@]}"
mmdebstrap --quiet --variant=apt --format=tar "${SLIM[@]}" bookworm "$WORK/debian12-slim.tar" \
  "${MIRRORS[@]}"
import_rootfs "$WORK/debian12.tar" docker.io/library/debian:12
import_rootfs "$WORK/debian12-slim.tar" docker.io/library/debian:12-slim
rm -f "$WORK"/debian12*.tar
say "base: $((SECONDS - start)) s (debian:12 and debian:12-slim from mmdebstrap)"

start=$SECONDS
buildah bud --pull=never --layers=false -f Dockerfile -t "$TAG" . > "$WORK/build.log" 2>&1 ||
  { tail -30 "$WORK/build.log"; say "build: FAILED after $((SECONDS - start)) s (log $WORK/build.log)"; exit 1; }
size="$(buildah images --format '{{.Size}}' "$TAG" | head -1)"
say "build: $((SECONDS - start)) s; image $TAG, $size (log $WORK/build.log)"

# --- smoke test -------------------------------------------------------------
ctr="$(buildah from --pull=never "$TAG")"
root="$(buildah mount "$ctr")"
tandem_pid=""
cleanup() {
  local rc=$?  # the script's, not the stopped server's
  set +e  # every step runs, whatever the one before returned
  if [ -n "$tandem_pid" ]; then
    kill "$tandem_pid" 2> /dev/null
    wait "$tandem_pid" 2> /dev/null
  fi
  # -R: /dev is bound with its submounts (pts, shm, mqueue).
  for m in proc dev sys; do umount -R "$root/$m" 2> /dev/null; done
  buildah umount "$ctr" > /dev/null 2>&1
  buildah rm "$ctr" > /dev/null 2>&1
  exit "$rc"
}
trap cleanup EXIT
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount -t sysfs sys "$root/sys"
user="$(buildah inspect --format '{{.OCIv1.Config.User}}' "$TAG")"
# chroot and env each exec the next, so a command started in the
# background with it is $!'s process itself, and killing $! stops it.
in_image() {
  exec chroot --userspec="$user:$user" "$root" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin \
    HOME=/tmp XDG_CACHE_HOME=/tmp "$@"
}

start=$SECONDS
port=$((20000 + RANDOM % 20000))
(in_image tandem up --port "$port") > "$WORK/up.log" 2>&1 &
tandem_pid=$!
for _ in $(seq 1 600); do
  grep -q '^READY' "$WORK/up.log" && break
  kill -0 "$tandem_pid" 2> /dev/null || break
  sleep 0.5
done
if ! grep -q '^READY' "$WORK/up.log"; then
  tail -20 "$WORK/up.log"
  say "smoke: tandem up did not become ready (log $WORK/up.log)"
  exit 1
fi
say "smoke: $(grep '^READY' "$WORK/up.log" | head -1) after $((SECONDS - start)) s"
if ! (in_image tandem-load --addr "127.0.0.1:$port" --requests 1 --concurrency 1 \
       --prompt-tokens 16 --max-tokens 8) > "$WORK/load.log" 2>&1; then
  tail -20 "$WORK/load.log"
  say "smoke: the request failed (log $WORK/load.log)"
  exit 1
fi
result="$(grep '^{' "$WORK/load.log" | tail -1)"
if [[ "$result" != *'"ok": 1,'* ]]; then
  cat "$WORK/load.log"
  say "smoke: the request was not answered: $result"
  exit 1
fi
say "smoke: one request answered: $result"
# Stopped as a pod is: SIGTERM, then it must drain its children and exit 0
# (a shell's `wait` gives 143 for a process the signal killed).
kill -TERM "$tandem_pid"
stopped=0
wait "$tandem_pid" || stopped=$?
tandem_pid=""
if [ "$stopped" != 0 ]; then
  tail -20 "$WORK/up.log"
  say "smoke: tandem up exited $stopped on SIGTERM, not 0 (log $WORK/up.log)"
  exit 1
fi
say "smoke: tandem up stopped on SIGTERM, exit 0, after $((SECONDS - start)) s in all"
