//! Sluice's tester modes against dpdk-testpmd's, on the same DPDK vdev and
//! the same input: a `net_pcap` port replaying ARP requests, ICMP echo
//! requests (to a host and to a group) and UDP packets. `icmpecho` must
//! send byte for byte what testpmd's `icmpecho` sends, in the same order;
//! `csum` must forward byte for byte what testpmd's `csum` forwards (its
//! checksums computed in software); `rxonly` must receive what testpmd's
//! receives. Needs the DPDK build
//! (`--features dpdk`) and dpdk-testpmd (Debian's `dpdk`, which
//! `scripts/test.sh` installs): without testpmd it skips, unless `CI` is
//! set.
#![cfg(feature = "dpdk")]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// net_pcap's MAC for its first port (as testpmd reports it).
const PCAP_MAC: &str = "02:70:63:61:70:00";
const PCAP_MAC_BYTES: [u8; 6] = [2, 0x70, 0x63, 0x61, 0x70, 0];

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sluice-tpmd-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    common::write_pcap(&d.join("in.pcap"), &common::tester_requests(PCAP_MAC_BYTES));
    d
}

/// testpmd in `mode` over the capture; its output frames and its RX count.
fn testpmd(d: &Path, mode: &str) -> (Vec<Vec<u8>>, u64) {
    let out = d.join("testpmd.pcap");
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "(sleep 2; echo) | timeout 60 dpdk-testpmd -l 0,1 --no-pci --no-huge -m 512 \
             --file-prefix tpmd-{pid} --log-level '*:error' \
             --vdev net_pcap0,rx_pcap={inp},tx_pcap={out} -- \
             --forward-mode={mode} -a --no-flush-rx --total-num-mbufs=2048",
            pid = std::process::id(),
            inp = d.join("in.pcap").display(),
            out = out.display()
        ))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let rx = text
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("RX-packets:")
                .and_then(|r| r.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or_else(|| panic!("no RX count from testpmd:\n{text}"));
    (pmd::pcap::read_frames(&out).unwrap(), rx)
}

/// Sluice's DPDK build in `mode` over the same vdev.
fn sluice(d: &Path, mode: &str) -> (Vec<Vec<u8>>, serde_json::Value) {
    let out = d.join("sluice.pcap");
    let cfg = d.join("s.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
[run]
duration = 1
[dpdk]
eal_args = ["--no-huge", "-m", "512"]
[[port]]
name = "p0"
driver = "dpdk"
mac = "{PCAP_MAC}"
peer_mac = "02:00:00:00:00:00"
[port.dpdk]
device = "net_pcap0,rx_pcap={},tx_pcap={}"
[[worker]]
core = 1
mode = "{mode}"
rx = ["p0"]
"#,
            d.join("in.pcap").display(),
            out.display()
        ),
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("run")
        .arg(&cfg)
        .arg("--json")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let last = String::from_utf8_lossy(&o.stdout)
        .lines()
        .last()
        .unwrap()
        .to_string();
    let frames = if out.exists() {
        pmd::pcap::read_frames(&out).unwrap()
    } else {
        Vec::new()
    };
    (frames, serde_json::from_str(&last).unwrap())
}

#[test]
fn icmpecho_csum_and_rxonly_match_testpmd() {
    if !common::have("dpdk-testpmd") {
        return;
    }
    let d = dir("modes");
    let (theirs, rx) = testpmd(&d, "icmpecho");
    assert_eq!(rx, 24);
    assert_eq!(
        theirs.len(),
        16,
        "testpmd answers 8 ARP and 8 echo requests"
    );
    let (ours, s) = sluice(&d, "icmpecho");
    assert_eq!(s["balance"]["offered"], 24, "{s}");
    assert_eq!(s["balance"]["consumed"], 8, "{s}");
    assert_eq!(ours.len(), theirs.len());
    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(a, b, "frame {i} differs from testpmd's");
    }
    // csum: same MACs (the port's and testpmd's default peer address),
    // same checksums, every packet forwarded.
    let (theirs, rx) = testpmd(&d, "csum");
    let (ours, s) = sluice(&d, "csum");
    assert_eq!((rx, theirs.len()), (24, 24));
    assert_eq!(ours.len(), 24, "{s}");
    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(a, b, "csum frame {i} differs from testpmd's");
    }
    // The input's UDP checksums are garbage except where the identifier
    // byte is 0 (7 of 8): both fixed them alike; Sluice verifies in
    // software and counts them, where testpmd trusts the NIC's RX flags
    // (net_pcap has none, so it counts 0).
    assert_eq!(s["cores"][0]["events"]["bad_l4_csum"], 7, "{s}");
    assert!(s["cores"][0]["events"].get("bad_ip_csum").is_none(), "{s}");
    let (_, rx) = testpmd(&d, "rxonly");
    let (ours, s) = sluice(&d, "rxonly");
    assert_eq!(rx, 24);
    assert_eq!(s["balance"]["offered"], 24, "{s}");
    assert_eq!(s["balance"]["consumed"], 24, "{s}");
    assert!(ours.is_empty());
    std::fs::remove_dir_all(&d).unwrap();
}
