//! The conntrack table's tests: states, timeouts, the index, NAT tuples.
use super::*;
use crate::acl::v4;

fn k(src: u32, sp: u16, dst: u32, dp: u16, proto: u8, flags: u16) -> Key {
    Key {
        src: v4(src),
        dst: v4(dst),
        sport: sp,
        dport: dp,
        proto,
        flags,
        meta: 0,
    }
}

const C: u32 = 0xc612_000a; // 198.18.0.10
const V4_MAPPED_TEST: u128 = 0xffff << 32;
const SV: u32 = 0xc613_0005; // 198.19.0.5

#[test]
fn tcp_handshake_data_and_close() {
    let mut t = ConnTrack::new(16, Timeouts::default());
    assert_eq!(t.track(0, &k(C, 40000, SV, 80, 6, SYN)), Conn::New);
    assert_eq!(
        t.track(0, &k(SV, 80, C, 40000, 6, SYN | ACK)),
        Conn::Established { reply: true }
    );
    assert_eq!(t.state(0, &k(C, 40000, SV, 80, 6, 0)), Some(State::SynRecv));
    assert_eq!(
        t.track(0, &k(C, 40000, SV, 80, 6, ACK)),
        Conn::Established { reply: false }
    );
    assert_eq!(
        t.state(0, &k(C, 40000, SV, 80, 6, 0)),
        Some(State::Established)
    );
    assert_eq!(
        t.track(0, &k(SV, 80, C, 40000, 6, ACK | FIN)),
        Conn::Established { reply: true }
    );
    assert_eq!(t.state(0, &k(C, 40000, SV, 80, 6, 0)), Some(State::FinWait));
    t.track(0, &k(C, 40000, SV, 80, 6, ACK | FIN));
    assert_eq!(
        t.state(0, &k(C, 40000, SV, 80, 6, 0)),
        Some(State::TimeWait)
    );
    assert_eq!(t.event(Event::Created), 1);
    assert_eq!(t.len(), 1, "one entry for both directions");
}

/// A filter selects flows by their original direction, as conntrack's
/// `-s`, `-d`, `-p`, `--sport`, `--dport`; a deletion in pages of
/// bounded work removes exactly those (both directions: neither
/// tuple is found after), counts them, and the next packet of one is
/// a new flow.
#[test]
fn filtered_flows_are_listed_and_deleted_in_pages() {
    let mut t = ConnTrack::new(300, Timeouts::default());
    let other = 0xc612_0014; // 198.18.0.20
    for p in 0..100u16 {
        t.track(0, &k(C, 1000 + p, SV, 53, 17, 0));
        t.track(0, &k(other, 1000 + p, SV, 80, 6, SYN));
        t.track(0, &k(SV, 80, other, 1000 + p, 6, SYN | ACK));
    }
    let f = |src: Option<u32>, len: u8| Filter {
        src: src.map(|a| (v4(a), 96 + len)),
        ..Filter::default()
    };
    let count = |t: &ConnTrack, flt: &Filter| t.flows().filter(|x| flt.matches(x)).count();
    assert_eq!(count(&t, &Filter::default()), 200);
    assert_eq!(count(&t, &f(Some(C), 32)), 100);
    assert_eq!(count(&t, &f(Some(C & 0xffff_ff00), 24)), 200);
    assert_eq!(count(&t, &f(Some(SV), 32)), 0, "the original source only");
    let tcp = Filter {
        proto: Some(6),
        dport: Some(80),
        ..Filter::default()
    };
    assert_eq!(count(&t, &tcp), 100);
    let one = Filter {
        sport: Some(1007),
        ..tcp
    };
    assert_eq!(count(&t, &one), 1);
    let mut page = Vec::new();
    assert_eq!(t.copy_flows(0, 1 << 20, 1000, &tcp, &mut page), None);
    assert!(page.len() == 100 && page.iter().all(|(x, _, _)| x.orig.proto == 6));
    // Deleted in pages of 7 slots: the TCP flows only.
    let (mut deleted, mut from) = (0, Some(0));
    while let Some(s) = from {
        let (n, next) = t.delete_flows(s, 7, &tcp);
        deleted += n;
        from = next;
    }
    assert_eq!(deleted, 100);
    assert_eq!(t.event(Event::Deleted), 100);
    assert_eq!((t.len(), count(&t, &tcp)), (100, 0));
    assert!(!t.contains(&Tuple::of(0, &k(SV, 80, other, 1007, 6, 0))));
    assert!(t.contains(&Tuple::of(0, &k(C, 1007, SV, 53, 17, 0))));
    assert_eq!(t.track(0, &k(other, 1007, SV, 80, 6, SYN)), Conn::New);
    // Everything.
    let (n, next) = t.delete_flows(0, 1 << 20, &Filter::default());
    assert_eq!((n, next, t.len()), (101, None, 0));
}

