//! One instance per device: before it opens its ports, `sluice run` takes
//! an exclusive, non-blocking `flock` for every kernel resource it will
//! own (an AF_PACKET or AF_XDP interface, a DPDK device bound to an
//! interface or a PCI address, a pcap file it writes). A second instance on
//! any of them is refused with the first one's PID; the kernel drops the
//! locks when a process exits, however it exits, so a crash leaves nothing
//! stale to clean up.
//!
//! Lock files live in `/run/sluice` (or, where that cannot be created, in
//! `sluice-locks` under the temporary directory). Interfaces are named per
//! network namespace: the key carries the namespace's inode, so instances
//! in different namespaces do not collide.

use crate::config::{Config, PortKind};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// The locks one instance holds; dropping it releases them.
#[derive(Debug)]
pub struct InstanceLocks {
    files: Vec<(String, File)>,
}

/// Why the locks could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds one.
    #[error("port {port}: {what} is already in use by another sluice (pid {pid}; lock {path}): stop that instance first")]
    Busy {
        /// The port's name.
        port: String,
        /// The resource.
        what: String,
        /// The holder's PID as it wrote it.
        pid: String,
        /// The lock file.
        path: String,
    },
    /// The lock file could not be opened.
    #[error("port {port}: cannot take the instance lock {path}: {source}")]
    Io {
        /// The port's name.
        port: String,
        /// The lock file.
        path: String,
        /// What went wrong.
        source: std::io::Error,
    },
}

impl InstanceLocks {
    /// The resources held (lock keys), for reports and tests.
    pub fn keys(&self) -> Vec<&str> {
        self.files.iter().map(|(k, _)| k.as_str()).collect()
    }
}

/// The directory lock files go in.
pub fn lock_dir() -> PathBuf {
    let run = Path::new("/run/sluice");
    if std::fs::create_dir_all(run).is_ok() && writable(run) {
        return run.to_path_buf();
    }
    let tmp = std::env::temp_dir().join("sluice-locks");
    let _ = std::fs::create_dir_all(&tmp);
    tmp
}

fn writable(dir: &Path) -> bool {
    let probe = dir.join(format!(".probe-{}", std::process::id()));
    let ok = File::create(&probe).is_ok();
    let _ = std::fs::remove_file(probe);
    ok
}

/// The network namespace's identity (its inode), so interface names in
/// different namespaces get different keys.
fn netns() -> String {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/net").map_or_else(|_| "0".into(), |m| m.ino().to_string())
}

/// 64-bit FNV-1a, a stable name for a path of any length.
fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The kernel resources a port owns: (lock key, description).
pub fn resources(kind: &PortKind) -> Vec<(String, String)> {
    let iface = |i: &str| (format!("netns{}-if-{i}", netns()), format!("interface {i}"));
    match kind {
        PortKind::AfPacket { iface: i, .. } | PortKind::AfXdp { iface: i, .. } => vec![iface(i)],
        PortKind::Dpdk { device } => {
            // A vdev on a kernel interface (net_af_packet, net_af_xdp,
            // net_tap: `iface=X`) or a PCI device; other vdevs (net_null,
            // net_ring) are private to the process.
            let args = device.split(',').skip(1);
            let ifs: Vec<_> = args
                .filter_map(|a| a.strip_prefix("iface="))
                .map(iface)
                .collect();
            let name = device.split(',').next().unwrap_or("");
            let pci = name.len() >= 7
                && name.contains(':')
                && name
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.');
            if pci {
                vec![(format!("pci-{name}"), format!("PCI device {name}"))]
            } else {
                ifs
            }
        }
        PortKind::Pcap {
            tx_file: Some(f), ..
        } => {
            // The file may not exist yet: its directory's canonical path.
            let full = match (f.parent(), f.file_name()) {
                (Some(d), Some(n)) => std::fs::canonicalize(if d.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    d
                })
                .map(|d| d.join(n))
                .unwrap_or_else(|_| f.clone()),
                _ => f.clone(),
            };
            let shown = full.display().to_string();
            vec![(
                format!("pcap-{:016x}", fnv(&shown)),
                format!("capture file {shown}"),
            )]
        }
        _ => Vec::new(),
    }
}

