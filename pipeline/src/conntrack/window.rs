//! TCP window tracking: a tracked TCP flow accepts only segments whose
//! sequence and acknowledgment numbers fall in the windows its endpoints
//! have opened, as Linux's conntrack checks them (`tcp_in_window`, after
//! Guido van Rooij's "Real Stateful TCP Packet Filtering in IP Filter").
//! Without it, anyone who knows a flow's addresses and ports (a NAT
//! mapping's public side is easy to learn) can close it with one RST of
//! any sequence number, or slip segments through it that its endpoints
//! never sent.
//!
//! Each direction keeps the highest sequence number it has sent (`end`),
//! the highest it may send (`maxend`: what the other side acknowledged
//! plus its window) and the largest window it has advertised (`maxwin`),
//! with its window scale. A segment is
//!
//! - **invalid** when it starts beyond what its receiver allows (`seq >
//!   maxend`) or acknowledges data never sent (`ack > end` of the other
//!   side): conntrack calls it `invalid` and the rules decide, as
//!   nftables' `ct state invalid` does;
//! - **ignored** (passed, the flow unchanged: neither its state nor its
//!   timer moves) when it lies below the window (a retransmission of data
//!   already acknowledged, an old ACK): harmless, and the endpoints know
//!   better;
//! - accepted, and the windows move, otherwise.
//!
//! A RST closes an established flow only when it is in the window and
//! its sequence number is exactly where its sender is (RFC 5961's
//! test: the endpoint would answer any other in-window RST with a
//! challenge ACK, not a close); any other in-window RST passes and the
//! flow stays established for the challenge ACK, set to expire as a
//! closed flow does unless another packet comes, as Linux does.
//!
//! A flow taken over from elsewhere (the HA peer's sync, a restart's
//! state file) has not been seen here: its windows are picked up from its
//! next segments and checked **liberally** for its life, as conntrackd
//! injects its flows by default (`TCPWindowTracking Off`: Linux's
//! per-flow `IP_CT_TCP_FLAG_BE_LIBERAL`): a segment out of the window
//! passes and moves it, except a RST, which stays invalid. Checked
//! strictly, a failover would stall every transfer with data in flight:
//! the first segment seen here may be a retransmission of what the peer
//! forwarded and the receiver acknowledged through it, so the receiver's
//! ACK would acknowledge "data never sent", and the window scales agreed
//! in the handshake are unknown.
//!
//! Left out from Linux's: the per-flow retransmission count and the
//! shorter timeout for unacknowledged data, and picking up flows in the
//! middle (Sluice opens TCP flows only on a SYN; a side whose first
//! segment is not a SYN is picked up from that segment, as Linux does).

use super::State;

/// Side flags.
const WSCALE: u8 = 1;
const SACK_PERM: u8 = 2;
/// Checked liberally (a flow taken over: [`Window::taken_over`]).
const LIBERAL: u8 = 4;
/// On the reply side while it has sent nothing (`maxwin` 0): a reply ACK
/// passed while the originator's SYN was unanswered, its acknowledgment
/// number in `maxend` ([`Window::note_ignored_ack`]).
const IGNORED_ACK: u8 = 8;
/// Linux's `MAXACKWINCONST`: how far below the other side's `end` an ACK
/// may lie before it is ignored, at least.
const MAXACKWIN: u32 = 66_000;
/// RFC 7323's largest window scale.
const MAX_WSCALE: u8 = 14;

const SYN: u16 = super::SYN;
const ACK: u16 = super::ACK;
const FIN: u16 = super::FIN;
const RST: u16 = super::RST;

/// Sequence number `a` is before `b` (modulo 2^32).
#[inline(always)]
fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// Sequence number `a` is after `b`.
#[inline(always)]
fn after(a: u32, b: u32) -> bool {
    before(b, a)
}

