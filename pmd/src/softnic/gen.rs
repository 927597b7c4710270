//! The softnic's traffic generator and sink: one thread per process, like a
//! hardware tester with a TX side (filling the ports' RX rings) and an RX
//! side (draining their TX rings).
//!
//! Below its top rate the thread sleeps between batches (with 1 µs timer
//! slack), so that on a two-core machine the workers' CPU figures stay
//! clean; it wakes early by its measured sleep overshoot and spins only that
//! remainder, so packets and coalescing timers fire on time. At `Rate::Max`
//! it spins.

use super::{Coalesce, GenConfig, Intr, Pattern, Rate, Shared, SinkCounters, SoftRx, SoftTx};
use super::{Control, SoftnicConfig};
use crate::hist::{hist_pair, HistReader, HistWriter};
use crate::mbuf::{Mbuf, Pool, CACHE_SIZE, DEFAULT_DATA_ROOM};
use crate::sys::{rdtsc, set_timer_slack, EventFd, Tsc};
use crate::{BoxRx, BoxTx, Counter, OpenPort, PacketBuf, PortError, QueueCounters};
use pipeline::checksum;
use pipeline::wire::{
    EtherType, EthernetFrame, IpProto, Ipv4Packet, Ipv6Packet, ETHERNET_HEADER_LEN,
};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Exp};
use std::sync::atomic::{fence, AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// First word of the payload signature ("SLC1").
pub const MAGIC: u32 = 0x534c_4331;
/// Bytes of the signature: magic, sequence, TSC.
pub const SIG_LEN: usize = 16;
/// Shortest sleep between batches below the top rate.
const MIN_SLEEP: Duration = Duration::from_micros(5);
/// Longest the sink goes without draining the TX rings.
const SINK_INTERVAL: Duration = Duration::from_micros(100);
/// Packets offered per queue per iteration at `Rate::Max`.
const MAX_BURST_OFFER: usize = 32;
/// Most packets one port emits per iteration (keeps the sink responsive).
const EMIT_BUDGET: usize = 4096;
/// A generator that fell further behind than this skips the backlog.
const MAX_LAG: Duration = Duration::from_millis(1);

const RUN: u8 = 0;
const STOP_GEN: u8 = 1;
const FINISH: u8 = 2;

struct Ctl {
    phase: AtomicU8,
    gen_stopped: AtomicBool,
}

/// One precomputed flow: its frame with a zero signature and the offsets to
/// patch per packet.
struct Flow {
    frame: Vec<u8>,
    sig_off: usize,
    csum_off: usize,
    udp: bool,
    queue: u16,
    rss: u32,
}

struct GenPort {
    port: u16,
    shared: Arc<Shared>,
    pool: Pool,
    rx: Vec<rtrb::Producer<Mbuf>>,
    tx: Vec<rtrb::Consumer<Mbuf>>,
    flows: Vec<Flow>,
    next_flow: usize,
    seq: u32,
    rate: Rate,
    gap: f64,
    next_due: f64,
    exp: Option<Exp<f64>>,
    rng: SmallRng,
    coalesce_cycles: u64,
    coalesce_frames: usize,
    pending_since: Vec<u64>,
    hist: HistWriter,
}

/// Builds softnic ports and then runs their shared generator/sink thread.
pub struct Generator {
    tsc: Tsc,
    ports: Vec<GenPort>,
}

/// The running generator/sink thread.
pub struct GenHandle {
    ctl: Arc<Ctl>,
    thread: JoinHandle<()>,
}

fn symmetric_hash(a: &[u8], b: &[u8], pa: u16, pb: u16) -> u32 {
    // Order-independent: XOR of both endpoints, then a 32-bit finaliser.
    let mut x: u64 = u64::from(pa ^ pb);
    for (i, (p, q)) in a.iter().zip(b).enumerate() {
        x ^= u64::from(p ^ q) << ((i % 8) * 8);
    }
    x = (x ^ (x >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    x = (x ^ (x >> 33)).wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    (x ^ (x >> 33)) as u32
}

fn pick<T: Copy + Into<u128> + TryFrom<u128>>(rng: &mut SmallRng, s: super::Span<T>) -> T {
    let (a, b) = (s.first.into(), s.last.into());
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    let v = lo + rng.random_range(0..=(hi - lo).min(u64::MAX as u128) as u64) as u128;
    T::try_from(v).unwrap_or(s.first)
}

fn build_flow(cfg: &GenConfig, rng: &mut SmallRng, nrxq: u16) -> Flow {
    let tcp = rng.random_bool(cfg.tcp_share.clamp(0.0, 1.0));
    let v6 = rng.random_bool(cfg.ipv6_share.clamp(0.0, 1.0));
    let sport = pick(rng, cfg.src_port);
    let dport = pick(rng, cfg.dst_port);
    let l3_len = if v6 { 40 } else { 20 };
    let l4_len = if tcp { 20 } else { 8 };
    let min = ETHERNET_HEADER_LEN + l3_len + l4_len + SIG_LEN;
    let len = cfg.size.clamp(min, DEFAULT_DATA_ROOM);
    let mut f = vec![0u8; len];
    // Payload after the signature: a recognisable byte pattern.
    for (i, b) in f[min..].iter_mut().enumerate() {
        *b = i as u8;
    }
    let mut eth = EthernetFrame::new_unchecked(&mut f[..]);
    eth.set_dst(cfg.dst_mac);
    eth.set_src(cfg.src_mac);
    let l4_off = ETHERNET_HEADER_LEN + l3_len;
    let l4_total = len - l4_off;
    let proto = if tcp { IpProto::TCP } else { IpProto::UDP };
    let (pseudo, rss) = if v6 {
        eth.set_ethertype(EtherType::IPV6);
        let src = pick(rng, cfg.src_ip6.map(u128::from)).to_be_bytes();
        let dst = pick(rng, cfg.dst_ip6.map(u128::from)).to_be_bytes();
        let mut ip = Ipv6Packet::new_unchecked(&mut f[ETHERNET_HEADER_LEN..]);
        ip.set_version();
        ip.set_payload_len(l4_total as u16);
        ip.set_next_header(proto);
        ip.set_hop_limit(64);
        ip.set_src(src);
        ip.set_dst(dst);
        (
            checksum::pseudo_v6(src, dst, proto, l4_total as u32),
            symmetric_hash(&src, &dst, sport, dport),
        )
    } else {
        eth.set_ethertype(EtherType::IPV4);
        let src = pick(rng, cfg.src_ip.map(u32::from)).to_be_bytes();
        let dst = pick(rng, cfg.dst_ip.map(u32::from)).to_be_bytes();
        let mut ip = Ipv4Packet::new_unchecked(&mut f[ETHERNET_HEADER_LEN..]);
        ip.set_version_ihl(20);
        ip.set_total_len((len - ETHERNET_HEADER_LEN) as u16);
        ip.set_flags_frag(0x4000);
        ip.set_ttl(64);
        ip.set_protocol(proto);
        ip.set_src(src);
        ip.set_dst(dst);
        ip.fill_checksum();
        (
            checksum::pseudo_v4(src, dst, proto, l4_total as u16),
            symmetric_hash(&src, &dst, sport, dport),
        )
    };
    let l4 = &mut f[l4_off..];
    l4[0..2].copy_from_slice(&sport.to_be_bytes());
    l4[2..4].copy_from_slice(&dport.to_be_bytes());
    let csum_off = if tcp {
        l4[4..8].copy_from_slice(&1u32.to_be_bytes()); // seq
        l4[8..12].copy_from_slice(&1u32.to_be_bytes()); // ack
        l4[12] = 5 << 4; // data offset
        l4[13] = 0x18; // PSH|ACK
        l4[14..16].copy_from_slice(&65535u16.to_be_bytes());
        16
    } else {
        l4[4..6].copy_from_slice(&(l4_total as u16).to_be_bytes());
        6
    };
    let c = !checksum::fold(checksum::sum(l4, pseudo));
    let c = if !tcp && c == 0 { 0xffff } else { c };
    l4[csum_off..csum_off + 2].copy_from_slice(&c.to_be_bytes());
    Flow {
        frame: f,
        sig_off: l4_off + l4_len,
        csum_off: l4_off + csum_off,
        udp: !tcp,
        queue: (rss % u32::from(nrxq.max(1))) as u16,
        rss,
    }
}

impl<T: Copy> super::Span<T> {
    fn map<U>(self, f: impl Fn(T) -> U) -> super::Span<U> {
        super::Span {
            first: f(self.first),
            last: f(self.last),
        }
    }
}

/// Checks a frame the sink received; returns the generator's TSC stamp.
fn check(frame: &[u8]) -> Option<u64> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    let (proto, l4) = match eth.ethertype() {
        EtherType::IPV4 => {
            let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
            if !ip.verify_checksum()
                || ETHERNET_HEADER_LEN + usize::from(ip.total_len()) != frame.len()
            {
                return None;
            }
            let l3 = eth.payload();
            (
                ip.protocol(),
                &l3[ip.header_len()..usize::from(ip.total_len())],
            )
        }
        EtherType::IPV6 => {
            let ip = Ipv6Packet::new_checked(eth.payload()).ok()?;
            let l3 = eth.payload();
            (
                ip.next_header(),
                &l3[40..40 + usize::from(ip.payload_len())],
            )
        }
        _ => return None,
    };
    let hl = match proto {
        IpProto::UDP => 8,
        IpProto::TCP => usize::from(l4.get(12)? >> 4) * 4,
        _ => return None,
    };
    let sig = l4.get(hl..hl + SIG_LEN)?;
    if u32::from_be_bytes([sig[0], sig[1], sig[2], sig[3]]) != MAGIC {
        return None;
    }
    let mut t = [0u8; 8];
    t.copy_from_slice(&sig[8..16]);
    Some(u64::from_be_bytes(t))
}

impl Generator {
    /// A generator with no ports yet.
    pub fn new(tsc: Tsc) -> Self {
        Generator {
            tsc,
            ports: Vec::new(),
        }
    }

    /// True when no port was added.
    pub fn is_empty(&self) -> bool {
        self.ports.is_empty()
    }

    /// Creates a softnic port fed by this generator. Returns the port and
    /// the reader of its end-to-end latency histogram (TSC cycles).
    pub fn add_port(&mut self, cfg: &SoftnicConfig) -> Result<(OpenPort, HistReader), PortError> {
        if cfg.rxq == 0 || cfg.txq == 0 || cfg.rxd == 0 || cfg.txd == 0 {
            return Err(PortError::Config(
                "softnic needs at least one queue and one descriptor per ring".into(),
            ));
        }
        let g = &cfg.gen;
        if g.flows == 0 {
            return Err(PortError::Config(
                "softnic generator needs at least one flow".into(),
            ));
        }
        // Rings, plus what workers hold in TX buffers and per-thread caches.
        let pool_size =
            cfg.rxd * usize::from(cfg.rxq) + cfg.txd * usize::from(cfg.txq) + 16 * CACHE_SIZE;
        let pool = Pool::new(
            &format!("softnic{}", cfg.port),
            pool_size,
            DEFAULT_DATA_ROOM,
        )?;
        let mut rng = SmallRng::seed_from_u64(g.seed ^ u64::from(cfg.port) << 32);
        let flows = (0..g.flows)
            .map(|_| build_flow(g, &mut rng, cfg.rxq))
            .collect();
        let intr = (0..cfg.rxq)
            .map(|_| {
                Ok(Intr {
                    armed: AtomicBool::new(false),
                    efd: EventFd::new().map_err(|e| PortError::Io {
                        path: "eventfd".into(),
                        source: e,
                    })?,
                    raised: Counter::default(),
                })
            })
            .collect::<Result<Vec<_>, PortError>>()?;
        let shared = Arc::new(Shared {
            rx: (0..cfg.rxq).map(|_| QueueCounters::default()).collect(),
            tx: (0..cfg.txq).map(|_| QueueCounters::default()).collect(),
            intr,
            sink: SinkCounters::default(),
        });
        let (mut rx_prod, mut rx_q) = (Vec::new(), Vec::new());
        for q in 0..usize::from(cfg.rxq) {
            let (p, c) = rtrb::RingBuffer::new(cfg.rxd);
            rx_prod.push(p);
            rx_q.push(Box::new(SoftRx {
                ring: c,
                shared: shared.clone(),
                queue: q,
            }) as BoxRx);
        }
        let (mut tx_cons, mut tx_q) = (Vec::new(), Vec::new());
        for _ in 0..cfg.txq {
            let (p, c) = rtrb::RingBuffer::new(cfg.txd);
            tx_cons.push(c);
            tx_q.push(Box::new(SoftTx { ring: p }) as BoxTx);
        }
        let (gap, exp) = match g.rate {
            Rate::Pps(pps) if pps > 0.0 => {
                let gap = self.tsc.hz as f64 / pps;
                let exp = (g.pattern == Pattern::Poisson)
                    .then(|| Exp::new(1.0 / gap).ok())
                    .flatten();
                (gap, exp)
            }
            Rate::Pps(_) => (f64::INFINITY, None),
            Rate::Max => (0.0, None),
        };
        let (hist_w, hist_r) = hist_pair();
        let Coalesce {
            rx_usecs,
            rx_frames,
        } = cfg.coalesce;
        self.ports.push(GenPort {
            port: cfg.port,
            shared: shared.clone(),
            pool,
            rx: rx_prod,
            tx: tx_cons,
            flows,
            next_flow: 0,
            seq: 0,
            rate: g.rate,
            gap,
            next_due: 0.0,
            exp,
            rng,
            coalesce_cycles: self.tsc.cycles(Duration::from_micros(u64::from(rx_usecs))),
            coalesce_frames: rx_frames.max(1) as usize,
            pending_since: vec![0; usize::from(cfg.rxq)],
            hist: hist_w,
        });
        Ok((
            OpenPort {
                control: Arc::new(Control(shared)),
                rx: rx_q,
                tx: tx_q,
                _buf: std::marker::PhantomData,
            },
            hist_r,
        ))
    }

    /// Starts the generator/sink thread; `on_start` runs first in it (to
    /// pin it to a core).
    pub fn spawn(self, on_start: impl FnOnce() + Send + 'static) -> std::io::Result<GenHandle> {
        let ctl = Arc::new(Ctl {
            phase: AtomicU8::new(RUN),
            gen_stopped: AtomicBool::new(false),
        });
        let c = ctl.clone();
        let thread = std::thread::Builder::new()
            .name("softnic-gen".into())
            .spawn(move || {
                on_start();
                self.run(&c);
            })?;
        Ok(GenHandle { ctl, thread })
    }

    fn run(mut self, ctl: &Ctl) {
        set_timer_slack(1_000);
        let tsc = self.tsc;
        let start = rdtsc() as f64;
        for p in &mut self.ports {
            p.next_due = start;
        }
        let sink_cycles = tsc.cycles(SINK_INTERVAL);
        let max_lag = tsc.cycles(MAX_LAG) as f64;
        let spin = self.ports.iter().any(|p| p.rate == Rate::Max);
        let mut last_publish = 0u64;
        let min_sleep = tsc.cycles(MIN_SLEEP);
        let max_overshoot = tsc.cycles(Duration::from_micros(100)) as f64;
        let max_spin = tsc.cycles(Duration::from_micros(100));
        let mut overshoot = 0f64;
        let publish_cycles = tsc.cycles(Duration::from_millis(10));
        loop {
            let phase = ctl.phase.load(Ordering::Acquire);
            let now = rdtsc();
            if phase == RUN {
                for p in &mut self.ports {
                    p.generate(now, max_lag);
                }
            } else {
                ctl.gen_stopped.store(true, Ordering::Release);
            }
            for p in &mut self.ports {
                p.sink();
                p.interrupts(now);
            }
            if now.wrapping_sub(last_publish) > publish_cycles {
                last_publish = now;
                for p in &mut self.ports {
                    p.hist.publish();
                }
            }
            if phase == FINISH {
                // Workers have stopped: drain what they left in the TX rings.
                for p in &mut self.ports {
                    while p.sink() > 0 {}
                    p.hist.publish();
                }
                break;
            }
            if phase == RUN && spin {
                continue;
            }
            let mut next = now + sink_cycles;
            for p in &self.ports {
                if phase == RUN && p.gap.is_finite() {
                    next = next.min(p.next_due as u64);
                }
                for &since in &p.pending_since {
                    if since != 0 {
                        next = next.min(since + p.coalesce_cycles);
                    }
                }
            }
            // Sleeps overshoot (by about 18 µs on a VM here): sleep for the
            // wait less the measured overshoot, then spin the rest, so that
            // packets and coalescing timers fire on time.
            let now = rdtsc();
            let wait = next.saturating_sub(now);
            let nap = wait.saturating_sub(overshoot as u64).max(min_sleep);
            std::thread::sleep(Duration::from_nanos(tsc.ns(nap) as u64));
            let woke = rdtsc();
            let over = woke.saturating_sub(now + nap) as f64;
            overshoot += (over.min(max_overshoot) - overshoot) / 8.0;
            while rdtsc() < next && next - woke < max_spin {
                crate::sys::cpu_relax();
            }
        }
        for p in self.ports {
            p.pool.flush_cache();
            p.hist.close();
        }
    }
}

impl GenPort {
    /// Offers the packets that are due by `now` to the RX rings.
    fn generate(&mut self, now: u64, max_lag: f64) {
        let nowf = now as f64;
        if self.rate == Rate::Max {
            for q in 0..self.rx.len() {
                for _ in 0..MAX_BURST_OFFER {
                    self.emit_to(q, now);
                }
            }
            self.kick();
            return;
        }
        if nowf - self.next_due > max_lag {
            // Behind by more than MAX_LAG (the thread did not run): skip
            // the backlog rather than burst it, and count what was skipped
            // (in mean gaps; Poisson's mean gap is `gap` too).
            let skipped = (nowf - max_lag - self.next_due) / self.gap;
            if skipped.is_finite() && skipped >= 1.0 {
                self.shared.sink.late.add(skipped as u64);
            }
            self.next_due = nowf - max_lag;
        }
        let mut n = 0;
        while self.next_due <= nowf && n < EMIT_BUDGET {
            let q = usize::from(self.flows[self.next_flow].queue);
            self.emit_to(q, now);
            n += 1;
            self.next_due += match &self.exp {
                Some(e) => e.sample(&mut self.rng),
                None => self.gap,
            };
        }
        if n > 0 {
            self.kick();
        }
    }

    /// Builds the next flow's packet into RX queue `q` (or counts why not).
    #[inline]
    fn emit_to(&mut self, q: usize, now: u64) {
        let c = &self.shared.rx[q];
        self.shared.sink.generated.add(1);
        let fi = self.next_flow;
        self.next_flow = if fi + 1 == self.flows.len() {
            0
        } else {
            fi + 1
        };
        // Below the top rate a full ring is checked first (saves building a
        // packet that would be dropped); at `Rate::Max` every offered packet
        // is built, so that the offered rate is the generator's real top
        // rate and not how fast it can count drops.
        if self.rate != Rate::Max && self.rx[q].is_full() {
            c.missed.add(1);
            return;
        }
        let Some(mut m) = self.pool.alloc() else {
            c.nombuf.add(1);
            return;
        };
        let f = &self.flows[fi];
        m.copy_from(&f.frame);
        let seq = self.seq;
        self.seq = seq.wrapping_add(1);
        let mut sig = [0u8; SIG_LEN];
        sig[0..4].copy_from_slice(&MAGIC.to_be_bytes());
        sig[4..8].copy_from_slice(&seq.to_be_bytes());
        sig[8..16].copy_from_slice(&now.to_be_bytes());
        let d = m.data_mut();
        d[f.sig_off..f.sig_off + SIG_LEN].copy_from_slice(&sig);
        // The template's checksum covers a zero signature: add its words.
        let old = u16::from_be_bytes([d[f.csum_off], d[f.csum_off + 1]]);
        let mut new = !checksum::fold(u64::from(!old) + checksum::sum(&sig, 0));
        if f.udp && new == 0 {
            new = 0xffff;
        }
        d[f.csum_off..f.csum_off + 2].copy_from_slice(&new.to_be_bytes());
        m.set_rx_meta(self.port, q as u16, now, f.rss);
        let len = f.frame.len() as u64;
        if self.rx[q].push(m).is_ok() {
            c.packets.add(1);
            c.bytes.add(len);
        } else {
            c.missed.add(1);
        }
    }

    /// After publishing packets: raise interrupts that are armed and due.
    fn kick(&mut self) {
        // Pairs with the fence in `Intr::enable`.
        fence(Ordering::SeqCst);
        self.interrupts(rdtsc());
    }

    /// Interrupt coalescing for every RX queue of this port.
    fn interrupts(&mut self, now: u64) {
        for q in 0..self.rx.len() {
            let intr: &Intr = &self.shared.intr[q];
            if !intr.armed.load(Ordering::SeqCst) {
                self.pending_since[q] = 0;
                continue;
            }
            let waiting = self.rx[q].buffer().capacity() - self.rx[q].slots();
            if waiting == 0 {
                self.pending_since[q] = 0;
                continue;
            }
            if self.pending_since[q] == 0 {
                self.pending_since[q] = now.max(1);
            }
            let due = waiting >= self.coalesce_frames
                || now.saturating_sub(self.pending_since[q]) >= self.coalesce_cycles;
            if due
                && intr
                    .armed
                    .compare_exchange(true, false, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
            {
                intr.efd.signal();
                intr.raised.add(1);
                self.pending_since[q] = 0;
            }
        }
    }

    /// Drains the TX rings: checks packets, records latency, frees them.
    /// Returns how many it drained.
    fn sink(&mut self) -> usize {
        let mut total = 0;
        for q in 0..self.tx.len() {
            let n = self.tx[q].slots();
            if n == 0 {
                continue;
            }
            let c = &self.shared.tx[q];
            let Ok(chunk) = self.tx[q].read_chunk(n) else {
                continue;
            };
            let mut bytes = 0;
            for m in chunk {
                bytes += m.len() as u64;
                match check(m.data()) {
                    Some(t0) => self.hist.record(m.aux().saturating_sub(t0)),
                    None => self.shared.sink.bad.add(1),
                }
            }
            c.packets.add(n as u64);
            c.bytes.add(bytes);
            total += n;
        }
        total
    }
}

impl GenHandle {
    /// Stops offering packets and waits until the generator has stopped;
    /// the sink keeps draining.
    pub fn stop_generating(&self) {
        let _ = self
            .ctl
            .phase
            .compare_exchange(RUN, STOP_GEN, Ordering::AcqRel, Ordering::Acquire);
        while !self.ctl.gen_stopped.load(Ordering::Acquire) && !self.thread.is_finished() {
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Drains the TX rings one last time and ends the thread. Call after the
    /// workers have stopped.
    pub fn finish(self) {
        self.stop_generating();
        self.ctl.phase.store(FINISH, Ordering::Release);
        let _ = self.thread.join();
    }
}