/// A listed flow comes with its time to expiry, as `conntrack -L`'s
/// timeout column: its state's timeout less its idle time, full again
/// after a packet, and the replied state's timeout once answered.
#[test]
fn listed_flows_show_their_time_to_expiry() {
    let mut t = ConnTrack::new(16, Timeouts::default());
    let to = Timeouts::default();
    let now = 3 * 3600 * S;
    t.tick(now);
    t.track(0, &k(C, 1000, SV, 53, 17, 0));
    t.tick(now + 10 * S);
    let list = |t: &ConnTrack| {
        let mut page = Vec::new();
        t.copy_flows(0, 16, 16, &Filter::default(), &mut page);
        page.iter().map(|&(_, e, _)| e).collect::<Vec<u64>>()
    };
    assert_eq!(list(&t), [to.unreplied - 10 * S]);
    let (f, _) = t.find(&Tuple::of(0, &k(C, 1000, SV, 53, 17, 0))).unwrap();
    assert!(t
        .flow(f)
        .describe(to.unreplied - 10 * S, None)
        .contains(" 20s reply "));
    // The answer.
    t.track(0, &k(SV, 53, C, 1000, 17, 0));
    assert_eq!(list(&t), [to.replied]);
    t.tick(now + 10 * S + to.replied - 1);
    assert_eq!(list(&t), [1]);
    t.tick(now + 20 * S + to.replied);
    assert_eq!(list(&t), [0; 0], "expired and swept");
}

/// A dump in pages of bounded work lists every live flow once, in
/// slot order, each page at most `max` flows.
#[test]
fn flows_are_copied_in_pages_of_bounded_work() {
    let mut t = ConnTrack::new(300, Timeouts::default());
    for p in 0..200u16 {
        assert_eq!(t.track(0, &k(C, 1000 + p, SV, 53, 17, 0)), Conn::New);
    }
    let all: Vec<Tuple> = t.flows().map(|f| f.orig).collect();
    assert_eq!(all.len(), 200);
    for (scan, max) in [(7, 5), (64, 1000), (1, 1), (1 << 20, 33)] {
        let (mut got, mut from, mut pages) = (Vec::new(), Some(0), 0);
        while let Some(f) = from {
            let mut page = Vec::new();
            from = t.copy_flows(f, scan, max, &Filter::default(), &mut page);
            assert!(page.len() <= max && page.len() <= scan, "{scan} {max}");
            if let Some(n) = from {
                assert!(n > f && n - f <= scan, "{f} -> {n}");
            }
            got.extend(page.iter().map(|(f, _, _)| f.orig));
            pages += 1;
        }
        assert_eq!(got, all, "scan {scan} max {max}");
        assert!(pages >= t.slots.len().div_ceil(scan), "{pages}");
    }
}

#[test]
fn tcp_invalid_packets() {
    let mut t = ConnTrack::new(16, Timeouts::default());
    // No flow and not a SYN.
    assert_eq!(t.track(0, &k(C, 1, SV, 80, 6, ACK)), Conn::Invalid);
    // SYN, then a second SYN from the responder instead of SYN+ACK.
    t.track(0, &k(C, 2, SV, 80, 6, SYN));
    assert_eq!(t.track(0, &k(SV, 80, C, 2, 6, SYN)), Conn::Invalid);
    // RST closes; segments still in flight pass (as Linux lets
    // them), a SYN from the responder does not, a new SYN reopens.
    t.track(0, &k(C, 3, SV, 80, 6, SYN));
    t.track(0, &k(SV, 80, C, 3, 6, RST | ACK));
    assert_eq!(t.state(0, &k(C, 3, SV, 80, 6, 0)), Some(State::Closed));
    assert_ne!(t.track(0, &k(C, 3, SV, 80, 6, ACK)), Conn::Invalid);
    assert_eq!(t.state(0, &k(C, 3, SV, 80, 6, 0)), Some(State::Closed));
    assert_eq!(t.track(0, &k(SV, 80, C, 3, 6, SYN)), Conn::Invalid);
    t.track(0, &k(C, 3, SV, 80, 6, SYN));
    assert_eq!(t.state(0, &k(C, 3, SV, 80, 6, 0)), Some(State::SynSent));
    // A SYN in an established flow passes, the state unchanged (Linux
    // ignores it: a new connection on a stale flow's tuple, see
    // `gateway::tests`); the responder's SYN is still refused.
    t.track(0, &k(C, 4, SV, 80, 6, SYN));
    t.track(0, &k(SV, 80, C, 4, 6, SYN | ACK));
    t.track(0, &k(C, 4, SV, 80, 6, ACK));
    assert_ne!(t.track(0, &k(C, 4, SV, 80, 6, SYN)), Conn::Invalid);
    assert_eq!(t.state(0, &k(C, 4, SV, 80, 6, 0)), Some(State::Established));
    assert_eq!(t.track(0, &k(SV, 80, C, 4, 6, SYN)), Conn::Invalid);
    assert_eq!(t.event(Event::Invalid), 4);
}

