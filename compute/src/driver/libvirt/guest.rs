//! The guest's definition: the image's properties read and checked
//! ([`GuestProps`]), and the libvirt domain XML ([`DomainSpec::to_xml`]).
//!
//! Image properties this driver honours: `hw_machine_type`,
//! `hw_disk_bus`, `hw_cdrom_bus`, `hw_vif_model`, `hw_video_model`,
//! `hw_architecture` and `hw_vm_mode` (as the host supports),
//! `os_command_line`, `kernel_id` and `ramdisk_id` (direct kernel boot),
//! `img_config_drive = mandatory` (the spawn fails when the build brings
//! no config drive). Any other `hw_*` property is refused with a fault
//! naming it: a guest built without what its image asked for is worse
//! than no guest.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use quick_xml::escape::escape;
use uuid::Uuid;

use super::config::{CpuMode, VirtType};

/// The disk bus (`hw_disk_bus`, `hw_cdrom_bus`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bus {
    /// virtio-blk.
    Virtio,
    /// virtio-scsi.
    Scsi,
    /// IDE.
    Ide,
    /// SATA (AHCI).
    Sata,
    /// USB storage.
    Usb,
}

impl Bus {
    fn parse(v: &str) -> Option<Bus> {
        Some(match v {
            "virtio" => Bus::Virtio,
            "scsi" => Bus::Scsi,
            "ide" => Bus::Ide,
            "sata" => Bus::Sata,
            "usb" => Bus::Usb,
            _ => return None,
        })
    }

    /// `<target bus='…'>`.
    pub fn as_str(self) -> &'static str {
        match self {
            Bus::Virtio => "virtio",
            Bus::Scsi => "scsi",
            Bus::Ide => "ide",
            Bus::Sata => "sata",
            Bus::Usb => "usb",
        }
    }

    /// The device name of the `index`th disk on this bus (`vda`, `sdb`, …).
    pub fn dev(self, index: usize) -> String {
        let prefix = match self {
            Bus::Virtio => "vd",
            Bus::Ide => "hd",
            Bus::Scsi | Bus::Sata | Bus::Usb => "sd",
        };
        let letter = char::from(b'a' + (index % 26) as u8);
        format!("{prefix}{letter}")
    }
}

/// Every disk bus.
pub const BUSES: &[Bus] = &[Bus::Virtio, Bus::Scsi, Bus::Ide, Bus::Sata, Bus::Usb];
/// The NIC models `hw_vif_model` may name.
pub const VIF_MODELS: &[&str] = &["virtio", "e1000", "e1000e", "rtl8139", "ne2k_pci", "pcnet"];
/// The video models `hw_video_model` may name.
pub const VIDEO_MODELS: &[&str] = &["vga", "cirrus", "virtio", "qxl", "none"];
/// The architectures this driver runs (the host's own, emulated or not).
pub const ARCHITECTURES: &[&str] = &["x86_64"];

/// What the image asks of the guest, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestProps {
    /// `hw_machine_type` (none: libvirt's default for the architecture).
    pub machine_type: Option<String>,
    /// `hw_disk_bus` (default virtio).
    pub disk_bus: Bus,
    /// `hw_cdrom_bus` (default ide).
    pub cdrom_bus: Bus,
    /// `img_config_drive=mandatory`.
    pub config_drive_mandatory: bool,
    /// `hw_vif_model` (default virtio), for the network's ports.
    pub vif_model: String,
    /// `hw_video_model` (default virtio; `none`: no video device).
    pub video_model: String,
    /// `os_command_line`.
    pub command_line: Option<String>,
    /// `kernel_id`: the image holding the kernel of a direct kernel boot.
    pub kernel_id: Option<String>,
    /// `ramdisk_id`: its initial ramdisk.
    pub ramdisk_id: Option<String>,
}

/// An image property this driver cannot honour.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("image property {name}={value:?} is not supported by the libvirt driver: {why}")]
pub struct UnsupportedProperty {
    /// The property.
    pub name: String,
    /// Its value.
    pub value: String,
    /// Why, or what it may be.
    pub why: String,
}

fn unsupported(name: &str, value: &str, why: impl Into<String>) -> UnsupportedProperty {
    UnsupportedProperty {
        name: name.to_owned(),
        value: value.to_owned(),
        why: why.into(),
    }
}

