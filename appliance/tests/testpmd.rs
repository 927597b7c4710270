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

use pcap_file::pcap::{PcapPacket, PcapWriter};
use pipeline::checksum;
use pipeline::wire::Ipv4Packet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// net_pcap's MAC for its first port (as testpmd reports it).
const PCAP_MAC: &str = "02:70:63:61:70:00";
const HOST: [u8; 6] = [2, 0x5e, 0, 0, 0, 1];

fn input() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for i in 0..8u8 {
        let mut arp = vec![0xff; 6];
        arp.extend_from_slice(&HOST);
        arp.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
        arp.extend_from_slice(&HOST);
        arp.extend_from_slice(&[198, 18, 0, 2, 0, 0, 0, 0, 0, 0, 198, 18, 0, 10 + i]);
        arp.resize(60, 0);
        out.push(arp);
        for proto in [1u8, 17] {
            let mut f = vec![0u8; 14 + 20 + 24];
            f[0..6].copy_from_slice(&[2, 0x70, 0x63, 0x61, 0x70, 0]);
            f[6..12].copy_from_slice(&HOST);
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            {
                let mut ip = Ipv4Packet::new_unchecked(&mut f[14..34]);
                ip.set_version_ihl(20);
                ip.set_total_len(44);
                ip.set_ident(u16::from(i));
                ip.set_ttl(64);
                ip.set_protocol(proto);
                ip.set_src([198, 18, 0, 2 + 4 * (i % 2)]);
                ip.set_dst(if i % 2 == 0 {
                    [198, 18, 0, 1]
                } else {
                    [224, 0, 0, 1]
                });
                ip.fill_checksum();
            }
            f[34] = if proto == 1 { 8 } else { 3 };
            f[38..42].copy_from_slice(&[0, 7, 0, i]);
            f[42..58].copy_from_slice(b"sluice-vs-tpmd-0");
            if proto == 1 {
                let c = !checksum::fold(checksum::sum(&f[34..], 0));
                f[36..38].copy_from_slice(&c.to_be_bytes());
            }
            out.push(f);
        }
    }
    out
}

fn have_testpmd() -> bool {
    let ok = Command::new("sh")
        .args(["-c", "command -v dpdk-testpmd"])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(std::env::var_os("CI").is_none(), "dpdk-testpmd is missing");
        eprintln!("skipping: dpdk-testpmd is not installed");
    }
    ok
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sluice-tpmd-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let mut w = PcapWriter::new(std::fs::File::create(d.join("in.pcap")).unwrap()).unwrap();
    for f in input() {
        w.write_packet(&PcapPacket::new(Duration::ZERO, f.len() as u32, &f))
            .unwrap();
    }
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
    if !have_testpmd() {
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