/// Retransmissions around the handshake pass, as in Linux: the
/// client's SYN again while the SYN+ACK is on its way (SYN+ACK lost
/// beyond the router), and the server's SYN+ACK again after the
/// handshake (the client's ACK lost beyond the router).
#[test]
fn tcp_handshake_retransmissions_pass() {
    let mut t = ConnTrack::new(16, Timeouts::default());
    t.track(0, &k(C, 9, SV, 80, 6, SYN));
    t.track(0, &k(SV, 80, C, 9, 6, SYN | ACK));
    assert_ne!(t.track(0, &k(C, 9, SV, 80, 6, SYN)), Conn::Invalid);
    assert_eq!(t.state(0, &k(C, 9, SV, 80, 6, 0)), Some(State::SynRecv));
    t.track(0, &k(C, 9, SV, 80, 6, ACK));
    assert_ne!(t.track(0, &k(SV, 80, C, 9, 6, SYN | ACK)), Conn::Invalid);
    assert_eq!(t.state(0, &k(C, 9, SV, 80, 6, 0)), Some(State::Established));
    assert_eq!(t.event(Event::Invalid), 0);
}

#[test]
fn udp_and_icmp_pseudo_states_and_zones() {
    let mut t = ConnTrack::new(16, Timeouts::default());
    assert_eq!(t.track(0, &k(C, 5353, SV, 53, 17, 0)), Conn::New);
    assert_eq!(
        t.state(0, &k(C, 5353, SV, 53, 17, 0)),
        Some(State::Unreplied)
    );
    assert_eq!(
        t.track(0, &k(SV, 53, C, 5353, 17, 0)),
        Conn::Established { reply: true }
    );
    assert_eq!(t.state(0, &k(C, 5353, SV, 53, 17, 0)), Some(State::Replied));
    // The same 5-tuple in another zone is another flow.
    assert_eq!(t.track(1, &k(C, 5353, SV, 53, 17, 0)), Conn::New);
    // An ICMP error quoting the tracked UDP packet is related.
    assert_eq!(t.related(0, &k(C, 5353, SV, 53, 17, 0)), Conn::Related);
    assert_eq!(t.related(0, &k(C, 5354, SV, 53, 17, 0)), Conn::Invalid);
    // ICMP echo: identifier as ports.
    assert_eq!(t.track(0, &k(C, 0x1234, SV, 0x1234, 1, 0)), Conn::New);
    assert_eq!(
        t.track(0, &k(SV, 0x1234, C, 0x1234, 1, 0)),
        Conn::Established { reply: true }
    );
}

/// The hand-written equality: any one field differing (in either half
/// of an address, in any byte of the ports, protocol or zone) makes
/// two tuples unequal.
#[test]
fn tuples_differ_in_every_field() {
    let t = Tuple {
        src: 0x2001_0db8_0000_0000_0000_0000_0000_0001,
        dst: V4_MAPPED_TEST | 0xc613_0005,
        sport: 0x1234,
        dport: 0x5678,
        proto: 17,
        zone: 0x0102,
    };
    assert_eq!(t, t.clone());
    let mut others = vec![];
    for bit in [0, 63, 64, 127] {
        others.push(Tuple {
            src: t.src ^ 1 << bit,
            ..t
        });
        others.push(Tuple {
            dst: t.dst ^ 1 << bit,
            ..t
        });
    }
    for bit in [0, 8, 15] {
        others.push(Tuple {
            sport: t.sport ^ 1 << bit,
            ..t
        });
        others.push(Tuple {
            dport: t.dport ^ 1 << bit,
            ..t
        });
        others.push(Tuple {
            zone: t.zone ^ 1 << bit,
            ..t
        });
    }
    others.push(Tuple { proto: 6, ..t });
    others.push(Tuple {
        proto: 17 | 0x80,
        ..t
    });
    for o in others {
        assert_ne!(t, o, "{o:?}");
        assert_ne!(o, t, "{o:?}");
    }
}

