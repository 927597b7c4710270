//! IPv4 options on forwarded packets (RFC 791 3.1, RFC 1812 5.2.4), as
//! Linux's `ip_options_compile` and `ip_forward_options` treat them with
//! its defaults:
//!
//! - a malformed option (a length that runs past the header or is too
//!   short, a pointer below its first slot, a partial slot, an unknown
//!   timestamp flag, a Record Route, Timestamp or source route given
//!   twice) is answered with Parameter Problem pointing at the bad byte,
//!   and the packet dropped (`malformed`);
//! - a loose or strict source route is dropped (`source_route`:
//!   `accept_source_route` is 0 by default on Linux, as source routing
//!   lets a sender steer around filters);
//! - Record Route gets the address of the interface the packet leaves by,
//!   where it has room (`ping -R` lists the router);
//! - Timestamp gets the time (milliseconds since midnight UT), after that
//!   address for the address-and-timestamp form, only where the router's
//!   own address is named in the prespecified form; a full one has its
//!   overflow count raised (a Parameter Problem when that overflows);
//! - the other options pass unchanged.
//!
//! Packets with options leave the burst path (whose headers are 20
//! bytes) for the per-packet one, where the checks come before the route
//! and the stamps after it (`ipv4.rs`), the header checksum made again.

use crate::wire::ETHERNET_HEADER_LEN as ETH;

const EOL: u8 = 0;
const NOP: u8 = 1;
const RR: u8 = 7;
const TS: u8 = 68;
const LSRR: u8 = 131;
const SSRR: u8 = 137;

/// What the options of a valid header hold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// A loose or strict source route.
    pub(super) source_route: bool,
    /// Where the Record Route and Timestamp options start (in the
    /// header), if present.
    rr: Option<usize>,
    ts: Option<usize>,
}

impl Options {
    /// Whether there is anything to stamp.
    pub(super) fn stamps(&self) -> bool {
        self.rr.is_some() || self.ts.is_some()
    }

    /// Whether the options lie within a header of `len` bytes.
    pub(super) fn fits(&self, len: usize) -> bool {
        let end = |i: Option<usize>| i.map_or(0, |i| i + 2);
        end(self.rr).max(end(self.ts)) <= len
    }
}

/// Checks the options of IPv4 header `h` (its whole `4 * IHL` bytes):
/// what they hold, or the offset in the header of the first bad byte.
pub(super) fn check(h: &[u8]) -> Result<Options, usize> {
    let mut o = Options::default();
    let mut i = 20;
    while i < h.len() {
        let t = h[i];
        if t == EOL {
            break;
        }
        if t == NOP {
            i += 1;
            continue;
        }
        let Some(&len) = h.get(i + 1) else {
            return Err(i);
        };
        let len = usize::from(len);
        if len < 2 || i + len > h.len() {
            return Err(i + 1);
        }
        let opt = &h[i..i + len];
        match t {
            RR | LSRR | SSRR => {
                if len < 3 {
                    return Err(i + 1);
                }
                let ptr = usize::from(opt[2]);
                if ptr < 4 {
                    return Err(i + 2);
                }
                if ptr <= len && ptr + 3 > len {
                    return Err(i + 2);
                }
                if t == RR {
                    if o.rr.is_some() {
                        return Err(i);
                    }
                    o.rr = Some(i);
                } else {
                    if o.source_route {
                        return Err(i);
                    }
                    o.source_route = true;
                }
            }
            TS => {
                if len < 4 {
                    return Err(i + 1);
                }
                let ptr = usize::from(opt[2]);
                if ptr < 5 {
                    return Err(i + 2);
                }
                let slot = match opt[3] & 0x0f {
                    0 => 4,
                    1 | 3 => 8,
                    _ => return Err(i + 3),
                };
                if ptr <= len && ptr + slot - 1 > len {
                    return Err(i + 2);
                }
                if ptr > len && opt[3] & 0xf0 == 0xf0 {
                    // Full, and its overflow count full too.
                    return Err(i + 3);
                }
                if o.ts.is_some() {
                    return Err(i);
                }
                o.ts = Some(i);
            }
            _ => {}
        }
        i += len;
    }
    Ok(o)
}