fn one_of(name: &str, value: &str, allowed: &[&str]) -> Result<String, UnsupportedProperty> {
    if allowed.contains(&value) {
        Ok(value.to_owned())
    } else {
        Err(unsupported(
            name,
            value,
            format!("one of {}", allowed.join(", ")),
        ))
    }
}

impl GuestProps {
    /// Reads an image's properties (the image's extra keys, as the image
    /// service lists them). Keys outside `hw_*`, `os_*` and `img_*` are
    /// the owner's own and are left alone.
    pub fn from_properties(
        props: &BTreeMap<String, String>,
    ) -> Result<GuestProps, UnsupportedProperty> {
        let mut g = GuestProps {
            machine_type: None,
            disk_bus: Bus::Virtio,
            cdrom_bus: Bus::Ide,
            config_drive_mandatory: false,
            vif_model: "virtio".to_owned(),
            video_model: "virtio".to_owned(),
            command_line: None,
            kernel_id: None,
            ramdisk_id: None,
        };
        for (k, v) in props {
            let v = v.as_str();
            match k.as_str() {
                "hw_machine_type" => {
                    let ok = !v.is_empty()
                        && v.len() <= 64
                        && v.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
                    if !ok {
                        return Err(unsupported(k, v, "not a machine type name"));
                    }
                    g.machine_type = Some(v.to_owned());
                }
                "hw_disk_bus" => {
                    g.disk_bus = Bus::parse(v)
                        .ok_or_else(|| unsupported(k, v, "one of virtio, scsi, ide, sata, usb"))?;
                }
                "hw_cdrom_bus" => {
                    g.cdrom_bus = match Bus::parse(v) {
                        Some(b @ (Bus::Ide | Bus::Sata | Bus::Scsi)) => b,
                        _ => return Err(unsupported(k, v, "one of ide, sata, scsi")),
                    };
                }
                "hw_vif_model" => g.vif_model = one_of(k, v, VIF_MODELS)?,
                "hw_video_model" => g.video_model = one_of(k, v, VIDEO_MODELS)?,
                "hw_architecture" | "architecture" => {
                    one_of(k, v, ARCHITECTURES)?;
                }
                "hw_vm_mode" | "vm_mode" => {
                    one_of(k, v, &["hvm"])?;
                }
                "os_command_line" => {
                    if v.len() > 1024 || v.chars().any(char::is_control) {
                        return Err(unsupported(k, v, "at most 1024 printable characters"));
                    }
                    g.command_line = Some(v.to_owned());
                }
                "kernel_id" => g.kernel_id = Some(v.to_owned()).filter(|s| !s.is_empty()),
                "ramdisk_id" => g.ramdisk_id = Some(v.to_owned()).filter(|s| !s.is_empty()),
                "img_config_drive" => g.config_drive_mandatory = v == "mandatory",
                "hw_qemu_guest_agent" | "hw_rng_model" | "hw_pointer_model" => {
                    // Devices a guest can do without; not added yet, and
                    // said so rather than refused.
                    tracing::info!(property = %k, "image property not applied (device not built)");
                }
                other if other.starts_with("hw_") => {
                    return Err(unsupported(other, v, "not built"));
                }
                _ => {}
            }
        }
        if g.ramdisk_id.is_some() && g.kernel_id.is_none() {
            return Err(unsupported(
                "ramdisk_id",
                g.ramdisk_id.as_deref().unwrap_or_default(),
                "needs kernel_id",
            ));
        }
        Ok(g)
    }
}

/// One disk of the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskSpec {
    /// The file.
    pub path: PathBuf,
    /// `qcow2` or `raw`.
    pub format: &'static str,
    /// `disk` or `cdrom`.
    pub device: &'static str,
    /// Its bus.
    pub bus: Bus,
    /// Its device name (`vda`).
    pub dev: String,
}