/// What one direction of a flow has shown of its sequence space.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Side {
    /// Highest sequence number sent, plus one (`td_end`).
    pub end: u32,
    /// Highest sequence number the other side allows (`td_maxend`).
    pub maxend: u32,
    /// Largest window advertised, scaled (`td_maxwin`); 0: nothing seen.
    pub maxwin: u32,
    /// Window scale (RFC 7323), when both sides offered one.
    pub scale: u8,
    flags: u8,
}

/// Both directions of a flow: the originator's, then the replies'. 32
/// bytes, aligned, so a flow's window is one access of one cache line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C, align(32))]
pub struct Window {
    /// Per direction.
    pub sides: [Side; 2],
}

const _: () = assert!(std::mem::size_of::<Window>() == 32);

/// The fields of a TCP segment window tracking reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Segment {
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number.
    pub ack: u32,
    /// Window, unscaled.
    pub win: u16,
    /// Sequence space the segment takes: payload bytes, SYN and FIN.
    pub len: u32,
    /// Its highest SACK block's right edge (RFC 2018) past `ack`, else
    /// `ack`.
    pub sack: u32,
    /// Window scale option (SYN only).
    pub wscale: Option<u8>,
    /// SACK permitted option (SYN only).
    pub sack_perm: bool,
    /// The header is malformed (its data offset below 5 or past the
    /// packet): the segment is invalid.
    pub bad: bool,
}

/// The first word of a segment's options when they are a timestamp alone,
/// aligned (RFC 7323 appendix A): NOP, NOP, kind 8, length 10.
const TIMESTAMP_ONLY: [u8; 4] = [1, 1, 8, 10];

/// A malformed segment.
const BAD: Segment = Segment {
    seq: 0,
    ack: 0,
    win: 0,
    len: 0,
    sack: 0,
    wscale: None,
    sack_perm: false,
    bad: true,
};

impl Segment {
    /// The segment whose TCP header (options included) and payload are
    /// `l4` (the IP payload, as its IP header's length gives it).
    #[inline]
    pub fn parse(l4: &[u8]) -> Segment {
        let Some(h) = l4.first_chunk::<20>() else {
            return BAD;
        };
        let doff = usize::from(h[12] >> 4) * 4;
        if doff < 20 || doff > l4.len() {
            return BAD;
        }
        let flags = u16::from(h[13]);
        let ack = u32::from_be_bytes([h[8], h[9], h[10], h[11]]);
        let mut s = Segment {
            seq: u32::from_be_bytes([h[4], h[5], h[6], h[7]]),
            ack,
            win: u16::from_be_bytes([h[14], h[15]]),
            len: (l4.len() - doff) as u32
                + u32::from(flags & SYN != 0)
                + u32::from(flags & FIN != 0),
            sack: ack,
            wscale: None,
            sack_perm: false,
            bad: false,
        };
        // The options of nearly every segment Linux and the BSDs send, a
        // timestamp after two NOPs, hold nothing read here: skipped
        // unread, as Linux's conntrack skips them (`tcp_sack`).
        if doff > 20 && !(doff == 32 && l4[20..24] == TIMESTAMP_ONLY) {
            s.options(&l4[20..doff], flags & SYN != 0);
        }
        s
    }

    /// Reads the options a SYN offers (window scale, SACK permitted) and
    /// any segment's SACK blocks, as Linux's `tcp_options` and
    /// `tcp_sack`; a malformed option ends the list.
    fn options(&mut self, mut o: &[u8], syn: bool) {
        while let Some(&kind) = o.first() {
            match kind {
                0 => return,
                1 => {
                    o = &o[1..];
                    continue;
                }
                _ => {}
            }
            let Some(&len) = o.get(1) else { return };
            let len = usize::from(len);
            if len < 2 || len > o.len() {
                return;
            }
            let body = &o[2..len];
            match (kind, body.len()) {
                (3, 1) if syn => self.wscale = Some(body[0].min(MAX_WSCALE)),
                (4, 0) if syn => self.sack_perm = true,
                (5, n) if n % 8 == 0 => {
                    for b in body.chunks_exact(8) {
                        let right = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
                        if after(right, self.sack) {
                            self.sack = right;
                        }
                    }
                }
                _ => {}
            }
            o = &o[len..];
        }
    }

