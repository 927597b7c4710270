//! Classic BPF: the programs libpcap compiles tcpdump expressions into
//! (`tcpdump -ddd EXPR` prints them), checked once and run over a frame.
//! Packet capture filters with these, so a filter means exactly what it
//! means to tcpdump, Wireshark and dpdk-dumpcap; the compiler is libpcap's,
//! only the (small, fully specified) machine is here.
//!
//! A program is checked when it is made: every jump lands inside it, it
//! cannot fall off its end, scratch memory indexes are in range, and there
//! is no division by a zero constant; running it then cannot panic or loop
//! (jumps only go forward). A load past the frame's end rejects the frame,
//! as the kernel's interpreter does. Loads relative to the link-layer
//! header (`SKF_LL_OFF`, as AF_PACKET's fanout programs use) read the
//! frame from its start.

/// One instruction (`struct sock_filter`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Opcode.
    pub code: u16,
    /// Jump offset if true.
    pub jt: u8,
    /// Jump offset if false.
    pub jf: u8,
    /// Operand.
    pub k: u32,
}

/// A checked program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Program(Vec<Insn>);

/// Why a program was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BpfError(pub String);

impl std::fmt::Display for BpfError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BpfError {}

// Instruction classes, sizes, modes, operations, sources.
const LD: u16 = 0x00;
const LDX: u16 = 0x01;
const ST: u16 = 0x02;
const STX: u16 = 0x03;
const ALU: u16 = 0x04;
const JMP: u16 = 0x05;
const RET: u16 = 0x06;
const MISC: u16 = 0x07;
const W: u16 = 0x00;
const H: u16 = 0x08;
const B: u16 = 0x10;
const IMM: u16 = 0x00;
const ABS: u16 = 0x20;
const IND: u16 = 0x40;
const MEM: u16 = 0x60;
const LEN: u16 = 0x80;
const MSH: u16 = 0xa0;
const X: u16 = 0x08;
const RET_A: u16 = 0x10;
/// Scratch memory words.
const MEMWORDS: u32 = 16;
/// The kernel's `SKF_LL_OFF` and `SKF_NET_OFF` (as unsigned offsets).
const LL_OFF: u32 = 0xffe0_0000;
const NET_OFF: u32 = 0xfff0_0000;

impl Program {
    /// Checks `insns`.
    pub fn new(insns: Vec<Insn>) -> Result<Self, BpfError> {
        let n = insns.len();
        if n == 0 || n > 4096 {
            return Err(BpfError(format!(
                "a program has 1 to 4096 instructions, not {n}"
            )));
        }
        for (pc, i) in insns.iter().enumerate() {
            let bad = |what: &str| BpfError(format!("instruction {pc} ({:#06x}): {what}", i.code));
            match i.code & 0x07 {
                LD | LDX => {
                    let mode = i.code & 0xe0;
                    let ok = match (i.code & 0x07, mode) {
                        (_, IMM | LEN) => true,
                        (_, MEM) => i.k < MEMWORDS,
                        (LD, ABS | IND) => matches!(i.code & 0x18, W | H | B),
                        (LDX, MSH) => i.code & 0x18 == B,
                        _ => false,
                    };
                    if !ok {
                        return Err(bad("not a load this machine runs"));
                    }
                }
                ST | STX => {
                    if i.k >= MEMWORDS {
                        return Err(bad("scratch memory index out of range"));
                    }
                }
                ALU => {
                    let op = i.code & 0xf0;
                    if op > 0xa0 {
                        return Err(bad("unknown ALU operation"));
                    }
                    if matches!(op, 0x30 | 0x90) && i.code & X == 0 && i.k == 0 {
                        return Err(bad("division by zero"));
                    }
                }
                JMP => {
                    let op = i.code & 0xf0;
                    let targets: &[u64] = if op == 0x00 {
                        &[u64::from(i.k)]
                    } else if op <= 0x40 {
                        &[u64::from(i.jt), u64::from(i.jf)]
                    } else {
                        return Err(bad("unknown jump"));
                    };
                    if targets.iter().any(|t| pc as u64 + 1 + t >= n as u64) {
                        return Err(bad("jumps past the end"));
                    }
                }
                RET => {}
                MISC => {
                    if i.code & 0xf8 != 0 && i.code & 0xf8 != 0x80 {
                        return Err(bad("unknown instruction"));
                    }
                }
                _ => return Err(bad("unknown instruction class")),
            }
        }
        if insns[n - 1].code & 0x07 != RET {
            return Err(BpfError("a program must end with a return".into()));
        }
        Ok(Program(insns))
    }

    /// The instructions.
    pub fn insns(&self) -> &[Insn] {
        &self.0
    }

