//! What a worker's conntrack table tells a flow collector (`[export]`;
//! IPFIX, RFC 7011, built by the appliance's exporter thread).
//!
//! With an [`Export`] set ([`ConnTrack::set_export`]), the table keeps
//! per flow and direction the packets, bytes, first and last packet times,
//! the interface the packets came in on and the TCP flags seen
//! ([`Acct`], in a table beside the flows: one cache line a flow, touched
//! once a packet, [`ConnTrack::account`]), and writes a [`Record`] into a
//! bounded single-producer ring for each direction that saw packets:
//!
//! - when the flow ends (its idle timeout, a TCP close or reset followed
//!   by its state's timeout, an eviction, a deletion on request or by the
//!   HA peer), with the reason as IPFIX's `flowEndReason` says it;
//! - every active timeout while it lives (the sweep that expires flows
//!   looks at each flow's age: a long flow's counts leave as deltas, and
//!   start again from zero);
//! - for a new flow the rules refused ([`ConnTrack::export_denied`]):
//!   `firewallEvent` 3, one packet.
//!
//! A full ring is never waited on: the record is lost, counted
//! (`export_lost`), and the next record that fits says how many went
//! before it ([`Record::lost_before`]), so the exporter advances IPFIX's
//! sequence number past them and the collector sees the gap. The exporter
//! thread, never a worker, empties the rings. Without an export set, the
//! accounting table is empty and a packet costs one comparison.
//!
//! Times in the table are milliseconds since the export was set, in 32
//! bits (49 days round: a record is read within seconds of being written,
//! and the reader unwraps it against its own clock, [`unwrap_ms`]).

use super::{ConnTrack, Event, Flow, State, Tuple};

/// Why a flow's record was written (IPFIX `flowEndReason`, IE 136).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum EndReason {
    /// The flow saw no packet for its state's timeout.
    Idle = 1,
    /// The flow lived longer than the active timeout (it goes on).
    Active = 2,
    /// The flow's end was seen (TCP FIN or RST; the HA peer's deletion).
    End = 3,
    /// Deleted on request (`sluice ctl clear conntrack`).
    Forced = 4,
    /// Evicted to make room for a new flow.
    Resources = 5,
}

/// What the firewall did (IPFIX `firewallEvent`, IE 233).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FirewallEvent {
    /// The flow was allowed and is gone.
    Deleted = 2,
    /// The flow's first packet was refused by a rule.
    Denied = 3,
    /// The flow goes on (an active timeout's record).
    Updated = 5,
}

/// A NAT event (IPFIX `natEvent`, IE 230, RFC 8158's values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum NatEvent {
    /// A NAT44 session (a translated flow) was created.
    SessionCreate = 4,
    /// A NAT44 session ended.
    SessionDelete = 5,
    /// A new flow found no free NAT port (or, with port blocks, its
    /// subscriber no free block).
    PortsExhausted = 12,
    /// A subscriber took a port block (`sent`: the outside address, the
    /// block's first and last ports as its source and destination port).
    BlockAllocate = 16,
    /// A subscriber's port block was released (its last flow ended).
    BlockRelease = 17,
}

/// What a table's export writes (`[export]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Flow records: each flow accounted, its records at its end and every
    /// `active_ns`.
    pub flows: bool,
    /// A long flow's record every so often (ns).
    pub active_ns: u64,
    /// A record for each first packet the rules refuse (with `flows`).
    pub denied: bool,
    /// NAT44 session create and delete events, and port exhaustion (at
    /// most one a second).
    pub nat_events: bool,
}

/// One direction of one flow, as the collector is told it; or a NAT
/// event (`nat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    /// The direction's packets as they came in (addresses, ports,
    /// protocol; ICMP queries: the identifier as both ports).
    pub seen: Tuple,
    /// The same packets as they left (after NAT; equal to `seen` when not
    /// translated).
    pub sent: Tuple,
    /// Packets since the flow's last record.
    pub packets: u64,
    /// IP bytes (header and payload) since the flow's last record.
    pub bytes: u64,
    /// The first and last packets' times (the table's milliseconds,
    /// [`unwrap_ms`]).
    pub start_ms: u32,
    /// See `start_ms`.
    pub end_ms: u32,
    /// The flow's number, the same in both directions' records (IPFIX
    /// `flowId`): the worker in the top 16 bits.
    pub flow_id: u64,
    /// The port the packets came in on.
    pub in_port: u16,
    /// The port they left by (`u16::MAX`: not known, or not sent).
    pub out_port: u16,
    /// TCP: the flags seen (ORed); ICMP: the type << 8 | code (a
    /// direction's packets are all of one type).
    pub flags: u16,
    /// Why it was written.
    pub reason: EndReason,
    /// What the firewall did.
    pub event: FirewallEvent,
    /// The responder's direction (IPFIX `biflowDirection` 2; the
    /// originator's: 1).
    pub reply: bool,
    /// Records lost to a full ring between the one before this and this.
    pub lost_before: u32,
    /// A NAT event rather than a flow's record: `seen` is the flow's
    /// original tuple, `sent` as it left, `start_ms` when (the counts are
    /// zero). For `PortsExhausted`, `sent` is the tuple no port was found
    /// for.
    pub nat: Option<NatEvent>,
}