    fn end(&self) -> u32 {
        self.seq.wrapping_add(self.len)
    }
}

/// What window tracking makes of a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// In the window: the flow moves on.
    Accept,
    /// Below the window (an old retransmission or ACK): passed, the flow
    /// unchanged.
    Ignore,
    /// A RST in the window but not where its sender is: passed, the flow
    /// kept open for the challenge ACK that answers it, but set to expire
    /// as a closed flow does unless another packet comes (Linux gives it
    /// the close timeout the same way), so a flow whose endpoint really
    /// is gone does not stay for the established timeout.
    Reset,
    /// Beyond the window, or acknowledging what was never sent.
    Invalid,
}

impl Side {
    /// The side of a SYN (or SYN+ACK) `s`.
    fn of_syn(s: &Segment) -> Side {
        let end = s.end();
        Side {
            end,
            maxend: end,
            maxwin: u32::from(s.win).max(1),
            scale: s.wscale.unwrap_or(0),
            flags: if s.wscale.is_some() { WSCALE } else { 0 }
                | if s.sack_perm { SACK_PERM } else { 0 },
        }
    }

    /// How far below this side's other side an ACK from it may lie.
    fn max_ack_window(&self) -> u32 {
        self.maxwin.max(MAXACKWIN)
    }

    /// A segment from this side ending at `end` reaches into what its
    /// receiver `r` may still take (not all of it acknowledged already).
    #[inline(always)]
    fn reaches(&self, r: &Side, end: u32) -> bool {
        after(end, self.end.wrapping_sub(r.maxwin).wrapping_sub(1))
    }

    /// An acknowledgment `sack` from this side is not far below what its
    /// other side, which has sent up to `r_end`, sent.
    #[inline(always)]
    fn acks_recent(&self, r_end: u32, sack: u32) -> bool {
        after(
            sack,
            r_end.wrapping_sub(self.max_ack_window()).wrapping_sub(1),
        )
    }
}

/// Moves the windows by an accepted segment of sender `sd` to receiver `r`
/// ending at `end`, acknowledging `ack` (`sack` with its SACK blocks),
/// with window `win` (scaled).
#[inline(always)]
fn update(sd: &mut Side, r: &mut Side, end: u32, ack: u32, sack: u32, win: u32) {
    sd.maxwin = sd.maxwin.max(win.wrapping_add(sack.wrapping_sub(ack)));
    if after(end, sd.end) {
        sd.end = end;
    }
    if r.maxwin != 0 && after(end, sd.maxend) {
        r.maxwin = r.maxwin.wrapping_add(end.wrapping_sub(sd.maxend));
    }
    let right = sack.wrapping_add(win);
    if after(right, r.maxend.wrapping_sub(1)) {
        r.maxend = right.wrapping_add(u32::from(win == 0));
    }
}

impl Window {
    /// The window of a flow opened by the originator's SYN `s`.
    pub fn open(s: &Segment) -> Window {
        Window {
            sides: [Side::of_syn(s), Side::default()],
        }
    }

    /// The window of a flow taken over from elsewhere (the HA peer, a
    /// restart's state file): both sides picked up from their next
    /// segments and checked liberally (out-of-window segments pass and
    /// move the window; RSTs do not).
    pub fn taken_over() -> Window {
        let side = Side {
            flags: LIBERAL,
            ..Side::default()
        };
        Window { sides: [side; 2] }
    }

    /// Whether the flow's windows are checked liberally.
    pub fn is_liberal(&self) -> bool {
        self.sides[0].flags & self.sides[1].flags & LIBERAL != 0
    }

