//! The flow table kept across a restart (`[ha] state_file`): written on a
//! clean stop (and by `sluice ctl state save`), read back at start, so that
//! an upgrade or a planned restart keeps every tracked flow and NAT mapping
//! (a TCP connection through it goes on after retransmitting over the gap;
//! a NATed client keeps its public port).
//!
//! The file: a header (magic, version, the wall-clock time it was written,
//! the number of records, a CRC-32 of the records), then one
//! [`RECORD`]-byte record per flow ([`Saved`]). Written to a new file
//! beside it (created, never opened through a link) and renamed over it,
//! so a reader finds the old file or the new one, whole. Read back only
//! from a regular file of this user's that no one else may write: the
//! flows in it open the firewall, so a planted file must not be taken. A
//! file is read once: it is removed when its flows are in, so that a
//! crash later (which writes none) cannot bring back flows that ended
//! since. The time the process was down is taken off each flow's time
//! left; those whose time ran out are not installed.

use anyhow::{anyhow, bail, Context, Result};
use pipeline::conntrack::saved::{Saved, RECORD};
use pipeline::conntrack::Listed;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const MAGIC: &[u8; 8] = b"SLUICEFL";
const VERSION: u32 = 1;
/// Magic, version, flags, written at (ns since the epoch), records,
/// CRC-32 of the records, reserved.
const HEADER: usize = 40;

/// Flows read back from a file.
#[derive(Debug)]
pub struct Loaded {
    /// Those to install, their time left less the time since the file
    /// was written.
    pub flows: Vec<Saved>,
    /// How long ago the file was written.
    pub age: Duration,
    /// Flows whose time ran out meanwhile.
    pub expired: u64,
}

/// Writes `flows` (each with the gateway worker it was on) to `path`:
/// a new file beside it, synced, renamed over it. How many.
pub fn write(path: &Path, flows: &[(u16, Vec<Listed>)]) -> Result<u64> {
    use std::os::unix::fs::OpenOptionsExt;
    let n: usize = flows.iter().map(|(_, l)| l.len()).sum();
    replaceable(path)?;
    let tmp = temp_beside(path);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    let written = (|| -> Result<()> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        let mut h = [0u8; HEADER];
        h[0..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        h[16..24].copy_from_slice(&now.to_le_bytes());
        h[24..32].copy_from_slice(&(n as u64).to_le_bytes());
        // The records' CRC goes in once they are written (bytes 32..36,
        // zero until then).
        let mut crc = crc32fast::Hasher::new();
        let mut out = std::io::BufWriter::with_capacity(1 << 20, &f);
        out.write_all(&h)?;
        for (w, list) in flows {
            for (f, left, _) in list {
                let r = Saved::of(f, *left, *w).encode();
                crc.update(&r);
                out.write_all(&r)?;
            }
        }
        out.flush()?;
        drop(out);
        std::os::unix::fs::FileExt::write_all_at(&f, &crc.finalize().to_le_bytes(), 32)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        // The rename itself, on disk.
        if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if let Ok(d) = std::fs::File::open(d) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.context(format!("writing {}", path.display())));
    }
    Ok(n as u64)
}

/// Whether [`write`] may put a flow file at `path`: nothing there, a
/// link (replaced, never followed), or a flow file written before; any
/// other file is left alone (a mistyped path must not cost a file).
fn replaceable(path: &Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let m = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(anyhow!(e).context(format!("{}", path.display()))),
    };
    if m.is_symlink() {
        return Ok(());
    }
    let mut head = [0u8; 8];
    let ours = m.is_file()
        && std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .and_then(|mut f| f.read_exact(&mut head))
            .is_ok()
        && &head == MAGIC;
    if !ours {
        bail!(
            "{} exists and is not a Sluice flow file: not replaced",
            path.display()
        );
    }
    Ok(())
}

/// `path` with `.new-PID` added: where [`write`] writes before renaming.
fn temp_beside(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(format!(".new-{}", std::process::id()));
    PathBuf::from(s)
}