/// A RST in the window but not at its sender's next sequence number
/// keeps the flow established (its endpoint answers with a challenge
/// ACK) but makes it expire as a closed flow does; a packet after it
/// gives it its established timeout again.
#[test]
fn an_inexact_reset_shortens_the_flows_life() {
    let seg = |seq: u32, ack: u32| Segment {
        seq,
        ack,
        win: 1000,
        ..Segment::default()
    };
    let syn = Segment {
        len: 1,
        ..seg(100, 0)
    };
    let synack = Segment {
        len: 1,
        ..seg(500, 101)
    };
    let mut t = ConnTrack::new(16, Timeouts::default());
    // The workers' clock is the TSC's, from boot: hours.
    let now = 3 * 3600 * S;
    t.tick(now);
    let mut flows = vec![];
    for p in [1u16, 2] {
        let a = Tuple::of(0, &k(C, p, SV, 80, 6, SYN));
        let i = t.open(a, a.reverse(), SYN, Some(&syn)).unwrap();
        assert_eq!(
            t.advance(i, true, SYN | ACK, Some(&synack)),
            Conn::Established { reply: true }
        );
        t.advance(i, false, ACK, Some(&seg(101, 501)));
        // The server's RST, 100 bytes past where it is.
        let rst = t.advance(i, true, RST, Some(&seg(601, 0)));
        assert_eq!(rst, Conn::Established { reply: true });
        assert_eq!(t.flow(i).state, State::Established);
        flows.push(a);
    }
    // The second flow's endpoints go on (the challenge ACK).
    let (i, _) = t.find(&flows[1]).unwrap();
    t.advance(i, false, ACK, Some(&seg(101, 501)));
    let closed = Timeouts::default().tcp_closed;
    t.tick(now + closed - 1);
    assert!(t.find(&flows[0]).is_some(), "kept for the challenge ACK");
    t.tick(now + closed + 1);
    assert!(t.find(&flows[0]).is_none(), "gone after the close timeout");
    assert!(t.find(&flows[1]).is_some(), "refreshed by its next packet");
    assert_eq!(t.event(Event::WindowIgnored), 2);
}

/// A SYN on a tuple the server still holds a connection for (a NAT port
/// reused): the server's challenge ACK passes to the client (Linux's
/// "ignore"), the client's RST answering it (its sequence number the
/// ACK's acknowledgment number, outside the client's window) passes and
/// closes the flow, and the client's next SYN opens the connection. A RST
/// that answers nothing noted is still refused by the window.
#[test]
fn a_challenge_ack_to_a_syn_and_its_reset_pass() {
    let seg = |seq: u32, ack: u32, len: u32| Segment {
        seq,
        ack,
        win: 1000,
        len,
        ..Segment::default()
    };
    let syn = seg(100, 0, 1);
    // The old connection's numbers, far from the new SYN's.
    let challenge = seg(7_000_000, 3_000_000_000, 0);
    for windows in [true, false] {
        let mut t = ConnTrack::new(16, Timeouts::default());
        let w = |s: &Segment| windows.then_some(*s);
        let a = Tuple::of(0, &k(C, 7, SV, 80, 6, SYN));
        let i = t.open(a, a.reverse(), SYN, w(&syn).as_ref()).unwrap();
        if windows {
            // A RST that answers no ACK, out of the window: refused.
            let stray = seg(2_000_000_000, 0, 0);
            assert_eq!(t.advance(i, false, RST, Some(&stray)), Conn::Invalid);
            assert_eq!(t.flow(i).state, State::SynSent);
        }
        assert_eq!(
            t.advance(i, true, ACK, w(&challenge).as_ref()),
            Conn::Established { reply: true },
            "windows {windows}"
        );
        assert_eq!(t.flow(i).state, State::SynSent);
        // The server's FIN or data-less SYN are not ignored.
        assert_eq!(
            t.advance(i, true, FIN | ACK, w(&challenge).as_ref()),
            Conn::Invalid
        );
        let reset = seg(3_000_000_000, 0, 0);
        assert_eq!(
            t.advance(i, false, RST, w(&reset).as_ref()),
            Conn::Established { reply: false },
            "windows {windows}"
        );
        assert_eq!(t.flow(i).state, State::Closed);
        // The SYN again (retransmitted, 1 s later), then the handshake.
        assert_ne!(t.advance(i, false, SYN, w(&syn).as_ref()), Conn::Invalid);
        assert_eq!(t.flow(i).state, State::SynSent);
        let synack = seg(500, 101, 1);
        assert_eq!(
            t.advance(i, true, SYN | ACK, w(&synack).as_ref()),
            Conn::Established { reply: true }
        );
        t.advance(i, false, ACK, w(&seg(101, 501, 0)).as_ref());
        assert_eq!(t.flow(i).state, State::Established, "windows {windows}");
        assert_eq!(t.event(Event::WindowIgnored), 1);
        assert_eq!(t.event(Event::Invalid), 1 + u64::from(windows));
    }
}

