//! Eight rules of a decision tree's leaf checked at once: each field's
//! bounds for the eight side by side, compared with the key's in SIMD
//! lanes (the `wide` crate: SSE2 on x86-64, NEON on aarch64, plain
//! arrays elsewhere; no `unsafe` here).
//!
//! SSE2 compares signed integers only, so the addresses are stored with
//! their top bit flipped (and the key's flipped likewise), which orders
//! them as unsigned; the ports likewise in 16-bit lanes, the protocol
//! as it is. A lane fails where a bound is past the key's field; the
//! eight lanes' failures end up in one byte (`pmovmskb`), whose zero
//! bits are the rules that cover the key. One check of a block costs
//! about 40 instructions where a rule checked alone cost about 20.

use wide::{i16x8, i32x4};

/// Rules in a block.
pub(super) const LANES: usize = 8;

/// A rule's five inclusive ranges: source, destination, source port,
/// destination port, protocol (the low and high ends).
pub(super) type Ranges = ([u32; 5], [u32; 5]);

/// Up to eight rules' ranges (a lane past the last rule matches no key).
/// Four cache lines.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct Block {
    /// The addresses' low ends (lanes 0–3, 4–7), then their high ends,
    /// top bit flipped.
    src: [i32x4; 4],
    dst: [i32x4; 4],
    /// Source port low and high ends, destination port low and high
    /// ends, top bit flipped.
    ports: [i16x8; 4],
    /// The protocol's low and high ends.
    proto: [i16x8; 2],
    /// Each lane's rule: its index, with [`MORE`] where it needs a check
    /// besides its ranges.
    pub(super) ids: [u32; LANES],
}

/// The flag in [`Block::ids`] of a rule that needs a residual check.
pub(super) const MORE: u32 = 1 << 31;

const FLIP32: u32 = 1 << 31;
const FLIP16: u32 = 1 << 15;

impl Block {
    /// The block of `rules` (at most [`LANES`]), each with its id (and
    /// [`MORE`]).
    pub(super) fn new(rules: &[(Ranges, u32)]) -> Block {
        assert!(rules.len() <= LANES);
        // An empty lane: every low end above every high end.
        let empty: Ranges = ([u32::MAX, u32::MAX, 0xffff, 0xffff, 0xff], [0; 5]);
        let lane = |i: usize| rules.get(i).map_or(empty, |r| r.0);
        let quad = |f: usize, hi: bool, from: usize| {
            i32x4::new(std::array::from_fn(|j| {
                let r = lane(from + j);
                ((if hi { r.1[f] } else { r.0[f] }) ^ FLIP32) as i32
            }))
        };
        let word = |f: usize, hi: bool, flip: u32| {
            i16x8::new(std::array::from_fn(|j| {
                let r = lane(j);
                ((if hi { r.1[f] } else { r.0[f] }) ^ flip) as u16 as i16
            }))
        };
        let addr = |f: usize| {
            [
                quad(f, false, 0),
                quad(f, false, 4),
                quad(f, true, 0),
                quad(f, true, 4),
            ]
        };
        Block {
            src: addr(0),
            dst: addr(1),
            ports: [
                word(2, false, FLIP16),
                word(2, true, FLIP16),
                word(3, false, FLIP16),
                word(3, true, FLIP16),
            ],
            proto: [word(4, false, 0), word(4, true, 0)],
            ids: std::array::from_fn(|i| rules.get(i).map_or(u32::MAX, |r| r.1)),
        }
    }

