//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).

/// Ones-complement sum of `data` as big-endian 16-bit words, added to `acc`,
/// not yet folded. An odd trailing byte is padded with zero.
#[inline]
pub fn sum(data: &[u8], mut acc: u64) -> u64 {
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let v = u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        // Sum the four 16-bit words of the 64-bit chunk.
        acc += (v >> 48) + ((v >> 32) & 0xffff) + ((v >> 16) & 0xffff) + (v & 0xffff);
    }
    let mut words = chunks.remainder().chunks_exact(2);
    for w in &mut words {
        acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [b] = words.remainder() {
        acc += u64::from(*b) << 8;
    }
    acc
}

/// Folds a 64-bit ones-complement accumulator into 16 bits (not inverted),
/// in four fixed steps instead of a loop (2^32 and 2^16 are both 1 in
/// ones-complement arithmetic): 64 bits to under 2^33, then under 2^18,
/// under 2^16 + 3, at most 0xffff. Only 0 folds to 0.
#[inline]
pub fn fold(acc: u64) -> u16 {
    let a = (acc & 0xffff_ffff) + (acc >> 32);
    let a = (a & 0xffff) + (a >> 16);
    let a = (a & 0xffff) + (a >> 16);
    ((a & 0xffff) + (a >> 16)) as u16
}

/// The Internet checksum of `data`: the inverted folded sum.
pub fn checksum(data: &[u8]) -> u16 {
    !fold(sum(data, 0))
}

/// RFC 1624 eqn. 3: the new checksum after a 16-bit word of the covered data
/// changed from `old` to `new`: `HC' = ~(~HC + ~m + m')`.
#[inline]
pub fn update16(csum: u16, old: u16, new: u16) -> u16 {
    // Under 3 * 2^16: two folds, no loop.
    let acc = u32::from(!csum) + u32::from(!old) + u32::from(new);
    let acc = (acc & 0xffff) + (acc >> 16);
    !(((acc & 0xffff) + (acc >> 16)) as u16)
}

/// RFC 1624 update for a change of a span of words: `old_sum` and `new_sum`
/// are [`sum`]s of the old and new contents of the changed bytes (same
/// length, starting on the same word alignment).
#[inline]
pub fn update_sums(csum: u16, old_sum: u64, new_sum: u64) -> u16 {
    let acc = u64::from(!csum) + u64::from(!fold(old_sum)) + u64::from(fold(new_sum));
    !fold(acc)
}

/// RFC 1624 eqn. 3 for several changed words at once: `delta` is the sum
/// of `!old + new` over the changed 16-bit words (under 2^31).
#[inline]
pub fn adjust(csum: u16, delta: u32) -> u16 {
    let acc = u32::from(!csum) + delta;
    let acc = (acc & 0xffff) + (acc >> 16);
    let acc = (acc & 0xffff) + (acc >> 16);
    !(acc as u16)
}

/// Ones-complement sum of the IPv4 pseudo-header (RFC 768/793).
pub fn pseudo_v4(src: [u8; 4], dst: [u8; 4], proto: u8, len: u16) -> u64 {
    sum(&src, sum(&dst, u64::from(proto) + u64::from(len)))
}

/// Ones-complement sum of the IPv6 pseudo-header (RFC 8200 §8.1).
pub fn pseudo_v6(src: [u8; 16], dst: [u8; 16], next: u8, len: u32) -> u64 {
    sum(&src, sum(&dst, u64::from(next) + u64::from(len)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 1071 §3 example: words 0001 f203 f4f5 f6f7 sum to ddf2 (folded).
    #[test]
    fn rfc1071_example() {
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&data, 0)), 0xddf2);
        assert_eq!(checksum(&data), !0xddf2);
    }

    /// A real IPv4 header (from a capture): checksum field 0xb861 verifies
    /// to zero, and recomputes to the same value with the field zeroed.
    #[test]
    fn ipv4_header_checksum() {
        let mut hdr = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&hdr), 0);
        hdr[10] = 0;
        hdr[11] = 0;
        assert_eq!(checksum(&hdr), 0xb861);
    }

    /// The fixed-step fold is the 16-bit fold repeated until it fits, on
    /// random, extreme and multiple-of-0xffff accumulators.
    #[test]
    fn fold_is_the_repeated_fold() {
        use rand::{RngExt, SeedableRng};
        let slow = |mut a: u64| {
            while a >> 16 != 0 {
                a = (a & 0xffff) + (a >> 16);
            }
            a as u16
        };
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let edges = [
            0,
            1,
            0xffff,
            0x1_0000,
            0x1_fffe,
            u64::MAX,
            0xffff * 0xffff,
            1 << 32,
        ];
        for a in edges.into_iter().chain((0..100_000).map(|i| {
            let x: u64 = rng.random();
            x >> (i % 64)
        })) {
            assert_eq!(fold(a), slow(a), "{a:#x}");
        }
    }

    #[test]
    fn odd_length_pads_with_zero() {
        assert_eq!(fold(sum(&[0x12, 0x34, 0x56], 0)), 0x1234 + 0x5600);
    }

    /// Incremental update gives the same result as a full recomputation,
    /// here for a TTL decrement (word 4 of the IPv4 header).
    #[test]
    fn incremental_matches_full() {
        let mut hdr = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        let c = checksum(&hdr);
        let old = u16::from_be_bytes([hdr[8], hdr[9]]);
        hdr[8] -= 1;
        let new = u16::from_be_bytes([hdr[8], hdr[9]]);
        let inc = update16(c, old, new);
        assert_eq!(inc, checksum(&hdr));
        let old_s = sum(&old.to_be_bytes(), 0);
        let new_s = sum(&new.to_be_bytes(), 0);
        assert_eq!(update_sums(c, old_s, new_s), inc);
    }
}