/// Without window tracking the windows' table is not kept, and TCP
/// flows still open, move and close by their flags.
#[test]
fn untracked_windows_take_no_memory() {
    let mut t = ConnTrack::new(1024, Timeouts::default());
    assert_eq!(t.windows.len(), 1024);
    t.set_tcp_window(false);
    assert!(t.windows.is_empty() && t.windows.capacity() == 0);
    let syn = Segment {
        seq: 100,
        len: 1,
        win: 1000,
        ..Segment::default()
    };
    let a = Tuple::of(0, &k(C, 1, SV, 80, 6, SYN));
    let i = t.open(a, a.reverse(), SYN, Some(&syn)).unwrap();
    assert_eq!(
        t.advance(i, true, SYN | ACK, Some(&syn)),
        Conn::Established { reply: true }
    );
    // A RST anywhere closes it: nothing checks its sequence number.
    t.advance(i, true, RST, Some(&Segment::default()));
    assert_eq!(t.flow(i).state, State::Closed);
    t.set_tcp_window(true);
    assert_eq!(t.windows.len(), 1024);
}

/// `open` refuses a tuple either way round that a flow holds;
/// `open_missed` (whose caller has just missed the packet's own tuple)
/// still refuses a reply tuple a flow holds, and a non-SYN TCP packet,
/// counting each as invalid, and what it opens is found by both tuples.
#[test]
fn opens_refuse_tuples_in_use() {
    let mut t = ConnTrack::new(16, Timeouts::default());
    let a = Tuple::of(0, &k(C, 1000, SV, 53, 17, 0));
    let nat = Tuple::of(0, &k(SV, 53, 0xc633_6401, 2000, 17, 0));
    assert!(t.open(a, nat, 0, None).is_ok());
    assert_eq!(t.open(a, a.reverse(), 0, None), Err(Refused::Exists));
    let b = Tuple::of(0, &k(C, 1001, SV, 53, 17, 0));
    assert_eq!(
        t.open_missed(b, b.hash(), nat, nat.hash(), 0, None),
        Err(Refused::Exists),
        "the reply tuple of another flow"
    );
    let syn_less = Tuple::of(0, &k(C, 7, SV, 80, 6, ACK));
    let r = syn_less.reverse();
    assert_eq!(
        t.open_missed(syn_less, syn_less.hash(), r, r.hash(), ACK, None),
        Err(Refused::NotSyn)
    );
    assert_eq!(t.event(Event::Invalid), 3);
    let n = t.open_missed(b, b.hash(), b.reverse(), b.reverse().hash(), 0, None);
    assert_eq!(t.find(&b), Some((n.unwrap(), false)));
    assert_eq!(t.find(&b.reverse()), Some((n.unwrap(), true)));
    assert_eq!(t.find(&nat), Some((0, true)));
    assert_eq!(t.len(), 2);
}

/// `open_picked` (whose caller has found both tuples untracked) enters
/// a flow found by both tuples, as `open_missed` does, and counts it
/// as created; a reply tuple it entered is refused to the next flow.
#[test]
fn open_picked_enters_both_tuples() {
    let mut t = ConnTrack::new(16, Timeouts::default());
    let a = Tuple::of(0, &k(C, 1000, SV, 53, 17, 0));
    let nat = Tuple::of(0, &k(SV, 53, 0xc633_6401, 2000, 17, 0));
    assert!(!t.contains_hashed(&nat, nat.hash()));
    let i = t
        .open_picked(a, a.hash(), nat, nat.hash(), 0, None)
        .unwrap();
    assert_eq!(t.find(&a), Some((i, false)));
    assert_eq!(t.find(&nat), Some((i, true)));
    assert!(t.flow(i).nat());
    assert_eq!(t.event(Event::Created), 1);
    let b = Tuple::of(0, &k(C, 1001, SV, 53, 17, 0));
    assert_eq!(
        t.open_missed(b, b.hash(), nat, nat.hash(), 0, None),
        Err(Refused::Exists)
    );
    let syn = Tuple::of(0, &k(C, 7, SV, 80, 6, SYN));
    let r = Tuple::of(0, &k(SV, 80, 0xc633_6401, 2001, 6, 0));
    let j = t
        .open_picked(syn, syn.hash(), r, r.hash(), SYN, None)
        .unwrap();
    assert_eq!(t.flow(j).state, State::SynSent);
    assert_eq!(t.len(), 2);
}

