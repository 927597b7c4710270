//! State sync with an HA peer (`[ha] listen`, `peer`, `key_file`), after
//! pfsync(4) and conntrackd: one thread, never a worker, between the
//! gateway workers' sync rings and a UDP socket.
//!
//! - **Out**: every millisecond it empties each worker's ring of
//!   [`Change`]s (creations, state changes, removals, refreshes:
//!   `pipeline::conntrack::sync`) into datagrams of up to [`PER_MESSAGE`]
//!   records, each with the sender's instance, a sequence number and the
//!   time it was sent, authenticated with HMAC-SHA256 under the shared key.
//!   With nothing to say it sends an empty message every second (the peer
//!   sees it alive and its sequence whole).
//! - **In**: a datagram that is not from the peer's address, whose tag
//!   does not verify, sent more than [`MAX_SKEW`] from now, or that is
//!   malformed is dropped and counted: a stranger on the sync link cannot
//!   open a hole in the firewall. A sequence number past the one expected
//!   is a gap (counted; a bulk sync is asked for); one behind it is a
//!   replay or a reordering, dropped. Each record goes to the ring of the
//!   worker it was on at the peer (the same config: the same RSS and NAT
//!   port slices), which applies it at its next tick
//!   (`ConnTrack::apply`).
//! - **Bulk sync**: at start, on hearing a peer instance for the first
//!   time (the peer started, perhaps with flows from its state file), and
//!   after a gap, it asks the peer for its whole table; asked, it has every gateway worker walk its table into
//!   its ring, as much as the ring has room for each tick, while it goes
//!   on forwarding.

use anyhow::{Context, Result};
use hmac::{Hmac, Mac};
use pipeline::conntrack::saved::{Saved, RECORD};
use pipeline::conntrack::sync::{Change, Kind};
use sha2::Sha256;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

type Tag = Hmac<Sha256>;

const MAGIC: &[u8; 4] = b"SLHA";
const VERSION: u8 = 1;
/// Message types.
const CHANGES: u8 = 1;
const BULK_REQUEST: u8 = 2;
/// Magic, version, type, count, instance, sequence, sent at.
const HEADER: usize = 32;
const TAG: usize = 32;
/// A record on the wire: its kind, then the flow.
const ITEM: usize = 1 + RECORD;
/// Records per datagram: what fits 1,400 bytes (under any path MTU of a
/// sync link).
pub const PER_MESSAGE: usize = (1400 - HEADER - TAG) / ITEM;
/// How far a message's send time may be from the receiver's clock.
pub const MAX_SKEW: Duration = Duration::from_secs(30);
/// The sync socket's receive buffer (bytes; above `net.core.rmem_max`
/// with CAP_NET_ADMIN).
const RCVBUF: usize = 32 << 20;
/// Records a worker's ring holds, each way.
pub const RING: usize = 16384;

/// What the sync thread has done (`sluice ctl show ha`, the metrics).
#[derive(Debug, Default)]
pub struct Stats {
    pub sent_messages: AtomicU64,
    pub sent_bytes: AtomicU64,
    pub sent_records: AtomicU64,
    pub received_messages: AtomicU64,
    pub received_bytes: AtomicU64,
    pub received_records: AtomicU64,
    /// Datagrams dropped: not from the peer's address.
    pub strangers: AtomicU64,
    /// Datagrams dropped: the tag did not verify.
    pub bad_tag: AtomicU64,
    /// Datagrams dropped: malformed (length, magic, version, count, a
    /// record that does not decode).
    pub malformed: AtomicU64,
    /// Datagrams dropped: sent too far from now.
    pub stale: AtomicU64,
    /// Datagrams dropped: a sequence number already seen (replayed or
    /// reordered).
    pub replayed: AtomicU64,
    /// Messages the peer sent that never came (sequence gaps).
    pub gaps: AtomicU64,
    /// Bulk syncs asked of the peer, and served to it.
    pub bulk_requested: AtomicU64,
    pub bulk_served: AtomicU64,
    /// Records for a worker whose ring was full (repaired by a bulk
    /// sync).
    pub apply_dropped: AtomicU64,
    /// When the last message from the peer came (ns since the epoch; 0:
    /// none yet).
    pub last_received_ns: AtomicU64,
    /// Send errors (the sync link down, no route).
    pub send_errors: AtomicU64,
    /// The sync lag of each message of changes: from the peer's send time
    /// to its receipt here (µs; the two clocks' offset included). Its
    /// records reach their worker's ring then, and are applied within a
    /// round (a blocked worker woken); they waited at most the peer's 1 ms
    /// loop before the send. Written by the sync thread a message at a
    /// time, read by `show ha` and the metrics.
    pub lag: std::sync::Mutex<Option<hdrhistogram::Histogram<u64>>>,
}