/// A flow's counts in one direction.
#[derive(Clone, Copy, Debug, Default)]
struct Dir {
    packets: u64,
    bytes: u64,
}

/// A flow's accounting: one cache line.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(64))]
pub struct Acct {
    dirs: [Dir; 2],
    start_ms: [u32; 2],
    last_ms: [u32; 2],
    flow_id: u64,
    in_port: [u16; 2],
    flags: [u16; 2],
}

const _: () = assert!(std::mem::size_of::<Acct>() == 64, "one cache line");

/// A table's [`Export`], if it has one. A copy of the table has none: the
/// ring belongs to one worker.
#[derive(Default)]
pub struct Slot(pub(super) Option<Box<Export>>);

impl Clone for Slot {
    fn clone(&self) -> Self {
        Slot(None)
    }
}

/// A worker's export ring and what its records need.
pub struct Export {
    out: rtrb::Producer<Record>,
    /// The table's clock when the export was set (time 0 of `*_ms`).
    base_ns: u64,
    /// The active timeout, in milliseconds.
    active_ms: u32,
    /// The next flow's number.
    next_id: u64,
    /// Records lost since the last one written.
    lost: u32,
    /// Whether refused first packets are recorded.
    denied: bool,
    /// Whether NAT events are.
    nat_events: bool,
    /// When ports were last found exhausted (ms; at most one event a
    /// second).
    exhausted_ms: Option<u32>,
}

/// The full time of a table's 32-bit millisecond `ms`, read when the
/// table's clock is at `now_ms` (64 bits, not wrapped): the latest time
/// not after `now_ms` with those low 32 bits.
pub fn unwrap_ms(ms: u32, now_ms: u64) -> u64 {
    let back = (now_ms as u32).wrapping_sub(ms);
    now_ms.saturating_sub(u64::from(back))
}

impl ConnTrack {
    /// Writes this table's records into `out`, as gateway worker
    /// `worker`'s, their times in milliseconds since `base_ns` on the
    /// table's clock (the same for every worker, so the exporter has one
    /// epoch): with `s.flows` each flow is accounted (from now on, the
    /// flows already here too) and its records written, with
    /// `s.nat_events` NAT events.
    pub fn set_export(
        &mut self,
        out: rtrb::Producer<Record>,
        worker: u16,
        base_ns: u64,
        s: &Settings,
    ) {
        let next_id = u64::from(worker) << 48;
        if s.flows {
            self.acct = super::index::written(self.capacity, Acct::default());
            for (i, a) in self.acct.iter_mut().enumerate() {
                a.flow_id = next_id + i as u64;
            }
        }
        self.export.0 = Some(Box::new(Export {
            out,
            base_ns,
            active_ms: (s.active_ns / 1_000_000).clamp(1, u64::from(u32::MAX / 2)) as u32,
            next_id: next_id + self.capacity as u64,
            lost: 0,
            denied: s.denied && s.flows,
            nat_events: s.nat_events,
            exhausted_ms: None,
        }));
        self.tick_export();
    }

    /// Whether anything is exported ([`ConnTrack::set_export`]): flow
    /// records, NAT events or both.
    #[inline]
    pub fn exporting(&self) -> bool {
        self.export.0.is_some()
    }

    /// Flow `i` just opened by a packet of `bytes` of IP (TCP `flags`,
    /// in on `in_port`): its first packet accounted, and its NAT
    /// session's creation written if it is translated and NAT events are
    /// (not for a port of a port block: the block's allocation is the
    /// log that covers it).
    #[cold]
    #[inline(never)]
    pub fn export_opened(&mut self, i: u32, bytes: usize, flags: u16, in_port: u16) {
        self.account(i, false, bytes, flags, in_port);
        if self.nat_events() && self.slots[i as usize].nat() && !self.in_block(i as usize) {
            self.export_nat_create(i);
        }
    }

