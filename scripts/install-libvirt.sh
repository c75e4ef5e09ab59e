#!/usr/bin/env bash
# Installs what the libvirt driver needs from Debian's packages, only what
# is missing, and (with --daemon) starts libvirtd.
#
#   scripts/install-libvirt.sh            build: libvirt-dev, pkg-config, qemu-img,
#                                         genisoimage (config drives), libssl-dev
#                                         (TLS through the system's OpenSSL)
#   scripts/install-libvirt.sh --daemon   also libvirtd, qemu (started) and noVNC
#
# The workspace links libvirt (the `virt` crate) whatever the driver in
# use, so the first form is what any build needs; the second is what the
# region on libvirt hosts and the tests against qemu:///system need.
# There is no systemd here: libvirtd is started as a daemon of its own.
set -euo pipefail

daemon=0
[ "${1:-}" = "--daemon" ] && daemon=1

need=()
want() { dpkg -s "$1" >/dev/null 2>&1 || need+=("$1"); }
want pkg-config
want libvirt-dev
want libssl-dev
want qemu-utils
want genisoimage
if [ "$daemon" = 1 ]; then
  want libvirt-daemon-system
  want qemu-system-x86
  # noVNC's web client, served by the region's noVNC proxy.
  want novnc
fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "missing Debian packages: ${need[*]} (run this script as root)" >&2
    exit 1
  fi
  echo "==> installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
# qemu-system-x86 and a newer qemu-utils from backports conflict: Debian's
# qemu-system-x86 removes it. qemu-img must be there either way.
command -v qemu-img >/dev/null 2>&1 || {
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-utils
}

[ "$daemon" = 1 ] || exit 0

if ! virsh -c qemu:///system version >/dev/null 2>&1; then
  echo "==> starting libvirtd"
  mkdir -p /run/libvirt
  # virtlogd keeps the guests' console logs; libvirtd starts it on demand
  # only under systemd.
  pgrep -x virtlogd >/dev/null 2>&1 || virtlogd -d
  pgrep -x libvirtd >/dev/null 2>&1 || libvirtd -d
  for _ in $(seq 1 30); do
    virsh -c qemu:///system version >/dev/null 2>&1 && break
    sleep 1
  done
fi
virsh -c qemu:///system version >/dev/null
echo "==> libvirtd answers on qemu:///system"
