//! The control-plane mirror's data path (`[control_plane] tap = true`),
//! as VPP's linux-cp does it: each routed port has a TAP interface in the
//! kernel with the port's MAC and MTU. What the router punts (traffic to
//! its addresses it does not answer itself, ARP replies and Neighbor
//! Advertisements) goes to the receiving interface's TAP; what the kernel
//! sends on a TAP leaves through the port. A VLAN sub-interface with
//! addresses has a TAP of its own: its frames reach the kernel untagged,
//! and the kernel's leave the port tagged. So a routing daemon (BIRD,
//! FRR) on the TAPs holds its BGP sessions through Sluice's ports.
//!
//! Workers never make a syscall for it: each worker copies punted frames
//! into its own lock-free byte ring (bounded: a full ring drops and counts
//! `punt_full`), and takes the kernel's frames from a ring of its own,
//! sending them in fresh buffers (counted as `injected`). One thread, the
//! mirror's, moves frames between the rings and the TAPs (`poll`). Each
//! side rings the other's doorbell (an eventfd) when it puts a frame into
//! an empty ring, so neither waits on a timeout: a worker blocked on
//! interrupts wakes for the kernel's frames, the mirror thread for
//! punted ones. A record in a ring is the frame's length and interface
//! (two little-endian u16: a punted frame names the router interface
//! whose TAP takes it, an injected one the port it leaves by) and the
//! frame.

use pmd::sys::EventFd;
use pmd::tap::Tap;
use rtrb::{Consumer, Producer, RingBuffer};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Bytes of each ring (worker → mirror and mirror → worker).
pub const RING_BYTES: usize = 1 << 20;
/// The largest frame moved (longer ones are dropped and counted).
pub const MAX_FRAME: usize = 9216 + 64;

/// Appends a frame for `port` to a ring; false (nothing written) when it
/// has no room.
#[inline]
pub fn put(p: &mut Producer<u8>, port: u16, frame: &[u8]) -> bool {
    if frame.len() > MAX_FRAME {
        return false;
    }
    let Ok(chunk) = p.write_chunk_uninit(4 + frame.len()) else {
        return false;
    };
    let len = (frame.len() as u16).to_le_bytes();
    let port = port.to_le_bytes();
    let head = [len[0], len[1], port[0], port[1]];
    chunk.fill_from_iter(head.into_iter().chain(frame.iter().copied()));
    true
}

/// Takes the next frame from a ring into `scratch`: its port and bytes.
pub fn take<'a>(c: &mut Consumer<u8>, scratch: &'a mut Vec<u8>) -> Option<(u16, &'a [u8])> {
    if c.slots() < 4 {
        return None;
    }
    let head = c.read_chunk(4).ok()?;
    let (a, b) = head.as_slices();
    let mut h = [0u8; 4];
    for (d, s) in h.iter_mut().zip(a.iter().chain(b)) {
        *d = *s;
    }
    let len = usize::from(u16::from_le_bytes([h[0], h[1]]));
    let port = u16::from_le_bytes([h[2], h[3]]);
    // The writer commits a record whole: its frame is there.
    let chunk = c.read_chunk(4 + len).ok()?;
    let (a, b) = chunk.as_slices();
    scratch.clear();
    scratch.extend(a.iter().chain(b).skip(4));
    chunk.commit_all();
    Some((port, &scratch[..]))
}

/// A worker's end of its punt ring, with the mirror thread's doorbell.
pub struct PuntEnd {
    ring: Producer<u8>,
    bell: Arc<EventFd>,
    /// A frame went into an empty ring this round: the mirror thread may
    /// be asleep in `poll`.
    wake: bool,
}

impl PuntEnd {
    /// Appends a frame (see [`put`]).
    #[inline]
    pub fn put(&mut self, port: u16, frame: &[u8]) -> bool {
        let empty = self.ring.slots() == self.ring.buffer().capacity();
        let ok = put(&mut self.ring, port, frame);
        self.wake |= ok && empty;
        ok
    }

    /// Rings the mirror thread's doorbell if this round put a frame into
    /// an empty ring: one write per round at most, none while the mirror
    /// thread is behind (a flood at the router's addresses costs the
    /// worker no syscalls).
    #[inline]
    pub fn wake(&mut self) {
        if self.wake {
            self.wake = false;
            self.bell.signal();
        }
    }
}

