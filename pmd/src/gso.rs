//! Software segmentation of received frames larger than the MTU: what
//! a veth peer with TSO/GSO on (or a NIC's GRO) hands a packet socket is
//! one aggregate of many TCP segments, which no wire carries and a router
//! must not forward as such. Split here into segments that fit the MTU,
//! as the kernel's GSO would have before transmitting: the headers copied,
//! the IPv4 total length, identification (one more per segment) and
//! header checksum, the IPv6 payload length, the TCP sequence number, FIN
//! and PSH on the last segment only, CWR on the first only, and each
//! segment's TCP checksum computed whole.
//!
//! The segment size is the sender's when known (the aggregate's GSO size,
//! which the AF_PACKET port reads from the kernel's virtio-net header),
//! capped at the largest the MTU allows (MTU less the IP and TCP headers,
//! options included); without it, that largest.
//!
//! UDP aggregates (a sender's UDP GSO) are cut into the sender's
//! datagrams instead ([`segment_udp`]): their boundaries are the
//! application's, so the size must be the one the sender gave, which the
//! AF_PACKET port reads from the virtio-net header the kernel writes
//! before each frame.

use pipeline::checksum::{fold, sum};

fn be16(b: &[u8], at: usize) -> usize {
    usize::from(u16::from_be_bytes([b[at], b[at + 1]]))
}

fn set16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// Where the headers of an IP packet of protocol `proto` are in `frame`
/// (Ethernet, up to two VLAN tags, IPv4 without fragments or IPv6 without
/// extension headers): (IPv4, IP header, L4 header, end of the packet).
fn locate(frame: &[u8], proto: u8) -> Option<(bool, usize, usize, usize)> {
    let mut l3 = 12;
    while frame.len() >= l3 + 2 && matches!(be16(frame, l3), 0x8100 | 0x88a8) {
        l3 += 4;
    }
    if frame.len() < l3 + 2 {
        return None;
    }
    let et = be16(frame, l3);
    l3 += 2;
    let (v4, l4, end) = match et {
        0x0800 if frame.len() >= l3 + 20 => {
            let ihl = usize::from(frame[l3] & 0x0f) * 4;
            if ihl < 20 || frame[l3 + 9] != proto || be16(frame, l3 + 6) & 0x3fff != 0 {
                return None;
            }
            (true, l3 + ihl, l3 + be16(frame, l3 + 2))
        }
        0x86dd if frame.len() >= l3 + 40 => {
            if frame[l3 + 6] != proto {
                return None;
            }
            (false, l3 + 40, l3 + 40 + be16(frame, l3 + 4))
        }
        _ => return None,
    };
    (end <= frame.len()).then_some((v4, l3, l4, end))
}

/// Writes segment `i`'s IP length (`l4_len` bytes of L4 after the IP
/// header) into `seg`: IPv4 total length, identification (one more per
/// segment, from `id0`) and header checksum, or the IPv6 payload length.
fn set_ip(seg: &mut [u8], v4: bool, l3: usize, l4: usize, l4_len: usize, id0: u16, i: usize) {
    if v4 {
        set16(seg, l3 + 2, (l4 - l3 + l4_len) as u16);
        set16(seg, l3 + 4, id0.wrapping_add(i as u16));
        set16(seg, l3 + 10, 0);
        let c = !fold(sum(&seg[l3..l4], 0));
        set16(seg, l3 + 10, c);
    } else {
        set16(seg, l3 + 4, l4_len as u16);
    }
}

/// The L4 checksum of `seg`'s transport header and payload from `l4`
/// (protocol `proto`), over the pseudo-header.
fn l4_checksum(seg: &[u8], v4: bool, l3: usize, l4: usize, proto: u8) -> u16 {
    let addrs = if v4 {
        &seg[l3 + 12..l3 + 20]
    } else {
        &seg[l3 + 8..l3 + 40]
    };
    let acc = sum(addrs, u64::from(proto) + (seg.len() - l4) as u64);
    !fold(sum(&seg[l4..], acc))
}

