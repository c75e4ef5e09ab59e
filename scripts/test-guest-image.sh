#!/usr/bin/env bash
# Boots the guest image built by scripts/build-guest-image.sh with plain
# qemu (TCG, direct kernel boot) and checks it:
#
#   scripts/test-guest-image.sh OUTDIR
#
#   boot 1 (hostname=probe): the CELLS-GUEST-UP marker on the serial
#          console (prints the seconds it took), `echo hello` typed on the
#          serial console answered, the virtio disk and NIC present, an
#          IPv4 address on eth0 by DHCP from qemu's user network, QMP
#          system_powerdown (the ACPI power button) makes qemu exit within 30 s
#   boot 2 (guest_poweroff_after=3): qemu exits by itself
#   boot 3: `poweroff -f` typed on the serial console makes qemu exit
#
# The serial console and QMP are unix sockets this script listens on and
# qemu connects to, so nothing the guest prints is lost. Exits non-zero on
# any failure. Environment: QEMU (default qemu-system-x86_64),
# GUEST_MARKER_TIMEOUT (seconds, default 180), GUEST_MACHINE (a -machine
# value, e.g. q35; default qemu's own, i440fx).
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
outdir=$1
for f in vmlinuz initrd.img disk.raw; do
  [ -f "$outdir/$f" ] || { echo "missing $outdir/$f (run scripts/build-guest-image.sh)" >&2; exit 1; }
done
if [ -f "$outdir/SHA256SUMS" ]; then
  echo "==> checking SHA256SUMS"
  (cd "$outdir" && sha256sum --quiet -c SHA256SUMS)
fi
qemu=${QEMU:-qemu-system-x86_64}
command -v "$qemu" >/dev/null || { echo "$qemu not found (apt-get install qemu-system-x86)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "python3 not found" >&2; exit 1; }

exec python3 - "$outdir" "$qemu" "${GUEST_MARKER_TIMEOUT:-180}" "${GUEST_MACHINE:-}" <<'PY'
import json, os, re, shutil, socket, subprocess, sys, tempfile, time

outdir, qemu, marker_timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
machine = sys.argv[4]
MARKER = re.compile(rb"CELLS-GUEST-UP (\S+) ([0-9.]+)\r?\n")


class Fail(Exception):
    pass


class Guest:
    def __init__(self, name, append):
        self.name = name
        self.tmp = tempfile.mkdtemp(prefix="cells-guest-")
        self.log = open(os.path.join(self.tmp, "serial.log"), "wb")
        self.buf = b""
        socks = {}
        for s in ("serial", "qmp"):
            path = os.path.join(self.tmp, s + ".sock")
            ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            ls.bind(path)
            ls.listen(1)
            ls.settimeout(30)
            socks[s] = (ls, path)
        cmd = [
            qemu, "-accel", "tcg", "-m", "256", "-smp", "1",
            "-display", "none", "-monitor", "none", "-no-reboot",
            "-kernel", os.path.join(outdir, "vmlinuz"),
            "-initrd", os.path.join(outdir, "initrd.img"),
            "-append", append,
            "-drive", "file=%s,format=raw,if=virtio,snapshot=on"
            % os.path.join(outdir, "disk.raw"),
            "-nic", "user,model=virtio-net-pci",
            "-serial", "unix:" + socks["serial"][1],
            "-qmp", "unix:" + socks["qmp"][1],
        ]
        if machine:
            cmd[1:1] = ["-machine", machine]
        print("==> [%s] %s" % (name, " ".join(cmd)), flush=True)
        self.start = time.monotonic()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        try:
            self.serial, _ = socks["serial"][0].accept()
            self.qmp, _ = socks["qmp"][0].accept()
        except socket.timeout:
            self.kill()
            raise Fail("qemu did not connect to the serial/QMP sockets: %s"
                       % self.qemu_output())
        for ls, _ in socks.values():
            ls.close()
        self.qmp_file = self.qmp.makefile("rwb")
        self.qmp_read()  # greeting
        self.qmp_cmd("qmp_capabilities")

    def qemu_output(self):
        try:
            out, _ = self.proc.communicate(timeout=5)
            return out.decode(errors="replace")
        except Exception:
            return ""

    def qmp_read(self):
        while True:
            line = self.qmp_file.readline()
            if not line:
                raise Fail("QMP connection closed")
            msg = json.loads(line)
            if "event" not in msg:
                return msg

    def qmp_cmd(self, cmd):
        self.qmp_file.write(json.dumps({"execute": cmd}).encode() + b"\n")
        self.qmp_file.flush()
        r = self.qmp_read()
        if "error" in r:
            raise Fail("QMP %s: %s" % (cmd, r["error"]))
        return r

    def pump(self, timeout):
        """Reads what the serial console has, for up to timeout seconds."""
        self.serial.settimeout(max(timeout, 0.01))
        try:
            data = self.serial.recv(65536)
        except socket.timeout:
            return True
        except OSError:
            return False
        if not data:
            return False
        self.buf += data
        self.log.write(data)
        self.log.flush()
        return True

    def expect(self, pattern, timeout, what):
        """Waits for pattern in the serial output after self.pos."""
        rx = re.compile(pattern) if isinstance(pattern, bytes) else pattern
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(self.buf, self.pos)
            if m:
                self.pos = m.end()
                return m
            left = deadline - time.monotonic()
            if left <= 0:
                raise Fail("[%s] timed out after %.0f s waiting for %s"
                           % (self.name, timeout, what))
            if not self.pump(min(left, 1.0)) and self.proc.poll() is not None:
                raise Fail("[%s] qemu exited (%s) while waiting for %s"
                           % (self.name, self.proc.returncode, what))

    pos = 0  # where expect() searches from

    def type(self, line):
        self.serial.sendall(line.encode() + b"\n")

    def wait_exit(self, timeout, what):
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Fail("[%s] qemu still running %.0f s after %s"
                           % (self.name, timeout, what))
            self.pump(min(left, 0.5))
        for _ in range(20):  # drain what the guest printed last
            if not self.pump(0.1):
                break
        return self.proc.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self, keep):
        self.kill()
        self.log.close()
        if keep:
            print("    serial log kept: %s" % self.log.name)
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