#[test]
fn timeouts_expire_lazily_and_by_sweep() {
    let to = Timeouts {
        unreplied: 30 * S,
        ..Timeouts::default()
    };
    let mut t = ConnTrack::new(16, to);
    t.tick(1);
    t.track(0, &k(C, 1, SV, 53, 17, 0));
    t.track(0, &k(C, 2, SV, 53, 17, 0));
    t.tick(31 * S + 2);
    // Lazy: the next packet of flow 1 finds it expired and starts over.
    assert_eq!(t.track(0, &k(C, 1, SV, 53, 17, 0)), Conn::New);
    // Sweep: flow 2 goes on the next ticks.
    t.tick(31 * S + 3);
    t.tick(31 * S + 4);
    assert_eq!(t.state(0, &k(C, 2, SV, 53, 17, 0)), None);
    assert_eq!(t.event(Event::Expired), 2);
}

#[test]
fn full_table_evicts_unreplied_never_established() {
    let mut t = ConnTrack::new(4, Timeouts::default());
    // Two established TCP flows and two unreplied UDP flows.
    for p in [1, 2] {
        t.track(0, &k(C, p, SV, 80, 6, SYN));
        t.track(0, &k(SV, 80, C, p, 6, SYN | ACK));
        t.track(0, &k(C, p, SV, 80, 6, ACK));
    }
    t.track(0, &k(C, 3, SV, 53, 17, 0));
    t.track(0, &k(C, 4, SV, 53, 17, 0));
    assert_eq!(
        t.track(0, &k(C, 5, SV, 53, 17, 0)),
        Conn::New,
        "evicts an unreplied flow"
    );
    assert_eq!(t.track(0, &k(C, 6, SV, 53, 17, 0)), Conn::New);
    assert_eq!(t.event(Event::Evicted), 2);
    // Now: two established + two unreplied (5, 6). Make them replied.
    t.track(0, &k(SV, 53, C, 5, 17, 0));
    t.track(0, &k(SV, 53, C, 6, 17, 0));
    assert_eq!(
        t.track(0, &k(C, 7, SV, 53, 17, 0)),
        Conn::Invalid,
        "nothing evictable"
    );
    assert_eq!(t.event(Event::TableFull), 1);
    for p in [1, 2] {
        assert_eq!(t.state(0, &k(C, p, SV, 80, 6, 0)), Some(State::Established));
    }
}

/// A table takes as many flows as its capacity: with sequential
/// sources to one server and port (NTP or DNS clients behind a
/// router), and with random tuples, every one of `capacity` flows
/// opens. (With a plain two-choice insert, one whose buckets were both
/// full was refused as `table_full`: here the first at flow 88,724 of
/// 100,000.)
#[test]
fn a_table_fills_to_its_capacity() {
    use rand::{RngExt, SeedableRng};
    let n = 100_000u32;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(9);
    for set in ["sequential", "random"] {
        let mut ct = ConnTrack::new(n as usize, Timeouts::default());
        let mut opened = 0;
        for i in 0..n {
            let t = if set == "sequential" {
                udp4(i)
            } else {
                Tuple {
                    src: v4(rng.random()),
                    dst: v4(rng.random()),
                    sport: rng.random(),
                    dport: rng.random(),
                    proto: 17,
                    zone: 0,
                }
            };
            match ct.open(t, t.reverse(), 0, None) {
                Ok(_) => opened += 1,
                Err(Refused::Exists) => {} // a random tuple drawn twice
                Err(e) => panic!("{set}: flow {i} of {n}: {e:?}"),
            }
        }
        assert_eq!(ct.len(), opened, "{set}");
        assert_eq!(ct.event(Event::TableFull), 0, "{set}");
        assert!(opened > n as usize - 10, "{set}: {opened}");
    }
}

/// The UDP flow of client `i` of 10.0.0.0/8 (in order) to one DNS
/// server, all from the same port.
fn udp4(i: u32) -> Tuple {
    Tuple {
        src: v4(0x0a00_0000 + i),
        dst: v4(SV),
        sport: 1024,
        dport: 53,
        proto: 17,
        zone: 0,
    }
}

