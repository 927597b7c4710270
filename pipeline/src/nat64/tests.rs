use super::*;
use std::net::{Ipv4Addr, Ipv6Addr};

fn v6(s: &str) -> u128 {
    u128::from(s.parse::<Ipv6Addr>().unwrap())
}

fn v4(s: &str) -> u32 {
    u32::from(s.parse::<Ipv4Addr>().unwrap())
}

/// RFC 6052 2.4's table: 192.0.2.33 embedded in a prefix of each length,
/// and taken out again.
#[test]
fn rfc6052_examples_embed_and_extract() {
    for (prefix, len, addr) in [
        ("2001:db8::", 32, "2001:db8:c000:221::"),
        ("2001:db8:100::", 40, "2001:db8:1c0:2:21::"),
        ("2001:db8:122::", 48, "2001:db8:122:c000:2:2100::"),
        ("2001:db8:122:300::", 56, "2001:db8:122:3c0:0:221::"),
        ("2001:db8:122:344::", 64, "2001:db8:122:344:c0:2:2100:0"),
        ("2001:db8:122:344::", 96, "2001:db8:122:344::192.0.2.33"),
        ("64:ff9b::", 96, "64:ff9b::192.0.2.33"),
    ] {
        let t = Nat64::new((v6(prefix), len), 1, vec![]).unwrap();
        assert_eq!(t.embed(v4("192.0.2.33")), v6(addr), "/{len}");
        assert!(t.contains(v6(addr)));
        assert_eq!(t.extract(v6(addr)), v4("192.0.2.33"), "/{len}");
    }
}

#[test]
fn prefixes_rfc6052_forbids_are_refused() {
    assert_eq!(
        Nat64::new((v6("2001:db8::"), 80), 1, vec![]),
        Err(BadPrefix::Length)
    );
    assert_eq!(
        Nat64::new((v6("2001:db8:0:0:ff00::"), 96), 1, vec![]),
        Err(BadPrefix::UOctet)
    );
    // The bits past the prefix are not the prefix's.
    let t = Nat64::new((v6("64:ff9b::1:2"), 96), 1, vec![]).unwrap();
    assert_eq!(t.prefix, WELL_KNOWN);
}

/// A client keeps its pool address (its /64 picks it), and every address
/// of the pool is used by some client.
#[test]
fn a_client_keeps_its_pool_address() {
    let t = Nat64::new(WELL_KNOWN, 1, vec![1, 2, 3]).unwrap();
    let a = t.pool_for(v6("2001:db8:1:2::10"));
    assert_eq!(a, t.pool_for(v6("2001:db8:1:2:aaaa::99")));
    let seen: std::collections::BTreeSet<_> = (0..64u128)
        .map(|i| t.pool_for(v6("2001:db8::") | i << 64).unwrap())
        .collect();
    assert_eq!(seen.len(), 3);
    assert_eq!(Nat64::new(WELL_KNOWN, 1, vec![]).unwrap().pool_for(1), None);
}

/// Checksum of an L4 segment with its pseudo-header, from scratch.
fn csum6(src: u128, dst: u128, proto: u8, l4: &[u8]) -> u16 {
    !crate::checksum::fold(sum(
        l4,
        pseudo_v6(src.to_be_bytes(), dst.to_be_bytes(), proto, l4.len() as u32),
    ))
}

fn csum4(src: u32, dst: u32, proto: u8, l4: &[u8]) -> u16 {
    !crate::checksum::fold(sum(
        l4,
        crate::checksum::pseudo_v4(src.to_be_bytes(), dst.to_be_bytes(), proto, l4.len() as u16),
    ))
}

/// TCP, UDP and echo translated each way keep a checksum that verifies
/// from scratch in the other family, whatever the payload's length.
#[test]
fn checksums_verify_after_translation_both_ways() {
    let (c6, s6) = (v6("2001:db8:1::10"), v6("64:ff9b::203.0.113.7"));
    let (p4, s4) = (v4("198.19.0.1"), v4("203.0.113.7"));
    for n in [0usize, 1, 7, 100, 1001] {
        for proto in [TCP, UDP, ICMPV6] {
            let hl = if proto == TCP { 20 } else { 8 };
            let mut l4: Vec<u8> = (0..hl + n).map(|i| (i * 37 + n) as u8).collect();
            match proto {
                TCP => l4[12] = 0x50,
                UDP => l4[4..6].copy_from_slice(&((hl + n) as u16).to_be_bytes()),
                _ => (l4[0], l4[1]) = (128, 0),
            }
            let at = match proto {
                TCP => 16,
                UDP => 6,
                _ => 2,
            };
            l4[at..at + 2].copy_from_slice(&[0, 0]);
            let c = csum6(c6, s6, proto, &l4);
            l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
            let to = Rewrite {
                src: p4,
                dst: s4,
                sport: 40_001,
                dport: 53,
            };
            let len = l4.len() as u32;
            let p = l4_to4(&mut l4, proto, len, c6.to_be_bytes(), s6.to_be_bytes(), &to).unwrap();
            if p == ICMP {
                assert_eq!(l4[0], 8);
                assert_eq!(checksum(&l4), 0, "icmp {n}");
                assert_eq!(&l4[4..6], &40_001u16.to_be_bytes());
            } else {
                assert_eq!(csum4(p4, s4, p, &l4), 0, "proto {p} {n}");
                assert_eq!(&l4[0..4], &[0x9c, 0x41, 0, 53]);
            }
            // And back, as the reply would come.
            let back = Rewrite {
                src: s6,
                dst: c6,
                sport: 7,
                dport: 5000,
            };
            let q = l4_to6(&mut l4, p, len, p4.to_be_bytes(), s4.to_be_bytes(), &back).unwrap();
            assert_eq!(q, proto);
            assert_eq!(csum6(s6, c6, proto, &l4), 0, "back {proto} {n}");
        }
    }
}

