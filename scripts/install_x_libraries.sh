#!/usr/bin/env bash
# The X server (Xvfb) and the X libraries Qt's xcb plugin loads: the window, its screenshots and
# the tests under Xvfb need them. Installed with apt-get where it is there and this user may
# (root, or sudo without a password); otherwise the one command to run is printed, and the rest of
# the set-up goes on (headless commands and the offscreen tests need none of them).
set -euo pipefail

X_PACKAGES="xvfb xauth libxcb-cursor0 libxkbcommon-x11-0 libxcb-icccm4 libxcb-image0 libxcb-keysyms1 libxcb-randr0 \
libxcb-render-util0 libxcb-shape0 libxcb-xinerama0 libxcb-xkb1 libegl1 libgl1 libfontconfig1 libdbus-1-3"

command -v dpkg-query >/dev/null || exit 0  # not Debian or Ubuntu: nothing to say by package
missing=$(dpkg-query -W -f='${Status} ${Package}\n' $X_PACKAGES 2>&1 | grep -v '^install ok installed' || true)
[ -z "$missing" ] && exit 0

if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  as_root=""
elif command -v apt-get >/dev/null && command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  as_root="sudo"
else
  echo "workbench: the window needs X libraries this machine lacks; install them with:" >&2
  echo "  sudo apt-get install --no-install-recommends $X_PACKAGES" >&2
  exit 0
fi
$as_root apt-get update -q
DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -q --no-install-recommends $X_PACKAGES