/// Everything the domain XML is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainSpec {
    /// The instance (the domain's uuid).
    pub uuid: Uuid,
    /// The domain's name.
    pub name: String,
    /// Domain type.
    pub virt_type: VirtType,
    /// CPU mode.
    pub cpu_mode: CpuMode,
    /// vCPUs.
    pub vcpus: i64,
    /// Memory, MiB.
    pub memory_mb: i64,
    /// The image's wishes.
    pub props: GuestProps,
    /// Disks in boot order.
    pub disks: Vec<DiskSpec>,
    /// Direct kernel boot: the kernel and ramdisk files.
    pub kernel: Option<PathBuf>,
    /// The ramdisk.
    pub ramdisk: Option<PathBuf>,
    /// The serial console's log file.
    pub console_log: PathBuf,
    /// Where the serial console listens (TCP, raw) for the console proxy.
    pub serial: std::net::SocketAddr,
}

/// The kernel command line of a direct kernel boot without
/// `os_command_line` (Nova's: root on the first disk, console on serial).
pub const DEFAULT_COMMAND_LINE: &str = "root=/dev/vda console=tty0 console=ttyS0";

fn attr(s: &str) -> std::borrow::Cow<'_, str> {
    escape(s)
}

fn path_attr(p: &std::path::Path) -> String {
    escape(p.to_string_lossy().as_ref()).into_owned()
}

impl DomainSpec {
    /// The domain XML (libvirt's format, domain type `qemu` or `kvm`).
    pub fn to_xml(&self) -> String {
        let mut x = String::with_capacity(2048);
        // Writing into a String cannot fail.
        let _ = self.write_xml(&mut x);
        x
    }

    fn write_xml(&self, x: &mut String) -> std::fmt::Result {
        writeln!(x, "<domain type='{}'>", self.virt_type.as_str())?;
        writeln!(x, "  <name>{}</name>", escape(&self.name))?;
        writeln!(x, "  <uuid>{}</uuid>", self.uuid)?;
        writeln!(x, "  <memory unit='MiB'>{}</memory>", self.memory_mb)?;
        writeln!(x, "  <vcpu>{}</vcpu>", self.vcpus)?;
        writeln!(
            x,
            "  <metadata><instance xmlns='https://docs.openstack.org/compute/instance'>{}</instance></metadata>",
            self.uuid
        )?;
        x.push_str("  <os>\n");
        match &self.props.machine_type {
            Some(m) => writeln!(
                x,
                "    <type arch='x86_64' machine='{}'>hvm</type>",
                attr(m)
            )?,
            None => x.push_str("    <type arch='x86_64'>hvm</type>\n"),
        }
        if let Some(k) = &self.kernel {
            writeln!(x, "    <kernel>{}</kernel>", path_attr(k))?;
            if let Some(r) = &self.ramdisk {
                writeln!(x, "    <initrd>{}</initrd>", path_attr(r))?;
            }
            let cmdline = self
                .props
                .command_line
                .as_deref()
                .unwrap_or(DEFAULT_COMMAND_LINE);
            writeln!(x, "    <cmdline>{}</cmdline>", escape(cmdline))?;
        } else {
            x.push_str("    <boot dev='hd'/>\n");
        }
        x.push_str("  </os>\n");
        x.push_str("  <features><acpi/><apic/></features>\n");
        match self.cpu_mode {
            CpuMode::None => {}
            CpuMode::HostModel => x.push_str("  <cpu mode='host-model'/>\n"),
            CpuMode::HostPassthrough => x.push_str("  <cpu mode='host-passthrough'/>\n"),
        }
        x.push_str("  <clock offset='utc'/>\n");
        x.push_str("  <on_poweroff>destroy</on_poweroff>\n");
        x.push_str("  <on_reboot>restart</on_reboot>\n");
        x.push_str("  <on_crash>destroy</on_crash>\n");
        x.push_str("  <devices>\n");
        for d in &self.disks {
            writeln!(x, "    <disk type='file' device='{}'>", d.device)?;
            writeln!(x, "      <driver name='qemu' type='{}'/>", d.format)?;
            writeln!(x, "      <source file='{}'/>", path_attr(&d.path))?;
            writeln!(
                x,
                "      <target dev='{}' bus='{}'/>",
                attr(&d.dev),
                d.bus.as_str()
            )?;
            if d.device == "cdrom" {
                x.push_str("      <readonly/>\n");
            }
            x.push_str("    </disk>\n");
        }
        if self.disks.iter().any(|d| d.bus == Bus::Scsi) {
            x.push_str("    <controller type='scsi' model='virtio-scsi'/>\n");
        }
        // The serial console: a raw TCP socket on this host that the
        // console proxy connects to (one client at a time, as Nova's
        // `[serial_console]`), its output also kept in a log file
        // (`os-getConsoleOutput`).
        x.push_str("    <serial type='tcp'>\n");
        writeln!(
            x,
            "      <source mode='bind' host='{}' service='{}'/>",
            self.serial.ip(),
            self.serial.port()
        )?;
        x.push_str("      <protocol type='raw'/>\n");
        writeln!(
            x,
            "      <log file='{}' append='on'/>",
            path_attr(&self.console_log)
        )?;
        x.push_str("      <target port='0'/>\n");
        x.push_str("    </serial>\n");
        if self.props.video_model != "none" {
            x.push_str("    <graphics type='vnc' autoport='yes' listen='127.0.0.1'/>\n");
            writeln!(
                x,
                "    <video><model type='{}'/></video>",
                attr(&self.props.video_model)
            )?;
        }
        x.push_str("    <memballoon model='virtio'/>\n");
        x.push_str("  </devices>\n");
        x.push_str("</domain>\n");
        Ok(())
    }
}

