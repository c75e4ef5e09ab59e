#!/usr/bin/env bash
# Builds the project's own tiny guest image (our "cirros") from Debian's
# packages only, for direct kernel boot (UEC style):
#
#   scripts/build-guest-image.sh OUTDIR
#
# writes into OUTDIR
#   vmlinuz      the Debian cloud kernel (linux-image-cloud-amd64)
#   initrd.img   gzip'd newc cpio: busybox-static, /init, the kernel modules
#                the guest needs (virtio, ata, CD-ROM and ISO 9660, ACPI
#                button, evdev), acpid power-button handler, udhcpc hook
#   disk.raw     1 MiB of zeros: the "root disk" the image service holds;
#                the guest runs from the initramfs and never mounts it
#   SHA256SUMS   of the three
#
# Runs as root. Installs only host tools that are missing (cpio, gzip); the
# kernel and busybox-static packages are downloaded with `apt-get download`
# and unpacked with `dpkg-deb -x` into a temporary directory, so the host's
# own kernel, boot configuration and busybox are never touched (Debian's
# busybox-static conflicts with busybox). An installed busybox-static is
# used as is.
#
# Environment:
#   GUEST_KERNEL_PACKAGE  kernel package (default: what linux-image-cloud-amd64
#                         depends on, e.g. linux-image-6.1.0-57-cloud-amd64)
#   SOURCE_DATE_EPOCH     timestamp of every file in the initramfs (default 0)
#
# See docs/GUEST_IMAGE.md.
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
outdir=$1
epoch=${SOURCE_DATE_EPOCH:-0}

if [ "$(id -u)" != 0 ]; then
  echo "$0: run this as root (apt-get, device nodes in the initramfs)" >&2
  exit 1
fi

say() { echo "==> $*"; }