/// The index against a model, on four buckets of eight ways filled up
/// to all 32, so first choices overflow into second ones and entries
/// move to make room: random inserts and removals; an insert
/// is refused only when both buckets are full and none of their
/// entries can move; after each step, every entry is found where the
/// model says (removed ones never), and each bucket's `moved` count is
/// the number of its entries living in their second choice.
#[test]
fn index_matches_a_model_through_overflow_and_removal() {
    use rand::{RngExt, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(5);
    let mut ix = Index::new(16);
    assert_eq!(ix.buckets.len(), 4);
    // value -> hash of the entries in the index.
    let mut model: Vec<(u32, u64)> = vec![];
    let mut next = 0u32;
    let mut overflowed = 0;
    let mut displaced = 0;
    let mut refused = 0;
    for _ in 0..20_000 {
        if model.len() < 32 && rng.random_bool(0.5) {
            let h: u64 = rng.random();
            let (b1, b2, _) = ix.place(h);
            let full = |ix: &Index, b: usize| ix.buckets[b].free_way().is_none();
            let first_full = full(&ix, b1);
            let both_full = first_full && full(&ix, b2);
            // Whether every entry of both buckets has its other
            // bucket full too (nothing can move).
            let stuck = both_full
                && model.iter().all(|&(v, hv)| {
                    let (o1, o2, _) = ix.place(hv);
                    let b = ix.find(hv, |x| x == v).unwrap().0;
                    ![b1, b2].contains(&b) || full(&ix, if b == o1 { o2 } else { o1 })
                });
            let hash_of = |x: u32| model.iter().find(|e| e.0 == x).unwrap().1;
            let ok = ix.insert(h, next, hash_of);
            assert_eq!(ok, !stuck, "refused only when nothing could move");
            refused += usize::from(!ok);
            if ok {
                model.push((next, h));
                overflowed += usize::from(first_full);
                displaced += usize::from(both_full);
            }
            next += 1;
        } else if !model.is_empty() {
            let (v, h) = model.swap_remove(rng.random_range(0..model.len()));
            let (b, w, got) = ix.find(h, |x| x == v).expect("present");
            assert_eq!(got, v);
            ix.remove_at(h, b, w);
            assert!(ix.find(h, |x| x == v).is_none(), "removed {v}");
        }
        assert_eq!(ix.len, model.len());
        for &(v, h) in &model {
            assert_eq!(ix.find(h, |x| x == v).map(|f| f.2), Some(v));
        }
        let mut moved = vec![0; ix.buckets.len()];
        for &(v, h) in &model {
            let (b1, _, _) = ix.place(h);
            let (b, _, _) = ix.find(h, |x| x == v).unwrap();
            if b != b1 {
                moved[b1] += 1;
            }
        }
        let counts: Vec<u32> = ix.buckets.iter().map(|b| b.moved).collect();
        assert_eq!(counts, moved);
    }
    assert!(overflowed > 100, "second choices used {overflowed} times");
    assert!(
        displaced > 50,
        "entries moved to make room {displaced} times"
    );
    assert!(refused > 0, "no insert found its buckets stuck");
}

/// A lookup given a hint (the prefetch pass's first signature match)
/// finds what a plain lookup finds whatever the hint names: the flow,
/// another flow, the other direction, a removed flow's slot, or a slot
/// out of range.
#[test]
fn hints_never_change_what_a_lookup_finds() {
    let to = Timeouts {
        unreplied: 10,
        ..Timeouts::default()
    };
    let mut t = ConnTrack::new(64, to);
    for p in 0..40 {
        assert_eq!(t.track(0, &k(C, p, SV, 53, 17, 0)), Conn::New);
    }
    // Flows 0..20 expire (the sweep removes them); 20..40 stay.
    t.tick(5);
    for p in 20..40 {
        t.track(0, &k(C, p, SV, 53, 17, 0));
    }
    t.tick(12);
    assert_eq!(t.len(), 20);
    let tuple = |p: u16, reply: bool| {
        let o = Tuple::of(0, &k(C, p, SV, 53, 17, 0));
        if reply {
            o.reverse()
        } else {
            o
        }
    };
    let hints = [
        None,
        Some(0),
        Some(1),
        Some(2 * 25),
        Some(2 * 25 + 1),
        Some(9999),
    ];
    for p in 0..40 {
        for reply in [false, true] {
            let x = tuple(p, reply);
            let want = t.clone().find(&x);
            assert_eq!(want.is_some(), p >= 20, "port {p}");
            for &hint in &hints {
                let got = t.clone().find_hashed(&x, x.hash(), hint);
                assert_eq!(got, want, "port {p} reply {reply} hint {hint:?}");
            }
        }
    }
}

/// Page faults this thread has taken (minor + major), from
/// /proc/thread-self/stat: `None` where there is no procfs.
fn faults() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // Fields after the command (which may hold spaces), from field 3.
    let rest = s.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // minflt is field 10, majflt field 12 (1-based; rest starts at 3).
    Some(f.get(7)?.parse::<u64>().ok()? + f.get(9)?.parse::<u64>().ok()?)
}

