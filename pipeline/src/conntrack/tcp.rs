//! The TCP state machine (Linux's nf_conntrack_proto_tcp table) and a
//! flow's step by one packet: timeouts, windows, the state's next value.

use super::*;

/// Whether flow `e` has been idle longer than its state's timeout at
/// `now`.
#[inline(always)]
pub(super) fn stale(now: u64, limits: &Limits, e: &Flow) -> bool {
    now.saturating_sub(e.last_ns) > limits[e.state as usize]
}

/// Moves flow `e` on by a packet in direction `reply` with TCP `flags` at
/// `now` (see [`ConnTrack::advance`]); a refused packet is counted in
/// `events`. `win`: the flow's window and the segment, when a TCP flow's
/// windows are tracked (the state moves only if the segment is in them).
#[inline(always)]
pub(super) fn step(
    e: &mut Flow,
    reply: bool,
    flags: u16,
    win: Option<(&mut Window, &Segment)>,
    now: u64,
    limits: &Limits,
    events: &mut [u64; Event::COUNT],
) -> Conn {
    let mut win = win;
    let next = if e.orig.proto == TCP {
        // A new connection on a stale flow's tuple (Linux's "ignored"
        // SYN, then its resync): only SYNs look.
        if flags & SYN != 0 {
            if let Some(c) = reopen(e, reply, flags, win.as_mut(), now) {
                return c;
            }
        }
        if e.state == State::SynSent {
            if let Some(c) = unanswered_syn(reply, flags, win.as_mut(), events) {
                return c;
            }
        }
        match tcp_next(e.state, reply, flags) {
            Some(s) => s,
            None => {
                events[Event::Invalid as usize] += 1;
                return Conn::Invalid;
            }
        }
    } else if reply {
        State::Replied
    } else {
        e.state
    };
    if let Some((w, seg)) = win {
        match w.check(reply, flags, seg, e.state) {
            Check::Accept => {}
            Check::Ignore => {
                events[Event::WindowIgnored as usize] += 1;
                return Conn::Established { reply };
            }
            Check::Reset => {
                // Expires as a closed flow would, unless a packet comes:
                // its last packet dated back by the difference (a clock
                // younger than that, hours from boot, keeps it at most
                // until the clock reaches its own timeout).
                events[Event::WindowIgnored as usize] += 1;
                let shorter =
                    limits[e.state as usize].saturating_sub(limits[State::Closed as usize]);
                e.last_ns = now.saturating_sub(shorter);
                return Conn::Established { reply };
            }
            Check::Invalid => {
                events[Event::OutOfWindow as usize] += 1;
                events[Event::Invalid as usize] += 1;
                return Conn::Invalid;
            }
        }
    }
    e.state = next;
    e.last_ns = now;
    e.remote = false;
    Conn::Established { reply }
}

/// While the originator's SYN is unanswered, as Linux's conntrack takes
/// it (`nf_conntrack_proto_tcp`, "c) ACK in reply direction after initial
/// SYN in original"): a bare ACK from the responder is ignored, passed
/// with the flow unchanged and without a window check. Most often it is
/// a server's challenge ACK (RFC 5961) to a SYN on a tuple for which it
/// still holds a connection (a NAT port reused after the flow that held
/// it went, its server never told); the client answers it with a RST
/// whose sequence number is the ACK's acknowledgment number, which
/// closes the server's connection, and its next SYN opens the new one.
/// That RST is outside the client's window: with window tracking the ACK
/// is noted ([`Window::note_ignored_ack`]) and the window check accepts
/// the RST that answers it, which closes the flow as any RST does.
/// Dropping either left such a tuple dark until the client gave up.
/// `None` for any other packet.
#[cold]
#[inline(never)]
fn unanswered_syn(
    reply: bool,
    flags: u16,
    win: Option<&mut (&mut Window, &Segment)>,
    events: &mut [u64; Event::COUNT],
) -> Option<Conn> {
    if !reply || flags & (SYN | ACK | RST | FIN) != ACK {
        return None;
    }
    if let Some((w, s)) = win {
        w.note_ignored_ack(s.ack);
    }
    events[Event::WindowIgnored as usize] += 1;
    Some(Conn::Established { reply })
}

