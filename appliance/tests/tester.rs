//! testpmd's receiving modes end to end: `icmpecho` answers the ARP and
//! ICMP echo requests of a replayed capture on the port they came in on
//! (and frees the rest, counted as consumed); `rxonly` counts and frees
//! everything. Every packet is accounted for.

mod common;

use pcap_file::pcap::{PcapPacket, PcapWriter};
use pipeline::checksum;
use pipeline::wire::{ArpPacket, IcmpPacket, Ipv4Packet, ARP_REPLY};
use std::path::Path;
use std::time::Duration;

const HOST: [u8; 6] = [2, 0x5e, 0, 0, 0, 1];
const PORT: [u8; 6] = [2, 0x51, 0, 0, 0, 0];

/// 8 ARP requests, 8 echo requests (half to a group), 8 UDP packets.
fn requests() -> Vec<Vec<u8>> {
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
            f[0..6].copy_from_slice(&PORT);
            f[6..12].copy_from_slice(&HOST);
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            {
                let mut ip = Ipv4Packet::new_unchecked(&mut f[14..34]);
                ip.set_version_ihl(20);
                ip.set_total_len(44);
                ip.set_ident(u16::from(i));
                ip.set_ttl(64);
                ip.set_protocol(proto);
                ip.set_src([198, 18, 0, 2]);
                ip.set_dst(if i % 2 == 0 {
                    [198, 18, 0, 1]
                } else {
                    [224, 0, 0, 1]
                });
                ip.fill_checksum();
            }
            f[34] = if proto == 1 { 8 } else { 0x03 };
            f[38..42].copy_from_slice(&[0, 7, 0, i]);
            f[42..58].copy_from_slice(b"sluice-echo-0000");
            if proto == 1 {
                let c = !checksum::fold(checksum::sum(&f[34..], 0));
                f[36..38].copy_from_slice(&c.to_be_bytes());
            }
            out.push(f);
        }
    }
    out
}

fn write_pcap(path: &Path, frames: &[Vec<u8>]) {
    let mut w = PcapWriter::new(std::fs::File::create(path).unwrap()).unwrap();
    for f in frames {
        w.write_packet(&PcapPacket::new(Duration::ZERO, f.len() as u32, f))
            .unwrap();
    }
}

fn run(mode: &str) -> (appliance::telemetry::Report, Vec<Vec<u8>>) {
    let dir = std::env::temp_dir().join(format!("sluice-tester-{mode}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    write_pcap(&dir.join("in.pcap"), &requests());
    let text = format!(
        r#"
[run]
duration = 0.5
[[port]]
name = "p0"
driver = "pcap"
mac = "02:51:00:00:00:00"
[port.pcap]
rx_file = "{0}/in.pcap"
tx_file = "{0}/out.pcap"
[[worker]]
core = 1
mode = "{mode}"
rx = ["p0"]
"#,
        dir.display()
    );
    let (_, s) = common::run(&text);
    let out = if dir.join("out.pcap").exists() {
        pmd::pcap::read_frames(&dir.join("out.pcap")).unwrap()
    } else {
        Vec::new()
    };
    std::fs::remove_dir_all(&dir).unwrap();
    (s, out)
}

#[test]
fn icmpecho_answers_arp_and_echo_and_frees_the_rest() {
    let (s, out) = run("icmpecho");
    let b = s.balance.as_ref().unwrap();
    assert!(b.balanced, "{}", s.text());
    assert_eq!(b.offered, 24, "{}", s.text());
    assert_eq!(b.consumed, 8, "the UDP packets: {}", s.text());
    assert_eq!(out.len(), 16, "{}", s.text());
    let (mut arps, mut echoes) = (0, 0);
    for f in &out {
        assert_eq!(&f[0..6], &HOST, "back to the asker");
        match &f[12..14] {
            [0x08, 0x06] => {
                let a = ArpPacket::new_checked(&f[14..]).unwrap();
                assert_eq!(a.oper(), ARP_REPLY);
                assert_eq!(a.sha().0, PORT);
                assert_eq!(a.tha().0, HOST);
                assert_eq!(a.tpa(), [198, 18, 0, 2]);
                assert_eq!(a.spa()[..3], [198, 18, 0]);
                arps += 1;
            }
            _ => {
                let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
                assert!(ip.verify_checksum());
                assert_eq!(ip.dst(), [198, 18, 0, 2]);
                assert_eq!(ip.src(), [198, 18, 0, 1]);
                let icmp = IcmpPacket::new_checked(ip.payload()).unwrap();
                assert_eq!((icmp.msg_type(), icmp.code()), (0, 0));
                assert_eq!(checksum::fold(checksum::sum(ip.payload(), 0)), 0xffff);
                echoes += 1;
            }
        }
    }
    assert_eq!((arps, echoes), (8, 8));
}

#[test]
fn rxonly_counts_and_frees_everything() {
    let (s, out) = run("rxonly");
    let b = s.balance.as_ref().unwrap();
    assert!(b.balanced, "{}", s.text());
    assert_eq!(
        (b.offered, b.consumed, b.delivered),
        (24, 24, 0),
        "{}",
        s.text()
    );
    assert!(out.is_empty());
    assert_eq!(s.cores[0].mode, "rxonly");
}