/// Filling a new table and emptying it again takes no page faults:
/// the flow slots and the free list are touched when the table is
/// made (at start, on the control path), not by the first packet of
/// each new flow in the fast path, as DPDK's rte_hash allocates and
/// zeroes its table up front. (Without that, 100,000 flows faulted in
/// 12.8 MB of slots one 4 KiB page, or one 2 MiB huge page, at a
/// time: 3,126 faults here, and new flows took up to twice the
/// cycles in the first pass over a fresh table.)
#[test]
fn filling_a_new_table_takes_no_page_faults() {
    if faults().is_none() {
        return;
    }
    let n = 100_000u32;
    // Twice the flows' room: the index's own limits are not this
    // test's subject.
    let mut ct = ConnTrack::new(2 * n as usize, Timeouts::default());
    let made = faults().unwrap();
    for i in 0..n {
        let t = udp4(i);
        let r = ct.open(t, t.reverse(), 0, None);
        assert!(r.is_ok(), "flow {i}: {r:?}");
    }
    let filled = faults().unwrap();
    // Expire them all: the sweep frees every slot.
    for tick in 0..=(n as u64).div_ceil(SWEEP_PER_TICK as u64) {
        ct.tick(3600 * S + tick);
    }
    assert!(ct.is_empty());
    let emptied = faults().unwrap();
    assert!(
        filled - made < 50,
        "opening {n} flows took {} page faults",
        filled - made
    );
    assert!(
        emptied - filled < 50,
        "expiring {n} flows took {} page faults",
        emptied - filled
    );
}

/// What `sluice check` reports a table takes is what it allocates.
#[test]
fn bytes_for_is_what_a_table_allocates() {
    use std::mem::size_of;
    for cap in [1usize, 1000, 1 << 18] {
        for win in [true, false] {
            let mut t = ConnTrack::new(cap, Timeouts::default());
            t.set_tcp_window(win);
            let held = t.slots.capacity() * size_of::<Flow>()
                + t.free.capacity() * size_of::<u32>()
                + t.windows.capacity() * size_of::<Window>()
                + t.map.bytes();
            assert_eq!(
                ConnTrack::bytes_for(cap, win, false),
                held,
                "{cap} flows, windows {win}"
            );
        }
    }
    // About 200 bytes a flow, as documented.
    let per = ConnTrack::bytes_for(1 << 18, true, false) / (1 << 18);
    assert!((150..=260).contains(&per), "{per} bytes a flow");
}

/// The sweep's share of a table: 1,024 slots a tick up to a table of
/// 1,024,000, then a thousandth of it (every slot visited within 1,000
/// ticks, 10 s of a worker's ticks, whatever the size; at a fixed 1,024 a
/// 10 M table took 100 s), never more than the table; and a tick that
/// finds everything expired removes at most 1,024 flows.
#[test]
fn the_sweep_visits_any_table_within_its_ticks_and_removes_a_bounded_number() {
    assert_eq!(sweep_scan(10), 10);
    assert_eq!(sweep_scan(100_000), SWEEP_PER_TICK);
    assert_eq!(sweep_scan(SWEEP_PER_TICK * SWEEP_TICKS), SWEEP_PER_TICK);
    assert_eq!(sweep_scan(10_000_000), 10_000);
    for n in [5_000usize, 2_000_000, 10_000_000, 67_108_864] {
        assert!(n.div_ceil(sweep_scan(n)) <= SWEEP_TICKS, "{n}");
    }
    let n = 3000u32;
    let mut ct = ConnTrack::new(n as usize, Timeouts::default());
    for i in 0..n {
        let t = udp4(i);
        ct.open(t, t.reverse(), 0, None).unwrap();
    }
    ct.tick(3600 * S);
    assert_eq!(ct.len(), (n as usize) - SWEEP_PER_TICK);
}
