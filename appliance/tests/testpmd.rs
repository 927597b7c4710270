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

/// The tests here run one at a time: each runs busy-polling DPDK
/// processes pinned to cores 0 and 1, and two at once would take turns on
/// the same cores (the txonly test's pacing check would see it).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn dir(name: &str) -> PathBuf {
    let d = common::fresh_dir(&format!("tpmd-{name}"));
    common::write_pcap(&d.join("in.pcap"), &common::tester_requests(PCAP_MAC_BYTES));
    d
}

/// dpdk-testpmd on a net_pcap port replaying `input` into
/// `d/testpmd.pcap`, fed `stdin` (a shell command's output), with `args`
/// after its EAL's; its output frames and what it printed.
fn run_testpmd(d: &Path, input: &Path, stdin: &str, args: &str) -> (Vec<Vec<u8>>, String) {
    let out = d.join("testpmd.pcap");
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{stdin} | timeout 60 dpdk-testpmd -l 0,1 --no-pci --no-huge -m 512 \
             --file-prefix tpmd-{pid} --log-level '*:error' \
             --vdev net_pcap0,rx_pcap={inp},tx_pcap={out} -- {args} --total-num-mbufs=2048",
            pid = std::process::id(),
            inp = input.display(),
            out = out.display()
        ))
        .output()
        .unwrap();
    (
        pmd::pcap::read_frames(&out).unwrap(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

/// testpmd in `mode` over the capture; its output frames and its RX count.
fn testpmd(d: &Path, mode: &str) -> (Vec<Vec<u8>>, u64) {
    let (frames, text) = run_testpmd(
        d,
        &d.join("in.pcap"),
        "(sleep 2; echo)",
        &format!("--forward-mode={mode} -a --no-flush-rx"),
    );
    let rx = text
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("RX-packets:")
                .and_then(|r| r.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or_else(|| panic!("no RX count from testpmd:\n{text}"));
    (frames, rx)
}

/// Sluice's DPDK build in `mode` over the same vdev.
fn sluice(d: &Path, mode: &str) -> (Vec<Vec<u8>>, serde_json::Value) {
    sluice_with(d, mode, &d.join("in.pcap"), "")
}

/// Sluice in `mode` on a net_pcap port replaying `input`, with `extra`
/// TOML after the worker (its `[worker.gen]`).
fn sluice_with(
    d: &Path,
    mode: &str,
    input: &Path,
    extra: &str,
) -> (Vec<Vec<u8>>, serde_json::Value) {
    let out = d.join("sluice.pcap");
    let _ = std::fs::remove_file(&out);
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
{extra}
"#,
            input.display(),
            out.display()
        ),
    )
    .unwrap();
    let summary = sluice_summary(&cfg);
    let frames = if out.exists() {
        pmd::pcap::read_frames(&out).unwrap()
    } else {
        Vec::new()
    };
    (frames, summary)
}

/// `sluice run --json CFG` to its end: the summary (its last line).
fn sluice_summary(cfg: &Path) -> serde_json::Value {
    let o = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("run")
        .arg(cfg)
        .arg("--json")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    serde_json::from_str(out.lines().last().unwrap()).unwrap()
}

#[test]
fn icmpecho_csum_and_rxonly_match_testpmd() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
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

/// A generator test's start: its turn on the cores, its directory, and an
/// empty capture for the vdev's RX side (the generators receive nothing);
/// `None` without testpmd.
fn generator_setup(name: &str) -> Option<(std::sync::MutexGuard<'static, ()>, PathBuf, PathBuf)> {
    let one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !common::have("dpdk-testpmd") {
        return None;
    }
    let d = dir(name);
    let empty = d.join("empty.pcap");
    common::write_pcap(&empty, &[]);
    Some((one, d, empty))
}

/// testpmd's txonly frame (from `start tx_first`: one burst of its txonly
/// engine, 32 frames) against Sluice's txonly on the same vdev with the
/// same addresses: the same frame length, MACs, IPv4 and UDP header fields
/// (Sluice sets DF and fills the UDP checksum, which testpmd leaves 0),
/// valid checksums; every frame Sluice counted is in the capture, paced
/// (the signatures' TSC gaps even), and without signatures the frames are
/// the template as is.
#[test]
fn txonly_frames_match_testpmds() {
    let Some((_one, d, empty)) = generator_setup("txonly") else {
        return;
    };
    let (theirs, text) = run_testpmd(&d, &empty, "printf 'start tx_first\\nstop\\nquit\\n'", "-i");
    assert_eq!(theirs.len(), 32, "testpmd's tx_first burst:\n{text}");
    let gen = |sig: bool| {
        format!(
            "[worker.gen]\nrate = 200\nsize = 64\nsrc_ip = \"198.18.0.1/32\"\n\
             dst_ip = \"198.18.0.2/32\"\nsrc_port = \"9\"\ndst_port = \"9\"\nsignature = {sig}\n"
        )
    };
    for sig in [true, false] {
        let (ours, s) = sluice_with(&d, "txonly", &empty, &gen(sig));
        let made = s["balance"]["generated"]
            .as_u64()
            .unwrap_or_else(|| panic!("{s}"));
        assert_eq!(ours.len() as u64, made, "every generated frame sent: {s}");
        assert_eq!(s["ports"][0]["tx_pkts"].as_u64(), Some(made), "{s}");
        assert_eq!(
            s["ports"][0]["xstats"]["tx_good_bytes"].as_u64(),
            Some(made * 64),
            "the PMD's byte count: {s}"
        );
        assert_eq!(s["balance"]["balanced"], true, "{s}");
        // Accounting, not a rate (CI shares its CPUs): what was made or
        // skipped behind schedule is at most the schedule's 200 a second
        // of the run, and enough was made to check the frames and pacing.
        let late = s["balance"]["gen_late"].as_u64().unwrap_or(0);
        let secs = s["interval"].as_f64().unwrap_or(1.0);
        assert!(
            (made + late) as f64 <= 200.0 * secs + 2.0,
            "made {made} + late {late} in {secs} s at 200 pps"
        );
        assert!(made >= 20, "made {made}: too few to check");
        for (i, f) in ours.iter().enumerate() {
            let t = &theirs[0];
            assert_eq!(f[..12], t[..12], "frame {i}: MACs");
            same_ipv4_udp_headers(i, f, t);
            let udp_csum = u16::from_be_bytes([f[40], f[41]]);
            assert_ne!(udp_csum, 0, "frame {i}: Sluice fills the UDP checksum");
            let mut pseudo = Vec::from(&f[26..34]);
            pseudo.extend_from_slice(&[0, 17]);
            pseudo.extend_from_slice(&f[38..40]);
            pseudo.extend_from_slice(&f[34..]);
            assert_eq!(
                pipeline::checksum::checksum(&pseudo),
                0,
                "frame {i}: UDP checksum"
            );
        }
        let sigs: Vec<_> = ours.iter().map(|f| pmd::probe::read(f)).collect();
        if sig {
            for (i, g) in sigs.iter().enumerate() {
                let g = g.unwrap_or_else(|| panic!("frame {i} unsigned"));
                assert_eq!(g.seq, i as u32, "sequence in order");
            }
            // Paced: the TSC gaps between stamps are even, and none are
            // bunched (no bursts). On a busy machine the core is taken
            // away now and then; what fell behind is skipped, not sent in
            // a burst, so those gaps are long, never short: at least half
            // within 20% of the median, under a tenth below a fifth of it.
            let mut gaps: Vec<u64> = sigs
                .windows(2)
                .map(|w| w[1].unwrap().tsc - w[0].unwrap().tsc)
                .collect();
            gaps.sort_unstable();
            let median = gaps[gaps.len() / 2];
            let even = gaps
                .iter()
                .filter(|g| g.abs_diff(median) * 5 < median)
                .count();
            let bunched = gaps.iter().filter(|g| **g * 5 < median).count();
            assert!(
                even * 2 >= gaps.len() && bunched * 10 < gaps.len(),
                "{even} of {} gaps within 20% of the median {median}, {bunched} under a fifth of it",
                gaps.len()
            );
        } else {
            assert!(sigs.iter().all(Option::is_none), "no signatures");
            assert!(ours.windows(2).all(|w| w[0] == w[1]), "one flow: one frame");
        }
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// txonly and flowgen into a net_ring, rxonly out of it on another core
/// (the shipped `configs/dpdk-ring-txrx.toml`, paced so that the ring does
/// not fill unless the receiver is descheduled): every frame made arrives
/// signed, in order, once, except what the ring still held when the run
/// stopped and what it refused while the receiver stalled.
#[test]
fn generated_frames_cross_a_ring_to_rxonly() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = common::fresh_dir("tpmd-ring");
    let shipped = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../configs/dpdk-ring-txrx.toml"
    ))
    .unwrap();
    for (mode, flows) in [("txonly", 1u64), ("flowgen", 64)] {
        let cfg = d.join(format!("{mode}.toml"));
        let text = shipped
            .replace("duration = 5", "duration = 1")
            .replace("rate = \"max\"", &format!("rate = 20000\nflows = {flows}"))
            .replace("mode = \"txonly\"", &format!("mode = \"{mode}\""))
            + "[dpdk]\neal_args = [\"--no-huge\", \"-m\", \"512\"]\n";
        std::fs::write(&cfg, text).unwrap();
        let s = sluice_summary(&cfg);
        let b = &s["balance"];
        assert_eq!(b["balanced"], true, "{s}");
        let made = b["generated"].as_u64().unwrap();
        let t = &s["cores"][1]["tester"];
        let signed = t["signed"].as_u64().unwrap();
        // Paced, the ring fills only if the receiving core is taken away
        // for longer than the ring lasts at this rate (1,024 frames at
        // 20,000/s: 51 ms; it happens on a busy CI host): then a frame
        // it held waited that long, and what the ring refused is counted
        // full and missed by the receiver's sequence, one for one.
        let full = b["tx_full"].as_u64().unwrap();
        if full > 0 {
            let waited = t["latency_ns"]["max"].as_f64().unwrap_or(0.0);
            assert!(
                waited > 0.9 * 1024.0 / 20_000.0 * 1e9,
                "{mode}: the ring filled ({full}) with the receiver never stalled: {s}"
            );
        }
        assert!(made >= 1000, "{mode}: made {made}: too few to check");
        assert!(
            signed + full <= made && made - signed - full <= 1024,
            "{mode}: {signed} of {made} received, {full} refused (the ring holds 1024): {s}"
        );
        assert_eq!(s["ports"][1]["rx_pkts"].as_u64(), Some(signed), "{s}");
        assert_eq!(t["lost"].as_u64(), Some(full), "{mode}: lost: {s}");
        for k in ["unsigned", "reordered", "duplicate"] {
            assert_eq!(t[k], 0, "{mode}: {k}: {s}");
        }
        assert_eq!(t["latency_ns"]["count"].as_u64(), Some(signed), "{s}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// flowgen with testpmd's address plan (source 10.254.0.0 port 1000,
/// destinations from 10.253.0.0 on, one address a flow, port 1001,
/// 64-byte frames): Sluice's `walk = "sequential"` sends testpmd's frames
/// in testpmd's order, flow after flow.
#[test]
fn flowgen_frames_match_testpmds() {
    let Some((_one, d, empty)) = generator_setup("flowgen") else {
        return;
    };
    // Stopped once its capture holds 128 frames (24-byte file header, 16
    // per record, 64-byte frames), not after a fixed time: on a busy
    // machine 50 ms once gave its forwarding core a single burst.
    let want = 24 + 128 * (16 + 64);
    let stdin = format!(
        "(sleep 2; echo start; i=0; while [ $(stat -c %s {out} 2>/dev/null || echo 0) -lt {want} ] \
         && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done; echo stop; echo quit)",
        out = d.join("testpmd.pcap").display()
    );
    let (theirs, text) = run_testpmd(
        &d,
        &empty,
        &stdin,
        "-i --forward-mode=flowgen --flowgen-flows=64",
    );
    assert!(
        theirs.len() >= 128,
        "testpmd's flowgen sent {}:\n{text}",
        theirs.len()
    );
    let (ours, s) = sluice_with(
        &d,
        "flowgen",
        &empty,
        "[worker.gen]\nrate = 2000\nsize = 60\nflows = 64\nwalk = \"sequential\"\n\
         src_ip = \"10.254.0.0/32\"\ndst_ip = \"10.253.0.0-10.253.0.63\"\n\
         src_port = \"1000\"\ndst_port = \"1001\"\nsignature = false\n",
    );
    assert_eq!(s["balance"]["balanced"], true, "{s}");
    assert!(
        ours.len() >= 128,
        "Sluice's flowgen sent {}: {s}",
        ours.len()
    );
    for (i, (f, t)) in ours.iter().zip(&theirs).take(128).enumerate() {
        // MACs: Sluice's are the port's and its peer's; testpmd's flowgen
        // has fixed ones (00:01:02:03:04:00 -> :01).
        assert_eq!(t[..12], [0, 1, 2, 3, 4, 1, 0, 1, 2, 3, 4, 0], "frame {i}");
        assert_eq!(f[..6], [2, 0, 0, 0, 0, 0], "frame {i}: peer_mac");
        assert_eq!(f[6..12], PCAP_MAC_BYTES, "frame {i}: the port's MAC");
        same_ipv4_udp_headers(i, f, t);
        assert_eq!(
            f[30..34],
            [10, 253, 0, (i % 64) as u8],
            "frame {i}: flow order"
        );
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// Frame `i` of Sluice's (`f`) and testpmd's (`t`) generated IPv4/UDP
/// frames agree from the EtherType to the UDP length: version, TOS, total
/// length, identification (0 in both), TTL, protocol, addresses, ports;
/// flags differ only by Sluice's DF; both IPv4 checksums verify.
fn same_ipv4_udp_headers(i: usize, f: &[u8], t: &[u8]) {
    assert_eq!(f.len(), t.len(), "frame {i}: length");
    assert_eq!(
        f[12..20],
        t[12..20],
        "frame {i}: EtherType, IPv4 version, TOS, length, id"
    );
    assert_eq!((f[20], t[20]), (0x40, 0), "frame {i}: DF in Sluice's only");
    assert_eq!(f[22..24], t[22..24], "frame {i}: TTL, protocol");
    assert_eq!(f[26..34], t[26..34], "frame {i}: addresses");
    assert_eq!(f[34..40], t[34..40], "frame {i}: UDP ports and length");
    for fr in [f, t] {
        assert_eq!(
            pipeline::checksum::checksum(&fr[14..34]),
            0,
            "frame {i}: IPv4 checksum"
        );
    }
}