/// The serial console's address in a domain's XML (`<serial type='tcp'>`
/// with a bound source), if it has one.
pub fn serial_of(xml: &str) -> Option<std::net::SocketAddr> {
    use quick_xml::events::Event;
    let mut r = quick_xml::Reader::from_str(xml);
    let mut in_tcp_serial = false;
    loop {
        match r.read_event() {
            Ok(Event::Start(e)) if e.name().as_ref() == b"serial" => {
                in_tcp_serial = e
                    .attributes()
                    .flatten()
                    .any(|a| a.key.as_ref() == b"type" && a.value.as_ref() == b"tcp");
            }
            Ok(Event::End(e)) if e.name().as_ref() == b"serial" => in_tcp_serial = false,
            Ok(Event::Empty(e)) if in_tcp_serial && e.name().as_ref() == b"source" => {
                let get = |k: &[u8]| {
                    e.attributes()
                        .flatten()
                        .find(|a| a.key.as_ref() == k)
                        .and_then(|a| a.unescape_value().ok().map(|v| v.into_owned()))
                };
                let ip: std::net::IpAddr = get(b"host")?.parse().ok()?;
                let port: u16 = get(b"service")?.parse().ok()?;
                return Some(std::net::SocketAddr::new(ip, port));
            }
            Ok(Event::Eof) | Err(_) => return None,
            _ => {}
        }
    }
}

/// Where the VNC server of a running domain listens, from its live XML
/// (`<graphics type='vnc' port='…' listen='…'>`; `None` before libvirt
/// gave it a port, or without one).
pub fn vnc_of(xml: &str) -> Option<std::net::SocketAddr> {
    use quick_xml::events::Event;
    let mut r = quick_xml::Reader::from_str(xml);
    loop {
        match r.read_event() {
            Ok(Event::Start(e) | Event::Empty(e)) if e.name().as_ref() == b"graphics" => {
                let get = |k: &[u8]| {
                    e.attributes()
                        .flatten()
                        .find(|a| a.key.as_ref() == k)
                        .and_then(|a| a.unescape_value().ok().map(|v| v.into_owned()))
                };
                if get(b"type").as_deref() != Some("vnc") {
                    continue;
                }
                let port: u16 = get(b"port")?.parse().ok()?;
                let ip: std::net::IpAddr = get(b"listen")
                    .unwrap_or_else(|| "127.0.0.1".to_owned())
                    .parse()
                    .ok()?;
                return Some(std::net::SocketAddr::new(ip, port));
            }
            Ok(Event::Eof) | Err(_) => return None,
            _ => {}
        }
    }
}

