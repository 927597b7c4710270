//! `gateway`: the full pipeline (conntrack + firewall with the fw1_10k rule
//! set + SNAT + full-table LPM) in one core, side by side with the router
//! alone and with a bare frame copy, on 64-byte IPv4/UDP frames (or,
//! `--tcp`, 80-byte TCP segments with the options Linux sends):
//!
//! - new flows: the first packet of each of N flows (conntrack miss, rule
//!   lookup, port allocation, flow insert, translation, route), cycles per
//!   flow and flows per second;
//! - established flows: random packets of those of the N flows that the
//!   first packets opened (conntrack hit, translation, route), cycles per
//!   packet and Mpps;
//! - refused flows: random packets of the flows that were not opened (the
//!   rules refused them, or no route): each one a conntrack miss and the
//!   new-flow path again, as long as the flow is not tracked.
//!
//! Each packet is copied from its flow's template into a work buffer first
//! (the stages rewrite it); the copy alone is measured and reported too.
//!
//! Then the same passes again with the gateway's stage clock on
//! (`pipeline::gateway::CycleClock`: the TSC read at each stage's end, as
//! VPP's `show runtime` gives clocks per node): cycles per packet in
//! parse, conntrack, firewall, NAT and route, less the cost of a clock
//! read itself (measured back to back), next to the unclocked totals.

use anyhow::{Context, Result};
use clap::Parser;
use pipeline::acl::v4;
use pipeline::conntrack::export::{EndReason, FirewallEvent, Record, Settings};
use pipeline::conntrack::saved::Saved;
use pipeline::conntrack::sync::{Change, Kind};
use pipeline::conntrack::{State, Tuple};
use pipeline::fwd::{ForwardMode, Frame};
use pipeline::gateway::{CycleClock, Gateway, Stage, StageClock};
use pipeline::router::Router;
use pipeline::Verdict;
use pmd::sys::{rdtsc, Tsc};
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};
use std::hint::black_box;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `gateway`.
#[derive(Parser)]
pub struct GatewayArgs {
    /// The gateway config (full table, fw1_10k rules, SNAT).
    #[arg(long, default_value = "configs/gateway-fulltable.toml")]
    config: PathBuf,
    /// Flows.
    #[arg(long, default_value_t = 100_000)]
    flows: usize,
    /// Packets per established-flow pass.
    #[arg(long, default_value_t = 2_000_000)]
    packets: usize,
    /// Passes (median reported).
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// 80-byte IPv4/TCP instead of UDP, with the options Linux sends:
    /// each flow's SYN (MSS, SACK permitted, timestamp, window scale)
    /// opens it, the server's SYN+ACK (the same options) and the client's
    /// ACK complete its handshake (not measured), and its established
    /// packets are the client's next segment (a timestamp, 14 bytes of
    /// data), again and again: in the window, so
    /// window tracking's whole check and update runs for each. Also
    /// measures the established packets with window tracking off.
    #[arg(long)]
    tcp: bool,
    /// Also measure new and established flows at each of these flow
    /// counts (comma-separated), one table row each: how the cost grows
    /// as the flows outgrow the caches.
    #[arg(long, value_delimiter = ',')]
    sweep: Vec<usize>,
    /// The gateways log their flows' changes for an HA peer (`[ha]`
    /// state sync), into a ring with room for every change of a pass:
    /// what syncing costs the worker.
    #[arg(long)]
    sync: bool,
    /// Also measure the new and established passes with state sync on
    /// (as `--sync`), in each run beside the passes without it: the
    /// active's cost of syncing, side by side.
    #[arg(long)]
    sync_rows: bool,
    /// The gateways account their flows for IPFIX export (`[export]`):
    /// packets, bytes, times per flow and direction, and a record per
    /// direction into a ring when a flow ends.
    #[arg(long)]
    export: bool,
    /// Also measure the new and established passes with export on (as
    /// `--export`), in each run beside the passes without it, and the
    /// end of every flow (its expiry, and with export its records
    /// written): what flow export costs a worker, side by side.
    #[arg(long)]
    export_rows: bool,
    /// Also measure the new and established passes with the LAN's source
    /// NAT deterministic (198.18.0.0/24 onto 198.51.100.0/28, 4,032 ports
    /// a host) instead of masquerade, in each run beside them.
    #[arg(long)]
    det_rows: bool,
    /// Also measure the new and established passes with the LAN's source
    /// NAT a pool in port blocks (198.51.100.0/28, blocks of 512, 4 at
    /// most a host) instead of masquerade, in each run beside them.
    #[arg(long)]
    block_rows: bool,
    /// Also measure the new and established passes of IPv6-only
    /// clients through NAT64 instead (`[[nat.nat64]]`: 64:ff9b::/96 out
    /// of the LAN's source NAT port, from its address): the same flows,
    /// each from 2001:db8:100::HOST to the prefix's address of its
    /// server, in 84-byte IPv6/UDP frames (64 bytes once translated), in
    /// each run beside NAT44's. UDP only.
    #[arg(long)]
    nat64_rows: bool,
    /// Also measure the new and established passes of plain IPv6 flows
    /// (conntrack and the firewall, no translation): the same flows, each
    /// from 2001:db8:100::HOST to an address in 2409:8000::/20 made of its
    /// server's IPv4 address, in 84-byte IPv6/UDP frames, with the route
    /// file's IPv6 prefixes loaded too (spread over 2001:db8:fe::2 on the
    /// second port; the IPv4 rows then run on both tables), in each run
    /// beside IPv4's. UDP only.
    #[arg(long)]
    ipv6_rows: bool,
    /// Every interface clamps TCP SYNs' MSS to this (`clamp_mss`): what
    /// clamping costs a new TCP flow (its SYN clamped coming in, looked
    /// at again going out).
    #[arg(long)]
    clamp_mss: Option<u16>,
    /// Only the rows by number of flows (`--sweep`), not the tables at
    /// `--flows` before them.
    #[arg(long)]
    sweep_only: bool,
    /// With `--sweep`: plot the established and new-flow cycles and the
    /// table's bytes per flow against the number of flows into
    /// `PLOT-cycles.svg` and `PLOT-memory.svg`.
    #[arg(long)]
    plot: Option<std::path::PathBuf>,
}

/// The frames' sizes: UDP, and TCP with its options.
const UDP_FRAME: usize = 64;
const TCP_FRAME: usize = 80;

