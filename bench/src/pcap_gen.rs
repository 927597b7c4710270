//! `udp-pcap`: writes a pcap of distinct IPv4/UDP packets for drivers that
//! replay a file (DPDK's `net_pcap`, Sluice's pcap port): packet `i` goes
//! from `--src` port `1024 + i` to `--dst-net`'s subnet `i % subnets`,
//! host `i / subnets + 1`, port 9, addressed to `--dst-mac`; or, with
//! `--full-table`, to a random address inside a random prefix of the
//! shared full Internet table; or, with `--full-table6`, IPv6/UDP packets
//! to random addresses inside random IPv6 prefixes of that table; or,
//! with `--host`, all to that one host as many flows
//! (`bench/run-lab-scale.sh`: conntrack and NAT at millions of flows
//! through a router).

use anyhow::{bail, Context, Result};
use clap::Args;
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::{DataLink, Endianness};
use pipeline::checksum;
use pipeline::wire::{IpProto, Ipv4Packet, Ipv6Packet, MacAddr, ETHERNET_HEADER_LEN};
use std::fs::File;
use std::io::BufWriter;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `udp-pcap`.
#[derive(Args)]
pub struct UdpPcapArgs {
    /// The file to write.
    #[arg(long)]
    out: PathBuf,
    /// Packets.
    #[arg(long, default_value_t = 1024)]
    packets: u32,
    /// Frame size (bytes, without the FCS).
    #[arg(long, default_value_t = 60)]
    size: usize,
    /// Destination MAC (the receiving port's).
    #[arg(long)]
    dst_mac: MacAddr,
    /// Source MAC.
    #[arg(long, default_value = "02:5e:00:00:00:00")]
    src_mac: MacAddr,
    /// Source address.
    #[arg(long, default_value = "198.19.0.2")]
    src: Ipv4Addr,
    /// First destination subnet (a /24); the next ones follow it.
    #[arg(long, default_value = "198.18.0.0")]
    dst_net: Ipv4Addr,
    /// Destination /24 subnets the packets spread over.
    #[arg(long, default_value_t = 16)]
    subnets: u32,
    /// Destinations inside random prefixes of the shared full table
    /// (`routes/bart_tier1_fulltable`; martians, 198.18.0.0/15 and
    /// 198.20.0.0/24, the lab's own, left out) instead of the subnets.
    #[arg(long)]
    full_table: bool,
    /// IPv6/UDP packets from `--src6` to random addresses inside random
    /// IPv6 prefixes of the shared full table (multicast, link-local,
    /// documentation and unique-local space left out); frames of at
    /// least 62 bytes.
    #[arg(long, conflicts_with_all = ["full_table", "host"])]
    full_table6: bool,
    /// Source address with `--full-table6`.
    #[arg(long, default_value = "2001:db8:1::2")]
    src6: Ipv6Addr,
    /// Every packet to this one host, each a flow of its own: packet `i`
    /// from port 1024 + i % 4096 to port 1024 + i / 4096 (4,096 flows a
    /// server port, so a source NAT that keeps reply tuples apart fills a
    /// sixteenth of its ports towards each).
    #[arg(long, conflicts_with = "full_table")]
    host: Option<Ipv4Addr>,
}

/// Flows to one server port with `--host`.
const FLOWS_PER_DPORT: u32 = 4096;

/// Packet `i`'s UDP ports: with `--host`, [`FLOWS_PER_DPORT`] source ports
/// a server port; else source port 1024 + i to port 9.
fn ports(a: &UdpPcapArgs, i: u32) -> (u16, u16) {
    match a.host {
        Some(_) => (
            (1024 + i % FLOWS_PER_DPORT) as u16,
            (1024 + i / FLOWS_PER_DPORT) as u16,
        ),
        None => ((1024 + i) as u16, 9),
    }
}