/// The domain name of an instance.
pub fn domain_name(instance: Uuid) -> String {
    format!("instance-{instance}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn properties_are_read_checked_and_refused_by_name() {
        let g = GuestProps::from_properties(&props(&[
            ("hw_machine_type", "q35"),
            ("hw_disk_bus", "scsi"),
            ("hw_vif_model", "e1000"),
            ("os_command_line", "console=ttyS0 quiet"),
            ("kernel_id", "k"),
            ("ramdisk_id", "r"),
            ("owner_note", "left alone"),
        ]))
        .unwrap();
        assert_eq!(g.machine_type.as_deref(), Some("q35"));
        assert_eq!(g.disk_bus, Bus::Scsi);
        assert_eq!(g.vif_model, "e1000");
        assert_eq!(g.kernel_id.as_deref(), Some("k"));

        let e = GuestProps::from_properties(&props(&[("hw_numa_nodes", "2")])).unwrap_err();
        assert_eq!(e.name, "hw_numa_nodes");
        assert!(
            e.to_string()
                .contains("not supported by the libvirt driver"),
            "{e}"
        );
        let e = GuestProps::from_properties(&props(&[("hw_disk_bus", "floppy")])).unwrap_err();
        assert!(e.to_string().contains("one of virtio"), "{e}");
        let e = GuestProps::from_properties(&props(&[("hw_architecture", "aarch64")])).unwrap_err();
        assert_eq!(e.name, "hw_architecture");
        let e = GuestProps::from_properties(&props(&[("hw_machine_type", "pc'><x")])).unwrap_err();
        assert_eq!(e.name, "hw_machine_type");
        let e = GuestProps::from_properties(&props(&[("ramdisk_id", "r")])).unwrap_err();
        assert_eq!(e.why, "needs kernel_id");
        let g = GuestProps::from_properties(&props(&[("img_config_drive", "mandatory")])).unwrap();
        assert!(g.config_drive_mandatory);
    }

    #[test]
    fn domain_xml_carries_flavor_image_and_console() {
        let uuid = Uuid::new_v4();
        let g = GuestProps::from_properties(&props(&[
            ("hw_machine_type", "pc"),
            ("os_command_line", "console=ttyS0 marker=<x>"),
        ]))
        .unwrap();
        let spec = DomainSpec {
            uuid,
            name: domain_name(uuid),
            virt_type: VirtType::Qemu,
            cpu_mode: CpuMode::None,
            vcpus: 2,
            memory_mb: 256,
            props: g,
            disks: vec![
                DiskSpec {
                    path: "/i/disk".into(),
                    format: "qcow2",
                    device: "disk",
                    bus: Bus::Virtio,
                    dev: Bus::Virtio.dev(0),
                },
                DiskSpec {
                    path: "/i/disk.eph0".into(),
                    format: "qcow2",
                    device: "disk",
                    bus: Bus::Virtio,
                    dev: Bus::Virtio.dev(1),
                },
            ],
            kernel: Some("/i/kernel".into()),
            ramdisk: Some("/i/ramdisk".into()),
            console_log: "/i/console.log".into(),
            serial: "127.0.0.1:10007".parse().unwrap(),
        };
        let x = spec.to_xml();
        assert!(x.starts_with("<domain type='qemu'>"), "{x}");
        assert!(x.contains(&format!("<uuid>{uuid}</uuid>")));
        assert!(x.contains("<memory unit='MiB'>256</memory>"));
        assert!(x.contains("<vcpu>2</vcpu>"));
        assert!(x.contains("machine='pc'>hvm</type>"));
        assert!(x.contains("<kernel>/i/kernel</kernel>"));
        assert!(x.contains("<initrd>/i/ramdisk</initrd>"));
        assert!(
            x.contains("<cmdline>console=ttyS0 marker=&lt;x&gt;</cmdline>"),
            "{x}"
        );
        assert!(x.contains("<target dev='vda' bus='virtio'/>"));
        assert!(x.contains("<target dev='vdb' bus='virtio'/>"));
        assert!(x.contains("<log file='/i/console.log' append='on'/>"));
        assert!(x.contains("<source mode='bind' host='127.0.0.1' service='10007'/>"));
        assert_eq!(serial_of(&x), Some("127.0.0.1:10007".parse().unwrap()));
        assert!(x.contains("<graphics type='vnc'"));
        // Not running: no port yet.
        assert_eq!(vnc_of(&x), None);
        let live =
            "<domain><devices><graphics type='vnc' port='5901' autoport='yes' listen='127.0.0.1'>\
                    <listen type='address' address='127.0.0.1'/></graphics></devices></domain>";
        assert_eq!(vnc_of(live), Some("127.0.0.1:5901".parse().unwrap()));
        assert_eq!(
            vnc_of("<domain><devices><graphics type='spice' port='5902'/></devices></domain>"),
            None
        );
        assert!(!x.contains("<cpu"));
        assert!(!x.contains("<boot dev"));
    }
}