/// An `N`-byte Ethernet/IPv4 frame to `mac` from `src` to `dst` with
/// protocol `proto` and `l4` (whose checksum field, at `sum_at`, is filled
/// in), padded: valid checksums.
fn ip_frame<const N: usize>(
    mac: [u8; 6],
    src: u32,
    dst: u32,
    proto: u8,
    l4: &[u8],
    sum_at: usize,
) -> [u8; N] {
    let mut f = [0u8; N];
    f[0..6].copy_from_slice(&mac);
    f[6..12].copy_from_slice(&[2, 0x5e, 0, 0, 0, 0x10]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let total = 20 + l4.len();
    let l3 = &mut f[14..];
    l3[0] = 0x45;
    l3[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    l3[6] = 0x40;
    l3[8] = 64;
    l3[9] = proto;
    l3[12..16].copy_from_slice(&src.to_be_bytes());
    l3[16..20].copy_from_slice(&dst.to_be_bytes());
    let c = pipeline::checksum::checksum(&l3[..20]);
    l3[10..12].copy_from_slice(&c.to_be_bytes());
    let l4 = {
        l3[20..total].copy_from_slice(l4);
        &mut l3[20..total]
    };
    let ph =
        pipeline::checksum::pseudo_v4(src.to_be_bytes(), dst.to_be_bytes(), proto, l4.len() as u16);
    let c = !pipeline::checksum::fold(pipeline::checksum::sum(l4, ph));
    l4[sum_at..sum_at + 2].copy_from_slice(&c.to_be_bytes());
    f
}

/// An `N`-byte Ethernet/IPv4/UDP frame to `mac` with valid checksums.
fn frame<const N: usize>(mac: [u8; 6], src: u32, dst: u32, sport: u16, dport: u16) -> [u8; N] {
    let mut l4 = [0u8; N];
    let l4 = &mut l4[..N - 34];
    l4[0..2].copy_from_slice(&sport.to_be_bytes());
    l4[2..4].copy_from_slice(&dport.to_be_bytes());
    l4[4..6].copy_from_slice(&((N - 34) as u16).to_be_bytes());
    ip_frame(mac, src, dst, 17, l4, 6)
}

/// A NAT64 client's frame: IPv6/UDP, 20 bytes longer than [`UDP_FRAME`].
const UDP6_FRAME: usize = UDP_FRAME + 20;

/// The IPv6 client's frame of IPv4/UDP frame `f` (its flow through NAT64
/// instead of NAT44): from 2001:db8:100::HOST (the source's last byte)
/// to the well-known prefix's address of its destination, the same
/// ports and length of data, the checksum valid.
fn frame6(f: &[u8]) -> [u8; UDP6_FRAME] {
    let nat64 = pipeline::nat64::Nat64::new(pipeline::nat64::WELL_KNOWN, 0, vec![]).unwrap();
    frame6_to(f, |server| nat64.embed(server))
}

/// A plain IPv6 client's frame of IPv4/UDP frame `f` (`--ipv6-rows`):
/// as [`frame6`], to its server's IPv4 address in 2409:8000::/20 (a
/// prefix of the shared table, with more specific ones inside it) below
/// its top 20 bits.
fn frame6_plain(f: &[u8]) -> [u8; UDP6_FRAME] {
    frame6_to(f, |server| 0x24098_u128 << 108 | u128::from(server) << 76)
}

/// [`frame6`] to `dst(server)` for the IPv4 server's address.
fn frame6_to(f: &[u8], dst: impl Fn(u32) -> u128) -> [u8; UDP6_FRAME] {
    let mut g = [0u8; UDP6_FRAME];
    g[..12].copy_from_slice(&f[..12]);
    g[12..14].copy_from_slice(&[0x86, 0xdd]);
    let l4 = UDP6_FRAME - 54;
    let l3 = &mut g[14..];
    l3[0] = 0x60;
    l3[4..6].copy_from_slice(&(l4 as u16).to_be_bytes());
    (l3[6], l3[7]) = (17, 64);
    let src = 0x2001_0db8_0100_u128 << 80 | u128::from(f[29]);
    let dst = dst(u32::from_be_bytes([f[30], f[31], f[32], f[33]]));
    l3[8..24].copy_from_slice(&src.to_be_bytes());
    l3[24..40].copy_from_slice(&dst.to_be_bytes());
    l3[40..44].copy_from_slice(&f[34..38]);
    l3[44..46].copy_from_slice(&(l4 as u16).to_be_bytes());
    let ph = pipeline::checksum::pseudo_v6(src.to_be_bytes(), dst.to_be_bytes(), 17, l4 as u32);
    let c = !pipeline::checksum::fold(pipeline::checksum::sum(&l3[40..40 + l4], ph));
    l3[46..48].copy_from_slice(&c.to_be_bytes());
    g
}

/// The client's and the server's initial sequence numbers (TCP).
const CLIENT_ISN: u32 = 1_000_000;
const SERVER_ISN: u32 = 7_000_000;

/// The options of a SYN or SYN+ACK from Linux: MSS 1460, SACK permitted,
/// a timestamp, a NOP, window scale 7 (20 bytes).
const SYN_OPTIONS: [u8; 20] = [
    2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
];

/// The options of any other segment from Linux: two NOPs and a
/// timestamp (12 bytes).
const TS_OPTIONS: [u8; 12] = [1, 1, 8, 10, 0, 0, 0, 2, 0, 0, 0, 1];

/// An `N`-byte Ethernet/IPv4/TCP frame to `mac` with valid checksums, as
/// Linux sends it: TCP `flags`, sequence `seq`, acknowledgment `ack`; a
/// SYN (or SYN+ACK) with [`SYN_OPTIONS`] and window 64,240 (padded), any
/// other segment with [`TS_OPTIONS`], window 502 (scaled by 7: 64,256)
/// and as much data as fills the frame.
#[allow(clippy::too_many_arguments)]
fn tcp_frame<const N: usize>(
    mac: [u8; 6],
    src: u32,
    dst: u32,
    sport: u16,
    dport: u16,
    flags: u8,
    seq: u32,
    ack: u32,
) -> [u8; N] {
    let syn = flags & 0x02 != 0;
    let (opts, win): (&[u8], u16) = if syn {
        (&SYN_OPTIONS, 64240)
    } else {
        (&TS_OPTIONS, 502)
    };
    let doff = 20 + opts.len();
    let len = if syn { doff } else { N - 34 };
    let mut l4 = [0u8; N];
    l4[0..2].copy_from_slice(&sport.to_be_bytes());
    l4[2..4].copy_from_slice(&dport.to_be_bytes());
    l4[4..8].copy_from_slice(&seq.to_be_bytes());
    l4[8..12].copy_from_slice(&ack.to_be_bytes());
    l4[12] = ((doff / 4) as u8) << 4;
    l4[13] = flags;
    l4[14..16].copy_from_slice(&win.to_be_bytes());
    l4[20..doff].copy_from_slice(opts);
    ip_frame(mac, src, dst, 6, &l4[..len], 16)
}

/// Burst size (as the worker's default).
const BURST: usize = 32;

/// A work buffer that prefetches as a port's buffer does
/// ([`Frame::prefetch`]: the stages' loops issue it inline), with
/// headroom in front of the frame as a port's buffer has (its front
/// moved, not its bytes, when a header grows or shrinks: NAT64).
struct Buf {
    data: Vec<u8>,
    /// Where the frame starts in `data`.
    start: usize,
}

/// A [`Buf`]'s headroom (as an mbuf's).
const HEADROOM: usize = 128;

impl Buf {
    fn new(room: usize) -> Buf {
        let mut data = Vec::with_capacity(HEADROOM + room);
        data.resize(HEADROOM, 0);
        Buf {
            data,
            start: HEADROOM,
        }
    }

    /// Holds `frame` (a copy), at the headroom's end.
    #[inline(always)]
    fn fill(&mut self, frame: &[u8]) {
        self.data.truncate(HEADROOM);
        self.data.extend_from_slice(frame);
        self.start = HEADROOM;
    }
}

impl Frame for Buf {
    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        &self.data[self.start..]
    }
    #[inline(always)]
    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.data[self.start..]
    }
    fn set_len(&mut self, len: usize) -> bool {
        self.data.resize(self.start + len, 0);
        true
    }
    fn cut_front(&mut self, n: usize) -> bool {
        if n > self.data.len() - self.start {
            return false;
        }
        self.start += n;
        true
    }
    fn grow_front(&mut self, n: usize) -> bool {
        if n > self.start {
            return false;
        }
        self.start -= n;
        true
    }
    #[inline(always)]
    fn prefetch(addr: *const u8) {
        pmd::sys::prefetch(addr);
    }
}

/// Cycles per packet of stage `m` over `order` in bursts of [`BURST`], as
/// the worker runs it (enter the round, prefetch hook, the burst path,
/// leave; each template copied into a work buffer first), and the packets
/// forwarded.
fn pass<M: ForwardMode, const N: usize>(
    templates: &[[u8; N]],
    order: &[u32],
    m: &mut M,
) -> (f64, usize) {
    let mut bufs: Vec<Buf> = (0..BURST).map(|_| Buf::new(N)).collect();
    let mut verdicts = [Verdict::Forward(0); BURST];
    let mut fwd = 0;
    let t0 = rdtsc();
    for chunk in order.chunks(BURST) {
        let bufs = &mut bufs[..chunk.len()];
        for (b, &i) in bufs.iter_mut().zip(chunk) {
            b.fill(&templates[i as usize]);
        }
        // A poll round per burst (the worst case: a round holds at
        // least one burst).
        m.enter();
        m.prefetch(bufs, pmd::sys::prefetch);
        let v = &mut verdicts[..chunk.len()];
        match m.process_burst(bufs, 0, v) {
            Some(Verdict::Forward(_)) => fwd += chunk.len(),
            Some(_) => {}
            None => {
                fwd += v
                    .iter()
                    .filter(|v| matches!(v, Verdict::Forward(_)))
                    .count()
            }
        }
        m.leave();
    }
    ((rdtsc() - t0) as f64 / order.len() as f64, fwd)
}

