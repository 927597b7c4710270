//! IP prefixes: parsing as `ip` writes them (through `ipnet`, which refuses
//! `/022`, `/+22` and lengths past the family's), and membership tests on
//! the integer forms the tables and stages use.
//!
//! A leaf: it imports nothing from the crate, so every stage may use it.

use std::net::IpAddr;

pub use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// Parses `a.b.c.d/len` or an IPv6 `addr/len` (surrounding blanks allowed,
/// as in route files); the address may have host bits set.
pub fn parse(s: &str) -> Option<(IpAddr, u8)> {
    let n: IpNet = s.trim().parse().ok()?;
    Some((n.addr(), n.prefix_len()))
}

/// The IPv4 netmask of a `len`-bit prefix (`len` above 32 counts as 32).
#[inline]
pub fn mask4(len: u8) -> u32 {
    match len {
        0 => 0,
        l => !0u32 << (32 - u32::from(l.min(32))),
    }
}

/// The IPv6 netmask of a `len`-bit prefix (`len` above 128 counts as 128).
#[inline]
pub fn mask6(len: u8) -> u128 {
    match len {
        0 => 0,
        l => !0u128 << (128 - u32::from(l.min(128))),
    }
}

/// `a` with the host bits of a /`len` (of 128) cleared: the network of a
/// 128-bit key (IPv6, or IPv4 mapped into the top or bottom 32 bits).
/// Always inlined: the classifier's lookup masks every key with it.
#[inline(always)]
pub fn network6(a: u128, len: u8) -> u128 {
    a & mask6(len)
}

/// Whether IPv4 address `a` is inside `prefix` (network, length).
#[inline]
pub fn in4(a: u32, (p, len): (u32, u8)) -> bool {
    let m = mask4(len);
    a & m == p & m
}

/// Whether IPv6 address `a` is inside `prefix` (network, length).
#[inline]
pub fn in6(a: u128, (p, len): (u128, u8)) -> bool {
    let m = mask6(len);
    a & m == p & m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_canonical_prefixes_only() {
        assert_eq!(parse("10.0.0.0/8").map(|p| p.1), Some(8));
        assert_eq!(parse(" 0.0.0.0/0 ").map(|p| p.1), Some(0));
        assert_eq!(parse("2001:db8::/128").map(|p| p.1), Some(128));
        assert_eq!(
            parse("10.0.0.1/24"),
            Some(("10.0.0.1".parse().unwrap(), 24))
        );
        for bad in [
            "10.0.0.0/022",
            "10.0.0.0/+22",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0",
            "10.0.0.0/",
            "10.0.0.0/ 8",
            "x/8",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn membership_and_masks() {
        assert!(in4(0xc612_0042, (0xc612_0000, 24)));
        assert!(!in4(0xc613_0042, (0xc612_0000, 24)));
        assert!(in4(1, (0, 0)));
        assert!(in4(7, (7, 32)));
        assert!(!in4(7, (6, 32)));
        assert_eq!(mask4(0), 0);
        assert_eq!(mask4(32), !0);
        assert_eq!(mask4(40), !0);
        assert_eq!(mask6(64), !0u128 << 64);
        assert!(in6(0x2001_0db8 << 96 | 5, (0x2001_0db8 << 96, 32)));
        assert!(!in6(0x2001_0db9 << 96, (0x2001_0db8 << 96, 32)));
        assert!(in6(u128::MAX, (0, 0)));
    }
}