impl Stats {
    /// The sync lag's median, 99th percentile and maximum (seconds), and
    /// the messages measured; `None` before the first.
    pub fn lag(&self) -> Option<([f64; 3], u64)> {
        let h = self.lag.lock().unwrap_or_else(|e| e.into_inner());
        let h = h.as_ref().filter(|h| !h.is_empty())?;
        let s = |us: u64| us as f64 / 1e6;
        Some((
            [
                s(h.value_at_quantile(0.5)),
                s(h.value_at_quantile(0.99)),
                s(h.max()),
            ],
            h.len(),
        ))
    }

    fn record_lag(&self, us: u64) {
        let mut h = self.lag.lock().unwrap_or_else(|e| e.into_inner());
        let h = h.get_or_insert_with(|| {
            hdrhistogram::Histogram::new_with_bounds(1, 60_000_000, 2).expect("valid bounds")
        });
        let _ = h.record(us.clamp(1, 60_000_000));
    }
}

/// The sync thread's ends of one gateway worker's rings.
pub struct ThreadEnds {
    /// The worker's changes.
    pub from: rtrb::Consumer<Change>,
    /// The peer's changes, for the worker to apply.
    pub to: rtrb::Producer<Change>,
    /// Rung after changes were queued in `to`, if the worker is blocked.
    pub waker: Arc<crate::worker::Waker>,
    /// Set to have the worker walk its table into its ring.
    pub bulk: Arc<AtomicBool>,
}

/// A worker's ends.
pub struct WorkerEnds {
    /// Where its table logs (given to its gateway).
    pub log: rtrb::Producer<Change>,
    /// The peer's changes to apply.
    pub apply: rtrb::Consumer<Change>,
    /// Set when the peer asked for a bulk sync.
    pub bulk: Arc<AtomicBool>,
    /// Its bell for the peer's changes.
    pub waker: Arc<crate::worker::Waker>,
}

/// The rings between the sync thread and one worker.
pub fn rings() -> std::io::Result<(ThreadEnds, WorkerEnds)> {
    let (log, from) = rtrb::RingBuffer::new(RING);
    let (to, apply) = rtrb::RingBuffer::new(RING);
    let bulk = Arc::new(AtomicBool::new(false));
    let waker = Arc::new(crate::worker::Waker::new()?);
    Ok((
        ThreadEnds {
            from,
            to,
            bulk: bulk.clone(),
            waker: waker.clone(),
        },
        WorkerEnds {
            log,
            apply,
            bulk,
            waker,
        },
    ))
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64
}

/// One side of the sync protocol, without its socket (tested alone).
pub struct Codec {
    key: Tag,
    instance: u64,
    seq: u64,
    /// The peer's instance and the next sequence number expected of it.
    peer: Option<(u64, u64)>,
    /// Set when a message came from a peer instance not heard before
    /// (the first, or the peer started again): its table may hold flows
    /// this side has not been sent (read back from its state file, or
    /// asked for while this side was down).
    pub new_peer: bool,
}

/// What a received datagram asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// Changes to apply.
    Changes(Vec<Change>),
    /// The peer wants the whole table.
    BulkRequest,
}