/// The mirror thread's ends of one worker's rings, and the worker's
/// doorbell (rung after the kernel's frames are put in its ring, so that a
/// worker blocked on interrupts sends them at once).
pub type MirrorEnds = (Consumer<u8>, Producer<u8>, Arc<EventFd>);

/// Where a worker takes the kernel's frames, and its doorbell.
pub type FromKernel = (Consumer<u8>, Arc<EventFd>);

/// A pair of rings for one worker: its ends, and the mirror's.
pub struct WorkerRings {
    /// The worker's: where it punts.
    pub punt: PuntEnd,
    /// Where it takes the kernel's frames, and its doorbell (in its
    /// interrupt set).
    pub from_kernel: FromKernel,
    /// The mirror thread's ends.
    pub mirror: MirrorEnds,
}

impl WorkerRings {
    /// Two empty rings of [`RING_BYTES`]; `mirror_bell` wakes the mirror
    /// thread.
    pub fn new(mirror_bell: &Arc<EventFd>) -> std::io::Result<WorkerRings> {
        let (punt, punted) = RingBuffer::new(RING_BYTES);
        let (to_worker, from_kernel) = RingBuffer::new(RING_BYTES);
        let bell = Arc::new(EventFd::new()?);
        Ok(WorkerRings {
            punt: PuntEnd {
                ring: punt,
                bell: mirror_bell.clone(),
                wake: false,
            },
            from_kernel: (from_kernel, bell.clone()),
            mirror: (punted, to_worker, bell),
        })
    }
}

/// The mirror's counters.
#[derive(Debug, Default)]
pub struct MirrorCounters {
    /// Frames written to a TAP (punted by workers).
    pub to_kernel: AtomicU64,
    /// Frames the kernel sent on a TAP, handed to a worker.
    pub from_kernel: AtomicU64,
    /// Frames lost: a TAP write failed, a punted frame for a port without
    /// TAP, or the worker's ring was full.
    pub lost: AtomicU64,
    /// TAP carriers switched to follow their port's link.
    pub carrier_changes: AtomicU64,
}

/// How often the ports' links are looked at (their TAPs' carriers follow).
const LINK_CHECK: Duration = Duration::from_millis(100);

/// A router interface's TAP: the interface (a port, or a VLAN
/// sub-interface of one), the port its frames use and the tags they carry
/// there, and the port's control (whose link the TAP's carrier follows, as
/// linux-cp keeps a TAP's carrier with its interface's link).
pub struct Mirror {
    /// The router interface (what a punt names).
    pub iface: u16,
    /// Its port.
    pub port: u16,
    /// For a sub-interface: the tags its frames carry on the port.
    pub vlan: Option<pipeline::router::Vlan>,
    /// The TAP.
    pub tap: Tap,
    /// The port's control.
    pub control: Arc<dyn pmd::PortControl>,
}

/// Room kept before a frame read from a TAP, for a sub-interface's tags.
const HEADROOM: usize = 8;

impl Mirror {
    /// The kernel's frame in `buf[HEADROOM..HEADROOM + n]` as it leaves
    /// the port: tagged in place for a sub-interface (its MACs moved into
    /// the headroom).
    fn outgoing<'a>(&self, buf: &'a mut [u8], n: usize) -> &'a [u8] {
        let Some(v) = self.vlan.filter(|_| n >= 14) else {
            return &buf[HEADROOM..HEADROOM + n];
        };
        let t = v.tag_len();
        let at = HEADROOM - t;
        buf.copy_within(HEADROOM..HEADROOM + 12, at);
        buf[at + 12..HEADROOM + 12].copy_from_slice(&v.tag_bytes()[..t]);
        &buf[at..HEADROOM + n]
    }
}