/// A UDP datagram without a checksum gets one in IPv6 (RFC 7915 4.5);
/// a quote of one cut short cannot.
#[test]
fn udp_without_a_checksum_gets_one() {
    let mut l4 = vec![0x9c, 0x41, 0, 53, 0, 12, 0, 0, b'a', b'b', b'c', b'd'];
    let to = Rewrite {
        src: v6("64:ff9b::203.0.113.7"),
        dst: v6("2001:db8:1::10"),
        sport: 53,
        dport: 5000,
    };
    let (s, d) = (
        v4("203.0.113.7").to_be_bytes(),
        v4("198.19.0.1").to_be_bytes(),
    );
    assert_eq!(l4_to6(&mut l4, UDP, 12, s, d, &to), Some(UDP));
    assert_ne!(&l4[6..8], &[0, 0]);
    assert_eq!(csum6(to.src, to.dst, UDP, &l4), 0);
    let mut cut = vec![0x9c, 0x41, 0, 53, 0, 12, 0, 0];
    assert_eq!(l4_to6(&mut cut, UDP, 12, s, d, &to), None);
}

/// Other ICMP queries and other protocols do not translate.
#[test]
fn what_does_not_translate() {
    let to = Rewrite {
        src: 1,
        dst: 2,
        sport: 3,
        dport: 4,
    };
    let mut info = vec![130u8, 0, 0, 0, 0, 0, 0, 0];
    assert_eq!(l4_to4(&mut info, ICMPV6, 8, [0; 16], [0; 16], &to), None);
    let mut sctp = vec![0u8; 12];
    assert_eq!(l4_to4(&mut sctp, 132, 12, [0; 16], [0; 16], &to), None);
}

/// RFC 7915's ICMP error tables, both ways, at their edges.
#[test]
fn icmp_error_types_map_as_rfc7915_says() {
    assert_eq!(error4to6(3, 3, 0, 1500), Some((1, 4, 0)));
    assert_eq!(error4to6(3, 1, 0, 1500), Some((1, 0, 0)));
    assert_eq!(error4to6(3, 13, 0, 1500), Some((1, 1, 0)));
    assert_eq!(error4to6(3, 2, 0, 1500), Some((4, 1, 6)));
    assert_eq!(error4to6(3, 4, 1400, 1500), Some((2, 0, 1420)));
    assert_eq!(
        error4to6(3, 4, 1492, 1500),
        Some((2, 0, 1500)),
        "capped at the IPv6 link's"
    );
    assert_eq!(error4to6(3, 4, 0, 1500), Some((2, 0, 1280)), "no MTU given");
    assert_eq!(error4to6(11, 0, 0, 1500), Some((3, 0, 0)));
    assert_eq!(error4to6(12, 0, 9 << 24, 1500), Some((4, 0, 6)));
    assert_eq!(error4to6(12, 0, 5 << 24, 1500), None);
    assert_eq!(error4to6(3, 14, 0, 1500), None);
    assert_eq!(error4to6(5, 0, 0, 1500), None, "redirect");
    assert_eq!(error6to4(1, 4, 0), Some((3, 3, 0)));
    assert_eq!(error6to4(1, 1, 0), Some((3, 10, 0)));
    assert_eq!(error6to4(2, 0, 1280), Some((3, 4, 1260)));
    assert_eq!(error6to4(3, 1, 0), Some((11, 1, 0)));
    assert_eq!(error6to4(4, 1, 6), Some((3, 2, 0)));
    assert_eq!(error6to4(4, 0, 7), Some((12, 0, 8 << 24)));
    assert_eq!(error6to4(4, 0, 40), None);
    assert_eq!(error6to4(1, 5, 0), None);
}

#[test]
fn df_is_set_above_1260_bytes() {
    assert!(!df_for(1260));
    assert!(df_for(1261));
}

/// Quotes cut anywhere inside the upper-layer header translate as far as
/// they go, never past their end.
#[test]
fn cut_quotes_translate_as_far_as_they_go() {
    let to4 = Rewrite {
        src: 1,
        dst: 2,
        sport: 3,
        dport: 4,
    };
    let to6 = Rewrite {
        src: 1u128,
        dst: 2,
        sport: 3,
        dport: 4,
    };
    for proto in [TCP, UDP, ICMPV6, ICMP] {
        for n in 1..24 {
            let mut l4 = vec![128u8; n];
            let _ = l4_to4(&mut l4, proto, 24, [0; 16], [0; 16], &to4);
            let mut l4 = vec![8u8; n];
            let _ = l4_to6(&mut l4, proto, 24, [0; 4], [0; 4], &to6);
        }
    }
}