    /// Whether NAT events are written ([`ConnTrack::set_export`]).
    #[inline]
    pub fn nat_events(&self) -> bool {
        self.export.0.as_ref().is_some_and(|e| e.nat_events)
    }

    /// NAT44 session create for flow `i`, just opened translated (when NAT
    /// events are written).
    #[cold]
    #[inline(never)]
    pub fn export_nat_create(&mut self, i: u32) {
        let f = self.slots[i as usize];
        self.push_nat(NatEvent::SessionCreate, f.orig, f.translated(false));
    }

    /// No free NAT port for a new flow whose reply tuple would have been
    /// `reply`: a ports-exhausted event, at most one a second.
    #[cold]
    #[inline(never)]
    pub fn export_exhausted(&mut self, orig: &Tuple, reply: &Tuple) {
        let now = self.now_ms;
        let Some(e) = self.export.0.as_mut() else {
            return;
        };
        if !e.nat_events || e.exhausted_ms.is_some_and(|t| now.wrapping_sub(t) < 1000) {
            return;
        }
        e.exhausted_ms = Some(now);
        self.push_nat(NatEvent::PortsExhausted, *orig, reply.reverse());
    }

    /// Writes NAT event `ev` of a flow `seen` that leaves as `sent`.
    pub(super) fn push_nat(&mut self, ev: NatEvent, seen: Tuple, sent: Tuple) {
        let now = self.now_ms;
        let Some(e) = self.export.0.as_mut() else {
            return;
        };
        let id = e.next_id;
        e.next_id += 1;
        let r = Record {
            seen,
            sent,
            packets: 0,
            bytes: 0,
            start_ms: now,
            end_ms: now,
            flow_id: id,
            in_port: u16::MAX,
            out_port: u16::MAX,
            flags: 0,
            reason: EndReason::End,
            event: FirewallEvent::Deleted,
            reply: false,
            lost_before: 0,
            nat: Some(ev),
        };
        self.push_record(r);
    }

    /// Whether flows are accounted ([`ConnTrack::set_export`]).
    #[inline]
    pub fn exports(&self) -> bool {
        !self.acct.is_empty()
    }

    /// Accounts a packet of flow `i` in direction `reply`: `bytes` of IP,
    /// its TCP flags (ICMP: type << 8 | code) `flags`, in on port
    /// `in_port`. One comparison when flows are
    /// not accounted.
    #[inline(always)]
    pub fn account(&mut self, i: u32, reply: bool, bytes: usize, flags: u16, in_port: u16) {
        let now = self.now_ms;
        if let Some(a) = self.acct.get_mut(i as usize) {
            let d = usize::from(reply);
            a.dirs[d].packets += 1;
            a.dirs[d].bytes += bytes as u64;
            if a.dirs[d].packets == 1 {
                a.start_ms[d] = now;
            }
            a.last_ms[d] = now;
            a.in_port[d] = in_port;
            a.flags[d] |= flags;
        }
    }

    /// Where the accounting of a hint's flow lives (to prefetch with the
    /// flow, when flows are exported).
    #[inline]
    pub fn acct_at(&self, hint: u32) -> Option<*const u8> {
        self.acct
            .get((hint >> 1) as usize)
            .map(|a| std::ptr::from_ref(a).cast())
    }

    /// [`ConnTrack::account`], not inlined (the established path's).
    #[inline(never)]
    pub(super) fn account_out_of_line(
        &mut self,
        i: u32,
        reply: bool,
        bytes: usize,
        flags: u16,
        in_port: u16,
    ) {
        self.account(i, reply, bytes, flags, in_port);
    }

    /// A new flow took slot `i`: its accounting starts at zero, under a
    /// new number.
    #[inline]
    pub(super) fn account_new(&mut self, i: usize) {
        if let (Some(a), Some(e)) = (self.acct.get_mut(i), self.export.0.as_mut()) {
            *a = Acct {
                flow_id: e.next_id,
                ..Acct::default()
            };
            e.next_id += 1;
        }
    }

