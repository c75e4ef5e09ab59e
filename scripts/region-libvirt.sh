#!/usr/bin/env bash
# The all-in-one region with a real hypervisor: one cell with one libvirt
# host (this machine's libvirtd, qemu with TCG), and the project's own
# guest image registered as `cells-guest` (docs/GUEST_IMAGE.md).
#
#   scripts/region-libvirt.sh            (as root: installs libvirt and qemu
#                                         from Debian's packages if missing)
#
# Then, with the `export OS_…` lines it prints:
#   openstack server create --flavor m1.tiny --image cells-guest --nic none --wait vm1
#   openstack console log show vm1
# Extra REGION__… variables pass through (docs/CONFIG.md).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-libvirt.sh --daemon
image="${CELLS_GUEST_IMAGE_DIR:-data/guest-image}"
if [ ! -s "$image/SHA256SUMS" ]; then
  scripts/build-guest-image.sh "$image"
fi

export REGION__REGION__COMPUTE_DRIVER=libvirt
export REGION__REGION__CELLS=1
export REGION__REGION__HOSTS_PER_CELL=1
export REGION__REGION__LIBVIRT__CONNECTION_URI="${REGION__REGION__LIBVIRT__CONNECTION_URI:-qemu:///system}"
# Nested KVM hangs guests in the firmware on this kind of machine: TCG.
export REGION__REGION__LIBVIRT__VIRT_TYPE="${REGION__REGION__LIBVIRT__VIRT_TYPE:-qemu}"
export REGION__REGION__GUEST_IMAGE_DIR="$(cd "$image" && pwd)"
exec cargo run --release -p region