    /// (Re)starts direction `dir` from its SYN or SYN+ACK `s`; when the
    /// replies' side starts, window scaling holds only if both sides
    /// offered it (RFC 7323).
    /// A reply ACK passed while the originator's SYN is unanswered
    /// (Linux's "ignore", most often a server's challenge ACK to a SYN on
    /// a tuple it still holds a connection for, RFC 5961): its
    /// acknowledgment number noted for the originator's RST that answers
    /// it ([`Window::answers_ignored_ack`]), in the reply side's fields
    /// that are unused until that side sends.
    pub fn note_ignored_ack(&mut self, ack: u32) {
        let r = &mut self.sides[1];
        if r.maxwin == 0 {
            r.maxend = ack;
            r.flags |= IGNORED_ACK;
        }
    }

    /// Whether the originator's RST with sequence number `seq` answers
    /// the reply ACK noted: RFC 793's reset for an unacceptable ACK in
    /// SYN-SENT carries that ACK's acknowledgment number as its sequence
    /// number (outside the originator's window: the ACK belonged to
    /// another connection). [`Window::check_full`] accepts it.
    fn answers_ignored_ack(&self, seq: u32) -> bool {
        let r = &self.sides[1];
        r.maxwin == 0 && r.flags & IGNORED_ACK != 0 && r.maxend == seq
    }

    fn init(&mut self, dir: usize, s: &Segment) {
        self.sides[dir] = Side::of_syn(s);
        let both = self.sides[0].flags & self.sides[1].flags & WSCALE != 0;
        if dir == 1 && !both {
            self.sides[0].scale = 0;
            self.sides[1].scale = 0;
        }
    }

    /// Checks segment `s` with TCP `flags`, sent in direction `reply` of a
    /// flow in `state`, against the windows, and moves them if it is
    /// accepted. Inline, the case of nearly every packet: an ACK (with or
    /// without data; no SYN, FIN or RST) of a flow both of whose sides
    /// have been seen, inside the windows; anything else, and any segment
    /// outside them, takes [`Window::check_full`], which decides every
    /// case and decides this one alike.
    #[inline(always)]
    pub fn check(&mut self, reply: bool, flags: u16, s: &Segment, state: State) -> Check {
        let [a, b] = &mut self.sides;
        let (sd, r) = if reply { (b, a) } else { (a, b) };
        if flags & (SYN | FIN | RST | ACK) == ACK && !s.bad && sd.maxwin != 0 && r.maxwin != 0 {
            let end = s.end();
            let sack = if r.flags & SACK_PERM != 0 {
                s.sack
            } else {
                s.ack
            };
            let in_window = before(s.seq, sd.maxend.wrapping_add(1))
                && before(sack, r.end.wrapping_add(1))
                && sd.reaches(r, end)
                && sd.acks_recent(r.end, sack);
            if in_window {
                update(sd, r, end, s.ack, sack, u32::from(s.win) << sd.scale);
                return Check::Accept;
            }
        }
        self.check_full(reply, flags, s, state)
    }