/// Splits a UDP aggregate (a sender's UDP GSO, `UDP_SEGMENT`: one packet
/// carrying many datagrams of `size` payload bytes each, the last one
/// shorter) into its datagrams, as the kernel's GSO would before sending:
/// the headers copied, the IP length (and the IPv4 identification, one
/// more per datagram, and header checksum), the UDP length and checksum
/// per datagram. Each is built in `seg` and handed to `emit` (false:
/// stop). Returns the datagrams handed over, or `None` when the frame is
/// not UDP it can split.
pub fn segment_udp(
    frame: &[u8],
    size: usize,
    seg: &mut Vec<u8>,
    mut emit: impl FnMut(&[u8]) -> bool,
) -> Option<usize> {
    let (v4, l3, l4, end) = locate(frame, 17)?;
    let hdr = l4 + 8;
    if size == 0 || hdr > end {
        return None;
    }
    let payload = &frame[hdr..end];
    let id0 = be16(frame, l3 + 4) as u16;
    let n = payload.len().div_ceil(size);
    for (i, chunk) in payload.chunks(size).enumerate() {
        seg.clear();
        seg.extend_from_slice(&frame[..hdr]);
        seg.extend_from_slice(chunk);
        let udp_len = 8 + chunk.len();
        set_ip(seg, v4, l3, l4, udp_len, id0, i);
        set16(seg, l4 + 4, udp_len as u16);
        set16(seg, l4 + 6, 0);
        let c = match l4_checksum(seg, v4, l3, l4, 17) {
            0 => 0xffff,
            c => c,
        };
        set16(seg, l4 + 6, c);
        if !emit(seg) {
            return Some(i);
        }
    }
    Some(n)
}