/// A bare SYN from the originator on an established or closing flow, or
/// the SYN+ACK that acknowledges one, as Linux's conntrack takes them
/// (`nf_conntrack_proto_tcp`: the SYN is ignored, passed with the state
/// unchanged and its end noted; a SYN+ACK acknowledging it means the
/// endpoints opened a new connection on the tuple while the flow was
/// stale, and the flow resyncs): `None` for any other packet. The SYN
/// passes with the flow's translation; on the SYN+ACK the flow is in
/// SYN-received, its windows picked up from the next segments
/// ([`Window::taken_over`]). Without window tracking the numbers are not
/// known: the SYN passes and the flow goes on as it was.
#[cold]
#[inline(never)]
fn reopen(
    e: &mut Flow,
    reply: bool,
    flags: u16,
    win: Option<&mut (&mut Window, &Segment)>,
    now: u64,
) -> Option<Conn> {
    let bare_syn = flags & (SYN | ACK | RST | FIN) == SYN;
    let syn_ack = flags & (SYN | ACK | RST) == SYN | ACK;
    match e.state {
        State::Established | State::FinWait if bare_syn && !reply => {
            e.syn_end = win.map_or(0, |(_, s)| s.seq.wrapping_add(1).max(1));
            Some(Conn::Established { reply })
        }
        State::Established | State::FinWait if syn_ack && reply && e.syn_end != 0 => {
            let (w, s) = win?;
            if s.ack != e.syn_end {
                return None;
            }
            **w = Window::taken_over();
            e.syn_end = 0;
            e.state = State::SynRecv;
            e.last_ns = now;
            e.remote = false;
            Some(Conn::Established { reply })
        }
        _ => None,
    }
}

/// The TCP state after a packet with `flags` in direction `reply`, or
/// `None` when the packet is not acceptable in `s`.
pub(super) fn tcp_next(s: State, reply: bool, flags: u16) -> Option<State> {
    if flags & RST != 0 {
        return Some(State::Closed);
    }
    let syn = flags & SYN != 0;
    let ack = flags & ACK != 0;
    let fin = flags & FIN != 0;
    // Where Linux's table (nf_conntrack_proto_tcp.c) says "ignore" (pass,
    // state unchanged: the endpoints may know better), so does this: a
    // SYN retransmitted while the SYN+ACK is on its way, a SYN+ACK
    // retransmitted after the handshake (its ACK was lost beyond the
    // router), and segments still in flight after a RST.
    Some(match s {
        State::SynSent => match (reply, syn, ack) {
            (false, true, false) => State::SynSent, // retransmitted SYN
            (true, true, true) => State::SynRecv,
            _ => return None,
        },
        State::SynRecv => match (reply, syn, ack) {
            (true, true, true) => State::SynRecv,   // retransmitted SYN+ACK
            (false, true, false) => State::SynRecv, // retransmitted SYN
            (false, false, true) if fin => State::FinWait,
            (false, false, true) => State::Established,
            _ => return None,
        },
        State::Established | State::FinWait if syn && ack && reply => s, // SYN+ACK again
        State::Established if syn => return None,
        State::Established if fin => State::FinWait,
        State::Established => State::Established,
        State::FinWait if fin => State::TimeWait,
        State::FinWait => State::FinWait,
        State::TimeWait if syn && !ack && !reply => State::SynSent, // reuse
        State::TimeWait => State::TimeWait,
        State::Closed if syn && !ack && !reply => State::SynSent,
        State::Closed if syn && !(ack && reply) => return None,
        State::Closed => State::Closed, // in flight after the RST
        State::Unreplied | State::Replied => return None,
    })
}