/// Packet `i`'s destination among `a`'s subnets.
fn subnet_dst(a: &UdpPcapArgs, i: u32) -> u32 {
    u32::from(a.dst_net) + ((i % a.subnets) << 8) + i / a.subnets + 1
}

/// Frame `i` of `a`, to `dst`.
fn frame(a: &UdpPcapArgs, i: u32, dst: u32) -> Vec<u8> {
    let mut f = vec![0u8; a.size];
    f[0..6].copy_from_slice(&a.dst_mac.0);
    f[6..12].copy_from_slice(&a.src_mac.0);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip_len = a.size - ETHERNET_HEADER_LEN;
    {
        let mut ip = Ipv4Packet::new_unchecked(&mut f[ETHERNET_HEADER_LEN..]);
        ip.set_version_ihl(20);
        ip.set_total_len(ip_len as u16);
        ip.set_ident(i as u16);
        ip.set_flags_frag(0x4000);
        ip.set_ttl(64);
        ip.set_protocol(IpProto::UDP);
        ip.set_src(a.src.octets());
        ip.set_dst(dst.to_be_bytes());
        ip.fill_checksum();
    }
    let udp = &mut f[ETHERNET_HEADER_LEN + 20..];
    let udp_len = udp.len() as u16;
    let (sport, dport) = ports(a, i);
    udp[0..2].copy_from_slice(&sport.to_be_bytes());
    udp[2..4].copy_from_slice(&dport.to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    udp[8..].fill(b'A'); // checksum 0: none (IPv4)
    f
}

/// IPv6 frame `i` of `a`, to `dst`: UDP from source port 1024 + i to
/// port 9, its checksum (which IPv6 requires) filled in.
fn frame6(a: &UdpPcapArgs, i: u32, dst: Ipv6Addr) -> Vec<u8> {
    let mut f = vec![0u8; a.size];
    f[0..6].copy_from_slice(&a.dst_mac.0);
    f[6..12].copy_from_slice(&a.src_mac.0);
    f[12..14].copy_from_slice(&[0x86, 0xdd]);
    let udp_len = (a.size - ETHERNET_HEADER_LEN - 40) as u16;
    {
        let mut ip = Ipv6Packet::new_unchecked(&mut f[ETHERNET_HEADER_LEN..]);
        ip.set_version();
        ip.set_payload_len(udp_len);
        ip.set_next_header(IpProto::UDP);
        ip.set_hop_limit(64);
        ip.set_src(a.src6.octets());
        ip.set_dst(dst.octets());
    }
    let udp = &mut f[ETHERNET_HEADER_LEN + 40..];
    udp[0..2].copy_from_slice(&((1024 + i) as u16).to_be_bytes());
    udp[2..4].copy_from_slice(&9u16.to_be_bytes());
    udp[4..6].copy_from_slice(&udp_len.to_be_bytes());
    udp[8..].fill(b'A');
    let ph = checksum::pseudo_v6(a.src6.octets(), dst.octets(), IpProto::UDP, udp_len.into());
    let c = match !checksum::fold(checksum::sum(udp, ph)) {
        0 => 0xffff,
        c => c,
    };
    udp[6..8].copy_from_slice(&c.to_be_bytes());
    f
}

/// Writes the file.
pub fn udp_pcap(a: UdpPcapArgs) -> Result<()> {
    let least = if a.full_table6 { 62 } else { 42 };
    if a.size < least || a.size > 1514 {
        bail!("--size must be {least}..=1514");
    }
    if a.full_table6 {
        let frames: Vec<Vec<u8>> = full_table6_dsts(a.packets as usize)?
            .into_iter()
            .enumerate()
            .map(|(i, d)| frame6(&a, i as u32, d))
            .collect();
        return write(&a.out, &frames);
    }
    let dsts: Vec<u32> = if let Some(h) = a.host {
        if u64::from(a.packets) > u64::from(FLOWS_PER_DPORT) * (65536 - 1024) {
            bail!(
                "--host: at most {} packets (4,096 flows on each server port 1024-65535)",
                FLOWS_PER_DPORT * (65536 - 1024)
            );
        }
        vec![u32::from(h); a.packets as usize]
    } else if a.full_table {
        full_table_dsts(a.packets as usize)?
    } else {
        if a.subnets == 0 || a.packets / a.subnets >= 254 {
            bail!("--subnets must be at least 1 and leave under 254 hosts per subnet");
        }
        (0..a.packets).map(|i| subnet_dst(&a, i)).collect()
    };
    let frames: Vec<Vec<u8>> = dsts
        .iter()
        .enumerate()
        .map(|(i, &dst)| frame(&a, i as u32, dst))
        .collect();
    write(&a.out, &frames)
}

/// Writes `frames` to a pcap file at `out`.
fn write(out: &std::path::Path, frames: &[Vec<u8>]) -> Result<()> {
    let f = File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let hdr = PcapHeader {
        datalink: DataLink::ETHERNET,
        snaplen: 65535,
        endianness: Endianness::Little,
        ..PcapHeader::default()
    };
    let mut w = PcapWriter::with_header(BufWriter::new(f), hdr)?;
    for b in frames {
        w.write_packet(&PcapPacket::new(Duration::ZERO, b.len() as u32, b))?;
    }
    Ok(())
}

/// `n` destinations inside random IPv6 prefixes of the shared full table,
/// none multicast (ff00::/8), link-local (fe80::/10), unique-local
/// (fc00::/7) or documentation (2001:db8::/32, the benchmarks' own).
fn full_table6_dsts(n: usize) -> Result<Vec<Ipv6Addr>> {
    use rand::SeedableRng;
    let (_, mut prefixes) = crate::lpm::table_prefixes()?;
    prefixes.retain(|&(_, len)| len > 0);
    if prefixes.is_empty() {
        bail!("the shared full table holds no IPv6 prefix");
    }
    let ours = |a: u128| {
        a >> 120 == 0xff
            || a >> 118 == 0xfe80 >> 6
            || a >> 121 == 0xfc >> 1
            || a >> 96 == 0x2001_0db8
    };
    let mut rng = rand::rngs::SmallRng::seed_from_u64(6);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let a = crate::lpm::host_in6(&mut rng, &prefixes);
        if !ours(a) {
            out.push(Ipv6Addr::from(a));
        }
    }
    Ok(out)
}

