//! Where a port's receive side sends a flow, where Sluice can compute it:
//! the symmetric flow hash that AF_PACKET ports with several RX queues
//! spread packets by (their fanout group runs [`fanout_program`], a
//! classic BPF program, on each packet), and which gateway worker polls
//! each queue.
//!
//! A datagram's fragments carry no ports past the first, so the spread
//! hashes every fragment by its addresses alone: a datagram's fragments
//! reach one queue, but not always the queue the flow's unfragmented
//! packets reach (NICs' RSS does the same with IPv4 fragments). The
//! gateway's worker that gets a first fragment computes, from the ports
//! in it, the worker that owns the flow ([`Spread::owner`]) and hands the
//! datagram to it; without this it opened a second flow there, and a NAT
//! mapping with another port.
//!
//! The hash: the 32-bit words of both addresses XORed together (one word
//! for IPv4, four each for IPv6), XORed with the two ports XORed together
//! for TCP, UDP and SCTP packets that are not fragments (IPv6: whose fixed
//! header names the transport; extension headers are not walked), then
//! multiplied by 0x9e3779b1 and folded (`h ^ h >> 16`); the kernel takes
//! it modulo the group's sockets. Both directions of a flow hash alike.

use crate::acl::is_v4;
use crate::bpf::{Insn, Program};
use crate::conntrack::Tuple;
use std::sync::Arc;

/// The multiplier of the hash's mix (the golden ratio's 32 bits).
const MIX: u32 = 0x9e37_79b1;

/// Whether packets of `proto` have their ports hashed (TCP, UDP, SCTP).
fn hashes_ports(proto: u8) -> bool {
    matches!(proto, 6 | 17 | 132)
}

/// The hash of a packet whose addresses' words XOR to `words`, and whose
/// ports XOR to `ports` (0 where they are not hashed).
#[inline]
pub fn mix(words: u32, ports: u32) -> u32 {
    let h = (words ^ ports).wrapping_mul(MIX);
    h ^ h >> 16
}

/// An address's 32-bit words XORed (IPv4 mapped: its one word).
fn words(a: u128) -> u32 {
    if is_v4(a) {
        a as u32
    } else {
        (a >> 96) as u32 ^ (a >> 64) as u32 ^ (a >> 32) as u32 ^ a as u32
    }
}

/// The hash of the unfragmented packets of the flow whose tuple is `t`
/// (either direction).
pub fn flow_hash(t: &Tuple) -> u32 {
    let ports = if hashes_ports(t.proto) {
        u32::from(t.sport ^ t.dport)
    } else {
        0
    };
    mix(words(t.src) ^ words(t.dst), ports)
}

/// How a port spreads flows: the gateway worker that polls each of its
/// RX queues, in queue order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Spread {
    /// Worker index by queue.
    pub workers: Arc<[u16]>,
}

impl Spread {
    /// The worker whose queue the flow of tuple `t` reaches.
    pub fn owner(&self, t: &Tuple) -> Option<u16> {
        let n = self.workers.len() as u32;
        (n > 0).then(|| self.workers[(flow_hash(t) % n) as usize])
    }
}

/// Classic BPF loads relative to the link-layer header (`SKF_LL_OFF`):
/// the kernel's fanout runs a program on the packet from its network
/// header, with any VLAN tag already taken off; these offsets name the
/// Ethernet header's bytes either way.
const LL: u32 = 0xffe0_0000;