/// The mirror thread's work: until `stop`, frames from the workers' punt
/// rings to the TAPs of the interfaces they name, and from the TAPs
/// (tagged for a sub-interface) to the worker that sends on each port
/// (`sender[port]`: an index into `workers`); every [`LINK_CHECK`], each
/// TAP's carrier set to its port's link (a link down on the wire is then a
/// link down in the kernel: routes through it flushed, routing daemons
/// told).
pub fn run(
    taps: Vec<Mirror>,
    mut workers: Vec<MirrorEnds>,
    bell: &EventFd,
    sender: Vec<Option<usize>>,
    counters: Arc<MirrorCounters>,
    kernel_flows: Option<Arc<pipeline::router::kernel_flows::KernelFlows>>,
    stop: &AtomicBool,
) {
    let mut scratch = Vec::with_capacity(MAX_FRAME);
    let mut buf = vec![0u8; HEADROOM + MAX_FRAME];
    let mut poller = pmd::tap::Poller::new(&taps.iter().map(|m| &m.tap).collect::<Vec<_>>())
        .also(bell.as_raw_fd());
    let mut woken = vec![false; workers.len()];
    let mut links: Vec<Option<bool>> = vec![None; taps.len()];
    let mut checked = Instant::now() - LINK_CHECK;
    while !stop.load(Ordering::Relaxed) {
        if checked.elapsed() >= LINK_CHECK {
            checked = Instant::now();
            for (m, last) in taps.iter().zip(links.iter_mut()) {
                let now = m.control.link_up();
                if now.is_some() && now != *last {
                    let up = now == Some(true);
                    match m.tap.set_carrier(up) {
                        Ok(()) => {
                            if last.is_some() {
                                counters.carrier_changes.fetch_add(1, Ordering::Relaxed);
                                eprintln!(
                                    "control plane: link {} on the port of TAP {}",
                                    if up { "up" } else { "down" },
                                    m.tap.name()
                                );
                            }
                            *last = now;
                        }
                        Err(e) => {
                            eprintln!("control plane: TAP {}: {e}", m.tap.name());
                            *last = now;
                        }
                    }
                }
            }
        }
        for (punted, _, _) in workers.iter_mut() {
            while let Some((iface, frame)) = take(punted, &mut scratch) {
                let ok = taps
                    .iter()
                    .find(|m| m.iface == iface)
                    .is_some_and(|m| m.tap.send(frame).is_ok());
                let c = if ok {
                    &counters.to_kernel
                } else {
                    &counters.lost
                };
                c.fetch_add(1, Ordering::Relaxed);
            }
        }
        if !poller.wait(Duration::from_millis(1)) {
            continue;
        }
        if poller.ready(taps.len()) {
            bell.clear();
        }
        for (i, m) in taps.iter().enumerate() {
            if !poller.ready(i) {
                continue;
            }
            while let Ok(Some(n)) = m.tap.recv(&mut buf[HEADROOM..]) {
                // The kernel's flow, for the punt rules' `state`.
                if let (Some(k), Some(l3)) = (&kernel_flows, buf.get(HEADROOM + 14..HEADROOM + n)) {
                    k.sent(l3, k.now_s());
                }
                let to = sender.get(usize::from(m.port)).copied().flatten();
                let mut ok = false;
                if let Some((w, (_, k, _))) = to.and_then(|w| Some((w, workers.get_mut(w)?))) {
                    ok = put(k, m.port, m.outgoing(&mut buf, n));
                    woken[w] |= ok;
                }
                let c = if ok {
                    &counters.from_kernel
                } else {
                    &counters.lost
                };
                c.fetch_add(1, Ordering::Relaxed);
            }
        }
        for ((_, _, b), w) in workers.iter().zip(woken.iter_mut()) {
            if std::mem::take(w) {
                b.signal();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records go through whole and in order, across the ring's wrap, and
    /// a full ring refuses without writing half a record.
    #[test]
    fn records_survive_the_wrap_and_a_full_ring_refuses() {
        let (mut p, mut c) = RingBuffer::new(1000);
        let mut scratch = Vec::new();
        for round in 0..50u16 {
            let frame: Vec<u8> = (0..(100 + round as usize * 7) % 300)
                .map(|i| (i as u8) ^ (round as u8))
                .collect();
            assert!(put(&mut p, round, &frame));
            let (port, got) = take(&mut c, &mut scratch).unwrap();
            assert_eq!(port, round);
            assert_eq!(got, &frame[..]);
        }
        assert!(take(&mut c, &mut scratch).is_none());
        let big = vec![7u8; 600];
        assert!(put(&mut p, 1, &big));
        assert!(!put(&mut p, 2, &big), "no room for a second");
        assert_eq!(take(&mut c, &mut scratch).unwrap().1.len(), 600);
        assert!(take(&mut c, &mut scratch).is_none());
    }
}