    /// Parses `tcpdump -ddd` output: the instruction count, then one
    /// `code jt jf k` line per instruction (decimal).
    pub fn from_ddd(text: &str) -> Result<Self, BpfError> {
        let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
        let count: usize = lines
            .next()
            .and_then(|l| l.parse().ok())
            .ok_or_else(|| BpfError("no instruction count".into()))?;
        let insns = lines
            .map(|l| {
                let f: Vec<u64> = l
                    .split_whitespace()
                    .map(|x| {
                        x.parse()
                            .map_err(|_| BpfError(format!("`{l}`: not four numbers")))
                    })
                    .collect::<Result<_, _>>()?;
                match f.as_slice() {
                    &[code, jt, jf, k]
                        if code <= 0xffff && jt <= 0xff && jf <= 0xff && k <= 0xffff_ffff =>
                    {
                        Ok(Insn {
                            code: code as u16,
                            jt: jt as u8,
                            jf: jf as u8,
                            k: k as u32,
                        })
                    }
                    _ => Err(BpfError(format!("`{l}`: not an instruction"))),
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        if insns.len() != count {
            return Err(BpfError(format!(
                "{count} instructions announced, {} given",
                insns.len()
            )));
        }
        Program::new(insns)
    }

    /// Runs the program over `pkt` (a whole frame): the number of bytes to
    /// keep, 0 to reject.
    pub fn run(&self, pkt: &[u8]) -> u32 {
        let (mut a, mut x) = (0u32, 0u32);
        let mut mem = [0u32; MEMWORDS as usize];
        let load = |off: u64, size: u16| -> Option<u32> {
            // An offset from the link-layer header (`SKF_LL_OFF`), which
            // is the frame's start here.
            let off = match u32::try_from(off) {
                Ok(o) if (LL_OFF..NET_OFF).contains(&o) => u64::from(o - LL_OFF),
                _ => off,
            };
            let off = usize::try_from(off).ok()?;
            let len = match size {
                W => 4,
                H => 2,
                _ => 1,
            };
            let b = pkt.get(off..off.checked_add(len)?)?;
            Some(b.iter().fold(0u32, |v, &x| (v << 8) | u32::from(x)))
        };
        let mut pc = 0;
        while let Some(i) = self.0.get(pc) {
            pc += 1;
            match i.code & 0x07 {
                LD => {
                    a = match i.code & 0xe0 {
                        IMM => i.k,
                        LEN => pkt.len() as u32,
                        MEM => mem[i.k as usize],
                        ABS => match load(u64::from(i.k), i.code & 0x18) {
                            Some(v) => v,
                            None => return 0,
                        },
                        _ => match load(u64::from(x) + u64::from(i.k), i.code & 0x18) {
                            Some(v) => v,
                            None => return 0,
                        },
                    }
                }
                LDX => {
                    x = match i.code & 0xe0 {
                        IMM => i.k,
                        LEN => pkt.len() as u32,
                        MEM => mem[i.k as usize],
                        _ => match load(u64::from(i.k), B) {
                            Some(v) => (v & 0x0f) * 4,
                            None => return 0,
                        },
                    }
                }
                ST => mem[i.k as usize] = a,
                STX => mem[i.k as usize] = x,
                ALU => {
                    let v = if i.code & X != 0 { x } else { i.k };
                    a = match i.code & 0xf0 {
                        0x00 => a.wrapping_add(v),
                        0x10 => a.wrapping_sub(v),
                        0x20 => a.wrapping_mul(v),
                        0x30 => match a.checked_div(v) {
                            Some(q) => q,
                            None => return 0,
                        },
                        0x40 => a | v,
                        0x50 => a & v,
                        0x60 => a.checked_shl(v).unwrap_or(0),
                        0x70 => a.checked_shr(v).unwrap_or(0),
                        0x80 => a.wrapping_neg(),
                        0x90 => match a.checked_rem(v) {
                            Some(r) => r,
                            None => return 0,
                        },
                        _ => a ^ v,
                    }
                }
                JMP => {
                    let v = if i.code & X != 0 { x } else { i.k };
                    let taken = match i.code & 0xf0 {
                        0x00 => {
                            pc += i.k as usize;
                            continue;
                        }
                        0x10 => a == v,
                        0x20 => a > v,
                        0x30 => a >= v,
                        _ => a & v != 0,
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                RET => {
                    return match i.code & 0x18 {
                        RET_A => a,
                        X => x,
                        _ => i.k,
                    }
                }
                _ => {
                    if i.code & 0xf8 == 0 {
                        x = a; // TAX
                    } else {
                        a = x; // TXA
                    }
                }
            }
        }
        0
    }

    /// Whether the program keeps `pkt`.
    pub fn matches(&self, pkt: &[u8]) -> bool {
        self.run(pkt) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn insn(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
        Insn { code, jt, jf, k }
    }

    /// `tcpdump -ddd -y EN10MB udp` (tcpdump 4.99, libpcap 1.10).
    const UDP: &str = "12
40 0 0 12
21 0 2 2048
48 0 0 23
21 6 7 17
21 0 6 34525
48 0 0 20
21 3 0 17
21 0 3 44
48 0 0 54
21 0 1 17
6 0 0 262144
6 0 0 0
";

    /// `tcpdump -ddd -y EN10MB 'tcp dst port 22'`.
    const TCP22: &str = "16
40 0 0 12
21 0 4 34525
48 0 0 20
21 0 11 6
40 0 0 56
21 8 9 22
21 0 8 2048
48 0 0 23
21 0 6 6
40 0 0 20
69 4 0 8191
177 0 0 14
72 0 0 16
21 0 1 22
6 0 0 262144
6 0 0 0
";

    fn ipv4(proto: u8, dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[23] = proto;
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f
    }

    #[test]
    fn runs_what_libpcap_compiles() {
        let udp = Program::from_ddd(UDP).unwrap();
        assert!(udp.matches(&ipv4(17, 53)));
        assert!(!udp.matches(&ipv4(6, 53)));
        assert_eq!(udp.run(&ipv4(17, 53)), 262_144);
        let mut v6 = vec![0u8; 60];
        v6[12..14].copy_from_slice(&[0x86, 0xdd]);
        v6[20] = 17;
        assert!(udp.matches(&v6));
        assert!(!udp.matches(&v6[..14]), "a load past the end rejects");
        // The fragment test, MSH (the IPv4 header length) and an indexed
        // load.
        let tcp = Program::from_ddd(TCP22).unwrap();
        assert!(tcp.matches(&ipv4(6, 22)));
        assert!(!tcp.matches(&ipv4(6, 23)));
        assert!(!tcp.matches(&ipv4(17, 22)));
        let mut frag = ipv4(6, 22);
        frag[20..22].copy_from_slice(&[0x00, 0x10]);
        assert!(!tcp.matches(&frag), "non-first fragments have no ports");
        let mut opts = ipv4(6, 0);
        opts[14] = 0x46; // 24-byte header: the port moves 4 bytes on
        opts[40..42].copy_from_slice(&22u16.to_be_bytes());
        assert!(tcp.matches(&opts));
    }

    #[test]
    fn alu_memory_and_misc() {
        // A = len; M[3] = A; A = A * 2 - 1; X = A; A = M[3]; A ^= X; ret A
        let p = Program::new(vec![
            insn(LD | LEN, 0, 0, 0),
            insn(ST, 0, 0, 3),
            insn(ALU | 0x20, 0, 0, 2),
            insn(ALU | 0x10, 0, 0, 1),
            insn(MISC, 0, 0, 0),
            insn(LD | MEM, 0, 0, 3),
            insn(ALU | 0xa0 | X, 0, 0, 0),
            insn(RET | RET_A, 0, 0, 0),
        ])
        .unwrap();
        assert_eq!(p.run(&[0; 10]), 10 ^ 19);
        // Division by X = 0 rejects instead of panicking.
        let div = Program::new(vec![
            insn(LDX | IMM, 0, 0, 0),
            insn(LD | IMM, 0, 0, 7),
            insn(ALU | 0x30 | X, 0, 0, 0),
            insn(RET | RET_A, 0, 0, 0),
        ])
        .unwrap();
        assert_eq!(div.run(&[]), 0);
    }

    #[test]
    fn refuses_programs_that_could_misbehave() {
        let ret = insn(RET, 0, 0, 1);
        for (p, why) in [
            (vec![], "1 to 4096"),
            (vec![insn(LD | ABS | W, 0, 0, 0)], "end with a return"),
            (vec![insn(JMP | 0x10, 5, 0, 0), ret], "past the end"),
            (vec![insn(JMP, 0, 0, 1), ret], "past the end"),
            (vec![insn(ST, 0, 0, 16), ret], "out of range"),
            (vec![insn(LD | MEM, 0, 0, 99), ret], "not a load"),
            (vec![insn(ALU | 0x30, 0, 0, 0), ret], "division by zero"),
            (vec![insn(ALU | 0xf0, 0, 0, 0), ret], "unknown ALU"),
        ] {
            let e = Program::new(p).unwrap_err();
            assert!(e.0.contains(why), "{e} / {why}");
        }
        assert!(Program::from_ddd("2\n6 0 0 1\n").is_err());
        assert!(Program::from_ddd("1\n6 0 0 x\n").is_err());
        assert!(Program::from_ddd("").is_err());
    }

    proptest::proptest! {
        /// Whatever a checked program is, running it over any frame
        /// returns (no panic, no endless loop).
        #[test]
        fn checked_programs_always_return(
            insns in proptest::collection::vec(
                (proptest::prelude::any::<u16>(), 0u8..4, 0u8..4, proptest::prelude::any::<u32>()),
                1..24,
            ),
            pkt in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..128),
        ) {
            let mut v: Vec<Insn> = insns
                .into_iter()
                .map(|(code, jt, jf, k)| insn(code & 0xff, jt, jf, k % 64))
                .collect();
            v.push(insn(RET, 0, 0, 1));
            if let Ok(p) = Program::new(v) {
                let _ = p.run(&pkt);
            }
        }
    }
}
