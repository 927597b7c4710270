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
    files: Vec<(String, LockFile)>,
}

/// A lock file held ([`take`]): locked while it lives; dropped, the file
/// is removed (while still locked, and only if its path still names it)
/// and the lock released, so no lock file stays after a stop.
#[derive(Debug)]
pub struct LockFile {
    path: PathBuf,
    file: File,
}

impl Drop for LockFile {
    fn drop(&mut self) {
        if names(&self.path, &self.file) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Whether `path` (not followed) is the file `f` is open on.
fn names(path: &Path, f: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::symlink_metadata(path), f.metadata()) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
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

/// The directory lock files go in: `/run/sluice`, or where that cannot be
/// written (an unprivileged user), `sluice-locks-UID` in the temporary
/// directory, created 0700, and used only if it is a directory this user
/// owns that no one else may write (one planted by another user, who
/// could swap the locks in it, is refused).
pub fn lock_dir() -> Result<PathBuf, String> {
    let run = Path::new("/run/sluice");
    if std::fs::create_dir_all(run).is_ok() && owned_dir(run).is_ok() && writable(run) {
        return Ok(run.to_path_buf());
    }
    let tmp = std::env::temp_dir().join(format!("sluice-locks-{}", pmd::sys::euid()));
    {
        use std::os::unix::fs::DirBuilderExt;
        let _ = std::fs::DirBuilder::new().mode(0o700).create(&tmp);
    }
    owned_dir(&tmp).map_err(|e| format!("the instance locks' directory: {e}"))?;
    Ok(tmp)
}

/// Whether `dir` is a directory (not a symlink to one) owned by this user
/// or root, that no other user may write.
pub fn owned_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !m.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    let me = pmd::sys::euid();
    if m.uid() != me && m.uid() != 0 {
        return Err(format!(
            "{} belongs to uid {}, not to this user ({me})",
            dir.display(),
            m.uid()
        ));
    }
    if m.mode() & 0o022 != 0 && m.mode() & 0o1000 == 0 {
        return Err(format!(
            "{} may be written by other users (mode {:o})",
            dir.display(),
            m.mode() & 0o7777
        ));
    }
    Ok(())
}

fn writable(dir: &Path) -> bool {
    let probe = dir.join(format!(".probe-{}", std::process::id()));
    let ok = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .is_ok();
    let _ = std::fs::remove_file(probe);
    ok
}

/// The network namespace's identity (its inode), so interface names in
/// different namespaces get different keys.
fn netns() -> String {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/net").map_or_else(|_| "0".into(), |m| m.ino().to_string())
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
            // The file itself is the resource, however it is reached (a
            // symlink, a hard link, another spelling of the path): its
            // device and inode. Created empty if missing (not truncated:
            // another instance may be writing it), as the port creates it
            // anyway.
            use std::os::unix::fs::MetadataExt;
            let _ = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(f);
            let shown = f.display().to_string();
            match std::fs::metadata(f) {
                Ok(m) => vec![(
                    format!("pcap-{}-{}", m.dev(), m.ino()),
                    format!("capture file {shown}"),
                )],
                // It cannot be created: the port's opening says why.
                Err(_) => Vec::new(),
            }
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
    /// What is at the path is not a lock file of this user's: a symlink, a
    /// hard link, another user's file (planted, say, in a shared
    /// directory); left as it is.
    Planted(String),
}

/// Takes an exclusive lock on the file `path` (created 0600 if missing)
/// and writes this process's PID into it; the lock lasts as long as the
/// file stays open. The file is opened without following a symlink, and
/// must be a regular file with one link, owned by this user: a symlink or
/// a hard link planted by another user in a shared directory is refused,
/// never truncated.
pub fn take(path: &Path) -> Result<LockFile, Held> {
    // A holder removes its file as it stops: a file locked just after
    // its holder let it go may be gone from the path, and is taken again.
    for _ in 0..3 {
        let f = take_once(path)?;
        if names(path, &f) {
            return Ok(LockFile {
                path: path.to_path_buf(),
                file: f,
            });
        }
    }
    Err(Held::Io(std::io::Error::other(
        "removed three times as it was taken: another instance is starting and stopping",
    )))
}

fn take_once(path: &Path) -> Result<File, Held> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                Held::Planted(format!("{} is a symlink", path.display()))
            } else {
                Held::Io(e)
            }
        })?;
    let m = f.metadata().map_err(Held::Io)?;
    let me = pmd::sys::euid();
    if !m.is_file() {
        return Err(Held::Planted(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    if m.nlink() != 1 {
        return Err(Held::Planted(format!(
            "{} has {} hard links",
            path.display(),
            m.nlink()
        )));
    }
    if m.uid() != me {
        return Err(Held::Planted(format!(
            "{} belongs to uid {}, not to this user ({me})",
            path.display(),
            m.uid()
        )));
    }
    match f.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut pid = String::new();
            let _ = (&mut f).take(32).read_to_string(&mut pid);
            let pid: String = pid
                .trim()
                .chars()
                .filter(char::is_ascii_digit)
                .take(10)
                .collect();
            return Err(Held::By(pid));
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
    let mut files: Vec<(String, LockFile)> = Vec::new();
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
                Held::Planted(why) => LockError::Io {
                    port: p.name.clone(),
                    path: path.display().to_string(),
                    source: std::io::Error::other(format!(
                        "{why}: not a lock file of this user's; left alone (remove it if it is yours)"
                    )),
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

    /// A symlink planted at a lock file's path is refused and its target
    /// left as it was (it used to be followed and truncated); so is a hard
    /// link to another file.
    #[test]
    fn a_planted_symlink_or_hard_link_is_refused_and_left_alone() {
        let dir = std::env::temp_dir().join(format!("sluice-lock-plant-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let sym = dir.join("sym.lock");
        std::os::unix::fs::symlink(&victim, &sym).unwrap();
        assert!(matches!(take(&sym), Err(Held::Planted(w)) if w.contains("symlink")));
        let hard = dir.join("hard.lock");
        std::fs::hard_link(&victim, &hard).unwrap();
        assert!(matches!(take(&hard), Err(Held::Planted(w)) if w.contains("hard links")));
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        // A plain lock file is still taken, and holds this PID.
        let f = take(&dir.join("plain.lock")).unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("plain.lock")).unwrap(),
            std::process::id().to_string()
        );
        // Released, it is gone.
        drop(f);
        assert!(!dir.join("plain.lock").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A pcap output is one resource however it is named: through a
    /// symlink, a hard link or another spelling of its path, a second
    /// instance is refused.
    #[test]
    fn a_pcap_output_is_the_same_file_through_links() {
        let dir = std::env::temp_dir().join(format!("sluice-lock-pcap-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        let out = dir.join("out.pcap");
        let pcap = |f: PathBuf| {
            resources(&PortKind::Pcap {
                rx_file: None,
                tx_file: Some(f),
                loops: 1,
            })[0]
                .0
                .clone()
        };
        let key = pcap(out.clone());
        std::os::unix::fs::symlink(&out, dir.join("sym.pcap")).unwrap();
        std::fs::hard_link(&out, dir.join("hard.pcap")).unwrap();
        assert_eq!(pcap(dir.join("sym.pcap")), key);
        assert_eq!(pcap(dir.join("hard.pcap")), key);
        assert_eq!(pcap(dir.join("sub/../out.pcap")), key);
        assert_ne!(pcap(dir.join("other.pcap")), key);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The locks' directory is used only if it is a real directory that no
    /// other user may write.
    #[test]
    fn a_lock_directory_others_may_write_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("sluice-lock-dir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(owned_dir(&dir).is_ok());
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(owned_dir(&dir)
            .unwrap_err()
            .contains("may be written by other users"));
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        let link =
            std::env::temp_dir().join(format!("sluice-lock-dir-link-{}", std::process::id()));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(owned_dir(&link).unwrap_err().contains("not a directory"));
        std::fs::remove_file(&link).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(lock_dir().is_ok());
    }
}