    /// [`Window::check`] for every segment, Linux's `tcp_in_window` step
    /// by step.
    #[cold]
    #[inline(never)]
    pub fn check_full(&mut self, reply: bool, flags: u16, s: &Segment, state: State) -> Check {
        if s.bad {
            return Check::Invalid;
        }
        let d = usize::from(reply);
        let (syn, has_ack, rst) = (flags & SYN != 0, flags & ACK != 0, flags & RST != 0);
        if rst && !reply && state == State::SynSent && self.answers_ignored_ack(s.seq) {
            // The originator's RST answering the reply ACK passed while
            // its SYN was unanswered: outside its window, but it closes
            // the server's old connection on the tuple.
            return Check::Accept;
        }
        let mut end = s.end();
        let (mut ack, mut sack) = (s.ack, s.ack);
        if self.sides[1 - d].flags & SACK_PERM != 0 {
            sack = s.sack;
        }
        let win = u32::from(s.win);
        if self.sides[d].maxwin == 0 {
            if syn {
                self.init(d, s);
                if !has_ack {
                    // A simultaneous open's SYN.
                    return Check::Accept;
                }
            } else {
                // Nothing seen from this side yet: taken from the segment.
                let scale = self.sides[d].scale;
                let maxwin = (win << scale).max(1);
                let sd = &mut self.sides[d];
                (sd.end, sd.maxwin, sd.maxend) = (end, maxwin, end.wrapping_add(maxwin));
                let r = &mut self.sides[1 - d];
                if r.maxwin == 0 {
                    (r.end, r.maxend) = (sack, sack);
                } else if sack == r.end.wrapping_add(1) {
                    // Likely the answer to a keepalive.
                    r.end = r.end.wrapping_add(1);
                }
            }
        } else if syn
            && after(end, self.sides[d].end)
            && matches!(state, State::SynSent | State::SynRecv)
        {
            // A SYN again with a later sequence number: that side started
            // over (RFC 793).
            self.init(d, s);
            if reply && !has_ack {
                return Check::Accept;
            }
        }
        let r_end = self.sides[1 - d].end;
        if !has_ack || (rst && s.ack == 0) {
            // No ACK (or a broken stack's RST with ACK 0): as if it
            // acknowledged all the other side sent.
            (ack, sack) = (r_end, r_end);
        }
        let mut seq = s.seq;
        if rst && seq == 0 && state == State::SynSent {
            // The RST answering a SYN.
            seq = self.sides[d].end;
            end = seq;
        }
        let (sd, r) = (self.sides[d], self.sides[1 - d]);
        if self.sides[d].flags & LIBERAL != 0 && !rst {
            // A flow taken over: what the window cannot place passes and
            // moves it. An ACK of what this box never saw: the other side
            // sent it through the box that had the flow before.
            if after(sack, r_end) {
                self.sides[1 - d].end = sack;
            }
        } else if !before(seq, sd.maxend.wrapping_add(1)) {
            // Over the upper bound. A sender a little past the window
            // (some stacks send more than it allows) is passed as Linux
            // passes it, and its end noted so that the ACK of those bytes
            // is not over the bound in turn.
            let overshot = end.wrapping_sub(sd.maxend).wrapping_add(1);
            let ack_ok = sd.acks_recent(r_end, sack);
            let in_recv = r.maxwin != 0 && sd.reaches(&r, end);
            if in_recv && ack_ok && overshot <= r.maxwin && before(sack, r_end.wrapping_add(1)) {
                self.sides[d].end = end;
                return Check::Ignore;
            }
            return Check::Invalid;
        } else if !before(sack, r_end.wrapping_add(1)) {
            // Acknowledges data the other side never sent.
            return Check::Invalid;
        }
        if r.maxwin != 0 && !sd.reaches(&r, end) {
            // Under the lower bound: already acknowledged, retransmitted.
            return Check::Ignore;
        }
        if !sd.acks_recent(r_end, sack) {
            // An ACK under its lower bound (much delayed).
            return Check::Ignore;
        }
        if rst && state == State::Established && seq != sd.end {
            // In the window but not where the sender is: its receiver
            // answers with a challenge ACK and stays open (RFC 5961).
            return Check::Reset;
        }
        let win = if syn { win } else { win << sd.scale };
        let [a, b] = &mut self.sides;
        let (sd, r) = if reply { (b, a) } else { (a, b) };
        update(sd, r, end, ack, sack, win);
        Check::Accept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TCP header (20 bytes and `opts`) and `payload` bytes.
    fn seg(
        seq: u32,
        ack: u32,
        flags: u16,
        win: u16,
        opts: &[u8],
        payload: usize,
    ) -> (Segment, u16) {
        let doff = 20 + opts.len();
        let mut b = vec![0u8; doff + payload];
        b[4..8].copy_from_slice(&seq.to_be_bytes());
        b[8..12].copy_from_slice(&ack.to_be_bytes());
        b[12] = ((doff / 4) as u8) << 4;
        b[13] = flags as u8;
        b[14..16].copy_from_slice(&win.to_be_bytes());
        b[20..doff].copy_from_slice(opts);
        (Segment::parse(&b), flags)
    }

    /// Window scale 7, SACK permitted, padded.
    const SYN_OPTS: [u8; 8] = [3, 3, 7, 4, 2, 1, 1, 0];

    /// A handshake from ISNs 1000 (client) and 5000 (server), windows
    /// 64,240 << 7.
    fn handshake() -> Window {
        let (s, _) = seg(1000, 0, SYN, 64240, &SYN_OPTS, 0);
        let mut w = Window::open(&s);
        let (s, f) = seg(5000, 1001, SYN | ACK, 65160, &SYN_OPTS, 0);
        assert_eq!(w.check(true, f, &s, State::SynSent), Check::Accept);
        let (s, f) = seg(1001, 5001, ACK, 502, &[], 0);
        assert_eq!(w.check(false, f, &s, State::SynRecv), Check::Accept);
        w
    }

    /// A flow taken over mid-transfer (window scale 7 agreed in a
    /// handshake this box never saw): the client's first segment here is
    /// a retransmission of what the server already acknowledged through
    /// the other box, the server's ACK acknowledges bytes never seen here,
    /// the client's next data lies past the unscaled window. Strictly
    /// checked, the ACK and the data would be invalid and the transfer
    /// would stall; a taken-over flow passes them, but not a stray RST.
    #[test]
    fn a_taken_over_flow_passes_what_went_through_the_other_box() {
        let mss = 1448;
        let retransmitted = seg(1000, 5001, ACK, 502, &[], mss as usize);
        let acked = seg(5001, 1000 + 10 * mss, ACK, 502, &[], 0);
        let next = seg(1000 + 10 * mss, 5001, ACK, 502, &[], mss as usize);
        let beyond = seg(1000 + 40 * mss, 5001, ACK, 502, &[], mss as usize);
        let stray_rst = seg(900_000, 0, RST, 0, &[], 0);

        let mut strict = Window::default();
        let (s, f) = retransmitted;
        assert_eq!(
            strict.check(false, f, &s, State::Established),
            Check::Accept
        );
        let (s, f) = acked;
        assert_eq!(
            strict.check(true, f, &s, State::Established),
            Check::Invalid,
            "strictly, an ACK of data never seen here"
        );

        let mut w = Window::taken_over();
        assert!(w.is_liberal() && !Window::default().is_liberal());
        for (reply, (s, f)) in [(false, retransmitted), (true, acked), (false, next)] {
            assert_eq!(w.check(reply, f, &s, State::Established), Check::Accept);
        }
        assert_eq!(w.sides[0].end, 1000 + 11 * mss, "the window moved");
        let (s, f) = beyond;
        assert_eq!(w.check(false, f, &s, State::Established), Check::Accept);
        let (s, f) = stray_rst;
        assert_eq!(
            w.check(true, f, &s, State::Established),
            Check::Invalid,
            "a RST out of the window stays invalid"
        );
        // A flow that starts over from a SYN is checked strictly again.
        let (s, _) = seg(70_000, 0, SYN, 64240, &SYN_OPTS, 0);
        let mut w = Window::taken_over();
        w.init(0, &s);
        assert_eq!(w.sides[0].flags & LIBERAL, 0);
    }

    #[test]
    fn a_segment_parses_with_its_options() {
        let (s, _) = seg(7, 9, SYN, 100, &SYN_OPTS, 3);
        assert_eq!((s.seq, s.ack, s.win, s.len), (7, 9, 100, 4));
        assert_eq!((s.wscale, s.sack_perm, s.bad), (Some(7), true, false));
        // SACK blocks: the highest right edge past the ACK.
        let blocks = [
            1, 1, 5, 18, 0, 0, 0, 20, 0, 0, 0, 30, 0, 0, 0, 35, 0, 0, 0, 40,
        ];
        let (s, _) = seg(7, 9, ACK, 100, &blocks, 0);
        assert_eq!((s.sack, s.wscale), (40, None));
        // A timestamp alone (skipped unread), and one SACK block in the
        // same 12 bytes (read).
        let ts = [1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2];
        let (s, _) = seg(7, 9, ACK, 100, &ts, 5);
        assert_eq!((s.sack, s.len, s.bad), (9, 5, false));
        let one = [1, 1, 5, 10, 0, 0, 0, 20, 0, 0, 0, 30];
        let (s, _) = seg(7, 9, ACK, 100, &one, 5);
        assert_eq!((s.sack, s.len), (30, 5));
        // Malformed: data offset below 5 or past the packet; a bad option
        // ends the list.
        assert!(Segment::parse(&[0; 19]).bad);
        let mut b = [0u8; 20];
        b[12] = 0x40;
        assert!(Segment::parse(&b).bad);
        b[12] = 0x60;
        assert!(Segment::parse(&b).bad);
        let (s, _) = seg(1, 0, SYN, 1, &[3, 9, 7, 0], 0);
        assert_eq!(s.wscale, None);
        let (s, _) = seg(1, 0, SYN, 1, &[3, 3, 200, 0], 0);
        assert_eq!(s.wscale, Some(MAX_WSCALE));
    }

    /// Data both ways within the windows moves them; a segment past what
    /// the receiver allows, or acknowledging unsent data, is invalid; an
    /// old retransmission is ignored.
    #[test]
    fn segments_in_the_window_pass_and_others_do_not() {
        let mut w = handshake();
        assert_eq!(w.sides[0].scale, 7);
        let e = State::Established;
        // The client sends 10 full segments; the server acknowledges.
        for i in 0..10 {
            let (s, f) = seg(1001 + i * 1448, 5001, ACK, 502, &[], 1448);
            assert_eq!(w.check(false, f, &s, e), Check::Accept);
        }
        let (s, f) = seg(5001, 1001 + 10 * 1448, ACK, 509, &[], 0);
        assert_eq!(w.check(true, f, &s, e), Check::Accept);
        assert_eq!(w.sides[0].end, 1001 + 10 * 1448);
        // Far past the server's window (509 << 7 = 65,152 bytes): invalid.
        let (s, f) = seg(1001 + 10 * 1448 + 200_000, 5001, ACK, 502, &[], 100);
        assert_eq!(w.check(false, f, &s, e), Check::Invalid);
        // Acknowledging server data never sent: invalid.
        let (s, f) = seg(1001 + 10 * 1448, 9_000_000, ACK, 502, &[], 0);
        assert_eq!(w.check(false, f, &s, e), Check::Invalid);
        // A retransmission far below the window: ignored, nothing moves.
        let before = w;
        let (s, f) = seg(1001u32.wrapping_sub(100_000), 5001, ACK, 502, &[], 10);
        assert_eq!(w.check(false, f, &s, e), Check::Ignore);
        assert_eq!(w, before);
        // Sequence numbers wrap.
        let (s, _) = seg(u32::MAX - 10, 0, SYN, 1000, &[], 0);
        let mut w = Window::open(&s);
        let (s, f) = seg(77, u32::MAX - 9, SYN | ACK, 1000, &[], 0);
        assert_eq!(w.check(true, f, &s, State::SynSent), Check::Accept);
        for i in 0..3u32 {
            let (s, f) = seg(
                (u32::MAX - 9).wrapping_add(i * 100),
                78,
                ACK,
                1000,
                &[],
                100,
            );
            assert_eq!(w.check(false, f, &s, e), Check::Accept, "{i}");
        }
    }

    /// A blind RST (a guessed sequence number) closes nothing: beyond the
    /// window it is invalid, below it ignored; one in the window but not
    /// exactly where its sender is only shortens the flow's life
    /// (`Reset`); the real one is accepted.
    #[test]
    fn only_a_rst_where_its_sender_is_closes() {
        let mut w = handshake();
        let e = State::Established;
        let (s, f) = seg(5001 + (1 << 30), 0, RST, 0, &[], 0);
        assert_eq!(w.check(true, f, &s, e), Check::Invalid);
        let (s, f) = seg(5001u32.wrapping_sub(1 << 30), 0, RST, 0, &[], 0);
        assert_eq!(w.check(true, f, &s, e), Check::Ignore);
        let (s, f) = seg(5001 + 1000, 0, RST, 0, &[], 0);
        assert_eq!(w.check(true, f, &s, e), Check::Reset);
        let (s, f) = seg(5001, 1001, RST | ACK, 0, &[], 0);
        assert_eq!(w.check(true, f, &s, e), Check::Accept);
        // The RST answering a SYN carries sequence number 0.
        let (s, _) = seg(1000, 0, SYN, 64240, &[], 0);
        let mut w = Window::open(&s);
        let (s, f) = seg(0, 1001, RST | ACK, 0, &[], 0);
        assert_eq!(w.check(true, f, &s, State::SynSent), Check::Accept);
    }

    /// Window scaling holds only when both SYNs offer it: without it a
    /// segment a scaled window would allow is past the window.
    #[test]
    fn window_scaling_needs_both_sides() {
        let (s, _) = seg(1000, 0, SYN, 64000, &SYN_OPTS, 0);
        let mut w = Window::open(&s);
        let (s, f) = seg(5000, 1001, SYN | ACK, 1000, &[], 0);
        assert_eq!(w.check(true, f, &s, State::SynSent), Check::Accept);
        assert_eq!((w.sides[0].scale, w.sides[1].scale), (0, 0));
        let (s, f) = seg(1001, 5001, ACK, 64000, &[], 0);
        assert_eq!(w.check(false, f, &s, State::SynRecv), Check::Accept);
        // The server's window is 1,000 bytes, unscaled.
        let (s, f) = seg(1001 + 1000, 5001, ACK, 64000, &[], 100);
        assert_eq!(w.check(false, f, &s, State::Established), Check::Accept);
        let (s, f) = seg(1001 + 5000, 5001, ACK, 64000, &[], 100);
        assert_eq!(w.check(false, f, &s, State::Established), Check::Invalid);
    }

    #[test]
    fn a_malformed_header_is_invalid() {
        let mut w = handshake();
        let s = Segment {
            bad: true,
            ..Segment::default()
        };
        assert_eq!(w.check(false, RST, &s, State::Established), Check::Invalid);
    }

    fn side() -> impl proptest::strategy::Strategy<Value = Side> {
        use proptest::prelude::*;
        // Values near one another (as a flow's are) and anywhere.
        let near = || prop_oneof![1_000_000u32..1_200_000, any::<u32>()];
        (near(), near(), 0u32..200_000, 0u8..15, 0u8..4).prop_map(
            |(end, maxend, maxwin, scale, flags)| Side {
                end,
                maxend,
                maxwin,
                scale,
                flags,
            },
        )
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]

        /// The inline check decides every segment as the full one does,
        /// and leaves the windows as it does.
        #[test]
        fn the_inline_check_is_the_full_check(
            a in side(),
            b in side(),
            seq in proptest::prop_oneof![1_000_000u32..1_200_000, proptest::arbitrary::any::<u32>()],
            ack in proptest::prop_oneof![1_000_000u32..1_200_000, proptest::arbitrary::any::<u32>()],
            sack_more in 0u32..5000,
            win in proptest::arbitrary::any::<u16>(),
            len in 0u32..3000,
            reply in proptest::arbitrary::any::<bool>(),
            flags in proptest::sample::select(vec![ACK, ACK | 0x08, ACK | FIN, ACK | RST, RST, SYN | ACK, 0]),
            state in proptest::sample::select(vec![State::Established, State::SynRecv, State::FinWait]),
        ) {
            let w = Window { sides: [a, b] };
            let s = Segment {
                seq,
                ack,
                win,
                len,
                sack: ack.wrapping_add(sack_more),
                ..Segment::default()
            };
            let (mut fast, mut full) = (w, w);
            let f = fast.check(reply, flags, &s, state);
            let g = full.check_full(reply, flags, &s, state);
            proptest::prop_assert_eq!(f, g);
            proptest::prop_assert_eq!(fast, full);
        }
    }
}
