//! TCP MSS clamping (nftables' `tcp option maxseg size set rt mtu`,
//! iptables' `TCPMSS --clamp-mss-to-pmtu`): the MSS option of a SYN or
//! SYN+ACK crossing an interface with `clamp_mss` is lowered, so that
//! neither end sends segments a smaller link on the path would have to
//! fragment or refuse (PPPoE's 1,492 bytes, a tunnel's). Only lowered,
//! never raised; a SYN without the option is left alone (RFC 9293's
//! default, 536 bytes over IPv4 and 1,220 over IPv6, is below any
//! clamp); the TCP checksum is updated for the change (RFC 1624).

use crate::checksum::update16;

/// What an interface's `clamp_mss` says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Clamp {
    /// No clamping (the default).
    #[default]
    Off,
    /// To the path through the router: the smaller MTU of the interface
    /// the SYN came in on and the one it leaves by, less the IP and TCP
    /// headers (40 bytes over IPv4, 60 over IPv6), as Linux's TCPMSS
    /// takes the smaller of the route's MTU and the reverse route's.
    Pmtu,
    /// To at most this many bytes.
    Max(u16),
}

/// A clamping rule (`[[firewall.clamp_mss]]`; nftables' `tcp flags syn
/// tcp option maxseg size set rt mtu` with its matches in a forward
/// chain): a TCP SYN or SYN+ACK forwarded from an interface of `in_ports`
/// to one of `out_ports` (empty: any), from `src` to `dst` as it came in
/// (`None`: any; IPv4 mapped), has its MSS clamped as `clamp` says
/// ([`Clamp::Pmtu`]: to the smaller MTU of the two interfaces).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MssRule {
    /// Interfaces the SYN comes in on.
    pub in_ports: Vec<u16>,
    /// Interfaces it leaves by.
    pub out_ports: Vec<u16>,
    /// Source prefix.
    pub src: Option<(u128, u8)>,
    /// Destination prefix.
    pub dst: Option<(u128, u8)>,
    /// The clamp.
    pub clamp: Clamp,
}

impl MssRule {
    /// Whether a SYN from `src` to `dst`, in on `i` and out by `o`, is
    /// this rule's.
    pub fn matches(&self, i: u16, o: u16, src: u128, dst: u128) -> bool {
        (self.in_ports.is_empty() || self.in_ports.contains(&i))
            && (self.out_ports.is_empty() || self.out_ports.contains(&o))
            && self.src.is_none_or(|p| crate::prefix::in6(src, p))
            && self.dst.is_none_or(|p| crate::prefix::in6(dst, p))
    }
}

/// The addresses (IPv4 mapped) of the untagged frame `b` if it carries a
/// TCP SYN [`clamp`] would look at.
pub(super) fn syn_addrs(b: &[u8]) -> Option<(u128, u128)> {
    let (_, v6) = syn_at(b)?;
    let l3 = b.get(14..)?;
    let a = |r: std::ops::Range<usize>| -> Option<u128> {
        let s = l3.get(r)?;
        Some(if v6 {
            u128::from_be_bytes(s.try_into().ok()?)
        } else {
            crate::acl::v4(u32::from_be_bytes(s.try_into().ok()?))
        })
    };
    if v6 {
        Some((a(8..24)?, a(24..40)?))
    } else {
        Some((a(12..16)?, a(16..20)?))
    }
}

/// The sequence and acknowledgment numbers of the untagged or tagged
/// frame `b` if it carries a TCP SYN [`clamp`] would look at (NAT leaves
/// them alone: they name a SYN before and after it).
pub(super) fn syn_numbers(b: &[u8]) -> Option<u64> {
    let (at, _) = syn_at(b)?;
    let n = b.get(at + 4..at + 12)?;
    Some(u64::from_be_bytes(n.try_into().ok()?))
}

/// The IP and TCP headers' bytes below an MTU: the MSS that fills it.
pub const fn headers(v6: bool) -> u16 {
    if v6 {
        60
    } else {
        40
    }
}

/// The TCP header of the untagged Ethernet frame `b` if it carries an
/// unfragmented IPv4 or IPv6 (no extension headers) TCP SYN: its offset,
/// and whether it is IPv6.
pub(super) fn syn_at(b: &[u8]) -> Option<(usize, bool)> {
    // Past up to two VLAN tags (a held frame leaving by a sub-interface
    // is tagged by then).
    let mut eth = 14;
    let mut ty = u16::from_be_bytes([*b.get(12)?, *b.get(13)?]);
    for _ in 0..2 {
        if ty != 0x8100 && ty != 0x88a8 {
            break;
        }
        ty = u16::from_be_bytes([*b.get(eth + 2)?, *b.get(eth + 3)?]);
        eth += 4;
    }
    let (at, v6) = match ty {
        0x0800 => {
            let ihl = usize::from(b.get(eth)? & 0x0f) * 4;
            // Not a fragment (MF clear, offset 0), TCP.
            let frag = u16::from_be_bytes([*b.get(eth + 6)?, *b.get(eth + 7)?]);
            if ihl < 20 || frag & 0x3fff != 0 || *b.get(eth + 9)? != 6 {
                return None;
            }
            (eth + ihl, false)
        }
        0x86dd => {
            if *b.get(eth + 6)? != 6 {
                return None;
            }
            (eth + 40, true)
        }
        _ => return None,
    };
    // SYN set (and RST not): a SYN or a SYN+ACK.
    let flags = *b.get(at + 13)?;
    (flags & 0x06 == 0x02).then_some((at, v6))
}