# --- host tools --------------------------------------------------------------
need=()
for p in cpio gzip; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
apt_updated=0
apt_update() {
  if [ "$apt_updated" = 0 ]; then
    say "apt-get update"
    apt-get update -qq
    apt_updated=1
  fi
}
if [ ${#need[@]} -gt 0 ]; then
  apt_update
  say "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
# apt-get download drops privileges to _apt; let it write here.
if id _apt >/dev/null 2>&1; then chown _apt "$work"; fi

download() { # package -> path of the .deb in $work
  local pkg=$1
  apt-cache show "$pkg" >/dev/null 2>&1 || apt_update
  (cd "$work" && apt-get download -qq "$pkg" >/dev/null)
  ls "$work"/"${pkg}"_*.deb
}

# --- kernel ------------------------------------------------------------------
kpkg=${GUEST_KERNEL_PACKAGE:-}
if [ -z "$kpkg" ]; then
  apt-cache show linux-image-cloud-amd64 >/dev/null 2>&1 || apt_update
  kpkg=$(apt-cache depends linux-image-cloud-amd64 |
    awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
  [ -n "$kpkg" ] || { echo "cannot resolve linux-image-cloud-amd64" >&2; exit 1; }
fi
say "downloading $kpkg"
kdeb=$(download "$kpkg")
say "unpacking $(basename "$kdeb")"
mkdir "$work/kernel"
dpkg-deb -x "$kdeb" "$work/kernel"
kver=$(ls "$work/kernel/lib/modules")
kmods=$work/kernel/lib/modules/$kver
say "kernel $kver"

# --- busybox -----------------------------------------------------------------
if dpkg -s busybox-static 2>/dev/null | grep -q '^Status: install ok installed'; then
  busybox=$(dpkg -L busybox-static | grep -E '/s?bin/busybox$' | head -n1)
  say "busybox-static installed: $busybox"
else
  say "downloading busybox-static"
  bdeb=$(download busybox-static)
  mkdir "$work/busybox"
  dpkg-deb -x "$bdeb" "$work/busybox"
  busybox=$(find "$work/busybox" -path '*bin/busybox' -type f | head -n1)
fi
"$busybox" --list | grep -qx acpid || { echo "$busybox has no acpid" >&2; exit 1; }

# --- kernel modules ----------------------------------------------------------
# Wanted modules (the dependencies are added ahead of each); anything built
# into this kernel (modules.builtin) is skipped.
wanted=(
  virtio_pci virtio_blk virtio_net virtio_console virtio_scsi virtio_balloon
  virtio_rng
  ata_piix sd_mod sr_mod isofs
  button evdev
)
declare -A modpath=()
while IFS= read -r f; do
  n=$(basename "$f" .ko)
  modpath[${n//-/_}]=$f
done < <(find "$kmods/kernel" -name '*.ko')
declare -A builtin=()
while IFS= read -r f; do
  n=$(basename "$f" .ko)
  builtin[${n//-/_}]=1
done <"$kmods/modules.builtin"

order=()
declare -A seen=()
add_module() {
  local m=${1//-/_} deps d
  [ -n "${seen[$m]:-}" ] && return 0
  seen[$m]=1
  [ -n "${builtin[$m]:-}" ] && return 0
  if [ -z "${modpath[$m]:-}" ]; then
    echo "module $m: neither built in nor in $kpkg" >&2
    exit 1
  fi
  # the .modinfo section: NUL separated key=value strings
  deps=$(tr '\0' '\n' <"${modpath[$m]}" | grep -a -m1 '^depends=' | cut -d= -f2 || true)
  for d in ${deps//,/ }; do add_module "$d"; done
  order+=("$m")
}
for m in "${wanted[@]}"; do add_module "$m"; done
say "modules (load order): ${order[*]}"

# --- initramfs tree ------------------------------------------------------------
root=$work/root
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,tmp,run,root,etc/acpi/PWRF,var/log,lib/modules}
cp "$busybox" "$root/bin/busybox"
while IFS= read -r applet; do
  applet=${applet#/}
  [ "$applet" = bin/busybox ] && continue
  [ -e "$root/$applet" ] && continue
  mkdir -p "$root/$(dirname "$applet")"
  ln -s /bin/busybox "$root/$applet"
done < <("$busybox" --list-full | LC_ALL=C sort)
mknod -m 600 "$root/dev/console" c 5 1
mknod -m 666 "$root/dev/null" c 1 3

: >"$root/lib/modules/load-order"
for m in "${order[@]}"; do
  cp "${modpath[$m]}" "$root/lib/modules/$m.ko"
  echo "$m" >>"$root/lib/modules/load-order"
done
echo "$kver" >"$root/etc/kernel-release"

echo "cells-guest" >"$root/etc/hostname"
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"

# busybox acpid: the power button (evdev KEY_POWER, "PWRF") runs
# /etc/acpi/PWRF/00000080.
printf 'PWRF PWRF/00000080\n' >"$root/etc/acpid.conf"
cat >"$root/etc/acpi/PWRF/00000080" <<'EOF'
#!/bin/sh
echo "cells-guest: ACPI power button, powering off" >/dev/ttyS0
poweroff -f
EOF
chmod 755 "$root/etc/acpi/PWRF/00000080"

mkdir -p "$root/etc/udhcpc"
cat >"$root/etc/udhcpc/default.script" <<'EOF'
#!/bin/sh
# udhcpc hook: configure the address, default route and resolver.
case "$1" in
  deconfig)
    ip -4 addr flush dev "$interface"
    ip link set "$interface" up
    ;;
  bound|renew)
    ip -4 addr flush dev "$interface"
    ip -4 addr add "$ip/${mask:-24}" dev "$interface"
    if [ -n "$router" ]; then
      set -- $router
      ip -4 route replace default via "$1" dev "$interface"
    fi
    : >/etc/resolv.conf
    for s in $dns; do echo "nameserver $s" >>/etc/resolv.conf; done
    ;;
esac
exit 0
EOF
chmod 755 "$root/etc/udhcpc/default.script"

cat >"$root/init" <<'EOF'
#!/bin/sh
# /init of the cells guest image (see docs/GUEST_IMAGE.md). Runs from the
# initramfs for the guest's whole life; never mounts root= nor pivots.
export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp

# kernel command line: hostname=NAME, guest_poweroff_after=SECONDS
set -f
read -r cmdline </proc/cmdline
hostname=$(cat /etc/hostname)
poweroff_after=
for arg in $cmdline; do
  case "$arg" in
    hostname=?*) hostname=${arg#hostname=} ;;
    guest_poweroff_after=*) poweroff_after=${arg#guest_poweroff_after=} ;;
  esac
done
set +f
hostname "$hostname"
echo "$hostname" >/etc/hostname

while read -r m; do
  insmod "/lib/modules/$m.ko" || echo "cells-guest: insmod $m failed" >/dev/console
done </lib/modules/load-order

# Power button -> poweroff -f. acpid reads the /dev/input/event* devices
# present when it starts: wait (briefly) for the ACPI button's.
for i in 1 2 3 4 5 6 7 8 9 10; do
  ls /dev/input/event* >/dev/null 2>&1 && break
  sleep 0.2
done
acpid -c /etc/acpi -a /etc/acpid.conf -l /var/log/acpid.log

# The config drive (the volume labelled config-2, as cloud-init finds
# it): its meta_data.json names the instance and the hostname, and its
# user_data runs when it is a script (as cirros does). busybox-static has
# no blkid: findfs finds the label on disks; a CD-ROM is tried by
# mounting it.
config=
mounted=
mkdir -p /mnt/config
for i in 1 2 3 4 5; do
  config=$(findfs LABEL=config-2 2>/dev/null) && break
  config=
  for d in /dev/sr*; do
    [ -b "$d" ] || continue
    mount -t iso9660 -o ro "$d" /mnt/config 2>/dev/null || continue
    if [ -f /mnt/config/openstack/latest/meta_data.json ]; then
      config=$d mounted=1
      break 2
    fi
    umount /mnt/config
  done
  sleep 0.2
done
if [ -n "$config" ] && [ -z "$mounted" ]; then
  mount -o ro "$config" /mnt/config && mounted=1
fi
if [ -n "$mounted" ]; then
  md=/mnt/config/openstack/latest/meta_data.json
  uuid=$(sed -n 's/.*"uuid":"\([^"]*\)".*/\1/p' "$md")
  fqdn=$(sed -n 's/.*"hostname":"\([^"]*\)".*/\1/p' "$md")
  if [ -n "$fqdn" ]; then
    hostname=${fqdn%%.*}
    hostname "$hostname"
    echo "$hostname" >/etc/hostname
  fi
  echo "CELLS-GUEST-CONFIG-DRIVE $config uuid=$uuid hostname=$fqdn" >/dev/ttyS0
elif [ -n "$config" ]; then
  echo "cells-guest: config drive $config could not be mounted" >/dev/ttyS0
fi

ip link set lo up
for dev in /sys/class/net/*; do
  dev=${dev##*/}
  [ "$dev" = lo ] && continue
  ip link set "$dev" up
  udhcpc -i "$dev" -s /etc/udhcpc/default.script -b -t 5 -T 2 >/dev/null 2>&1 </dev/null &
done

case "$poweroff_after" in
  ''|*[!0-9]*) ;;
  *)
    (sleep "$poweroff_after"
     echo "cells-guest: guest_poweroff_after=$poweroff_after, powering off" >/dev/ttyS0
     poweroff -f) &
    ;;
esac

ud=/mnt/config/openstack/latest/user_data
if [ -n "$mounted" ] && [ -f "$ud" ] && [ "$(head -c 2 "$ud")" = '#!' ]; then
  cp "$ud" /tmp/user-data
  chmod 700 /tmp/user-data
  /tmp/user-data >/dev/ttyS0 2>&1 </dev/null
  echo "CELLS-GUEST-USER-DATA exit=$?" >/dev/ttyS0
fi

read -r up _ </proc/uptime
echo "CELLS-GUEST-UP $hostname $up" >/dev/ttyS0
# from now on only emergencies from the kernel on the console
echo 1 >/proc/sys/kernel/printk

export PS1='\h:\w# '
while :; do
  setsid sh -c 'exec sh -i </dev/ttyS0 >/dev/ttyS0 2>&1'
  sleep 1
done
EOF
chmod 755 "$root/init"

# --- outputs -----------------------------------------------------------------
mkdir -p "$outdir"
say "writing $outdir/vmlinuz"
cp "$work/kernel/boot/vmlinuz-$kver" "$outdir/vmlinuz.tmp"
mv "$outdir/vmlinuz.tmp" "$outdir/vmlinuz"

say "writing $outdir/initrd.img"
find "$root" -exec touch -h -d "@$epoch" {} +
(cd "$root" && find . -mindepth 1 | LC_ALL=C sort |
  cpio --quiet -o -H newc -R 0:0 --reproducible) |
  gzip -9 -n >"$outdir/initrd.img.tmp"
mv "$outdir/initrd.img.tmp" "$outdir/initrd.img"

say "writing $outdir/disk.raw"
head -c 1048576 /dev/zero >"$outdir/disk.raw.tmp"
mv "$outdir/disk.raw.tmp" "$outdir/disk.raw"

say "writing $outdir/SHA256SUMS"
(cd "$outdir" && sha256sum vmlinuz initrd.img disk.raw >SHA256SUMS.tmp &&
  mv SHA256SUMS.tmp SHA256SUMS)
(cd "$outdir" && ls -l vmlinuz initrd.img disk.raw && cat SHA256SUMS)
say "done: $kpkg, $(wc -l <"$root/lib/modules/load-order") modules"