/// One instruction of [`fanout_program`] before its jumps are resolved.
enum Asm {
    Op(u16, u32),
    /// A conditional jump (`code`, `k`) to a label if true, else on.
    If(u16, u32, &'static str),
    /// A conditional jump (`code`, `k`): on if true, to a label if false.
    Unless(u16, u32, &'static str),
    Goto(&'static str),
    Label(&'static str),
}

/// The fanout program (`PACKET_FANOUT_CBPF`): [`flow_hash`] of each
/// packet, as the module describes it (0 for anything not IPv4 or IPv6).
pub fn fanout_program() -> Program {
    use Asm::*;
    const LDW: u16 = 0x20; // ld [k]
    const LDH: u16 = 0x28; // ldh [k]
    const LDB: u16 = 0x30; // ldb [k]
    const LDH_X: u16 = 0x48; // ldh [x + k]
    const LDI: u16 = 0x00; // ld #k
    const LDX_MSH: u16 = 0xb1; // ldx 4 * ([k] & 0xf)
    const LDX_M: u16 = 0x61; // ldx M[k]
    const ST: u16 = 0x02; // st M[k]
    const XOR_X: u16 = 0xac;
    const MUL: u16 = 0x24;
    const RSH: u16 = 0x74;
    const JEQ: u16 = 0x15;
    const JSET: u16 = 0x45;
    const TAX: u16 = 0x07;
    const RET_A: u16 = 0x16;
    const RET: u16 = 0x06;
    let mut p = vec![
        Op(LDH, LL + 12),
        If(JEQ, 0x0800, "v4"),
        If(JEQ, 0x86dd, "v6"),
        Op(RET, 0),
        // IPv4: ports unless it is a fragment.
        Label("v4"),
        Op(LDH, LL + 14 + 6),
        If(JSET, 0x3fff, "v4-addresses-only"),
        Op(LDB, LL + 14 + 9),
        If(JEQ, 6, "v4-ports"),
        If(JEQ, 17, "v4-ports"),
        Unless(JEQ, 132, "v4-addresses-only"),
        Label("v4-ports"),
        Op(LDX_MSH, LL + 14),
    ];
    // The ports XORed into M[0], loaded by `ld` from `at` on.
    let ports = |ld: u16, at: u32| {
        [
            Op(ld, at),
            Op(ST, 0),
            Op(ld, at + 2),
            Op(LDX_M, 0),
            Op(XOR_X, 0),
            Op(ST, 0),
        ]
    };
    p.extend(ports(LDH_X, LL + 14));
    p.extend([
        Goto("v4-addresses"),
        Label("v4-addresses-only"),
        Op(LDI, 0),
        Op(ST, 0),
        Label("v4-addresses"),
        Op(LDW, LL + 14 + 12),
        Op(ST, 1),
        Op(LDW, LL + 14 + 16),
        Op(LDX_M, 1),
        Op(XOR_X, 0),
        Op(LDX_M, 0),
        Op(XOR_X, 0),
        Goto("mix"),
        // IPv6: ports when the fixed header names TCP, UDP or SCTP.
        Label("v6"),
        Op(LDB, LL + 14 + 6),
        If(JEQ, 6, "v6-ports"),
        If(JEQ, 17, "v6-ports"),
        Unless(JEQ, 132, "v6-addresses-only"),
        Label("v6-ports"),
    ]);
    p.extend(ports(LDH, LL + 14 + 40));
    p.extend([
        Goto("v6-addresses"),
        Label("v6-addresses-only"),
        Op(LDI, 0),
        Op(ST, 0),
        Label("v6-addresses"),
    ]);
    for w in 0..8 {
        p.extend([
            Op(LDW, LL + 14 + 8 + 4 * w),
            Op(LDX_M, 0),
            Op(XOR_X, 0),
            Op(ST, 0),
        ]);
    }
    p.extend([
        Label("mix"),
        Op(MUL, MIX),
        Op(TAX, 0),
        Op(RSH, 16),
        Op(XOR_X, 0),
        Op(RET_A, 0),
    ]);
    // Resolve the labels: each instruction's index, then the jumps.
    let mut at = std::collections::HashMap::new();
    let mut n = 0usize;
    for a in &p {
        match a {
            Label(l) => {
                at.insert(*l, n);
            }
            _ => n += 1,
        }
    }
    let mut insns = Vec::with_capacity(n);
    for a in &p {
        let pc = insns.len();
        let to = |l: &str| (at[l] - pc - 1) as u32;
        let (code, jt, jf, k) = match *a {
            Label(_) => continue,
            Op(code, k) => (code, 0, 0, k),
            If(code, k, l) => (code, to(l) as u8, 0, k),
            Unless(code, k, l) => (code, 0, to(l) as u8, k),
            Goto(l) => (0x05, 0, 0, to(l)),
        };
        insns.push(Insn { code, jt, jf, k });
    }
    Program::new(insns).expect("the fanout program is well formed")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::v4;

    /// An Ethernet frame of `proto` from `src` to `dst` (IPv4 when both are
    /// IPv4 mapped), its transport header starting with the ports;
    /// `frag`: IPv4's flags and offset, or an IPv6 fragment header.
    fn frame(src: u128, dst: u128, proto: u8, sport: u16, dport: u16, frag: u16) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        let ports = [sport.to_be_bytes(), dport.to_be_bytes()].concat();
        if is_v4(src) {
            f.extend([0x08, 0x00, 0x45, 0, 0, 48, 0, 0]);
            f.extend(frag.to_be_bytes());
            f.extend([64, proto, 0, 0]);
            f.extend((src as u32).to_be_bytes());
            f.extend((dst as u32).to_be_bytes());
        } else {
            f.extend([0x86, 0xdd, 0x60, 0, 0, 0, 0, 28]);
            f.push(if frag != 0 { 44 } else { proto });
            f.push(64);
            f.extend(src.to_be_bytes());
            f.extend(dst.to_be_bytes());
            if frag != 0 {
                f.extend([proto, 0]);
                f.extend((frag & !7).to_be_bytes());
                f.extend([0, 0, 0, 7]);
            }
        }
        f.extend(ports);
        f.extend([0u8; 20]);
        f
    }

    fn tuple(src: u128, dst: u128, proto: u8, sport: u16, dport: u16) -> Tuple {
        Tuple {
            src,
            dst,
            sport,
            dport,
            proto,
            zone: 0,
        }
    }

    /// The program computes `flow_hash` of every unfragmented packet,
    /// IPv4 and IPv6, TCP, UDP, SCTP and others; a fragment (any: the
    /// first too) hashes as the same flow without ports; both directions
    /// hash alike.
    #[test]
    fn the_fanout_program_is_the_flow_hash() {
        let prog = fanout_program();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rand = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..2000 {
            let (src, dst) = if i % 2 == 0 {
                (v4(rand() as u32), v4(rand() as u32))
            } else {
                (
                    u128::from(rand()) << 64 | u128::from(rand()),
                    u128::from(rand()) << 64 | u128::from(rand()),
                )
            };
            let proto = [6, 17, 132, 1, 58, 47][i % 6];
            let (sport, dport) = (rand() as u16, rand() as u16);
            let t = tuple(src, dst, proto, sport, dport);
            let h = flow_hash(&t);
            assert_eq!(prog.run(&frame(src, dst, proto, sport, dport, 0)), h);
            assert_eq!(flow_hash(&tuple(dst, src, proto, dport, sport)), h);
            // Fragments: the first (More Fragments) and a later one.
            let bare = flow_hash(&tuple(src, dst, 1, 0, 0));
            for frag in [0x2000u16, 0x0010] {
                let frag = if is_v4(src) {
                    frag
                } else {
                    frag.rotate_left(3) | 1
                };
                assert_eq!(prog.run(&frame(src, dst, proto, sport, dport, frag)), bare);
            }
        }
        // Not IP: 0.
        let mut arp = frame(v4(1), v4(2), 17, 1, 2, 0);
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(prog.run(&arp), 0);
    }

    /// A spread names the worker of each queue.
    #[test]
    fn a_spread_names_the_worker_of_the_flows_queue() {
        let s = Spread {
            workers: Arc::from([3u16, 1]),
        };
        let t = tuple(v4(1), v4(2), 17, 1000, 53);
        let want = [3, 1][(flow_hash(&t) % 2) as usize];
        assert_eq!(s.owner(&t), Some(want));
        assert_eq!(s.owner(&tuple(v4(2), v4(1), 17, 53, 1000)), Some(want));
        let none = Spread {
            workers: Arc::from([]),
        };
        assert_eq!(none.owner(&t), None);
    }
}