    /// A packet of tuple `seen` (`bytes` of IP, TCP `flags`) that came in
    /// on `in_port` and opened no flow: a rule refused it. Recorded with
    /// `firewallEvent` 3 when refused packets are.
    #[cold]
    #[inline(never)]
    pub fn export_denied(&mut self, seen: &Tuple, bytes: usize, flags: u16, in_port: u16) {
        let now = self.now_ms;
        let Some(e) = self.export.0.as_mut() else {
            return;
        };
        if !e.denied {
            return;
        }
        let id = e.next_id;
        e.next_id += 1;
        let r = Record {
            seen: *seen,
            sent: *seen,
            packets: 1,
            bytes: bytes as u64,
            start_ms: now,
            end_ms: now,
            flow_id: id,
            in_port,
            out_port: u16::MAX,
            flags,
            reason: EndReason::End,
            event: FirewallEvent::Denied,
            reply: false,
            lost_before: 0,
            nat: None,
        };
        self.push_record(r);
    }

    /// Writes `r` into the ring, or counts it lost.
    fn push_record(&mut self, mut r: Record) {
        let Some(e) = self.export.0.as_mut() else {
            return;
        };
        r.lost_before = e.lost;
        if e.out.push(r).is_ok() {
            e.lost = 0;
        } else {
            e.lost = e.lost.saturating_add(1);
            self.events[Event::ExportLost as usize] += 1;
        }
    }

    /// The records of flow `i` for each direction that saw packets since
    /// its last (`reason`; an active timeout's keep the flow going), then
    /// its counts start again from zero.
    #[cold]
    #[inline(never)]
    pub(super) fn export_flow(&mut self, i: usize, reason: EndReason) {
        let Some(a) = self.acct.get(i).copied() else {
            return;
        };
        let f = self.slots[i];
        let event = if reason == EndReason::Active {
            FirewallEvent::Updated
        } else {
            FirewallEvent::Deleted
        };
        for (d, reply) in [(0, false), (1, true)] {
            if a.dirs[d].packets == 0 {
                continue;
            }
            let r = Record {
                seen: if reply { f.reply } else { f.orig },
                sent: f.translated(reply),
                packets: a.dirs[d].packets,
                bytes: a.dirs[d].bytes,
                start_ms: a.start_ms[d],
                end_ms: a.last_ms[d],
                flow_id: a.flow_id,
                in_port: a.in_port[d],
                out_port: out_port(&f, reply),
                flags: a.flags[d],
                reason,
                event,
                reply,
                lost_before: 0,
                nat: None,
            };
            self.push_record(r);
        }
        self.acct[i] = Acct {
            flow_id: a.flow_id,
            ..Acct::default()
        };
    }

    /// The records of the live flows from slot `from` on, as far as the
    /// ring has room (IPFIX's forced end: the worker stops and its flows
    /// with it), and when they `end` (no state file keeps them) their NAT
    /// sessions' delete events; the slot to go on from once the exporter
    /// has made room, or `None` past the last (or without an export). The
    /// flows stay (a state file may keep them).
    pub fn export_open(&mut self, from: usize, end: bool) -> Option<usize> {
        self.export.0.as_ref()?;
        for i in from..self.slots.len() {
            let room = self.export.0.as_ref().map_or(0, |e| e.out.slots());
            if room < 3 {
                return Some(i);
            }
            if !self.slots[i].live {
                continue;
            }
            if end {
                self.export_end(i, EndReason::Forced);
            } else if !self.acct.is_empty() {
                self.export_flow(i, EndReason::Forced);
            }
        }
        None
    }

    /// The end of flow `i` for the export: its records (when flows are
    /// accounted) and, translated, its NAT session's delete event.
    #[cold]
    #[inline(never)]
    pub(super) fn export_end(&mut self, i: usize, why: EndReason) {
        if !self.acct.is_empty() {
            self.export_flow(i, why);
        }
        let f = self.slots[i];
        if f.nat() && self.nat_events() && !self.in_block(i) {
            self.push_nat(NatEvent::SessionDelete, f.orig, f.translated(false));
        }
    }

    /// Why flow `f`, timed out, ended: a TCP flow whose close or reset
    /// was seen ended; any other, idle.
    pub(super) fn timed_out(f: &Flow) -> EndReason {
        match f.state {
            State::FinWait | State::TimeWait | State::Closed if f.orig.proto == super::TCP => {
                EndReason::End
            }
            _ => EndReason::Idle,
        }
    }

    /// The sweep's visit of live slot `i`: its records if it has been
    /// counting for the active timeout.
    #[inline]
    pub(super) fn sweep_export(&mut self, i: usize) {
        let (Some(a), Some(e)) = (self.acct.get(i), self.export.0.as_ref()) else {
            return;
        };
        let age = |d: usize| {
            if a.dirs[d].packets == 0 {
                0
            } else {
                self.now_ms.wrapping_sub(a.start_ms[d])
            }
        };
        if age(0).max(age(1)) >= e.active_ms {
            self.export_flow(i, EndReason::Active);
        }
    }