/// Lowers the MSS option of the TCP SYN in frame `b` (Ethernet, up to two
/// VLAN tags, checksums complete) to `limit(v6)` where it is above it, updating the
/// TCP checksum. Whether it changed anything. Anything else (not a SYN,
/// no MSS option, options cut short, a fragment) is left as it is.
pub fn clamp(b: &mut [u8], limit: impl Fn(bool) -> u16) -> bool {
    let Some((at, v6)) = syn_at(b) else {
        return false;
    };
    let Some(&off) = b.get(at + 12) else {
        return false;
    };
    let end = at + usize::from(off >> 4) * 4;
    if end > b.len() || end < at + 20 {
        return false;
    }
    let mut i = at + 20;
    while i < end {
        match b[i] {
            0 => return false,
            1 => i += 1,
            kind => {
                let Some(&len) = b.get(i + 1) else {
                    return false;
                };
                let len = usize::from(len);
                if len < 2 || i + len > end {
                    return false;
                }
                if kind == 2 && len == 4 {
                    let mss = u16::from_be_bytes([b[i + 2], b[i + 3]]);
                    let max = limit(v6);
                    if mss <= max {
                        return false;
                    }
                    b[i + 2..i + 4].copy_from_slice(&max.to_be_bytes());
                    // The checksum sums 16-bit words from the TCP header's
                    // start: a value at an odd offset counts byte-swapped
                    // (RFC 1071's byte-order independence).
                    let (old, new) = if (i + 2 - at) % 2 == 0 {
                        (mss, max)
                    } else {
                        (mss.swap_bytes(), max.swap_bytes())
                    };
                    let sum = u16::from_be_bytes([b[at + 16], b[at + 17]]);
                    b[at + 16..at + 18].copy_from_slice(&update16(sum, old, new).to_be_bytes());
                    return true;
                }
                i += len;
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checksum::{checksum, fold, pseudo_v4, pseudo_v6, sum};

    /// An IPv4 or IPv6 TCP segment with `flags` and `options` (padded to
    /// a multiple of 4 with end-of-options), its checksums valid.
    fn segment(v6: bool, flags: u8, options: &[u8]) -> Vec<u8> {
        let mut opts = options.to_vec();
        while !opts.len().is_multiple_of(4) {
            opts.push(0);
        }
        let tcp_len = 20 + opts.len();
        let mut tcp = vec![0u8; tcp_len];
        tcp[0..2].copy_from_slice(&40000u16.to_be_bytes());
        tcp[2..4].copy_from_slice(&80u16.to_be_bytes());
        tcp[4..8].copy_from_slice(&12345u32.to_be_bytes());
        tcp[12] = ((tcp_len / 4) as u8) << 4;
        tcp[13] = flags;
        tcp[14..16].copy_from_slice(&64240u16.to_be_bytes());
        tcp[20..].copy_from_slice(&opts);
        let mut f = vec![0u8; 14];
        f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        if v6 {
            f[12..14].copy_from_slice(&[0x86, 0xdd]);
            let mut ip = vec![0u8; 40];
            ip[0] = 0x60;
            ip[4..6].copy_from_slice(&(tcp_len as u16).to_be_bytes());
            ip[6] = 6;
            ip[7] = 64;
            ip[8..24].copy_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
            ip[24..40].copy_from_slice(&[0x20, 1, 0xd, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
            let ph = pseudo_v6(
                ip[8..24].try_into().unwrap(),
                ip[24..40].try_into().unwrap(),
                6,
                tcp_len as u32,
            );
            let c = !fold(sum(&tcp, ph));
            tcp[16..18].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&ip);
        } else {
            f[12..14].copy_from_slice(&[0x08, 0x00]);
            let mut ip = vec![0u8; 20];
            ip[0] = 0x45;
            ip[2..4].copy_from_slice(&((20 + tcp_len) as u16).to_be_bytes());
            ip[6] = 0x40;
            ip[8] = 64;
            ip[9] = 6;
            ip[12..16].copy_from_slice(&[198, 18, 0, 2]);
            ip[16..20].copy_from_slice(&[198, 19, 0, 2]);
            let c = checksum(&ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            let ph = pseudo_v4([198, 18, 0, 2], [198, 19, 0, 2], 6, tcp_len as u16);
            let c = !fold(sum(&tcp, ph));
            tcp[16..18].copy_from_slice(&c.to_be_bytes());
            f.extend_from_slice(&ip);
        }
        f.extend_from_slice(&tcp);
        f
    }

    /// Whether the TCP checksum of `f` (made by [`segment`]) verifies.
    fn tcp_sum_ok(f: &[u8]) -> bool {
        if f[12] == 0x86 {
            let tcp = &f[54..];
            let ph = pseudo_v6(
                f[22..38].try_into().unwrap(),
                f[38..54].try_into().unwrap(),
                6,
                tcp.len() as u32,
            );
            fold(sum(tcp, ph)) == 0xffff
        } else {
            let tcp = &f[34..];
            let ph = pseudo_v4(
                f[26..30].try_into().unwrap(),
                f[30..34].try_into().unwrap(),
                6,
                tcp.len() as u16,
            );
            fold(sum(tcp, ph)) == 0xffff
        }
    }

    fn mss_of(f: &[u8]) -> Option<u16> {
        let at = if f[12] == 0x86 { 54 } else { 34 };
        let end = at + usize::from(f[at + 12] >> 4) * 4;
        let mut i = at + 20;
        while i < end {
            match f[i] {
                0 => return None,
                1 => i += 1,
                2 => return Some(u16::from_be_bytes([f[i + 2], f[i + 3]])),
                _ => i += usize::from(f[i + 1]),
            }
        }
        None
    }

    /// Linux's SYN options: MSS, SACK permitted, a timestamp, a NOP,
    /// window scale.
    const LINUX: [u8; 20] = [
        2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
    ];

    #[test]
    fn a_syn_above_the_limit_is_lowered_with_its_checksum() {
        for v6 in [false, true] {
            for flags in [0x02, 0x12] {
                let mut f = segment(v6, flags, &LINUX);
                assert!(tcp_sum_ok(&f));
                assert!(clamp(&mut f, |six| 1492 - headers(six)));
                assert_eq!(mss_of(&f), Some(if v6 { 1432 } else { 1452 }));
                assert!(tcp_sum_ok(&f), "v6 {v6} flags {flags:#x}");
            }
        }
    }

    /// A frame with a VLAN tag (a held SYN leaving by a sub-interface).
    #[test]
    fn a_tagged_syn_is_clamped() {
        let f = segment(false, 0x02, &LINUX);
        let mut t = f[..12].to_vec();
        t.extend_from_slice(&[0x81, 0x00, 0x00, 0x0a]);
        t.extend_from_slice(&f[12..]);
        assert!(clamp(&mut t, |_| 1400));
        let mut back = t[..12].to_vec();
        back.extend_from_slice(&t[16..]);
        assert_eq!(mss_of(&back), Some(1400));
        assert!(tcp_sum_ok(&back));
    }

    /// The MSS option after a single NOP: its value at an odd offset of
    /// the TCP header, where the checksum counts it byte-swapped.
    #[test]
    fn an_mss_at_an_odd_offset_keeps_the_checksum_right() {
        for v6 in [false, true] {
            let mut f = segment(v6, 0x02, &[1, 2, 4, 0x23, 0x28, 1, 1, 1]);
            assert_eq!(mss_of(&f), Some(9000));
            assert!(clamp(&mut f, |_| 1360));
            assert_eq!(mss_of(&f), Some(1360));
            assert!(tcp_sum_ok(&f), "v6 {v6}");
        }
    }

    #[test]
    fn what_is_not_a_syn_over_the_limit_is_left_alone() {
        let limit = |_| 1400;
        // Below the limit, no MSS option, not a SYN, a RST with SYN.
        for (flags, opts) in [
            (0x02, &[2u8, 4, 0x05, 0x00][..]),
            (0x02, &[1, 1, 4, 2][..]),
            (0x10, &LINUX[..]),
            (0x18, &LINUX[..]),
            (0x06, &LINUX[..]),
        ] {
            let mut f = segment(false, flags, opts);
            let before = f.clone();
            assert!(!clamp(&mut f, limit));
            assert_eq!(f, before);
        }
        // A fragment (MF set).
        let mut f = segment(false, 0x02, &LINUX);
        f[20] |= 0x20;
        let before = f.clone();
        assert!(!clamp(&mut f, limit));
        assert_eq!(f, before);
        // An IPv6 SYN behind an extension header is not looked into.
        let mut f = segment(true, 0x02, &LINUX);
        f[20] = 0;
        let before = f.clone();
        assert!(!clamp(&mut f, limit));
        assert_eq!(f, before);
    }

    /// Options cut short or lying about their length, frames cut short:
    /// left alone, never a panic.
    #[test]
    fn malformed_options_and_short_frames_are_left_alone() {
        let limit = |_| 1400;
        for opts in [
            &[1u8, 1, 1, 2][..],
            &[2, 0, 0x05, 0xb4][..],
            &[3, 9, 7, 0][..],
            &[2, 5, 0x05, 0xb4, 0, 0, 0, 0][..],
        ] {
            let mut f = segment(false, 0x02, opts);
            let before = f.clone();
            assert!(!clamp(&mut f, limit));
            assert_eq!(f, before, "{opts:?}");
        }
        let f = segment(false, 0x02, &LINUX);
        for n in 0..f.len() {
            let mut g = f[..n].to_vec();
            clamp(&mut g, limit);
        }
        // A data offset past the frame.
        let mut g = f.clone();
        g[34 + 12] = 0xf0;
        assert!(!clamp(&mut g, limit));
    }
}