/// `n` destinations inside random prefixes of the shared full table, none
/// martian or in the benchmarks' own 198.18.0.0/15 and 198.20.0.0/24.
fn full_table_dsts(n: usize) -> Result<Vec<u32>> {
    let (prefixes, _) = crate::lpm::table_prefixes()?;
    let ours = |a: u32| {
        let first = a >> 24;
        first == 0 || first == 127 || first >= 224 || a >> 17 == 0xc612 >> 1 || a >> 8 == 0xc6_1400
    };
    let mut seed = 3;
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let (_, inside) = crate::lpm::v4_addrs(n, &prefixes, seed);
        out.extend(inside.into_iter().filter(|&a| !ours(a)));
        seed += 1;
    }
    out.truncate(n);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `packets` packets from `src` (16 subnets of 198.18.0.0, or `host`).
    fn args(packets: u32, src: &str, host: Option<&str>) -> UdpPcapArgs {
        UdpPcapArgs {
            out: PathBuf::new(),
            packets,
            size: 60,
            dst_mac: "02:51:00:00:00:00".parse().unwrap(),
            src_mac: "02:5e:00:00:00:00".parse().unwrap(),
            src: src.parse().unwrap(),
            dst_net: "198.18.0.0".parse().unwrap(),
            subnets: 16,
            full_table: false,
            full_table6: false,
            src6: "2001:db8:1::2".parse().unwrap(),
            host: host.map(|h| h.parse().unwrap()),
        }
    }

    #[test]
    fn frames_are_valid_and_distinct() {
        let a = args(1024, "198.19.0.2", None);
        let f = frame(&a, 17, subnet_dst(&a, 17));
        assert_eq!(f.len(), 60);
        let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
        assert!(ip.verify_checksum());
        assert_eq!(ip.dst(), [198, 18, 1, 2]);
        assert_eq!(ip.total_len(), 46);
        assert_eq!(&f[34..36], &(1024u16 + 17).to_be_bytes());
        assert_ne!(
            frame(&a, 1, subnet_dst(&a, 1)),
            frame(&a, 2, subnet_dst(&a, 2))
        );
    }

    /// `--host`: one destination, every packet a distinct flow, 4,096 to a
    /// server port.
    #[test]
    fn host_flows_are_distinct() {
        let a = args(3 * FLOWS_PER_DPORT, "198.18.0.2", Some("198.19.0.2"));
        let mut seen = std::collections::HashSet::new();
        for i in 0..a.packets {
            assert!(seen.insert(ports(&a, i)), "packet {i}");
        }
        assert_eq!(ports(&a, 4097), (1025, 1025));
        let f = frame(&a, 4097, u32::from(a.host.unwrap()));
        assert_eq!(&f[34..38], &[4, 1, 4, 1]);
        assert_eq!(
            Ipv4Packet::new_checked(&f[14..]).unwrap().dst(),
            [198, 19, 0, 2]
        );
    }

    /// Full-table destinations: as many as asked, none martian or in the
    /// benchmarks' own ranges, and spread (most distinct).
    #[test]
    fn full_table_destinations_avoid_the_labs_ranges() {
        if testdata::shared("routes/bart_tier1_fulltable/prefixes.txt.gz").is_none() {
            eprintln!("skipped: no shared full table");
            return;
        }
        let d = full_table_dsts(5000).unwrap();
        assert_eq!(d.len(), 5000);
        for &a in &d {
            let first = a >> 24;
            assert!(first != 0 && first != 127 && first < 224, "{a:#x}");
            assert!(!(0xc612_0000..0xc614_0000).contains(&a) && a >> 8 != 0xc6_1400);
        }
        let mut u = d.clone();
        u.sort_unstable();
        u.dedup();
        assert!(u.len() > 4900, "{} distinct", u.len());
    }

    /// `--full-table6`: IPv6/UDP frames with a valid UDP checksum, to
    /// addresses inside the table's IPv6 prefixes and outside the
    /// special ranges, spread (most distinct).
    #[test]
    fn full_table6_frames_are_valid_and_spread() {
        if testdata::shared("routes/bart_tier1_fulltable/prefixes.txt.gz").is_none() {
            eprintln!("skipped: no shared full table");
            return;
        }
        let d = full_table6_dsts(5000).unwrap();
        assert_eq!(d.len(), 5000);
        for a in &d {
            let s = a.segments();
            assert!(s[0] >> 8 != 0xff && s[0] & 0xffc0 != 0xfe80 && s[0] & 0xfe00 != 0xfc00);
            assert!(!(s[0] == 0x2001 && s[1] == 0x0db8), "{a}");
        }
        let mut u = d.clone();
        u.sort_unstable();
        u.dedup();
        assert!(u.len() > 4900, "{} distinct", u.len());
        let mut a = args(1, "198.19.0.2", None);
        a.size = 62;
        let f = frame6(&a, 5, d[0]);
        assert_eq!(f.len(), 62);
        let ip = Ipv6Packet::new_checked(&f[14..]).unwrap();
        assert_eq!(
            (ip.payload_len(), ip.next_header(), ip.hop_limit()),
            (8, 17, 64)
        );
        assert_eq!(ip.dst(), d[0].octets());
        let ph = checksum::pseudo_v6(ip.src(), ip.dst(), 17, 8);
        assert_eq!(checksum::fold(checksum::sum(&f[54..], ph)), 0xffff);
        assert_eq!(&f[54..56], &1029u16.to_be_bytes());
    }
}