    /// The lanes whose rule covers `x` (source, destination, source
    /// port, destination port, protocol): bit `i` for lane `i`.
    #[inline(always)]
    pub(super) fn covers(&self, x: &[u32; 5]) -> u32 {
        let s = i32x4::splat((x[0] ^ FLIP32) as i32);
        let d = i32x4::splat((x[1] ^ FLIP32) as i32);
        let outside = |h: usize| {
            (self.src[h].simd_gt(s)
                | s.simd_gt(self.src[2 + h])
                | self.dst[h].simd_gt(d)
                | d.simd_gt(self.dst[2 + h]))
            .to_bitmask()
        };
        let sp = i16x8::splat((x[2] ^ FLIP16) as u16 as i16);
        let dp = i16x8::splat((x[3] ^ FLIP16) as u16 as i16);
        let pr = i16x8::splat(x[4] as u16 as i16);
        let ports = (self.ports[0].simd_gt(sp)
            | sp.simd_gt(self.ports[1])
            | self.ports[2].simd_gt(dp)
            | dp.simd_gt(self.ports[3])
            | self.proto[0].simd_gt(pr)
            | pr.simd_gt(self.proto[1]))
        .to_bitmask();
        !(outside(0) | outside(1) << 4 | ports) & 0xff
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn one(r: &Ranges, x: &[u32; 5]) -> bool {
        (0..5).all(|f| r.0[f] <= x[f] && x[f] <= r.1[f])
    }

    fn ranges() -> impl Strategy<Value = Ranges> {
        // Ends drawn near the edges of each field, where a signed
        // compare would go wrong.
        let end = |max: u32| {
            prop_oneof![
                Just(0u32),
                Just(max),
                Just(max / 2),
                Just(max / 2 + 1),
                0..=max
            ]
        };
        let field = move |max: u32| (end(max), end(max)).prop_map(|(a, b)| (a.min(b), a.max(b)));
        (
            field(u32::MAX),
            field(u32::MAX),
            field(0xffff),
            field(0xffff),
            field(0xff),
        )
            .prop_map(|(a, b, c, d, e)| ([a.0, b.0, c.0, d.0, e.0], [a.1, b.1, c.1, d.1, e.1]))
    }

    proptest! {
        /// Each lane's bit is the rule's plain check, for blocks of 0 to 8
        /// rules and keys at the rules' ends and anywhere.
        #[test]
        fn a_block_covers_as_its_rules_do(
            rules in proptest::collection::vec(ranges(), 0..=LANES),
            pick in 0usize..8,
            edge in any::<[bool; 5]>(),
            free in (any::<u32>(), any::<u32>(), 0u32..=0xffff, 0u32..=0xffff, 0u32..=0xff),
        ) {
            let free = [free.0, free.1, free.2, free.3, free.4];
            // A key on the ends of one rule's ranges (or anywhere).
            let x: [u32; 5] = std::array::from_fn(|f| match rules.get(pick) {
                Some(r) if edge[f] => r.0[f],
                Some(r) if pick % 2 == 0 => r.1[f],
                _ => free[f],
            });
            let with_ids: Vec<(Ranges, u32)> =
                rules.iter().enumerate().map(|(i, r)| (*r, i as u32)).collect();
            let b = Block::new(&with_ids);
            let want = rules
                .iter()
                .enumerate()
                .fold(0u32, |m, (i, r)| m | u32::from(one(r, &x)) << i);
            prop_assert_eq!(b.covers(&x), want);
            for i in rules.len()..LANES {
                prop_assert_eq!(b.ids[i], u32::MAX);
            }
        }
    }

    #[test]
    fn an_empty_lane_matches_nothing_not_even_the_extremes() {
        let b = Block::new(&[]);
        for x in [[0; 5], [u32::MAX, u32::MAX, 0xffff, 0xffff, 0xff]] {
            assert_eq!(b.covers(&x), 0);
        }
        let all = ([0; 5], [u32::MAX, u32::MAX, 0xffff, 0xffff, 0xff]);
        let b = Block::new(&[(all, 7)]);
        for x in [[0; 5], [u32::MAX, u32::MAX, 0xffff, 0xffff, 0xff]] {
            assert_eq!(b.covers(&x), 1);
        }
        assert_eq!(std::mem::size_of::<Block>(), 256);
    }
}