/// [`pass`] of packets received on `port` (the servers' side).
fn pass_in<const N: usize>(
    templates: &[[u8; N]],
    order: &[u32],
    g: &mut Gateway,
    port: u16,
) -> (f64, usize) {
    let mut bufs: Vec<Buf> = (0..BURST).map(|_| Buf::new(N + 20)).collect();
    let mut verdicts = [Verdict::Forward(0); BURST];
    let mut fwd = 0;
    let t0 = rdtsc();
    for chunk in order.chunks(BURST) {
        let bufs = &mut bufs[..chunk.len()];
        for (b, &i) in bufs.iter_mut().zip(chunk) {
            b.fill(&templates[i as usize]);
        }
        g.enter();
        g.prefetch(bufs, pmd::sys::prefetch);
        let v = &mut verdicts[..chunk.len()];
        match g.process_burst(bufs, port, v) {
            Some(Verdict::Forward(_)) => fwd += chunk.len(),
            Some(_) => {}
            None => {
                fwd += v
                    .iter()
                    .filter(|v| matches!(v, Verdict::Forward(_)))
                    .count()
            }
        }
        g.leave();
    }
    ((rdtsc() - t0) as f64 / order.len() as f64, fwd)
}

/// [`pass`] of the unclocked gateway, out of line under a name of its own:
/// what `bench/run-gateway-instructions.sh` has valgrind count.
#[inline(never)]
fn gateway_pass<const N: usize>(
    templates: &[[u8; N]],
    order: &[u32],
    g: &mut Gateway,
) -> (f64, usize) {
    pass(templates, order, g)
}

/// Ends every flow of `g`'s table: time far past every timeout, then
/// ticks (each through `tick`, given the time) until the sweep has
/// expired them all (at most twice the ticks a whole table's sweep
/// takes).
#[inline(always)]
fn expire_all(g: &mut Gateway, mut tick: impl FnMut(&mut Gateway, u64)) {
    let mut now = g.conntrack().now() + 100_000 * 1_000_000_000;
    let ticks = 2 * (g.conntrack().capacity() / pipeline::conntrack::SWEEP_PER_TICK + 2);
    for _ in 0..ticks {
        if g.conntrack().is_empty() {
            break;
        }
        now += 1_000;
        tick(g, now);
    }
    assert!(g.conntrack().is_empty(), "the sweep expired every flow");
}

/// The end of every flow of `g`'s table ([`expire_all`]); cycles per
/// flow of `flows`. Out of line under a name of its own (for valgrind to
/// count, as `gateway_pass`).
#[inline(never)]
fn end_pass(g: &mut Gateway, flows: usize) -> f64 {
    let t0 = rdtsc();
    expire_all(g, |g, now| g.tick(now));
    let c = rdtsc() - t0;
    c as f64 / flows.max(1) as f64
}

/// The median cycles of a tick over `g`'s table while nothing expires
/// (200 ticks 10 ms apart, as a worker's): the sweep's steady cost.
fn live_ticks(g: &mut Gateway) -> f64 {
    let mut now = g.conntrack().now();
    let mut c: Vec<f64> = (0..200)
        .map(|_| {
            now += 10_000_000;
            let t0 = rdtsc();
            g.tick(now);
            (rdtsc() - t0) as f64
        })
        .collect();
    crate::median(&mut c)
}

/// [`end_pass`] with each tick timed: the cycles a flow of all the ticks;
/// each tick's cycles pushed to `ticks_out` (how long a worker's poll
/// loop is held while a whole table expires).
fn end_pass_ticks(g: &mut Gateway, flows: usize, ticks_out: &mut Vec<u64>) -> f64 {
    let mut total = 0u64;
    expire_all(g, |g, now| {
        let t0 = rdtsc();
        g.tick(now);
        let c = rdtsc() - t0;
        total += c;
        ticks_out.push(c);
    });
    total as f64 / flows.max(1) as f64
}

/// [`pass`] of the unclocked gateway with TCP window tracking off, out of
/// line under a name of its own (for valgrind to count, as
/// `gateway_pass`).
#[inline(never)]
fn nowin_pass<const N: usize>(
    templates: &[[u8; N]],
    order: &[u32],
    g: &mut Gateway,
) -> (f64, usize) {
    pass(templates, order, g)
}

/// [`pass`] of the unclocked gateway over the packets of flows it refused,
/// out of line under a name of its own (for valgrind to count, as
/// `gateway_pass`).
#[inline(never)]
fn refused_pass<const N: usize>(
    templates: &[[u8; N]],
    order: &[u32],
    g: &mut Gateway,
) -> (f64, usize) {
    pass(templates, order, g)
}

/// [`pass`] of the router alone, out of line under a name of its own (for
/// valgrind to count, as `gateway_pass`).
#[inline(never)]
fn router_pass<const N: usize>(
    templates: &[[u8; N]],
    order: &[u32],
    r: &mut Router,
) -> (f64, usize) {
    pass(templates, order, r)
}

/// The baseline: the copy and the loop, nothing else.
#[derive(Clone)]
struct Copy;

impl ForwardMode for Copy {
    const NAME: &'static str = "copy";
    fn process<P: pipeline::fwd::Frame>(&mut self, pkt: &mut P, _: u16) -> Verdict {
        black_box(pkt.bytes());
        Verdict::Forward(1)
    }
}

/// The packets of a measurement: `flows` flows' templates, the first
/// packet of each in order, and random packets of those the gateway
/// opened (established) and of those it did not (refused).
struct Workload<const N: usize> {
    /// Each flow's first packet (TCP: its SYN).
    templates: Vec<[u8; N]>,
    /// Each flow's established packet (UDP: the first again; TCP: the
    /// client's segment after the handshake).
    est_templates: Vec<[u8; N]>,
    /// TCP: what completes each opened flow's handshake, given the
    /// gateway that opened it (the server's SYN+ACK, to the flow's
    /// translated tuple, on the port its SYN left by; then the ACK).
    handshake: Option<Handshake>,
    new_order: Vec<u32>,
    est_order: Vec<u32>,
    refused_order: Vec<u32>,
    /// Flows the first packets did not open.
    refused: usize,
}

/// What a TCP flow's handshake needs past its SYN: the port each flow's
/// SYN left by (its server answers there), the ports' MACs, and which
/// flow a tuple is.
struct Handshake {
    out: std::collections::HashMap<(u128, u128, u16, u16), (u16, u32)>,
    macs: Vec<[u8; 6]>,
}

impl Handshake {
    /// Completes the handshake of every flow `g` tracks: the server's
    /// SYN+ACK to the flow's reply tuple, then the client's ACK (its
    /// first established packet, `est`).
    fn run<C: StageClock, const N: usize>(&self, g: &mut Gateway<C>, est: &[[u8; N]]) {
        let flows: Vec<(Tuple, Tuple)> = g.conntrack().flows().map(|f| (f.orig, f.reply)).collect();
        for (orig, r) in flows {
            let key = (orig.src, orig.dst, orig.sport, orig.dport);
            let Some(&(port, i)) = self.out.get(&key) else {
                continue;
            };
            let mut sa = tcp_frame::<N>(
                self.macs[usize::from(port)],
                r.src as u32,
                r.dst as u32,
                r.sport,
                r.dport,
                0x12,
                SERVER_ISN,
                CLIENT_ISN + 1,
            )
            .to_vec();
            g.process(&mut sa, port);
            let mut ack = est[i as usize].to_vec();
            g.process(&mut ack, 0);
        }
    }
}

impl<const N: usize> Workload<N> {
    /// TCP: completes the handshakes of the flows `g` opened.
    fn handshake<C: StageClock>(&self, g: &mut Gateway<C>) {
        if let Some(h) = &self.handshake {
            h.run(g, &self.est_templates);
        }
    }