/// Reads the flows of `path` back (`Ok(None)`: there is no file), at
/// most `max` of them (the tables' capacity), with the time since it was
/// written taken off each; the file is removed once read.
pub fn read(path: &Path, max: usize) -> Result<Option<Loaded>> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            bail!("{} is a symbolic link: not read", path.display())
        }
        Err(e) => return Err(anyhow!(e).context(format!("opening {}", path.display()))),
    };
    let m = f.metadata()?;
    if !m.is_file() {
        bail!("{} is not a regular file: not read", path.display());
    }
    if m.uid() != pmd::sys::euid() || m.mode() & 0o022 != 0 {
        bail!(
            "{} is not this user's alone (owner uid {}, mode {:o}): not read (its flows would open the firewall)",
            path.display(),
            m.uid(),
            m.mode() & 0o7777
        );
    }
    let size = m.len();
    let bad = |why: &str| anyhow!("{}: {why}: not read", path.display());
    if size < HEADER as u64 {
        return Err(bad("shorter than its header"));
    }
    let mut r = std::io::BufReader::with_capacity(1 << 20, f);
    let mut h = [0u8; HEADER];
    r.read_exact(&mut h)?;
    if &h[0..8] != MAGIC {
        return Err(bad("not a Sluice flow file"));
    }
    let word = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().unwrap_or_default());
    let version = u32::from_le_bytes([h[8], h[9], h[10], h[11]]);
    if version != VERSION {
        return Err(bad(&format!(
            "version {version}, this build reads {VERSION}"
        )));
    }
    let (written_ns, n) = (word(16), word(24));
    let crc_want = u32::from_le_bytes([h[32], h[33], h[34], h[35]]);
    if size != HEADER as u64 + n.saturating_mul(RECORD as u64) {
        return Err(bad(&format!(
            "{size} bytes where its header says {n} flows ({} bytes)",
            HEADER as u64 + n.saturating_mul(RECORD as u64)
        )));
    }
    if n > max as u64 {
        return Err(bad(&format!(
            "{n} flows, more than the tables hold ({max})"
        )));
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64;
    let age = now.saturating_sub(written_ns);
    let mut crc = crc32fast::Hasher::new();
    let mut flows = Vec::with_capacity(n as usize);
    let mut expired = 0;
    let mut b = [0u8; RECORD];
    for i in 0..n {
        r.read_exact(&mut b)?;
        crc.update(&b);
        let mut s = Saved::decode(&b).map_err(|why| bad(&format!("flow {i}: {}", why.name())))?;
        if s.remaining_ns <= age {
            expired += 1;
            continue;
        }
        s.remaining_ns -= age;
        flows.push(s);
    }
    if crc.finalize() != crc_want {
        return Err(bad("its checksum does not match (damaged)"));
    }
    std::fs::remove_file(path).with_context(|| format!("removing {} once read", path.display()))?;
    Ok(Some(Loaded {
        flows,
        age: Duration::from_nanos(age),
        expired,
    }))
}

/// `flows` split over `n` gateway workers: each back on the worker it was
/// on (the same config puts its packets there again: the same RSS, the
/// same slice of NAT ports). With fewer workers than the file's, a flow of
/// a worker that is gone goes to the worker `owner` names (a NAT flow's:
/// the owner of its mapping, where its replies are handed), else to
/// worker `w % n`.
pub fn place(
    flows: Vec<Saved>,
    n: usize,
    owner: impl Fn(&Saved) -> Option<u16>,
) -> Vec<Vec<Saved>> {
    let n = n.max(1);
    let mut out = vec![Vec::new(); n];
    for s in flows {
        let w = usize::from(s.worker);
        let w = if w < n {
            w
        } else {
            owner(&s).map_or(w % n, |o| usize::from(o) % n)
        };
        out[w].push(s);
    }
    out
}