/// Splits `frame` (Ethernet, up to two VLAN tags, IPv4 without fragments
/// or IPv6 without extension headers, TCP) into segments whose IP packets
/// are at most `mtu` bytes, each built in `seg` and handed to `emit`
/// (which returns false to stop: no buffer). `sender_mss`, when known
/// (the aggregate's GSO size), is the sender's segment payload, used when
/// smaller than what the MTU allows (a peer's smaller MSS or path MTU is
/// kept). Returns the segments handed over, or `None` when the frame is
/// not a TCP segment it can split (or already fits).
pub fn segment_tcp(
    frame: &[u8],
    mtu: usize,
    sender_mss: Option<usize>,
    seg: &mut Vec<u8>,
    mut emit: impl FnMut(&[u8]) -> bool,
) -> Option<usize> {
    let (v4, l3, l4, end) = locate(frame, 6)?;
    if l4 + 20 > end {
        return None;
    }
    let thl = usize::from(frame[l4 + 12] >> 4) * 4;
    let hdr = l4 + thl;
    if thl < 20 || hdr > end {
        return None;
    }
    let mss = mtu.checked_sub(l4 - l3 + thl).filter(|&m| m >= 8)?;
    let mss = sender_mss.filter(|&m| m > 0).map_or(mss, |m| m.min(mss));
    let payload = &frame[hdr..end];
    if payload.len() <= mss {
        return None;
    }
    let seq0 = u32::from_be_bytes([frame[l4 + 4], frame[l4 + 5], frame[l4 + 6], frame[l4 + 7]]);
    let flags0 = frame[l4 + 13];
    let id0 = be16(frame, l3 + 4) as u16;
    let n = payload.len().div_ceil(mss);
    for (i, chunk) in payload.chunks(mss).enumerate() {
        seg.clear();
        seg.extend_from_slice(&frame[..hdr]);
        seg.extend_from_slice(chunk);
        let tcp_len = thl + chunk.len();
        set_ip(seg, v4, l3, l4, tcp_len, id0, i);
        let seq = seq0.wrapping_add((i * mss) as u32);
        seg[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
        let mut f = flags0;
        if i + 1 < n {
            f &= !(0x01 | 0x08); // FIN, PSH: the last segment's
        }
        if i > 0 {
            f &= !0x80; // CWR: the first segment's
        }
        seg[l4 + 13] = f;
        set16(seg, l4 + 16, 0);
        let c = l4_checksum(seg, v4, l3, l4, 6);
        set16(seg, l4 + 16, c);
        if !emit(seg) {
            return Some(i);
        }
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pipeline::checksum::checksum;

    /// A TCP frame with `payload` bytes, timestamps option, PSH|ACK|FIN
    /// and CWR, IPv4 (id 0xfffe) or IPv6.
    fn frame(v4: bool, payload: usize) -> Vec<u8> {
        let thl = 32;
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(if v4 { &[0x08, 0x00] } else { &[0x86, 0xdd] });
        if v4 {
            let mut ip = vec![0u8; 20];
            ip[0] = 0x45;
            ip[2..4].copy_from_slice(&((20 + thl + payload) as u16).to_be_bytes());
            ip[4..6].copy_from_slice(&0xfffeu16.to_be_bytes());
            ip[6] = 0x40;
            ip[8] = 64;
            ip[9] = 6;
            ip[12..16].copy_from_slice(&[198, 18, 0, 2]);
            ip[16..20].copy_from_slice(&[198, 19, 0, 2]);
            f.extend(ip);
        } else {
            let mut ip = vec![0u8; 40];
            ip[0] = 0x60;
            ip[4..6].copy_from_slice(&((thl + payload) as u16).to_be_bytes());
            ip[6] = 6;
            ip[7] = 64;
            ip[8] = 0x20;
            ip[9] = 0x01;
            ip[23] = 2;
            ip[24] = 0x20;
            ip[25] = 0x01;
            ip[39] = 3;
            f.extend(ip);
        }
        let mut tcp = vec![0u8; thl];
        tcp[0..2].copy_from_slice(&40000u16.to_be_bytes());
        tcp[2..4].copy_from_slice(&179u16.to_be_bytes());
        tcp[4..8].copy_from_slice(&0xffff_fff0u32.to_be_bytes());
        tcp[12] = (thl as u8 / 4) << 4;
        tcp[13] = 0x80 | 0x10 | 0x08 | 0x01;
        tcp[20] = 1;
        tcp[21] = 1;
        tcp[22] = 8;
        tcp[23] = 10;
        f.extend(tcp);
        f.extend((0..payload).map(|i| (i * 7 % 251) as u8));
        f
    }

    fn tcp_ok(s: &[u8], l3: usize, l4: usize, v4: bool) -> bool {
        let addrs = if v4 {
            &s[l3 + 12..l3 + 20]
        } else {
            &s[l3 + 8..l3 + 40]
        };
        fold(sum(&s[l4..], sum(addrs, 6 + (s.len() - l4) as u64))) == 0xffff
    }

    #[test]
    fn splits_into_mtu_sized_segments_that_rebuild_the_stream() {
        for v4 in [true, false] {
            let (l3, l4) = if v4 { (14, 34) } else { (14, 54) };
            let f = frame(v4, 10_000);
            let mut seg = Vec::new();
            let mut out: Vec<Vec<u8>> = Vec::new();
            let n = segment_tcp(&f, 1500, None, &mut seg, |s| {
                out.push(s.to_vec());
                true
            });
            let mss = 1500 - (l4 - l3) - 32;
            assert_eq!(n, Some(10_000usize.div_ceil(mss)));
            assert_eq!(out.len(), n.unwrap());
            let mut stream = Vec::new();
            for (i, s) in out.iter().enumerate() {
                assert!(s.len() - 14 <= 1500, "fits the MTU");
                if v4 {
                    assert_eq!(be16(s, l3 + 2), s.len() - 14);
                    assert_eq!(checksum(&s[l3..l4]), 0, "IPv4 header checksum");
                    assert_eq!(be16(s, l3 + 4) as u16, 0xfffeu16.wrapping_add(i as u16));
                } else {
                    assert_eq!(be16(s, l3 + 4), s.len() - l4);
                }
                assert!(tcp_ok(s, l3, l4, v4), "TCP checksum of segment {i}");
                let seq = u32::from_be_bytes([s[l4 + 4], s[l4 + 5], s[l4 + 6], s[l4 + 7]]);
                assert_eq!(seq, 0xffff_fff0u32.wrapping_add((i * mss) as u32));
                let last = i + 1 == out.len();
                assert_eq!(s[l4 + 13] & 0x09 != 0, last, "FIN/PSH on the last only");
                assert_eq!(s[l4 + 13] & 0x80 != 0, i == 0, "CWR on the first only");
                assert_eq!(s[l4 + 13] & 0x10, 0x10, "ACK on all");
                assert_eq!(&s[l4 + 20..l4 + 32], &f[l4 + 20..l4 + 32], "options kept");
                stream.extend_from_slice(&s[l4 + 32..]);
            }
            assert_eq!(&stream[..], &f[l4 + 32..], "the payload, in order");
        }
    }

    /// The sender's segment size (the aggregate's GSO size) is kept when
    /// smaller than what the MTU allows, capped by it when larger.
    #[test]
    fn keeps_the_senders_smaller_segment_size() {
        let f = frame(true, 10_000);
        let mut seg = Vec::new();
        for (hint, mss) in [
            (Some(500), 500),
            (Some(5000), 1500 - 20 - 32),
            (Some(0), 1448),
        ] {
            let mut sizes = Vec::new();
            let n = segment_tcp(&f, 1500, hint, &mut seg, |s| {
                sizes.push(s.len() - 14 - 20 - 32);
                true
            });
            assert_eq!(n, Some(10_000usize.div_ceil(mss)), "{hint:?}");
            assert!(
                sizes[..sizes.len() - 1].iter().all(|&l| l == mss),
                "{hint:?}"
            );
            assert_eq!(sizes.iter().sum::<usize>(), 10_000);
        }
    }

    #[test]
    fn leaves_what_it_cannot_or_need_not_split() {
        let mut seg = Vec::new();
        let never = |_: &[u8]| -> bool { panic!("nothing to emit") };
        assert_eq!(
            segment_tcp(&frame(true, 1000), 1500, None, &mut seg, never),
            None
        );
        let mut udp = frame(true, 5000);
        udp[14 + 9] = 17;
        assert_eq!(segment_tcp(&udp, 1500, None, &mut seg, never), None);
        let mut frag = frame(true, 5000);
        frag[14 + 6] = 0x20;
        assert_eq!(segment_tcp(&frag, 1500, None, &mut seg, never), None);
        let short = frame(true, 5000);
        assert_eq!(
            segment_tcp(&short[..3000], 1500, None, &mut seg, never),
            None
        );
        assert_eq!(
            segment_tcp(&frame(true, 5000)[..30], 1500, None, &mut seg, never),
            None
        );
        // No buffer after two: two handed over.
        let mut k = 0;
        let got = segment_tcp(&frame(false, 5000), 1500, None, &mut seg, |_| {
            k += 1;
            k <= 2
        });
        assert_eq!(got, Some(2));
    }

    /// Any bytes: no panic, and whatever it emits fits the MTU.
    #[test]
    fn mangled_frames_never_panic() {
        let mut seg = Vec::new();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..20_000 {
            let mut f = frame(i % 2 == 0, (rnd() % 6000) as usize);
            for _ in 0..(rnd() % 4) {
                let at = (rnd() % 80) as usize % f.len();
                f[at] = rnd() as u8;
            }
            let cut = (rnd() as usize) % (f.len() + 1);
            let mtu = 60 + (rnd() % 1500) as usize;
            let _ = segment_tcp(&f[..cut.max(f.len() / 2)], mtu, None, &mut seg, |s| {
                assert!(s.len() <= mtu + 14 + 8);
                true
            });
            // The same bytes as UDP, split at a random datagram size.
            let mut u = f.clone();
            if u.len() > 14 + 9 && u[12] == 0x08 {
                u[14 + 9] = 17;
            }
            let size = 1 + (rnd() % 2000) as usize;
            let _ = segment_udp(&u[..cut.max(u.len() / 2)], size, &mut seg, |s| {
                assert!(s.len() <= 14 + 8 + 40 + 8 + size);
                true
            });
        }
    }

    /// A UDP GSO aggregate (`frame` with protocol 17: its first 8 TCP
    /// bytes become the UDP header) splits into datagrams of the sender's
    /// size, the last shorter, each with its IP and UDP lengths and valid
    /// checksums, the payload in order; IPv4 and IPv6.
    #[test]
    fn udp_aggregates_split_into_the_senders_datagrams() {
        for v4 in [true, false] {
            let (l3, l4) = if v4 { (14, 34) } else { (14, 54) };
            let mut f = frame(v4, 10_000);
            if v4 {
                f[l3 + 9] = 17;
                f[l3 + 10..l3 + 12].fill(0);
                let c = checksum(&f[l3..l4]);
                f[l3 + 10..l3 + 12].copy_from_slice(&c.to_be_bytes());
            } else {
                f[l3 + 6] = 17;
            }
            let udp_total = f.len() - l4;
            f[l4 + 4..l4 + 6].copy_from_slice(&(udp_total as u16).to_be_bytes());
            let mut seg = Vec::new();
            let mut out: Vec<Vec<u8>> = Vec::new();
            let n = segment_udp(&f, 1200, &mut seg, |s| {
                out.push(s.to_vec());
                true
            });
            let payload = &f[l4 + 8..];
            assert_eq!(n, Some(payload.len().div_ceil(1200)));
            assert_eq!(out.len(), n.unwrap());
            let mut data = Vec::new();
            for (i, s) in out.iter().enumerate() {
                let last = i + 1 == out.len();
                let want = if last { payload.len() - 1200 * i } else { 1200 };
                assert_eq!(s.len() - l4 - 8, want, "datagram {i}");
                assert_eq!(be16(s, l4 + 4), 8 + want, "UDP length");
                if v4 {
                    assert_eq!(be16(s, l3 + 2), s.len() - 14);
                    assert_eq!(checksum(&s[l3..l4]), 0, "IPv4 header checksum");
                    assert_eq!(be16(s, l3 + 4) as u16, 0xfffeu16.wrapping_add(i as u16));
                } else {
                    assert_eq!(be16(s, l3 + 4), s.len() - l4);
                }
                let addrs = if v4 {
                    &s[l3 + 12..l3 + 20]
                } else {
                    &s[l3 + 8..l3 + 40]
                };
                let ok = fold(sum(&s[l4..], sum(addrs, 17 + (s.len() - l4) as u64)));
                assert_eq!(ok, 0xffff, "UDP checksum of datagram {i}");
                assert_eq!(&s[l4..l4 + 4], &f[l4..l4 + 4], "ports kept");
                data.extend_from_slice(&s[l4 + 8..]);
            }
            assert_eq!(&data[..], payload, "the payload, in order");
        }
        let mut seg = Vec::new();
        let never = |_: &[u8]| -> bool { panic!("nothing to emit") };
        assert_eq!(
            segment_udp(&frame(true, 5000), 1200, &mut seg, never),
            None,
            "TCP"
        );
    }
}