    /// Inside hosts in 198.18.0.0/24 (the SNAT rule's prefix), 10,000
    /// destinations in 82.0.0.0/8 (routed by the full table); `packets`
    /// established packets. Which flows the first packets open is asked
    /// of a gateway `g` (the rest the rules refuse, or have no route).
    /// `macs`: the ports' MACs (packets come in on port 0); with `tcp`,
    /// TCP flows whose handshakes complete before the established passes.
    fn new(
        flows: usize,
        packets: usize,
        macs: &[[u8; 6]],
        tcp: bool,
        mut g: Gateway,
    ) -> Result<Workload<N>> {
        let mac = macs[0];
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let dsts: Vec<u32> = (0..10_000)
            .map(|_| 0x5200_0000 | rng.random_range(0..0x00ff_ffffu32))
            .collect();
        let tuples: Vec<Tuple> = (0..flows)
            .map(|i| Tuple {
                src: v4(0xc612_0000 | rng.random_range(2..254u32)),
                dst: v4(dsts[i % dsts.len()]),
                sport: 1024 + (i / 251) as u16,
                dport: rng.random_range(1..65535),
                proto: if tcp { 6 } else { 17 },
                zone: 0,
            })
            .collect();
        let (a, b) = (|t: &Tuple| t.src as u32, |t: &Tuple| t.dst as u32);
        let templates: Vec<[u8; N]> = tuples
            .iter()
            .map(|t| match tcp {
                false => frame(mac, a(t), b(t), t.sport, t.dport),
                true => tcp_frame(mac, a(t), b(t), t.sport, t.dport, 0x02, CLIENT_ISN, 0),
            })
            .collect();
        let est_templates: Vec<[u8; N]> = match tcp {
            false => templates.clone(),
            true => tuples
                .iter()
                .map(|t| {
                    let (seq, ack) = (CLIENT_ISN + 1, SERVER_ISN + 1);
                    tcp_frame(mac, a(t), b(t), t.sport, t.dport, 0x18, seq, ack)
                })
                .collect(),
        };
        let new_order: Vec<u32> = (0..flows as u32).collect();
        // Not `gateway_pass`: valgrind counts that one's instructions.
        // One by one, to learn the port each first packet leaves by.
        let mut out = std::collections::HashMap::new();
        for (i, t) in templates.iter().enumerate() {
            let mut f = t.to_vec();
            if let Verdict::Forward(p) = g.process(&mut f, 0) {
                let t = &tuples[i];
                out.insert((t.src, t.dst, t.sport, t.dport), (p, i as u32));
            }
        }
        let handshake = tcp.then(|| Handshake {
            out,
            macs: macs.to_vec(),
        });
        let (tracked, refused): (Vec<u32>, Vec<u32>) = new_order
            .iter()
            .partition(|&&i| g.conntrack().contains(&tuples[i as usize]));
        anyhow::ensure!(!tracked.is_empty(), "no flow opened");
        let mut est_order: Vec<u32> = (0..packets)
            .map(|_| tracked[rng.random_range(0..tracked.len())])
            .collect();
        est_order.shuffle(&mut rng);
        let refused_order: Vec<u32> = if refused.is_empty() {
            vec![]
        } else {
            (0..(packets / 20).max(1))
                .map(|_| refused[rng.random_range(0..refused.len())])
                .collect()
        };
        if let Some(h) = &handshake {
            h.run(&mut g, &est_templates);
            let established = g
                .conntrack()
                .flows()
                .filter(|f| f.state == pipeline::conntrack::State::Established)
                .count();
            anyhow::ensure!(
                established == tracked.len(),
                "{established} of {} handshakes completed",
                tracked.len()
            );
        }
        Ok(Workload {
            templates,
            est_templates,
            handshake,
            new_order,
            est_order,
            refused_order,
            refused: refused.len(),
        })
    }
}

/// Runs the comparison and prints a Markdown table.
pub fn gateway(a: GatewayArgs) -> Result<()> {
    if a.tcp {
        run::<TCP_FRAME>(a)
    } else {
        run::<UDP_FRAME>(a)
    }
}

/// A ring of `cap` items whose every slot has been written with `fill`
/// and read once: a worker's ring (HA sync, export) is a standing one, its
/// pages long mapped, and a fresh one's first touches (a page fault each 4
/// KiB) would be charged to the pass.
fn standing<T: std::marker::Copy>(cap: usize, fill: T) -> rtrb::Producer<T> {
    let (mut log, mut drained) = rtrb::RingBuffer::new(cap);
    while log.push(fill).is_ok() {}
    while drained.pop().is_ok() {}
    log
}

/// A standing sync ring of `cap` changes.
fn standing_ring(cap: usize) -> rtrb::Producer<Change> {
    let t = Tuple {
        src: 0,
        dst: 0,
        sport: 0,
        dport: 0,
        proto: 17,
        zone: 0,
    };
    let c = Change {
        kind: Kind::Created,
        flow: Saved {
            orig: t,
            reply: t,
            state: State::Unreplied,
            remaining_ns: 0,
            worker: 0,
        },
    };
    standing(cap, c)
}

/// A standing export ring of `cap` records.
fn export_ring(cap: usize) -> rtrb::Producer<Record> {
    let t = Tuple::default();
    let r = Record {
        seen: t,
        sent: t,
        packets: 0,
        bytes: 0,
        start_ms: 0,
        end_ms: 0,
        flow_id: 0,
        in_port: 0,
        out_port: 0,
        flags: 0,
        reason: EndReason::Idle,
        event: FirewallEvent::Deleted,
        reply: false,
        lost_before: 0,
        nat: None,
    };
    standing(cap, r)
}

/// The IPv6 gateway of `--ipv6-rows` on the second port: 2001:db8:fe::2
/// (2001:db8:fe::1/64 there), the route file's IPv6 prefixes spread over
/// it.
fn with_ipv6_table(cfg: &mut appliance::config::Config) -> Result<()> {
    let gw: std::net::Ipv6Addr = "2001:db8:fe::2".parse()?;
    let rs = &mut cfg.router;
    let Some((_, _, via6)) = &mut rs.route_file else {
        anyhow::bail!("--ipv6-rows needs a config with a route file");
    };
    anyhow::ensure!(rs.interfaces.len() >= 2, "--ipv6-rows needs two ports");
    *via6 = vec![pipeline::fib::NextHop {
        port: 1,
        via: Some(gw.into()),
    }];
    rs.interfaces[1].ipv6.push(("2001:db8:fe::1".parse()?, 64));
    let mac = pipeline::wire::MacAddr([0x02, 0x5e, 0, 0, 0xfe, 0x02]);
    rs.neighbors.push((1, gw.into(), mac));
    Ok(())
}