impl Codec {
    /// A side keyed with `key`, its instance the time it started.
    pub fn new(key: &[u8]) -> Codec {
        Codec {
            key: Tag::new_from_slice(key).expect("HMAC takes any key length"),
            instance: now_ns(),
            seq: 0,
            peer: None,
            new_peer: false,
        }
    }

    /// The next datagram of type `kind` carrying `items` (at most
    /// [`PER_MESSAGE`]).
    pub fn encode(&mut self, kind: u8, items: &[Change], out: &mut Vec<u8>) {
        debug_assert!(items.len() <= PER_MESSAGE);
        out.clear();
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        out.push(kind);
        out.extend_from_slice(&(items.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.instance.to_le_bytes());
        out.extend_from_slice(&self.seq.to_le_bytes());
        out.extend_from_slice(&now_ns().to_le_bytes());
        self.seq += 1;
        for c in items {
            out.push(c.kind as u8);
            out.extend_from_slice(&c.flow.encode());
        }
        let mut m = self.key.clone();
        m.update(out);
        out.extend_from_slice(&m.finalize().into_bytes());
    }

    /// A datagram received: what it asks for, or `Err` with the counter
    /// it goes to; `gaps` gets the messages skipped before it.
    pub fn decode<'a>(
        &mut self,
        d: &[u8],
        stats: &'a Stats,
        gaps: &mut u64,
    ) -> Result<Received, &'a AtomicU64> {
        if d.len() < HEADER + TAG || !(d.len() - HEADER - TAG).is_multiple_of(ITEM) {
            return Err(&stats.malformed);
        }
        let (body, tag) = d.split_at(d.len() - TAG);
        let mut m = self.key.clone();
        m.update(body);
        if m.verify_slice(tag).is_err() {
            return Err(&stats.bad_tag);
        }
        let word = |i: usize| u64::from_le_bytes(body[i..i + 8].try_into().unwrap_or_default());
        let count = usize::from(u16::from_le_bytes([body[6], body[7]]));
        if &body[0..4] != MAGIC || body[4] != VERSION || count * ITEM != body.len() - HEADER {
            return Err(&stats.malformed);
        }
        let (instance, seq, sent) = (word(8), word(16), word(24));
        if now_ns().abs_diff(sent) > MAX_SKEW.as_nanos() as u64 {
            return Err(&stats.stale);
        }
        match self.peer {
            Some((i, _)) if instance < i => return Err(&stats.replayed),
            Some((i, next)) if instance == i => {
                if seq < next {
                    return Err(&stats.replayed);
                }
                *gaps = seq - next;
            }
            // A new instance of the peer (it started again).
            _ => {
                *gaps = 0;
                self.new_peer = true;
            }
        }
        self.peer = Some((instance, seq + 1));
        match body[5] {
            BULK_REQUEST => Ok(Received::BulkRequest),
            CHANGES => {
                let mut out = Vec::with_capacity(count);
                for item in body[HEADER..].chunks_exact(ITEM) {
                    let kind = Kind::of(item[0]).ok_or(&stats.malformed)?;
                    let rec: &[u8; RECORD] = item[1..].try_into().map_err(|_| &stats.malformed)?;
                    let flow = Saved::decode(rec).map_err(|_| &stats.malformed)?;
                    out.push(Change { kind, flow });
                }
                // The lag of a message that carries changes (the empty
                // keepalive says nothing of it).
                if count > 0 {
                    stats.record_lag(now_ns().saturating_sub(sent) / 1000);
                }
                Ok(Received::Changes(out))
            }
            _ => Err(&stats.malformed),
        }
    }
}

