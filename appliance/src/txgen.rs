//! Sluice as a tester on real ports: the generator a `txonly` or
//! `flowgen` worker runs on each of its TX ports, and the commands that
//! drive it while it runs (`sluice ctl gen`, `sluice bench ndr`).
//!
//! A generator makes each packet from its flow's precomputed frame
//! ([`pmd::probe::Flow`]) in a fresh buffer from the port's pool, stamps
//! it (flow, per-flow sequence, TSC) and queues it on the worker's TX
//! buffer for the port, when the [`Pacer`] says it is due: evenly spaced
//! from the TSC at a constant rate (not a second's packets in one burst),
//! Poisson arrivals, or as fast as the port takes them. A generator that
//! fell more than [`MAX_LAG`] behind (the core was taken away) skips the
//! backlog and counts it as `gen_late`. Frames leave with the port's MAC as
//! source and its `peer_mac` (the device under test) as destination.

use pmd::probe::{build_flows, rng_for, Flow, Pacer};
use pmd::softnic::{GenConfig, Rate};
use pmd::PacketBuf;
use std::time::Duration;

/// How far behind its schedule a generator may fall before it skips.
pub const MAX_LAG: Duration = Duration::from_millis(1);

/// The largest frame a generator makes (bytes, without FCS): a pool
/// buffer's data room.
pub const MAX_FRAME: usize = pmd::probe::MAX_FRAME_LEN;

/// A frame size for the generators: one length for every flow, or the
/// simple IMIX ([`pmd::probe::IMIX`], one length per flow in turn).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GenSize {
    /// Bytes without FCS.
    One(usize),
    /// 64, 594 and 1518-byte frames with FCS, 7:4:1.
    Imix,
}

/// A change to a running generator (`sluice ctl gen start/stop`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GenCommand {
    /// The new rate (packets per second per port; 0 stops).
    pub rate: Rate,
    /// A new frame size (the flows are rebuilt, their sequences go on).
    pub size: Option<GenSize>,
    /// Stop by itself after this long (a trial); `None`: until told.
    pub duration: Option<Duration>,
    /// Its number, which the worker publishes once applied
    /// (`WorkerCounters::gen_applied`); 0 when no one waits for it.
    pub seq: u64,
}

/// One port's generator in a worker.
pub struct TxGen {
    /// The port it sends on.
    pub port: u16,
    cfg: GenConfig,
    flows: Vec<Flow>,
    /// Per flow, the next sequence number.
    seq: Vec<u32>,
    next: usize,
    /// The number of its first flow in the signatures (flows are numbered
    /// across the process's generators, so that a receiver tells streams
    /// apart).
    base: u16,
    pacer: Pacer,
    /// TSC at which a trial ends (`u64::MAX`: none).
    stop_at: u64,
    hz: u64,
    max_lag: f64,
}

impl TxGen {
    /// A generator of `cfg`'s traffic on `port` (TSC of `hz`), starting
    /// its schedule at `now`, its flows numbered from `base`.
    pub fn new(port: u16, cfg: GenConfig, hz: u64, now: u64, base: u16) -> TxGen {
        let flows = flows_of(&cfg, port);
        let mut pacer = Pacer::new(cfg.rate, cfg.pattern, hz, cfg.seed ^ u64::from(port));
        pacer.start(now);
        TxGen {
            port,
            seq: vec![0; flows.len()],
            flows,
            next: 0,
            base,
            pacer,
            stop_at: u64::MAX,
            hz,
            max_lag: hz as f64 * MAX_LAG.as_secs_f64(),
            cfg,
        }
    }

    /// Whether it is sending.
    pub fn running(&self) -> bool {
        match self.cfg.rate {
            Rate::Pps(p) => p > 0.0,
            Rate::Max => true,
        }
    }

    /// Whether it sends on a schedule (not as fast as it can).
    pub fn paced(&self) -> bool {
        !self.pacer.is_max()
    }

    /// Stops sending.
    pub fn stop(&mut self) {
        self.cfg.rate = Rate::Pps(0.0);
        self.stop_at = u64::MAX;
    }

    /// Applies a command at `now` (control path: may rebuild the flows).
    pub fn apply(&mut self, c: &GenCommand, now: u64) {
        let rebuild = match c.size {
            // One size for every flow (a mix given in the config ends).
            Some(GenSize::One(n)) if n != self.cfg.size || !self.cfg.sizes.is_empty() => {
                self.cfg.size = n;
                self.cfg.sizes.clear();
                true
            }
            Some(GenSize::Imix) if self.cfg.sizes != pmd::probe::IMIX => {
                self.cfg.sizes = pmd::probe::IMIX.to_vec();
                true
            }
            _ => false,
        };
        if rebuild {
            self.flows = flows_of(&self.cfg, self.port);
        }
        self.cfg.rate = c.rate;
        self.pacer = Pacer::new(
            c.rate,
            self.cfg.pattern,
            self.hz,
            self.cfg.seed ^ u64::from(self.port) ^ now,
        );
        self.pacer.start(now);
        self.stop_at = c.duration.map_or(u64::MAX, |d| {
            now + (d.as_secs_f64() * self.hz as f64) as u64
        });
    }