/// Why a lock file could not be taken.
#[derive(Debug)]
pub enum Held {
    /// Another process holds it; the PID it wrote.
    By(String),
    /// It could not be opened or locked.
    Io(std::io::Error),
}

/// Takes an exclusive lock on the file `path` (created if missing) and
/// writes this process's PID into it; the lock lasts as long as the file
/// stays open.
pub fn take(path: &Path) -> Result<File, Held> {
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(Held::Io)?;
    match f.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut pid = String::new();
            let _ = f.read_to_string(&mut pid);
            return Err(Held::By(pid.trim().to_string()));
        }
        Err(TryLockError::Error(e)) => return Err(Held::Io(e)),
    }
    // Ours now: note who holds it.
    let _ = f.set_len(0);
    let _ = f.rewind();
    let _ = write!(f, "{}", std::process::id());
    Ok(f)
}

/// Takes the locks for every port of `cfg` in `dir` (see [`lock_dir`]).
pub fn acquire(cfg: &Config, dir: &Path) -> Result<InstanceLocks, LockError> {
    let mut files: Vec<(String, File)> = Vec::new();
    for p in &cfg.ports {
        for (key, what) in resources(&p.kind) {
            if files.iter().any(|(k, _)| *k == key) {
                continue; // two ports of this config on one device: the config's business
            }
            let path = dir.join(format!("{key}.lock"));
            let f = take(&path).map_err(|e| match e {
                Held::By(pid) => LockError::Busy {
                    port: p.name.clone(),
                    what,
                    pid,
                    path: path.display().to_string(),
                },
                Held::Io(source) => LockError::Io {
                    port: p.name.clone(),
                    path: path.display().to_string(),
                    source,
                },
            })?;
            files.push((key, f));
        }
    }
    Ok(InstanceLocks { files })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(iface: &str) -> Config {
        let text = format!(
            "[[port]]\nname = \"a\"\ndriver = \"afpacket\"\nipv4 = [\"198.18.0.1/24\"]\n[port.afpacket]\niface = \"{iface}\"\n\n[[port]]\nname = \"b\"\ndriver = \"null\"\n\n[[worker]]\ncore = 0\nmode = \"io\"\nrx = [\"a\", \"b\"]\n"
        );
        crate::config::parse_with(&text, "t.toml", None, false).unwrap()
    }

    /// A second holder of the same interface is refused with the first
    /// one's PID; another interface, or the first released, is fine. (Two
    /// open file descriptions in one process conflict as two processes'
    /// do: flock locks belong to the open file.)
    #[test]
    fn second_instance_on_an_interface_is_refused() {
        let dir = std::env::temp_dir().join(format!("sluice-lock-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let first = acquire(&cfg("eth-test0"), &dir).unwrap();
        assert_eq!(first.keys().len(), 1);
        let e = acquire(&cfg("eth-test0"), &dir).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("interface eth-test0 is already in use")
                && msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
        let other = acquire(&cfg("eth-test1"), &dir).unwrap();
        drop(first);
        let again = acquire(&cfg("eth-test0"), &dir).unwrap();
        drop((other, again));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn dpdk_devices_lock_their_interface_or_pci_address() {
        let k = |d: &str| resources(&PortKind::Dpdk { device: d.into() });
        assert!(k("net_null0").is_empty());
        assert!(k("net_ring0").is_empty());
        assert_eq!(
            k("net_af_packet0,iface=veth0")[0].0,
            resources(&PortKind::AfPacket {
                iface: "veth0".into(),
                blocks: 1,
                ring: pmd::afpacket::RingVersion::V3,
                qdisc_bypass: true
            })[0]
                .0,
            "an AF_PACKET port and a DPDK vdev on one interface collide"
        );
        assert_eq!(k("0000:03:00.0")[0].0, "pci-0000:03:00.0");
    }
}
