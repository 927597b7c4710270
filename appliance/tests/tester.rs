//! testpmd's receiving modes end to end: `icmpecho` answers the ARP and
//! ICMP echo requests of a replayed capture on the port they came in on
//! (and frees the rest, counted as consumed); `rxonly` counts and frees
//! everything. Every packet is accounted for.

mod common;

use pipeline::checksum;
use pipeline::wire::{ArpPacket, IcmpPacket, Ipv4Packet, ARP_REPLY};

const HOST: [u8; 6] = [2, 0x5e, 0, 0, 0, 1];
const PORT: [u8; 6] = [2, 0x51, 0, 0, 0, 0];

fn run(mode: &str) -> (appliance::telemetry::Report, Vec<Vec<u8>>) {
    let dir = common::fresh_dir(&format!("tester-{mode}"));
    common::write_pcap(&dir.join("in.pcap"), &common::tester_requests(PORT));
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