/// [`gateway`] on `N`-byte frames.
fn run<const N: usize>(a: GatewayArgs) -> Result<()> {
    let mut cfg = appliance::config::load_file(&a.config).map_err(|e| anyhow::anyhow!("{e}"))?;
    if a.ipv6_rows {
        anyhow::ensure!(!a.tcp, "--ipv6-rows measures UDP flows");
        with_ipv6_table(&mut cfg)?;
    }
    let (router, fib) = appliance::stages::build_router(&cfg).context("building the router")?;
    // The routes as loaded (the route file's and the config's), for the
    // header.
    let (routes4, routes6) = (fib.fib().routes4(), fib.fib().routes6());
    let mut gcfg = appliance::stages::build_gateway(&cfg, 1);
    if let Some(m) = a.clamp_mss {
        gcfg.mss_limits = vec![[m; 2]; cfg.router.interfaces.len()].into();
    }
    let tsc = Tsc::calibrate(Duration::from_millis(50));
    let hz = tsc.hz as f64;
    let macs: Vec<[u8; 6]> = cfg.ports.iter().map(|p| p.mac.0).collect();
    let make = |sync: bool, export: bool, capacity: usize| {
        let mut c = gcfg.clone();
        c.ct_capacity = capacity;
        let mut g = Gateway::new(router.clone(), &c, 0);
        if sync {
            // The sync thread's end is not read: the ring holds a pass's
            // changes (every flow's creation, with room to spare).
            g.set_sync(standing_ring(2 * a.flows + 4096));
        }
        if export {
            // The exporter's end is not read: the ring holds every
            // flow's two records (their end), with room to spare.
            let now = tsc.ns(rdtsc()) as u64;
            let s = Settings {
                flows: true,
                active_ns: 60_000_000_000,
                denied: true,
                nat_events: false,
            };
            g.set_export(export_ring(2 * a.flows + 4096), now, &s);
        }
        g.tick(tsc.ns(rdtsc()) as u64);
        g
    };
    let fresh = || make(a.sync, a.export, gcfg.ct_capacity);
    // The sweep's gateways: each table sized for its row's flows.
    let cap_for = |flows: usize| (flows * 17 / 16).max(1024);
    let sized = |flows: usize| make(a.sync, a.export, cap_for(flows));
    let table = |flows: usize| {
        pipeline::conntrack::ConnTrack::bytes_for(cap_for(flows), gcfg.tcp_window, a.export)
    };
    if a.sweep_only {
        return sweep::<N>(&a, hz, &macs, &router, &sized, &table);
    }
    let w = Workload::<N>::new(a.flows, a.packets, &macs, a.tcp, fresh())?;
    let (templates, new_order, est_order, refused_order) =
        (&w.templates, &w.new_order, &w.est_order, &w.refused_order);
    let est_templates = &w.est_templates;
    // TCP: the established packets again with window tracking off.
    let mut nowin_cfg = gcfg.clone();
    nowin_cfg.tcp_window = false;
    let mut gw_nowin = vec![];

    let (mut copy, mut route, mut gw_new, mut gw_est) = (vec![], vec![], vec![], vec![]);
    let mut gw_refused = vec![];
    let (mut sync_new, mut sync_est) = (vec![], vec![]);
    let (mut exp_new, mut exp_est, mut exp_end) = (vec![], vec![], vec![]);
    // The LAN's source NAT rule's addresses taken from `to` instead of
    // masquerade (`--det-rows`, `--block-rows`).
    let ip = |s: &str| u32::from(s.parse::<std::net::Ipv4Addr>().unwrap());
    let lan_snat = |to: &dyn Fn(&pipeline::nat::NatConfig) -> pipeline::nat::SnatTo| {
        let mut c = gcfg.clone();
        let mut nat = (*c.nat).clone();
        let t = to(&nat);
        for s in &mut nat.snat {
            if s.src == (ip("198.18.0.0"), 24) {
                s.to = t.clone();
            }
        }
        c.nat = std::sync::Arc::new(nat);
        c
    };
    // Each such variant: its name, what it is, its config, and its new
    // and established passes' cycles per run.
    type Variant = (
        &'static str,
        &'static str,
        pipeline::gateway::GatewayConfig,
        Vec<f64>,
        Vec<f64>,
    );
    let mut variants: Vec<Variant> = vec![];
    if a.det_rows {
        let cfg = lan_snat(&|nat| {
            pipeline::nat::SnatTo::Deterministic(pipeline::nat::Det {
                inside: (ip("198.18.0.0"), 24),
                outside: (ip("198.51.100.0"), 28),
                block: pipeline::nat::Det::max_block(24, 28, &nat.ports),
            })
        });
        let what = "the LAN's 252 hosts onto a /28, 4,032 ports each";
        variants.push(("deterministic NAT", what, cfg, vec![], vec![]));
    }
    if a.block_rows {
        let cfg = lan_snat(&|_| {
            pipeline::nat::SnatTo::Blocks(pipeline::nat::BlockRule {
                addrs: (0..16).map(|i| ip("198.51.100.0") + i).collect(),
                size: 512,
                max: 4,
            })
        });
        let what = "a /28 pool in blocks of 512 ports, 4 at most a host";
        variants.push(("port blocks", what, cfg, vec![], vec![]));
    }
    // NAT64's config and its clients' frames (`--nat64-rows`).
    let nat64 = if a.nat64_rows {
        anyhow::ensure!(!a.tcp, "--nat64-rows measures UDP flows");
        let mut c = gcfg.clone();
        let mut nat = (*c.nat).clone();
        let out = nat
            .snat
            .iter()
            .find(|s| s.src == (ip("198.18.0.0"), 24))
            .map(|s| s.out_port)
            .context("the config has no source NAT rule for 198.18.0.0/24")?;
        nat.nat64 =
            vec![pipeline::nat64::Nat64::new(pipeline::nat64::WELL_KNOWN, out, vec![]).unwrap()];
        c.nat = std::sync::Arc::new(nat);
        let t6: Vec<[u8; UDP6_FRAME]> = templates.iter().map(|f| frame6(f)).collect();
        Some((c, t6, out))
    } else {
        None
    };
    let (mut n64_new, mut n64_est, mut n64_back) = (vec![], vec![], vec![]);
    // Plain IPv6 clients' frames (`--ipv6-rows`).
    let plain6: Option<Vec<[u8; UDP6_FRAME]>> = a
        .ipv6_rows
        .then(|| templates.iter().map(|f| frame6_plain(f)).collect());
    let (mut v6_new, mut v6_est, mut v6_fwd) = (vec![], vec![], (0, 0, 0));
    // The router alone on each family and on both (`--ipv6-rows`), in
    // frames of one size: the IPv4 frames padded to the IPv6 ones'
    // length; mixed, even flows IPv4 and odd flows IPv6 (the established
    // order's packets, so the families interleave at random), then the
    // same packets with each burst's IPv4 ones first.
    let families = plain6.as_ref().map(|t6| {
        let pad4: Vec<[u8; UDP6_FRAME]> = est_templates
            .iter()
            .map(|f| {
                let mut g = [0u8; UDP6_FRAME];
                g[..f.len()].copy_from_slice(f);
                g
            })
            .collect();
        let mixed: Vec<[u8; UDP6_FRAME]> = pad4
            .iter()
            .zip(t6)
            .enumerate()
            .map(|(i, (f4, f6))| if i % 2 == 0 { *f4 } else { *f6 })
            .collect();
        let grouped: Vec<u32> = est_order
            .chunks(BURST)
            .flat_map(|c| {
                let mut c = c.to_vec();
                c.sort_by_key(|&i| i % 2);
                c
            })
            .collect();
        (pad4, mixed, grouped)
    });
    // Per run: cycles per packet of the router alone on IPv4, IPv6, both
    // at random, both grouped per burst.
    let mut fam_runs: Vec<[f64; 4]> = vec![];
    // The servers' replies to NAT64's flows (IPv4 to the pool's ports),
    // made from the first run's table, and their order.
    let mut replies: Vec<[u8; UDP_FRAME]> = vec![];
    let mut reply_order: Vec<u32> = vec![];
    let mut n64_fwd = (0, 0, 0);
    let mut end = vec![];
    // Per run: each stage's cycles per packet (new flows, established).
    let mut prof_new: Vec<[f64; Stage::COUNT]> = vec![];
    let mut prof_est: Vec<[f64; Stage::COUNT]> = vec![];
    // A clock read's own cost, charged to every mark: reads back to back.
    let read = {
        let mut k = CycleClock::new(rdtsc);
        let n = 1_000_000u64;
        k.start();
        for _ in 0..n {
            k.mark(Stage::Parse);
        }
        k.cycles[0] as f64 / n as f64
    };
    let mut fwd_new = 0;
    let mut fwd_est = 0;
    let mut fwd_refused = 0;
    let mut flows = 0;
    for run in 0..a.runs {
        let (c, _) = pass(est_templates, est_order, &mut Copy);
        copy.push(c);
        let mut r = router.clone();
        r.tick(tsc.ns(rdtsc()) as u64);
        let (c, _) = router_pass(est_templates, est_order, &mut r);
        route.push(c);
        let mut g = fresh();
        let (c, n) = gateway_pass(templates, new_order, &mut g);
        gw_new.push(c);
        fwd_new = n;
        flows = g.conntrack().len();
        w.handshake(&mut g);
        let (c, n) = gateway_pass(est_templates, est_order, &mut g);
        gw_est.push(c);
        fwd_est = n;
        if a.export_rows {
            // The end of every flow, without export (this run's table)
            // and with it: a tick far past every timeout, the sweep's
            // work over the whole table, per flow.
            end.push(end_pass(&mut g, a.flows));
            let mut g = make(a.sync, true, gcfg.ct_capacity);
            exp_new.push(gateway_pass(templates, new_order, &mut g).0);
            w.handshake(&mut g);
            exp_est.push(gateway_pass(est_templates, est_order, &mut g).0);
            exp_end.push(end_pass(&mut g, a.flows));
        }
        for (name, _, cfg, new, est) in &mut variants {
            let mut g = Gateway::new(router.clone(), cfg, 0);
            g.tick(tsc.ns(rdtsc()) as u64);
            let (c, n) = gateway_pass(templates, new_order, &mut g);
            assert_eq!(n, fwd_new, "{name} forwards as masquerade does");
            new.push(c);
            w.handshake(&mut g);
            est.push(gateway_pass(est_templates, est_order, &mut g).0);
        }
        if let Some((c, t6, out)) = &nat64 {
            let mut g = Gateway::new(router.clone(), c, 0);
            g.tick(tsc.ns(rdtsc()) as u64);
            let (cy, n) = gateway_pass(t6, new_order, &mut g);
            n64_new.push(cy);
            let (ce, ne) = gateway_pass(t6, est_order, &mut g);
            n64_est.push(ce);
            if replies.is_empty() {
                let mac = macs[usize::from(*out)];
                replies = g
                    .conntrack()
                    .flows()
                    .map(|f| {
                        let r = f.reply;
                        frame::<UDP_FRAME>(mac, r.src as u32, r.dst as u32, r.sport, r.dport)
                    })
                    .collect();
                let k = replies.len().max(1) as u32;
                reply_order = est_order.iter().map(|&i| i % k).collect();
            }
            let (cb, nb) = pass_in(&replies, &reply_order, &mut g, *out);
            n64_back.push(cb);
            n64_fwd = (n, ne, nb);
        }
        if let Some(t6) = &plain6 {
            let mut g = fresh();
            let (cy, n) = gateway_pass(t6, new_order, &mut g);
            v6_new.push(cy);
            let (ce, ne) = gateway_pass(t6, est_order, &mut g);
            v6_est.push(ce);
            v6_fwd = (n, ne, g.conntrack().len());
            if let Some((pad4, mixed, grouped)) = &families {
                let alone = |t: &[[u8; UDP6_FRAME]], order: &[u32]| {
                    let mut r = router.clone();
                    r.tick(tsc.ns(rdtsc()) as u64);
                    router_pass(t, order, &mut r).0
                };
                fam_runs.push([
                    alone(pad4, est_order),
                    alone(t6, est_order),
                    alone(mixed, est_order),
                    alone(mixed, grouped),
                ]);
            }
        }
        if a.sync_rows {
            let mut g = make(true, a.export, gcfg.ct_capacity);
            sync_new.push(gateway_pass(templates, new_order, &mut g).0);
            w.handshake(&mut g);
            sync_est.push(gateway_pass(est_templates, est_order, &mut g).0);
        }
        if a.tcp {
            let mut g = Gateway::new(router.clone(), &nowin_cfg, 0);
            g.tick(tsc.ns(rdtsc()) as u64);
            pass(templates, new_order, &mut g);
            w.handshake(&mut g);
            gw_nowin.push(nowin_pass(est_templates, est_order, &mut g).0);
        }
        if !refused_order.is_empty() {
            let (c, n) = refused_pass(templates, refused_order, &mut g);
            gw_refused.push(c);
            fwd_refused = n;
        }
        // The stage profile: the same passes with the clock on.
        let mut g = Gateway::with_clock(router.clone(), &gcfg, 0, CycleClock::new(rdtsc));
        g.tick(tsc.ns(rdtsc()) as u64);
        pass(templates, new_order, &mut g);
        let after_new = g.clock().clone();
        w.handshake(&mut g);
        let after_new_hs = g.clock().clone();
        pass(est_templates, est_order, &mut g);
        let per = |c: &CycleClock, base: Option<&CycleClock>, n: usize| {
            let mut out = [0.0; Stage::COUNT];
            for (i, o) in out.iter_mut().enumerate() {
                let (cy, mk) = match base {
                    Some(b) => (c.cycles[i] - b.cycles[i], c.marks[i] - b.marks[i]),
                    None => (c.cycles[i], c.marks[i]),
                };
                *o = ((cy as f64 - mk as f64 * read) / n as f64).max(0.0);
            }
            out
        };
        prof_new.push(per(&after_new, None, a.flows));
        prof_est.push(per(g.clock(), Some(&after_new_hs), a.packets));
        eprintln!(
            "run {run}: copy {:.0}, router {:.0}, gateway new {:.0}, established {:.0} cycles/packet; stages new {:?}, established {:?}",
            copy[run], route[run], gw_new[run], gw_est[run], prof_new[run], prof_est[run]
        );
    }
    let m = |v: &mut Vec<f64>| crate::median(v);
    let (copy, route, gw_new, gw_est) =
        (m(&mut copy), m(&mut route), m(&mut gw_new), m(&mut gw_est));
    println!(
        "{} flows of {N}-byte IPv4/{} from 198.18.0.0/24 to 10,000 destinations in 82.0.0.0/8; `{}`: full table ({} IPv4 routes), {} firewall rules (fw1_10k, all accept), SNAT masquerade; one core at {:.2} GHz; median of {} passes; in bursts of 32 as the worker runs them (the stage's prefetch hook, then its burst path); cycles include copying each {N}-byte template into a work buffer. The established packets are of the flows the first packets opened; the packets of those not opened (here: destinations the table has no route to, answered with a rate-limited ICMP unreachable or dropped) are measured on their own.{}\n",
        a.flows,
        if a.tcp { "TCP" } else { "UDP" },
        a.config.display(),
        thousands(routes4),
        gcfg.rules.rules().len(),
        hz / 1e9,
        a.runs,
        if a.tcp {
            " TCP: each flow's SYN opens it; the server's SYN+ACK and the client's ACK complete its handshake (not measured); the segments carry the options Linux sends (SYN and SYN+ACK: MSS, SACK permitted, timestamp, window scale 7; then a timestamp); its established packets are the client's next segment (14 bytes of data) again and again, in the window, so conntrack's window tracking checks and updates for each.".to_string()
        } else if a.ipv6_rows {
            format!(" With `--ipv6-rows` the route file's IPv6 prefixes are loaded too ({} IPv6 routes; every row runs on both tables), spread over 2001:db8:fe::2 on the second port; the plain IPv6 flows are the same flows from 2001:db8:100::HOST to their servers' IPv4 addresses below 2409:8000::/20 (`frame6_plain`), tracked by conntrack and classified by the firewall's IPv6 family, not translated.", thousands(routes6))
        } else {
            String::new()
        }
    );
    println!("| path | cycles/packet | minus copy | Mpps (or new flows/s) per core | forwarded |");
    println!("|---|---|---|---|---|");
    println!(
        "| template copy only | {copy:.0} | 0 | {:.1} | - |",
        hz / copy / 1e6
    );
    println!(
        "| router alone, {} packets | {route:.0} | {:.0} | {:.1} | - |",
        a.packets,
        route - copy,
        hz / route / 1e6
    );
    println!(
        "| gateway, first packet of each flow (new flow) | {gw_new:.0} | {:.0} | {:.2} M flows/s | {fwd_new} of {} ({flows} flows tracked) |",
        gw_new - copy,
        hz / gw_new / 1e6,
        a.flows
    );
    println!(
        "| gateway, {} packets of established flows | {gw_est:.0} | {:.0} | {:.1} | {fwd_est} of {} |",
        a.packets,
        gw_est - copy,
        hz / gw_est / 1e6,
        a.packets
    );
    let synced = (!sync_new.is_empty()).then(|| (m(&mut sync_new), m(&mut sync_est)));
    if let Some((sn, se)) = synced {
        println!(
            "| gateway, new flow, state sync on (its creation logged for the HA peer) | {sn:.0} | {:.0} | {:.2} M flows/s | - |",
            sn - copy,
            hz / sn / 1e6
        );
        println!(
            "| gateway, established flows, state sync on | {se:.0} | {:.0} | {:.1} | - |",
            se - copy,
            hz / se / 1e6
        );
    }
    let exported = (!exp_new.is_empty()).then(|| {
        (
            m(&mut exp_new),
            m(&mut exp_est),
            m(&mut end),
            m(&mut exp_end),
        )
    });
    if let Some((xn, xe, e0, e1)) = exported {
        println!(
            "| gateway, new flow, flow export on (`[export]`: its accounting started) | {xn:.0} | {:.0} | {:.2} M flows/s | - |",
            xn - copy,
            hz / xn / 1e6
        );
        println!(
            "| gateway, established flows, flow export on (each packet counted) | {xe:.0} | {:.0} | {:.1} | - |",
            xe - copy,
            hz / xe / 1e6
        );
        println!("| a flow's end (its expiry by the sweep), per flow | {e0:.0} | - | - | - |");
        println!(
            "| a flow's end, flow export on (its two records written) | {e1:.0} | - | - | - |"
        );
    }
    let variants: Vec<(&str, &str, f64, f64)> = variants
        .into_iter()
        .map(|(name, what, _, mut new, mut est)| (name, what, m(&mut new), m(&mut est)))
        .collect();
    for (name, what, vn, ve) in &variants {
        println!(
            "| gateway, new flow, {name} ({what}) | {vn:.0} | {:.0} | {:.2} M flows/s | - |",
            vn - copy,
            hz / vn / 1e6
        );
        println!(
            "| gateway, established flows, {name} | {ve:.0} | {:.0} | {:.1} | - |",
            ve - copy,
            hz / ve / 1e6
        );
    }
    let nat64 = (!n64_new.is_empty()).then(|| (m(&mut n64_new), m(&mut n64_est)));
    if let Some((nn, ne)) = nat64 {
        let nb = m(&mut n64_back);
        println!(
            "| gateway, new flow, NAT64 (an IPv6 client's first packet to 64:ff9b::SERVER, {UDP6_FRAME} bytes, translated to IPv4) | {nn:.0} | {:.0} | {:.2} M flows/s | {} of {} |",
            nn - copy,
            hz / nn / 1e6,
            n64_fwd.0,
            a.flows
        );
        println!(
            "| gateway, established flows, NAT64 (IPv6 to IPv4) | {ne:.0} | {:.0} | {:.1} | {} of {} |",
            ne - copy,
            hz / ne / 1e6,
            n64_fwd.1,
            a.packets
        );
        println!(
            "| gateway, the servers' replies, NAT64 (IPv4 to IPv6, {UDP_FRAME} bytes in, {UDP6_FRAME} out) | {nb:.0} | {:.0} | {:.1} | {} of {} |",
            nb - copy,
            hz / nb / 1e6,
            n64_fwd.2,
            reply_order.len()
        );
    }
    if !gw_nowin.is_empty() {
        let n = m(&mut gw_nowin);
        println!(
            "| gateway, the same established packets, TCP windows not tracked (`tcp_window = false`) | {n:.0} | {:.0} | {:.1} | - |",
            n - copy,
            hz / n / 1e6
        );
    }
    if !gw_refused.is_empty() {
        let r = m(&mut gw_refused);
        println!(
            "| gateway, {} packets of the {} flows not opened (each a new-flow lookup again) | {r:.0} | {:.0} | {:.2} | {fwd_refused} of {} |",
            refused_order.len(),
            w.refused,
            r - copy,
            hz / r / 1e6,
            refused_order.len()
        );
    }
    println!(
        "\nThe gateway costs {:.2}× the router alone per established packet.",
        (gw_est - copy) / (route - copy)
    );
    if let Some((sn, se)) = synced {
        println!(
            "\nState sync on (each run's passes beside those without it; the changes pushed into a ring with room for a pass's, which the sync thread would drain): new flows/s {:.2}× those without it, established cycles per packet {:.3}× (issue 53's goal: ≥ 0.9× and ≤ 1.05×).",
            gw_new / sn,
            se / gw_est
        );
    }
    if let Some((xn, xe, e0, e1)) = exported {
        println!(
            "\nFlow export on (each run's passes beside those without it; the records pushed into a ring with room for every flow's, which the exporter thread would drain): new flows/s {:.2}× those without it, established cycles per packet {:.3}× (issue 55's goal: ≥ 0.9× and ≤ 1.03×); a flow's end {:.0} cycles more (its two records).",
            gw_new / xn,
            xe / gw_est,
            e1 - e0
        );
    }
    for (name, _, vn, ve) in &variants {
        let mut title = name.to_string();
        title[..1].make_ascii_uppercase();
        println!(
            "\n{title} instead of masquerade (each run's passes beside those without it): new flows/s {:.2}×, established cycles per packet {:.3}×.",
            gw_new / vn,
            ve / gw_est
        );
    }
    let plain = (!v6_new.is_empty()).then(|| (m(&mut v6_new), m(&mut v6_est)));
    if let Some((pn, pe)) = plain {
        println!(
            "| gateway, new flow, plain IPv6 (a client's first packet to 2409:8000::/20, {UDP6_FRAME} bytes: conntrack and the firewall, no translation) | {pn:.0} | {:.0} | {:.2} M flows/s | {} of {} ({} flows tracked) |",
            pn - copy,
            hz / pn / 1e6,
            v6_fwd.0,
            a.flows,
            v6_fwd.2
        );
        println!(
            "| gateway, established flows, plain IPv6 | {pe:.0} | {:.0} | {:.1} | {} of {} |",
            pe - copy,
            hz / pe / 1e6,
            v6_fwd.1,
            a.packets
        );
    }
    if !fam_runs.is_empty() {
        let col = |i| median_at(&fam_runs, i);
        let (r4, r6, rmix, rgrp) = (col(0), col(1), col(2), col(3));
        let rows = [
            (
                format!("router alone, IPv4 (the same packets in {UDP6_FRAME}-byte frames)"),
                r4,
            ),
            ("router alone, plain IPv6".into(), r6),
            (
                "router alone, half the flows IPv4 and half IPv6, the families interleaved at random"
                    .into(),
                rmix,
            ),
            (
                "router alone, the same packets, each burst's IPv4 ones first".into(),
                rgrp,
            ),
        ];
        for (what, c) in rows {
            println!("| {what} | {c:.0} | - | {:.1} | - |", hz / c / 1e6);
        }
        // Each run's own ratios, their median: the passes of a run are
        // side by side.
        let ratio = |i: usize| {
            let mut v: Vec<f64> = fam_runs
                .iter()
                .map(|r| r[i] / ((r[0] + r[1]) / 2.0))
                .collect();
            crate::median(&mut v)
        };
        println!(
            "\nThe router alone on both families at once against the mean of each alone (the same frame size; each run's passes side by side, the median of their ratios): interleaved at random {:.2}×, grouped per burst {:.2}×.",
            ratio(2),
            ratio(3)
        );
    }
    if let Some((pn, pe)) = plain {
        println!(
            "\nPlain IPv6 against IPv4 with NAT44 (the same flows, each run's passes side by side): new flows/s {:.2}×, established packets/s {:.2}×.",
            gw_new / pn,
            gw_est / pe
        );
    }
    if let Some((nn, ne)) = nat64 {
        println!(
            "\nNAT64 against NAT44 (the same flows from IPv6 clients, each run's passes side by side): new flows/s {:.2}×, established packets/s {:.2}× (issue 56's goal: ≥ 0.8×).",
            gw_new / nn,
            gw_est / ne
        );
    }
    let stage = median_at::<{ Stage::COUNT }>;
    println!(
        "\n## Cycles per stage\n\nThe same passes with the gateway's stage clock on (the TSC read where each stage ends; {read:.0} cycles per read, measured back to back, taken off each stage); medians of {} passes. The clock's reads overlap the work (the CPU runs ahead of them), so a stage's figure is where its cycles were spent give or take a few, and the sum differs from the unclocked total. A new flow's destination NAT, route lookup and reply tuple (the source NAT address, its index bucket prefetched) are worked out for a chunk's likely new flows before the first is opened (the gateway's `Plan4`) and counted under route; its NAT port's check, under nat.\n",
        a.runs
    );
    println!("| stage | new flow | established packet |");
    println!("|---|---|---|");
    let (mut sn, mut se) = (0.0, 0.0);
    for (i, name) in Stage::NAMES.iter().enumerate() {
        let (n, e) = (stage(&prof_new, i), stage(&prof_est, i));
        sn += n;
        se += e;
        println!("| {name} | {n:.0} | {e:.0} |");
    }
    println!("| sum of the stages | {sn:.0} | {se:.0} |");
    println!(
        "| unclocked total, less the copy (above) | {:.0} | {:.0} |",
        gw_new - copy,
        gw_est - copy
    );
    if !a.sweep.is_empty() {
        sweep::<N>(&a, hz, &macs, &router, &sized, &table)?;
    }
    Ok(())
}