/// Starts the sync thread: bound to `cfg.listen` now (an address in use
/// fails the start), between `workers`' rings and the peer, until `stop`.
pub fn start(
    cfg: &crate::config::SyncConfig,
    workers: Vec<ThreadEnds>,
    stop: Arc<AtomicBool>,
) -> Result<(std::thread::JoinHandle<()>, Arc<Stats>)> {
    let sock = UdpSocket::bind(cfg.listen)
        .with_context(|| format!("[ha] listen: binding {}", cfg.listen))?;
    sock.set_read_timeout(Some(Duration::from_millis(1)))?;
    // Room for a burst (a bulk sync, thousands of new flows at once)
    // while this thread is busy: the default (about 200 KiB, 160
    // datagrams) lost messages in the lab, each a gap and a bulk sync.
    {
        use std::os::fd::AsRawFd;
        let _ = pmd::sys::set_rcvbuf(sock.as_raw_fd(), RCVBUF);
    }
    let stats = Arc::new(Stats::default());
    let st = stats.clone();
    let (peer, codec) = (cfg.peer, Codec::new(&cfg.key));
    let h = std::thread::Builder::new()
        .name("ha-sync".into())
        .spawn(move || {
            crate::privilege::shed_thread();
            run(sock, peer, codec, workers, &st, &stop)
        })
        .context("spawning the HA sync thread")?;
    Ok((h, stats))
}