    /// Advances the accounting's clock to the table's.
    #[inline]
    pub(super) fn tick_export(&mut self) {
        if let Some(e) = self.export.0.as_ref() {
            self.now_ms = (self.now_ns.saturating_sub(e.base_ns) / 1_000_000) as u32;
        }
    }

    /// Flow `i`'s packets and bytes per direction (the originator's, the
    /// replies') since its last record; `None` when flows are not
    /// accounted.
    pub fn counts(&self, i: usize) -> Option<super::Counts> {
        self.acct
            .get(i)
            .map(|a| a.dirs.map(|d| (d.packets, d.bytes)))
    }
}

/// The port flow `f`'s packets in direction `reply` leave by, if its
/// route cache holds one.
fn out_port(f: &Flow, reply: bool) -> u16 {
    let hop = if reply { &f.reply_hop } else { &f.orig_hop };
    if hop.generation == 0 {
        u16::MAX
    } else {
        hop.port
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conntrack::Timeouts;

    fn tuple(src: u32, sport: u16, dst: u32, dport: u16) -> Tuple {
        Tuple {
            src: 0xffff_0000_0000 | u128::from(src),
            dst: 0xffff_0000_0000 | u128::from(dst),
            sport,
            dport,
            proto: 17,
            zone: 0,
        }
    }

    fn table(ring: usize, active_s: u64) -> (ConnTrack, rtrb::Consumer<Record>) {
        let mut ct = ConnTrack::new(64, Timeouts::default());
        ct.tick(1_000_000_000);
        let (tx, rx) = rtrb::RingBuffer::new(ring);
        let s = Settings {
            flows: true,
            active_ns: active_s * 1_000_000_000,
            denied: true,
            nat_events: true,
        };
        ct.set_export(tx, 3, 1_000_000_000, &s);
        (ct, rx)
    }

    #[test]
    fn a_flow_deleted_leaves_a_record_per_direction_with_its_counts() {
        let (mut ct, mut rx) = table(16, 60);
        let o = tuple(0xc612_0002, 5000, 0xcb00_7107, 53);
        let r = tuple(0xcb00_7107, 53, 0xc612_0101, 1024);
        let i = ct.open(o, r, 0, None).unwrap();
        for n in 0..5 {
            ct.tick(1_000_000_000 + n * 10_000_000);
            ct.account(i, false, 100, 0, 1);
        }
        ct.account(i, true, 60, 0, 0);
        ct.tick(2_000_000_000);
        let (n, _) = ct.delete_flows(0, 64, &crate::conntrack::Filter::default());
        assert_eq!(n, 1);
        let a = rx.pop().unwrap();
        let b = rx.pop().unwrap();
        // Translated: its NAT session's end too.
        assert_eq!(rx.pop().unwrap().nat, Some(NatEvent::SessionDelete));
        assert!(rx.pop().is_err());
        assert_eq!((a.packets, a.bytes, a.reply), (5, 500, false));
        assert_eq!((a.seen, a.sent), (o, r.reverse()));
        assert_eq!((a.start_ms, a.end_ms, a.in_port), (0, 40, 1));
        assert_eq!((b.packets, b.bytes, b.reply), (1, 60, true));
        assert_eq!((b.seen, b.sent), (r, o.reverse()));
        assert_eq!(a.flow_id, b.flow_id);
        assert_eq!(a.flow_id >> 48, 3);
        assert_eq!(
            (a.reason, a.event),
            (EndReason::Forced, FirewallEvent::Deleted)
        );
    }

    #[test]
    fn a_long_flow_leaves_deltas_every_active_timeout_and_its_end_once() {
        let (mut ct, mut rx) = table(16, 2);
        let o = tuple(0xc612_0002, 5000, 0xcb00_7107, 53);
        let i = ct.open(o, o.reverse(), 0, None).unwrap();
        let (mut sent, mut seen) = (0u64, 0u64);
        // A packet every 100 ms for 5 s (the sweep passes every slot each
        // tick: the table has 64).
        for n in 0..50u64 {
            ct.tick(1_000_000_000 + n * 100_000_000);
            ct.account(i, false, 200, 0, 0);
            sent += 1;
            while let Ok(r) = rx.pop() {
                assert_eq!(r.reason, EndReason::Active);
                seen += r.packets;
            }
        }
        assert!(seen >= 20 && seen < sent, "{seen} of {sent} in updates");
        // Idle: the end's record has the rest.
        ct.tick(1_000_000_000 + 300 * 1_000_000_000);
        let mut end = 0;
        while let Ok(r) = rx.pop() {
            assert_eq!(
                (r.reason, r.event),
                (EndReason::Idle, FirewallEvent::Deleted)
            );
            end += r.packets;
        }
        assert_eq!(seen + end, sent, "every packet in exactly one record");
    }

    #[test]
    fn records_lost_to_a_full_ring_are_counted_and_announced() {
        let (mut ct, mut rx) = table(2, 60);
        for n in 0..5u16 {
            ct.export_denied(&tuple(1, n, 2, 80), 60, 0x02, 0);
        }
        assert_eq!(ct.event(Event::ExportLost), 3);
        assert_eq!(rx.pop().unwrap().lost_before, 0);
        assert_eq!(rx.pop().unwrap().seen.sport, 1);
        ct.export_denied(&tuple(1, 9, 2, 80), 60, 0x02, 0);
        let r = rx.pop().unwrap();
        assert_eq!((r.lost_before, r.event), (3, FirewallEvent::Denied));
    }

    #[test]
    fn the_flows_open_at_a_stop_leave_their_records_as_the_ring_makes_room() {
        let (mut ct, mut rx) = table(4, 60);
        for n in 0..5u16 {
            let o = tuple(1, n, 2, 53);
            let i = ct.open(o, o.reverse(), 0, None).unwrap();
            ct.account(i, false, 100, 0, 0);
            ct.account(i, true, 100, 0, 1);
        }
        let mut at = Some(0);
        let mut got = Vec::new();
        for _ in 0..10 {
            let Some(from) = at else { break };
            at = ct.export_open(from, true);
            while let Ok(r) = rx.pop() {
                got.push(r);
            }
        }
        assert_eq!(at, None);
        assert_eq!(got.len(), 10, "two records a flow, none lost");
        assert!(got
            .iter()
            .all(|r| r.reason == EndReason::Forced && r.packets == 1 && r.nat.is_none()));
        assert_eq!(ct.event(Event::ExportLost), 0);
        assert_eq!(ct.len(), 5, "the flows stay");
    }

    #[test]
    fn nat_sessions_log_their_creation_and_end_and_exhaustion_once_a_second() {
        let (mut ct, mut rx) = table(16, 60);
        let o = tuple(0xc612_0002, 5000, 0xcb00_7107, 53);
        let r = tuple(0xcb00_7107, 53, 0xc612_0101, 1024);
        let i = ct.open(o, r, 0, None).unwrap();
        ct.export_nat_create(i);
        let c = rx.pop().unwrap();
        assert_eq!(
            (c.nat, c.seen, c.sent),
            (Some(NatEvent::SessionCreate), o, r.reverse())
        );
        ct.tick(5_000_000_000);
        ct.delete_flows(0, 64, &crate::conntrack::Filter::default());
        let kinds: Vec<_> = std::iter::from_fn(|| rx.pop().ok())
            .map(|r| r.nat)
            .collect();
        // Its flow had no packet counted: only the session's end.
        assert_eq!(kinds, [Some(NatEvent::SessionDelete)]);
        for _ in 0..3 {
            ct.export_exhausted(&o, &r);
        }
        ct.tick(5_500_000_000);
        ct.export_exhausted(&o, &r);
        ct.tick(6_100_000_000);
        ct.export_exhausted(&o, &r);
        let n = std::iter::from_fn(|| rx.pop().ok())
            .filter(|r| r.nat == Some(NatEvent::PortsExhausted))
            .count();
        assert_eq!(n, 2, "one at 5 s, the next past 6 s");
    }

    #[test]
    fn without_an_export_nothing_is_counted() {
        let mut ct = ConnTrack::new(8, Timeouts::default());
        let o = tuple(1, 1, 2, 2);
        let i = ct.open(o, o.reverse(), 0, None).unwrap();
        ct.account(i, false, 100, 0, 0);
        assert!(!ct.exports());
        assert_eq!(ct.counts(i as usize), None);
    }

    #[test]
    fn wrapped_milliseconds_unwrap_against_the_reader_s_clock() {
        assert_eq!(unwrap_ms(10, 20), 10);
        let now = (1u64 << 32) + 5;
        assert_eq!(unwrap_ms(u32::MAX - 4, now), (1u64 << 32) - 5);
        assert_eq!(unwrap_ms(3, 2), 0);
    }
}