/// The flows of `path` for gateway `g`'s workers ([`read`], [`place`]),
/// with what became of the file said on stderr: `None` when there is no
/// file or it was refused (the start goes on with empty tables: a bad
/// file must not keep the router down).
pub fn restore(path: &Path, g: &pipeline::gateway::GatewayConfig) -> Option<Vec<Vec<Saved>>> {
    let workers = g.workers.max(1);
    let max = g.ct_capacity.saturating_mul(usize::from(workers));
    match read(path, max) {
        Ok(Some(l)) => {
            eprintln!(
                "state: {} read ({} flows, written {:.1} s ago; {} ran out meanwhile)",
                path.display(),
                l.flows.len() as u64 + l.expired,
                l.age.as_secs_f64(),
                l.expired
            );
            let nat = &g.nat;
            Some(place(l.flows, usize::from(workers), |s| {
                let inside = |a: u128| (a >> 32 == 0xffff).then_some(a as u32);
                if nat
                    .statics
                    .iter()
                    .any(|x| Some(x.inside) == inside(s.orig.src))
                {
                    // 1:1 NAT: worker 0's.
                    Some(0)
                } else if s.orig.src != s.reply.dst {
                    // A source-NAT mapping: the worker whose slice holds
                    // its port (where its replies are handed).
                    nat.port_owner(s.reply.dst as u32, s.reply.dport, workers)
                } else {
                    None
                }
            }))
        }
        Ok(None) => {
            eprintln!("state: no {} (no flows to restore)", path.display());
            None
        }
        Err(e) => {
            eprintln!("state: {e:#}; starting with no flows");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pipeline::conntrack::{ConnTrack, State, Timeouts, Tuple};

    fn flows() -> Vec<(u16, Vec<Listed>)> {
        let mut ct = ConnTrack::new(64, Timeouts::default());
        ct.set_now(1_000_000_000_000);
        let v4 = |a: u32| 0xffff_0000_0000u128 | u128::from(a);
        for i in 0..10u16 {
            let orig = Tuple {
                src: v4(0x0a00_0002),
                dst: v4(0xc633_6407),
                sport: 40000 + i,
                dport: 443,
                proto: 17,
                zone: 0,
            };
            let reply = Tuple {
                src: orig.dst,
                dst: v4(0xcb00_7101),
                sport: 443,
                dport: 2000 + i,
                ..orig
            };
            ct.install(&Saved {
                orig,
                reply,
                state: State::Replied,
                // Flow i has i + 1 hours left.
                remaining_ns: (u64::from(i) + 1) * 3_600_000_000_000,
                worker: 0,
            })
            .unwrap();
        }
        let mut l = Vec::new();
        ct.copy_flows(0, usize::MAX, usize::MAX, &Default::default(), &mut l);
        vec![(0, l[..5].to_vec()), (1, l[5..].to_vec())]
    }

    /// Written and read back: every flow, on its worker, with its time
    /// left; the file is gone once read; a damaged, truncated, foreign or
    /// linked file is refused with its reason, and loses nothing else.
    #[test]
    fn a_state_file_reads_back_once_and_refuses_what_is_not_ours() {
        let dir = std::env::temp_dir().join(format!("sluice-state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("flows");
        let all = flows();
        assert_eq!(write(&path, &all).unwrap(), 10);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), HEADER + 10 * RECORD);
        let got = read(&path, 1000).unwrap().unwrap();
        assert!(!path.exists(), "read once");
        assert_eq!(got.flows.len(), 10);
        assert_eq!(got.expired, 0);
        assert!(got.age < Duration::from_secs(60));
        for (w, list) in &all {
            for (f, left, _) in list {
                let s = got.flows.iter().find(|s| s.orig == f.orig).unwrap();
                assert_eq!(s.worker, *w);
                assert_eq!(s.reply, f.reply);
                assert!(s.remaining_ns <= *left && s.remaining_ns + 60_000_000_000 > *left);
            }
        }
        let placed = place(got.flows.clone(), 2, |_| None);
        assert_eq!((placed[0].len(), placed[1].len()), (5, 5));
        // One worker now: worker 1's flows go where `owner` says.
        let placed = place(got.flows, 1, |_| Some(0));
        assert_eq!(placed[0].len(), 10);

        // No file: nothing, no error.
        assert!(read(&path, 1000).unwrap().is_none());
        let refused = |b: &[u8], max: usize, why: &str| {
            std::fs::write(&path, b).unwrap();
            let e = read(&path, max).unwrap_err().to_string();
            assert!(e.contains(why), "{why}: {e}");
            assert!(path.exists(), "a refused file is left for the operator");
            std::fs::remove_file(&path).unwrap();
        };
        let mut damaged = bytes.clone();
        damaged[HEADER + 3 * RECORD + 20] ^= 1;
        refused(&damaged, 1000, "checksum");
        refused(
            &bytes[..bytes.len() - 1],
            1000,
            "where its header says 10 flows",
        );
        refused(&bytes, 9, "more than the tables hold");
        refused(
            b"#!/bin/sh\nlots of text, but not a flow file\n",
            1000,
            "not a Sluice flow file",
        );
        let mut bad_state = bytes.clone();
        bad_state[HEADER + 80] = 99;
        refused(&bad_state, 1000, "flow 0: unknown state");

        // Writable by others, or a link: refused.
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(&path, &bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(read(&path, 1000).unwrap_err().to_string().contains("alone"));
        std::fs::remove_file(&path).unwrap();
        let real = dir.join("real");
        std::fs::write(&real, &bytes).unwrap();
        std::os::unix::fs::symlink(&real, &path).unwrap();
        assert!(read(&path, 1000)
            .unwrap_err()
            .to_string()
            .contains("symbolic link"));
        // Another file is never replaced.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, b"precious").unwrap();
        let e = write(&path, &all).unwrap_err().to_string();
        assert!(e.contains("not a Sluice flow file"), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), b"precious");
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&real, &path).unwrap();
        // Writing replaces the link itself, never its target.
        write(&path, &all).unwrap();
        assert_eq!(std::fs::read(&real).unwrap(), bytes);
        assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