/// A cache's size as the kernel gives it (`index` 2: L2, 3: L3), or "?".
fn cache_size(index: u32) -> String {
    std::fs::read_to_string(format!(
        "/sys/devices/system/cpu/cpu0/cache/index{index}/size"
    ))
    .map(|s| s.trim().to_string())
    .unwrap_or_else(|_| "?".into())
}

/// The unclocked passes again at each flow count of `a.sweep`, one row
/// each: new flows, established packets and the router alone on the same
/// packets, medians of `a.runs` passes; each on a gateway from `sized`
/// (its table sized for the row's flows), whose table takes `table`
/// bytes.
fn sweep<const N: usize>(
    a: &GatewayArgs,
    hz: f64,
    macs: &[[u8; 6]],
    router: &Router,
    sized: &dyn Fn(usize) -> Gateway,
    table: &dyn Fn(usize) -> usize,
) -> Result<()> {
    println!(
        "\n## By number of flows\n\nThe same unclocked passes at each number of flows, {} established packets each, medians of {} passes; each flow has a template, so the copy reads more memory as the flows grow (as a NIC's freshly written buffers miss the caches), and the copy alone is measured at each size too. A flow's entry is {} bytes (two cache lines, both read by each packet) and its index bucket one line; this CPU's L2 is {} and its L3 {} (shared with whatever else runs on the host): the established path's instructions do not change with the flows, its cache misses do. The table is sized for each row (capacity 17/16 of its flows, at least 1,024), all of it allocated and written when the gateway is built; bytes per flow are the whole table's (entries, free list, index{}) over the flows it holds. {} A tick sweeps at least {} slots, and a thousandth of a larger table (a worker ticks every 10 ms: every slot within 10 s); first 200 ticks 10 ms apart while nothing expires (the sweep's steady cost), then the expiry: time jumps past every timeout and the gateway ticks (each removing at most that many flows) until every flow has ended; its cycles over the flows, and the ticks' times over all the passes (the longest includes whatever the host did to this process meanwhile: the more ticks, the likelier an interruption among them).\n",
        a.packets,
        a.runs,
        std::mem::size_of::<pipeline::conntrack::Flow>(),
        cache_size(2),
        cache_size(3),
        if a.tcp { ", TCP windows" } else { "" },
        linux_conntrack_entry(),
        pipeline::conntrack::SWEEP_PER_TICK
    );
    println!("| flows | flow entries in use | table MiB (bytes per flow) | template copy only: cycles/packet | new flow: cycles | new flows/s | established: cycles/packet (less the copy) | established Mpps | router alone: cycles/packet (less the copy) | a tick while none expires: µs (slots it sweeps) | expiry of them all: cycles a flow | a tick's µs while they expire: p99 / p99.9 / longest (ticks) |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut points: Vec<(f64, f64, f64, f64, f64)> = Vec::new();
    for &n in &a.sweep {
        let w = Workload::<N>::new(n, a.packets, macs, a.tcp, sized(n))?;
        let (mut copy, mut new, mut est, mut alone) = (vec![], vec![], vec![], vec![]);
        let (mut tracked, mut end, mut ticks, mut live) = (0, vec![], vec![], vec![]);
        for _ in 0..a.runs {
            copy.push(pass(&w.est_templates, &w.est_order, &mut Copy).0);
            let mut r = router.clone();
            alone.push(router_pass(&w.est_templates, &w.est_order, &mut r).0);
            let mut g = sized(n);
            new.push(gateway_pass(&w.templates, &w.new_order, &mut g).0);
            w.handshake(&mut g);
            est.push(gateway_pass(&w.est_templates, &w.est_order, &mut g).0);
            tracked = g.conntrack().len();
            live.push(live_ticks(&mut g));
            end.push(end_pass_ticks(&mut g, tracked, &mut ticks));
        }
        let m = |v: &mut Vec<f64>| crate::median(v);
        let (copy, new, est, alone) = (m(&mut copy), m(&mut new), m(&mut est), m(&mut alone));
        let bytes = table(n);
        let per_flow = bytes as f64 / tracked.max(1) as f64;
        let end = m(&mut end);
        let live = m(&mut live) / hz * 1e6;
        ticks.sort_unstable();
        let q = |f: f64| {
            let i = ((ticks.len() as f64 * f) as usize).min(ticks.len().saturating_sub(1));
            ticks.get(i).map_or(0.0, |&c| c as f64 / hz * 1e6)
        };
        let (p99, p999, longest) = (q(0.99), q(0.999), q(1.0));
        println!(
            "| {n} | {tracked} ({:.1} MiB) | {:.0} ({per_flow:.0}) | {copy:.0} | {new:.0} | {:.2} M | {est:.0} ({:.0}) | {:.1} | {alone:.0} ({:.0}) | {live:.0} ({}) | {end:.0} | {p99:.0} / {p999:.0} / {longest:.0} ({}) |",
            (tracked * std::mem::size_of::<pipeline::conntrack::Flow>()) as f64 / (1 << 20) as f64,
            bytes as f64 / (1 << 20) as f64,
            hz / new / 1e6,
            est - copy,
            hz / est / 1e6,
            alone - copy,
            pipeline::conntrack::sweep_scan(tracked),
            ticks.len()
        );
        points.push((n as f64, new, est - copy, alone - copy, per_flow));
    }
    if let Some(p) = &a.plot {
        let with = |suffix: &str| {
            let mut s = p.as_os_str().to_owned();
            s.push(suffix);
            std::path::PathBuf::from(s)
        };
        let line = |f: fn(&(f64, f64, f64, f64, f64)) -> f64| {
            points.iter().map(|q| (q.0, f(q))).collect::<Vec<_>>()
        };
        crate::sweep::plot_series(
            &with("-cycles.svg"),
            "The gateway's cost against the flows it holds (one core)",
            "flows (log scale)",
            "cycles (log scale)",
            &[
                ("new flow".into(), line(|q| q.1)),
                ("established packet (less the copy)".into(), line(|q| q.2)),
                ("router alone (less the copy)".into(), line(|q| q.3)),
            ],
            true,
        )?;
        let mut memory = vec![("Sluice (whole table / flows held)".into(), line(|q| q.4))];
        if let Some(l) = linux_conntrack_bytes() {
            memory.push((
                "Linux (nf_conntrack slab object alone)".into(),
                points.iter().map(|q| (q.0, l as f64)).collect(),
            ));
        }
        crate::sweep::plot_series(
            &with("-memory.svg"),
            "The flow table's bytes per flow",
            "flows (log scale)",
            "bytes per flow",
            &memory,
            false,
        )?;
    }
    Ok(())
}

/// Linux conntrack's entry as this kernel allocates it: the
/// `nf_conntrack` slab's object size, when `/proc/slabinfo` shows it.
fn linux_conntrack_bytes() -> Option<u64> {
    let slab = std::fs::read_to_string("/proc/slabinfo").ok()?;
    slab.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        (f.next() == Some("nf_conntrack")).then(|| f.nth(2)?.parse().ok())?
    })
}

/// [`linux_conntrack_bytes`] said as a sentence.
fn linux_conntrack_entry() -> String {
    match linux_conntrack_bytes() {
        Some(s) => format!("Linux's conntrack entry on this kernel: {s} bytes (the `nf_conntrack` slab's objects), plus its hash table's 8-byte bucket heads and, with NAT, the `nf_nat` extension."),
        None => "Linux's `nf_conntrack` slab is not in /proc/slabinfo here (conntrack not loaded, or not readable).".into(),
    }
}

/// `n` with a comma between each three digits (901899: "901,899").
fn thousands(n: usize) -> String {
    let d = n.to_string();
    let mut out = String::with_capacity(d.len() + d.len() / 3);
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The median over runs of each run's figure `i`.
fn median_at<const K: usize>(runs: &[[f64; K]], i: usize) -> f64 {
    let mut v: Vec<f64> = runs.iter().map(|r| r[i]).collect();
    crate::median(&mut v)
}
