//! Least privilege. Opening ports takes capabilities (AF_PACKET
//! `CAP_NET_RAW`; AF_XDP `CAP_NET_ADMIN`, `CAP_BPF` and locked memory; TAP
//! mirrors and the netlink buffer `CAP_NET_ADMIN`), forwarding takes none:
//!
//! - every thread that touches what arrives from outside (workers, the TAP
//!   mirror, the netlink mirror, the metrics and control servers, the
//!   state-sync thread, the generator) holds none once the start is over:
//!   its sockets and rings are already open. Started unprivileged, each
//!   sheds them as it starts ([`shed_thread`]); started as root, the
//!   management thread's `setuid` takes them from all at once;
//! - once every port is open and every worker polls, the management thread
//!   ([`drop_after_start`]) becomes `[service] user` (started as root:
//!   `setgroups`, `setgid`, `setuid`, which glibc applies to every thread)
//!   and keeps only what the stop still needs ([`kept`]: AF_XDP ports
//!   detach their XDP program, `CAP_NET_ADMIN`), with `no_new_privs` so that nothing it
//!   runs later (`tcpdump -ddd` for a capture filter) gains any. Started
//!   as an unprivileged user with ambient capabilities (systemd's
//!   `AmbientCapabilities=`, `setpriv --ambient-caps`), it keeps the same.
//!
//! A root start without `[service] user` keeps root's management thread.

use crate::config::{Config, PortKind, RunAs};
use anyhow::{bail, Context, Result};
use caps::{CapSet, Capability, CapsHashSet};

/// The capabilities the running appliance still needs after its start,
/// for `cfg`: AF_XDP ports detach their XDP program from the link at the
/// stop (`CAP_NET_ADMIN`; libxdp cannot, its lock directory `/run/xdp`
/// being root's, so `pmd::afxdp` does); nothing else does.
pub fn kept(cfg: &Config) -> CapsHashSet {
    let mut keep = CapsHashSet::new();
    if cfg
        .ports
        .iter()
        .any(|p| matches!(p.kind, PortKind::AfXdp { .. }))
    {
        keep.insert(Capability::CAP_NET_ADMIN);
    }
    keep
}

/// Sheds every capability of the calling thread (ambient, inheritable,
/// effective, permitted), unless it runs as root: then the management
/// thread's `setuid` clears every thread's at once (glibc applies it to
/// each thread and aborts the process if one of them may not, so no
/// thread may shed `CAP_SETUID` before it).
pub fn shed_thread() {
    if nix::unistd::geteuid().is_root() {
        return;
    }
    // Clearing cannot fail for lack of privilege: capset may always lower.
    let _ = caps::clear(None, CapSet::Ambient);
    let _ = caps::clear(None, CapSet::Inheritable);
    let _ = caps::clear(None, CapSet::Permitted);
}

/// Becomes `run_as` (if set and started as root) and keeps only `keep` of
/// the capabilities this thread holds; returns a line saying what it runs
/// as now. Call it once, from the management thread, once every worker
/// polls (they have shed theirs as they started).
pub fn drop_after_start(run_as: Option<&RunAs>, keep: &CapsHashSet) -> Result<String> {
    let euid = nix::unistd::geteuid();
    if let Some(r) = run_as {
        if euid.is_root() {
            let (uid, gid) = (
                nix::unistd::Uid::from_raw(r.uid),
                nix::unistd::Gid::from_raw(r.gid),
            );
            nix::sys::prctl::set_keepcaps(true).context("prctl(PR_SET_KEEPCAPS)")?;
            nix::unistd::setgroups(&[gid]).context("setgroups")?;
            nix::unistd::setgid(gid).with_context(|| format!("setgid({gid})"))?;
            nix::unistd::setuid(uid).with_context(|| format!("setuid({uid})"))?;
            nix::sys::prctl::set_keepcaps(false).context("prctl(PR_SET_KEEPCAPS)")?;
        } else if euid.as_raw() != r.uid {
            bail!(
                "[service] user {}: started as uid {euid}, and only root may become another user",
                r.user
            );
        }
    } else if euid.is_root() {
        return Ok("privileges: root (no [service] user to become)".into());
    }
    let held = caps::read(None, CapSet::Permitted).context("reading the capabilities")?;
    let keep: CapsHashSet = keep.intersection(&held).copied().collect();
    caps::clear(None, CapSet::Ambient).context("clearing the ambient capabilities")?;
    caps::clear(None, CapSet::Inheritable).context("clearing the inheritable capabilities")?;
    caps::set(None, CapSet::Effective, &keep).context("lowering the effective capabilities")?;
    caps::set(None, CapSet::Permitted, &keep).context("lowering the permitted capabilities")?;
    nix::sys::prctl::set_no_new_privs().context("prctl(PR_SET_NO_NEW_PRIVS)")?;
    Ok(format!(
        "privileges: uid {}, gid {}, capabilities kept: {}",
        nix::unistd::geteuid(),
        nix::unistd::getegid(),
        names(&keep)
    ))
}

/// `keep`'s names, sorted, or "none".
fn names(keep: &CapsHashSet) -> String {
    let mut v: Vec<String> = keep.iter().map(|c| c.to_string()).collect();
    v.sort();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Config {
        crate::config::parse(text, "t.toml", None).expect("a valid config")
    }

    #[test]
    fn only_af_xdp_ports_keep_a_capability() {
        let pcap = parsed(
            "[[port]]\nname = \"a\"\ndriver = \"null\"\n[[worker]]\ncore = 0\nmode = \"io\"\nrx = [\"a:0\"]\n",
        );
        assert!(kept(&pcap).is_empty());
        assert_eq!(names(&kept(&pcap)), "none");
        let mut xdp = pcap.clone();
        xdp.ports[0].kind = PortKind::AfXdp {
            iface: "eth0".into(),
            frames: 4096,
            zerocopy: false,
            skb_mode: false,
        };
        assert_eq!(names(&kept(&xdp)), "CAP_NET_ADMIN");
    }

    #[test]
    fn a_thread_that_sheds_holds_nothing_and_others_keep_theirs() {
        if nix::unistd::geteuid().is_root() {
            // Root's threads keep theirs for the drop's setuid.
            return;
        }
        let before = caps::read(None, CapSet::Permitted).unwrap();
        let after = std::thread::spawn(|| {
            shed_thread();
            [
                CapSet::Ambient,
                CapSet::Inheritable,
                CapSet::Effective,
                CapSet::Permitted,
            ]
            .map(|s| caps::read(None, s).unwrap().len())
        })
        .join()
        .unwrap();
        assert_eq!(after, [0, 0, 0, 0]);
        assert_eq!(caps::read(None, CapSet::Permitted).unwrap(), before);
    }
}