    /// How many packets are due at `now` (at most `budget`), and how many
    /// were skipped (behind schedule); ends a trial whose time is up.
    #[inline]
    pub fn due(&mut self, now: u64, budget: usize) -> (usize, u64) {
        if !self.running() {
            return (0, 0);
        }
        if now >= self.stop_at {
            // The trial's time is up: what was due before its end and not
            // made (the core was away) is skipped, so that made + skipped
            // is the schedule's count.
            let (n, s) = self.pacer.due(self.stop_at - 1, usize::MAX, f64::INFINITY);
            self.stop();
            return (0, n as u64 + s);
        }
        self.pacer.due(now, budget, self.max_lag)
    }

    /// The next packets, written into `bufs` (fresh, empty buffers) and
    /// stamped at `now`; returns how many did not fit (left empty). The
    /// flow and sequence counters stay in registers for the burst (kept
    /// in `self` they would chain every packet to the one before through
    /// memory).
    #[inline]
    pub fn fill<B: PacketBuf>(&mut self, bufs: &mut [B], now: u64) -> usize {
        let mut unfit = 0;
        let mut next = self.next;
        let nflows = self.flows.len();
        if nflows == 1 && self.cfg.signature {
            // One flow (txonly): its sequence in a register too.
            let (flow, number) = (&self.flows[0], self.base);
            let (len, st) = (flow.frame.len(), flow.stamper());
            let mut seq = self.seq[0];
            for m in bufs {
                let Some(d) = m.append(len) else {
                    unfit += 1;
                    continue;
                };
                flow.copy_to(d);
                st.stamp(d, number, seq, now);
                seq = seq.wrapping_add(1);
            }
            self.seq[0] = seq;
            return unfit;
        }
        for m in bufs {
            let Some(d) = m.append(self.flows[next].frame.len()) else {
                unfit += 1;
                continue;
            };
            self.flows[next].copy_to(d);
            self.stamp_flow(next, d, now);
            next = if next + 1 == nflows { 0 } else { next + 1 };
        }
        self.next = next;
        unfit
    }

    /// The next packet, made by `make` (a fresh buffer holding a copy of
    /// the bytes given) and stamped at `now`; `None` without a buffer.
    #[inline]
    pub fn make<B: PacketBuf>(&mut self, make: &dyn Fn(&[u8]) -> Option<B>, now: u64) -> Option<B> {
        let mut m = make(&self.flows[self.next].frame)?;
        self.stamp(&mut m, now);
        Some(m)
    }

    /// Stamps `m`, a copy of the next flow's frame, and moves on to the
    /// following flow.
    #[inline]
    fn stamp<B: PacketBuf>(&mut self, m: &mut B, now: u64) {
        let i = self.next;
        self.next = if i + 1 == self.flows.len() { 0 } else { i + 1 };
        self.stamp_flow(i, m.data_mut(), now);
    }

    /// Stamps `d`, a copy of flow `i`'s frame, with that flow's next
    /// sequence number and `now`; without the signature, leaves it as is
    /// (testpmd's txonly).
    #[inline]
    fn stamp_flow(&mut self, i: usize, d: &mut [u8], now: u64) {
        if !self.cfg.signature {
            return;
        }
        let seq = self.seq[i];
        self.seq[i] = seq.wrapping_add(1);
        self.flows[i].stamp(d, self.base.wrapping_add(i as u16), seq, now);
    }
}

/// A generator's flows for `port` (reproducible from `cfg.seed`).
fn flows_of(cfg: &GenConfig, port: u16) -> Vec<Flow> {
    build_flows(cfg, &mut rng_for(cfg.seed, port), 1, MAX_FRAME)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pmd::mbuf::{Mbuf, Pool};
    use pmd::softnic::Pattern;

    /// A trial sends its rate for its duration, evenly spaced, then stops;
    /// a new size rebuilds the frames and the sequences go on.
    #[test]
    fn trials_pace_stop_and_resize() {
        let hz = 1_000_000_000;
        let cfg = GenConfig {
            rate: Rate::Pps(0.0),
            flows: 4,
            pattern: Pattern::Constant,
            ..GenConfig::default()
        };
        let mut g = TxGen::new(0, cfg, hz, 0, 100);
        assert!(!g.running());
        assert_eq!(g.due(1_000, 32), (0, 0));
        g.apply(
            &GenCommand {
                rate: Rate::Pps(1_000_000.0),
                size: Some(GenSize::One(256)),
                duration: Some(Duration::from_micros(100)),
                seq: 0,
            },
            10_000,
        );
        // 1 Mpps: one packet per µs, for 100 µs.
        let mut sent = 0;
        let mut t = 10_000;
        while t < 200_000 {
            sent += g.due(t, 8).0;
            t += 1_000;
        }
        assert_eq!(sent, 100);
        assert!(!g.running());
        let pool = Pool::new("tester-test", 64, 2048).unwrap();
        let make = |b: &[u8]| pmd::filled::<Mbuf>(pool.alloc(), b);
        let sigs: Vec<_> = (0..6)
            .map(|_| {
                let m = g.make(&make, 5).unwrap();
                assert_eq!(m.data().len(), 256);
                pmd::probe::read(m.data()).unwrap()
            })
            .collect();
        let flows: Vec<u16> = sigs.iter().map(|s| s.flow).collect();
        assert_eq!(flows, [100, 101, 102, 103, 100, 101]);
        assert_eq!(sigs[4].seq, 1);
    }
}