fn run(
    sock: UdpSocket,
    peer: SocketAddr,
    mut codec: Codec,
    mut workers: Vec<ThreadEnds>,
    stats: &Stats,
    stop: &AtomicBool,
) {
    let mut out = Vec::with_capacity(1500);
    let mut batch: Vec<Change> = Vec::with_capacity(PER_MESSAGE);
    let mut buf = vec![0u8; 65536];
    let send = |codec: &mut Codec, kind: u8, items: &[Change], out: &mut Vec<u8>| {
        codec.encode(kind, items, out);
        match sock.send_to(out, peer) {
            Ok(n) => {
                stats.sent_messages.fetch_add(1, Ordering::Relaxed);
                stats.sent_bytes.fetch_add(n as u64, Ordering::Relaxed);
                stats
                    .sent_records
                    .fetch_add(items.len() as u64, Ordering::Relaxed);
            }
            Err(_) => {
                stats.send_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    };
    // A bulk sync from the peer, to start with its table.
    let ask_bulk = |codec: &mut Codec, out: &mut Vec<u8>| {
        stats.bulk_requested.fetch_add(1, Ordering::Relaxed);
        send(codec, BULK_REQUEST, &[], out);
    };
    ask_bulk(&mut codec, &mut out);
    let mut last_sent = Instant::now();
    let mut last_ask = Instant::now();
    // A gap or a full ring seen since the last ask: the whole table is
    // owed, asked for once a second has passed since that ask.
    let mut owed = false;
    while !stop.load(Ordering::Acquire) {
        for w in &mut workers {
            while let Ok(c) = w.from.pop() {
                batch.push(c);
                if batch.len() == PER_MESSAGE {
                    send(&mut codec, CHANGES, &batch, &mut out);
                    batch.clear();
                    last_sent = Instant::now();
                }
            }
        }
        if !batch.is_empty() || last_sent.elapsed() >= Duration::from_secs(1) {
            send(&mut codec, CHANGES, &batch, &mut out);
            batch.clear();
            last_sent = Instant::now();
        }
        // What came, for at most a millisecond's wait.
        let (mut wanted_bulk, mut new_peer) = (false, false);
        let mut queued = vec![false; workers.len()];
        let mut full = false;
        for _ in 0..4096 {
            // A message is taken only when every worker's ring has room
            // for all its records: a bulk sync comes faster than a
            // worker applies it in bursts, and what waits stays in the
            // socket's buffer (32 MiB) rather than being dropped here.
            if workers.iter().any(|w| w.to.slots() < PER_MESSAGE) {
                full = true;
                break;
            }
            let (n, from) = match sock.recv_from(&mut buf) {
                Ok(x) => x,
                Err(_) => break,
            };
            stats.received_bytes.fetch_add(n as u64, Ordering::Relaxed);
            if from.ip() != peer.ip() {
                stats.strangers.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let mut gaps = 0;
            match codec.decode(&buf[..n], stats, &mut gaps) {
                Err(counter) => {
                    counter.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                Ok(r) => {
                    stats.received_messages.fetch_add(1, Ordering::Relaxed);
                    stats.last_received_ns.store(now_ns(), Ordering::Relaxed);
                    if gaps > 0 {
                        stats.gaps.fetch_add(gaps, Ordering::Relaxed);
                        wanted_bulk = true;
                    }
                    // A peer heard for the first time, or started again:
                    // its whole table (it may hold flows never sent here).
                    if std::mem::take(&mut codec.new_peer) {
                        new_peer = true;
                    }
                    match r {
                        Received::BulkRequest => {
                            stats.bulk_served.fetch_add(1, Ordering::Relaxed);
                            for w in &workers {
                                w.bulk.store(true, Ordering::Release);
                            }
                        }
                        Received::Changes(items) => {
                            stats
                                .received_records
                                .fetch_add(items.len() as u64, Ordering::Relaxed);
                            let n = workers.len();
                            for c in items {
                                let w = usize::from(c.flow.worker) % n.max(1);
                                if workers[w].to.push(c).is_err() {
                                    stats.apply_dropped.fetch_add(1, Ordering::Relaxed);
                                    wanted_bulk = true;
                                } else {
                                    queued[w] = true;
                                }
                            }
                        }
                    }
                }
            }
        }
        // A worker blocked on its interrupts applies what was queued for
        // it now, not at its next 10 ms tick.
        for (w, q) in workers.iter().zip(&queued) {
            if *q || full {
                w.waker.wake();
            }
        }
        // A peer new to this side: its table now. A gap or a full ring:
        // the whole table again, at most once a second.
        owed |= wanted_bulk;
        if new_peer || (owed && last_ask.elapsed() >= Duration::from_secs(1)) {
            ask_bulk(&mut codec, &mut out);
            last_ask = Instant::now();
            owed = false;
        }
        if full {
            // The workers' turn: the socket's read timeout does not pace
            // this loop while the rings are full.
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pipeline::conntrack::{State, Tuple};

    fn change(i: u16) -> Change {
        let t = Tuple {
            src: 0xffff_0a00_0002,
            dst: 0xffff_c633_6407,
            sport: i,
            dport: 53,
            proto: 17,
            zone: 0,
        };
        Change {
            kind: Kind::Created,
            flow: Saved {
                orig: t,
                reply: Tuple {
                    src: t.dst,
                    dst: 0xffff_cb00_7101,
                    sport: 53,
                    dport: 2000 + i,
                    ..t
                },
                state: State::Unreplied,
                remaining_ns: 30_000_000_000,
                worker: 1,
            },
        }
    }

    /// Messages decode as encoded, in order; a gap is measured; a
    /// replayed or reordered one, a forged one (another key, a flipped
    /// bit), a cut one, and one of an older instance are refused, each
    /// to its counter.
    #[test]
    fn messages_are_authenticated_ordered_and_whole() {
        let key = [7u8; 32];
        let mut a = Codec::new(&key);
        let mut b = Codec::new(&key);
        let stats = Stats::default();
        let items: Vec<Change> = (0..PER_MESSAGE as u16).map(change).collect();
        let mut m = Vec::new();
        let mut gaps = 0;
        a.encode(CHANGES, &items, &mut m);
        assert!(m.len() <= 1400);
        assert_eq!(
            b.decode(&m, &stats, &mut gaps).ok(),
            Some(Received::Changes(items.clone()))
        );
        assert!(std::mem::take(&mut b.new_peer), "first contact");
        let first = m.clone();
        // Replayed: refused.
        let e = b.decode(&first, &stats, &mut gaps).unwrap_err();
        assert!(std::ptr::eq(e, &stats.replayed));
        // Two lost, the next taken with the gap measured.
        for _ in 0..3 {
            a.encode(CHANGES, &items[..1], &mut m);
        }
        assert!(b.decode(&m, &stats, &mut gaps).is_ok());
        assert_eq!(gaps, 2);
        assert!(!b.new_peer, "the same instance");
        // Another key, a flipped bit, a cut message.
        let mut stranger = Codec::new(&[8u8; 32]);
        stranger.encode(BULK_REQUEST, &[], &mut m);
        assert!(std::ptr::eq(
            b.decode(&m, &stats, &mut gaps).unwrap_err(),
            &stats.bad_tag
        ));
        a.encode(CHANGES, &items[..2], &mut m);
        let mut flipped = m.clone();
        flipped[HEADER + 5] ^= 1;
        assert!(std::ptr::eq(
            b.decode(&flipped, &stats, &mut gaps).unwrap_err(),
            &stats.bad_tag
        ));
        assert!(std::ptr::eq(
            b.decode(&m[..m.len() - 1], &stats, &mut gaps).unwrap_err(),
            &stats.malformed
        ));
        assert!(b.decode(&m, &stats, &mut gaps).is_ok());
        // A restarted peer (a newer instance) is followed; messages of
        // the instance before are refused.
        let mut a2 = Codec::new(&key);
        a2.instance = a.instance + 1;
        a2.encode(BULK_REQUEST, &[], &mut m);
        assert_eq!(
            b.decode(&m, &stats, &mut gaps).ok(),
            Some(Received::BulkRequest)
        );
        assert!(b.new_peer, "the peer started again");
        a.encode(CHANGES, &[], &mut m);
        assert!(std::ptr::eq(
            b.decode(&m, &stats, &mut gaps).unwrap_err(),
            &stats.replayed
        ));
    }

    /// More records than a worker's ring holds, sent at once (a bulk
    /// sync), all reach the worker while it applies them late: the sync
    /// thread leaves what does not fit in the socket's buffer instead of
    /// dropping it. (It took up to 4,096 datagrams at a time and dropped
    /// what overflowed the ring: 1 M flows from a state file reached the
    /// peer with 39,455 dropped, and the bulk sync owed for them was
    /// forgotten.)
    #[test]
    fn a_bulk_sync_larger_than_the_ring_arrives_whole() {
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let listen = {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            s.local_addr().unwrap()
        };
        let key: Arc<[u8]> = Arc::from(&[9u8; 32][..]);
        let cfg = crate::config::SyncConfig {
            listen,
            peer: peer.local_addr().unwrap(),
            key: key.clone(),
        };
        let (thread_ends, mut worker) = rings().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let (h, stats) = start(&cfg, vec![thread_ends], stop.clone()).unwrap();
        let mut codec = Codec::new(&key);
        let messages = 2000;
        let sent = messages * PER_MESSAGE;
        assert!(sent > RING);
        let mut m = Vec::new();
        let items: Vec<Change> = (0..PER_MESSAGE as u16)
            .map(|i| Change {
                flow: Saved {
                    worker: 0,
                    ..change(i).flow
                },
                ..change(i)
            })
            .collect();
        for _ in 0..messages {
            codec.encode(CHANGES, &items, &mut m);
            peer.send_to(&m, listen).unwrap();
        }
        // The worker late: the ring fills, nothing is dropped.
        let t = Instant::now();
        while worker.apply.slots() < RING - PER_MESSAGE && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(stats.apply_dropped.load(Ordering::Relaxed), 0);
        // Then it applies: every record comes.
        let mut got = 0;
        let t = Instant::now();
        while got < sent && t.elapsed() < Duration::from_secs(10) {
            while worker.apply.pop().is_ok() {
                got += 1;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        stop.store(true, Ordering::Release);
        h.join().unwrap();
        assert_eq!(got, sent);
        assert_eq!(stats.apply_dropped.load(Ordering::Relaxed), 0);
        assert_eq!(stats.gaps.load(Ordering::Relaxed), 0);
    }
}