/// Stamps the Record Route and Timestamp options of `o` in the IPv4
/// header of frame `f` (checked by [`check`]) for a packet leaving by an
/// interface whose address is `out` at `ms` (milliseconds since midnight
/// UT); `local(a)`: whether `a` is one of the router's addresses. The
/// header checksum is made again when anything changed: whether it did.
pub(super) fn stamp(
    f: &mut [u8],
    o: &Options,
    out: Option<[u8; 4]>,
    ms: u32,
    local: impl Fn(u32) -> bool,
) -> bool {
    let ihl = usize::from(f[ETH] & 0x0f) * 4;
    let h = &mut f[ETH..ETH + ihl];
    let mut changed = false;
    // An option's length, within the header (as checked, unless the
    // frame changed since).
    let len_at = |h: &[u8], i: usize| usize::from(h[i + 1]).min(h.len() - i);
    if let (Some(i), Some(a)) = (o.rr.filter(|&i| i + 3 <= h.len()), out) {
        let (len, ptr) = (len_at(h, i), usize::from(h[i + 2]));
        if ptr >= 4 && ptr + 3 <= len {
            h[i + ptr - 1..i + ptr + 3].copy_from_slice(&a);
            h[i + 2] += 4;
            changed = true;
        }
    }
    if let Some(i) = o.ts.filter(|&i| i + 4 <= h.len() && h[i + 2] >= 5) {
        let (len, ptr, flags) = (len_at(h, i), usize::from(h[i + 2]), h[i + 3]);
        let at = i + ptr - 1;
        let time = ms.to_be_bytes();
        match flags & 0x0f {
            0 if ptr + 3 <= len => {
                h[at..at + 4].copy_from_slice(&time);
                h[i + 2] += 4;
                changed = true;
            }
            1 if ptr + 7 <= len => {
                if let Some(a) = out {
                    h[at..at + 4].copy_from_slice(&a);
                    h[at + 4..at + 8].copy_from_slice(&time);
                    h[i + 2] += 8;
                    changed = true;
                }
            }
            3 if ptr + 7 <= len => {
                let named = u32::from_be_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
                if local(named) {
                    h[at + 4..at + 8].copy_from_slice(&time);
                    h[i + 2] += 8;
                    changed = true;
                }
            }
            // Full: one more router that could not stamp it (`check`
            // refused a full overflow count).
            _ if ptr > len => {
                h[i + 3] = flags.wrapping_add(0x10);
                changed = true;
            }
            _ => {}
        }
    }
    if changed {
        h[10..12].fill(0);
        let c = crate::checksum::checksum(h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
    }
    changed
}

/// Milliseconds since midnight UT (RFC 791's timestamp), from the system
/// clock (read only for a packet with a Timestamp option).
pub(super) fn now_ms() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (t.as_millis() % 86_400_000) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame whose IPv4 header carries `opts` (padded with EOL to a
    /// multiple of 4), its checksum valid.
    fn frame(opts: &[u8]) -> Vec<u8> {
        let mut o = opts.to_vec();
        while !o.len().is_multiple_of(4) {
            o.push(EOL);
        }
        let ihl = 20 + o.len();
        let mut f = vec![0u8; ETH];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f.extend([
            0x40 | (ihl / 4) as u8,
            0,
            0,
            (ihl + 8) as u8,
            0,
            1,
            0,
            0,
            64,
            1,
            0,
            0,
        ]);
        f.extend([198, 18, 0, 2, 198, 19, 0, 2]);
        f.extend(o);
        f.extend([8, 0, 0, 0, 0, 1, 0, 1]);
        let c = crate::checksum::checksum(&f[ETH..ETH + ihl]);
        f[ETH + 10..ETH + 12].copy_from_slice(&c.to_be_bytes());
        f
    }

    fn header(f: &[u8]) -> &[u8] {
        &f[ETH..ETH + usize::from(f[ETH] & 0x0f) * 4]
    }

    const OUT: [u8; 4] = [198, 19, 0, 1];

    /// Record Route: each router's outgoing address in the next slot, none
    /// when full; the checksum made again.
    #[test]
    fn record_route_gets_the_outgoing_address_while_it_has_room() {
        let mut f = frame(&[NOP, RR, 11, 4, 0, 0, 0, 0, 0, 0, 0, 0]);
        let o = check(header(&f)).unwrap();
        stamp(&mut f, &o, Some(OUT), 0, |_| false);
        assert_eq!(
            &f[ETH + 21..ETH + 32],
            &[RR, 11, 8, 198, 19, 0, 1, 0, 0, 0, 0]
        );
        assert_eq!(crate::checksum::checksum(header(&f)), 0, "valid");
        stamp(&mut f, &o, Some([10, 0, 0, 1]), 0, |_| false);
        assert_eq!(
            &f[ETH + 21..ETH + 32],
            &[RR, 11, 12, 198, 19, 0, 1, 10, 0, 0, 1]
        );
        let before = f.clone();
        stamp(&mut f, &o, Some(OUT), 0, |_| false);
        assert_eq!(f, before, "full: unchanged");
    }

    /// Timestamp, the three forms: the time alone; address and time;
    /// prespecified addresses, stamped only where one is the router's; a
    /// full one counts an overflow.
    #[test]
    fn timestamps_take_their_three_forms() {
        let mut f = frame(&[TS, 12, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let o = check(header(&f)).unwrap();
        stamp(&mut f, &o, Some(OUT), 0x0102_0304, |_| false);
        assert_eq!(
            &f[ETH + 20..ETH + 32],
            &[TS, 12, 9, 0, 1, 2, 3, 4, 0, 0, 0, 0]
        );
        let mut f = frame(&[TS, 12, 5, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
        let o = check(header(&f)).unwrap();
        stamp(&mut f, &o, Some(OUT), 7, |_| false);
        assert_eq!(
            &f[ETH + 20..ETH + 32],
            &[TS, 12, 13, 1, 198, 19, 0, 1, 0, 0, 0, 7]
        );
        stamp(&mut f, &o, Some(OUT), 7, |_| false);
        assert_eq!(f[ETH + 23], 0x11, "full: an overflow counted");
        assert_eq!(crate::checksum::checksum(header(&f)), 0);
        let spec = [
            TS, 20, 5, 3, 10, 0, 0, 9, 0, 0, 0, 0, 198, 19, 0, 1, 0, 0, 0, 0,
        ];
        let mut f = frame(&spec);
        let o = check(header(&f)).unwrap();
        let ours = |a: u32| a == u32::from_be_bytes(OUT);
        stamp(&mut f, &o, Some(OUT), 5, ours);
        assert_eq!(f[ETH + 22], 5, "10.0.0.9 is not ours: not stamped");
        let mut f = frame(&[
            TS, 20, 13, 3, 10, 0, 0, 9, 0, 0, 0, 1, 198, 19, 0, 1, 0, 0, 0, 0,
        ]);
        let o = check(header(&f)).unwrap();
        stamp(&mut f, &o, Some(OUT), 5, ours);
        assert_eq!(&f[ETH + 32..ETH + 40], &[198, 19, 0, 1, 0, 0, 0, 5]);
        assert_eq!(f[ETH + 22], 21);
    }

    /// Source routes are found; malformed options name their bad byte.
    #[test]
    fn malformed_options_name_the_bad_byte() {
        let f = frame(&[LSRR, 7, 4, 10, 0, 0, 1]);
        assert!(check(header(&f)).unwrap().source_route);
        let f = frame(&[NOP, SSRR, 7, 4, 10, 0, 0, 1]);
        assert!(check(header(&f)).unwrap().source_route);
        for (opts, at) in [
            (&[RR, 40, 4][..], 21),                   // runs past the header
            (&[RR, 1, 4][..], 21),                    // too short
            (&[NOP, RR, 7, 3, 0, 0, 0][..], 23),      // pointer before the slots
            (&[RR, 9, 8, 0, 0, 0, 0, 0, 0][..], 22),  // a partial slot
            (&[TS, 8, 5, 2, 0, 0, 0, 0][..], 23),     // unknown flag
            (&[TS, 8, 13, 0xf0, 0, 0, 0, 0][..], 23), // overflow full
            (&[RR, 3, 4, RR, 3, 4][..], 23),          // twice
            (&[NOP, NOP, NOP, 130][..], 23),          // no length
        ] {
            let f = frame(opts);
            assert_eq!(check(header(&f)), Err(at), "{opts:?}");
        }
        let f = frame(&[148, 4, 0, 0]);
        assert_eq!(check(header(&f)), Ok(Options::default()), "router alert");
    }
}