def marker(g, hostname):
    m = g.expect(MARKER, marker_timeout, "CELLS-GUEST-UP")
    took = time.monotonic() - g.start
    if m.group(1).decode() != hostname:
        raise Fail("[%s] marker names host %r, wanted %r"
                   % (g.name, m.group(1).decode(), hostname))
    print("    marker after %.1f s (qemu start to marker; guest uptime %s s): %s"
          % (took, m.group(2).decode(), m.group(0).decode().strip()), flush=True)
    return took


def prompt(g, hostname):
    g.expect(re.escape(hostname.encode()) + rb":[^\r\n]*# ", 60, "the shell prompt")


def boot1():
    g = Guest("probe", "console=ttyS0 hostname=probe")
    ok = False
    try:
        took = marker(g, "probe")
        prompt(g, "probe")
        g.type("echo hello")
        g.expect(rb"(?m)^hello\r?\n", 30, "hello from the serial shell")
        print("    serial shell answered `echo hello`", flush=True)
        prompt(g, "probe")
        g.type("echo devs: $(ls /sys/class/block) $(ls /sys/class/net)")
        m = g.expect(rb"(?m)^devs: ([^\r\n]*)\r?\n", 30, "device list")
        devs = m.group(1).decode().split()
        for want in ("vda", "eth0"):
            if want not in devs:
                raise Fail("[probe] no %s in the guest (%s)" % (want, devs))
        print("    guest devices: %s" % " ".join(devs), flush=True)
        # DHCP from qemu's user network (udhcpc started by /init)
        for _ in range(20):
            prompt(g, "probe")
            g.type("ip -4 -o addr show dev eth0")
            m = g.expect(rb"(?:inet (\d+\.\d+\.\d+\.\d+/\d+) |probe:[^\r\n]*# )", 30,
                         "eth0 address")
            if m.group(1):
                print("    eth0 DHCP address: %s" % m.group(1).decode(), flush=True)
                break
            g.pos = m.start()  # leave the prompt for the next round
            time.sleep(1)
        else:
            raise Fail("[probe] eth0 got no IPv4 address by DHCP")
        t0 = time.monotonic()
        g.qmp_cmd("system_powerdown")
        rc = g.wait_exit(30, "QMP system_powerdown")
        print("    QMP system_powerdown: qemu exited (%d) after %.1f s"
              % (rc, time.monotonic() - t0), flush=True)
        if rc != 0:
            raise Fail("[probe] qemu exit status %d" % rc)
        if b"ACPI power button, powering off" not in g.buf:
            raise Fail("[probe] qemu exited but the guest's power-button handler did not run")
        ok = True
        return took
    finally:
        g.close(keep=not ok)


def boot2():
    g = Guest("self-poweroff", "console=ttyS0 hostname=selfoff guest_poweroff_after=3")
    ok = False
    try:
        marker(g, "selfoff")
        t0 = time.monotonic()
        rc = g.wait_exit(60, "the marker with guest_poweroff_after=3")
        took = time.monotonic() - t0
        print("    guest_poweroff_after=3: qemu exited (%d) %.1f s after the marker"
              % (rc, took), flush=True)
        if rc != 0:
            raise Fail("[self-poweroff] qemu exit status %d" % rc)
        if took < 2:
            raise Fail("[self-poweroff] powered off too early (%.1f s)" % took)
        if b"guest_poweroff_after=3, powering off" not in g.buf:
            raise Fail("[self-poweroff] qemu exited without the guest's poweroff message")
        ok = True
    finally:
        g.close(keep=not ok)


def boot3():
    g = Guest("typed-poweroff", "root=/dev/vda console=tty0 console=ttyS0 hostname=typed")
    ok = False
    try:
        marker(g, "typed")
        prompt(g, "typed")
        t0 = time.monotonic()
        g.type("poweroff -f")
        rc = g.wait_exit(30, "typing poweroff -f")
        print("    typed `poweroff -f`: qemu exited (%d) after %.1f s"
              % (rc, time.monotonic() - t0), flush=True)
        if rc != 0:
            raise Fail("[typed-poweroff] qemu exit status %d" % rc)
        ok = True
    finally:
        g.close(keep=not ok)


try:
    took = boot1()
    boot2()
    boot3()
except Fail as e:
    print("FAIL: %s" % e, file=sys.stderr)
    sys.exit(1)
print("==> guest image OK (marker after %.1f s)" % took)
PY
