//! Packet capture (`sluice ctl capture`): the packets a port receives,
//! sends or drops, optionally filtered by a tcpdump expression, written to
//! a pcapng file (one interface block per port, nanosecond timestamps, the
//! direction in `epb_flags`, a dropped packet's reason as its comment).
//!
//! The workers copy matching packets into a ring each ([`Tap`]: bounded,
//! never blocking; a full ring counts the packet as a capture drop) and the
//! management thread writes them out ([`Capture`]). A worker without a tap
//! pays one branch per burst. Filters are compiled by libpcap (through
//! `tcpdump -ddd`, so that an expression means what it means to tcpdump)
//! and run by `pipeline::bpf`.

use anyhow::{bail, Context, Result};
use pcap_file::pcapng::blocks::enhanced_packet::{EnhancedPacketBlock, EnhancedPacketOption};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::DataLink;
use pipeline::bpf::Program;
use pipeline::DropReason;
use std::borrow::Cow;
use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

/// Bytes kept of each packet (longer ones are cut, their length kept).
pub const SNAPLEN: usize = 1600;

/// Packets each worker's ring holds.
const RING: usize = 4096;

/// Packets the management thread writes per turn.
pub const DRAIN_MAX: usize = 4096;

/// Directions, as bits.
pub const RX: u8 = 1;
/// Sent.
pub const TX: u8 = 2;
/// Dropped (by a stage) after it was received on the port.
pub const DROP: u8 = 4;

/// One captured packet.
pub struct Record {
    tsc: u64,
    dir: u8,
    reason: u8,
    len: u32,
    data: [u8; SNAPLEN],
}

/// A worker's end: what to capture and where to put it.
pub struct Tap {
    port: u16,
    /// Of the received packets (and those dropped), only those of this RX
    /// queue (`--queue`).
    rx_queue: Option<u16>,
    dirs: u8,
    filter: Option<Arc<Program>>,
    ring: rtrb::Producer<Record>,
    dropped: Arc<AtomicU64>,
    /// Packets still wanted, all workers together (`None`: no limit).
    remaining: Option<Arc<AtomicU64>>,
}

impl Tap {
    /// Whether it takes the packets received from RX queue `queue` (and
    /// those of them dropped): all queues' but with `--queue`. (What is
    /// sent, it takes if it was made for the worker's TX queue.)
    #[inline]
    pub fn takes(&self, queue: u16) -> bool {
        self.rx_queue.is_none_or(|q| q == queue)
    }

    /// Offers the packets of a burst seen on `port` in direction `dir`
    /// (drops with their reasons).
    #[inline(never)]
    pub fn burst<'a>(
        &mut self,
        port: u16,
        dir: u8,
        tsc: u64,
        pkts: impl Iterator<Item = (&'a [u8], u8)>,
    ) {
        if port != self.port || self.dirs & dir == 0 {
            return;
        }
        for (b, reason) in pkts {
            if self.filter.as_ref().is_some_and(|f| !f.matches(b)) {
                continue;
            }
            if let Some(left) = &self.remaining {
                let took =
                    left.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
                if took.is_err() {
                    return; // the count is reached: the rest is not wanted
                }
            }
            if self.ring.is_full() {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let n = b.len().min(SNAPLEN);
            let mut r = Record {
                tsc,
                dir,
                reason,
                len: b.len() as u32,
                data: [0; SNAPLEN],
            };
            r.data[..n].copy_from_slice(&b[..n]);
            let _ = self.ring.push(r);
        }
    }

    /// The port it captures.
    pub fn port(&self) -> u16 {
        self.port
    }
}

/// What an operator asked for.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Port index.
    pub port: u16,
    /// Only this queue's packets: received from RX queue N (and dropped
    /// after), sent on TX queue N (as `dpdk-pdump`'s `queue=N`).
    pub queue: Option<u16>,
    /// Direction bits.
    pub dirs: u8,
    /// Stop after this many packets (0: no limit).
    pub count: u64,
    /// Stop after this long.
    pub duration: Option<Duration>,
    /// The tcpdump expression, if any.
    pub filter: Option<String>,
    /// The pcapng file.
    pub file: PathBuf,
}

/// Compiles a tcpdump expression for Ethernet frames with libpcap (through
/// `tcpdump -ddd`).
pub fn compile(expr: &str) -> Result<Program> {
    let out = std::process::Command::new("tcpdump")
        .args(["-ddd", "-y", "EN10MB", "--", expr])
        .output()
        .context("capture filters are compiled by libpcap through tcpdump, which is not installed (apt-get install tcpdump)")?;
    if !out.status.success() {
        bail!(
            "filter `{expr}`: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Program::from_ddd(&String::from_utf8_lossy(&out.stdout))
        .map_err(|e| anyhow::anyhow!("filter `{expr}`: {e}"))
}

/// A running capture, on the management thread.
pub struct Capture {
    /// What was asked.
    pub spec: Spec,
    writer: Option<PcapNgWriter<BufWriter<File>>>,
    rings: Vec<rtrb::Consumer<Record>>,
    dropped: Arc<AtomicU64>,
    written: u64,
    started: Instant,
    /// TSC and wall clock at the same instant, to date the records.
    tsc0: u64,
    wall0: Duration,
    tsc_hz: f64,
}

/// Where a capture stands.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Status {
    /// Still capturing.
    pub running: bool,
    /// Packets written.
    pub written: u64,
    /// Packets lost because a worker's ring was full.
    pub dropped: u64,
    /// The file.
    pub file: String,
}

impl Capture {
    /// Opens the file (one interface block per port of `ports`) and makes
    /// one tap per worker; `tx_queues[w]`: the TX queue worker `w` sends
    /// on through the port, if any (with `--queue`, only the worker whose
    /// TX queue it is captures what is sent).
    pub fn start(
        spec: Spec,
        ports: &[String],
        tx_queues: &[Option<u16>],
        tsc_hz: f64,
    ) -> Result<(Capture, Vec<Tap>)> {
        let filter = match &spec.filter {
            Some(e) => Some(Arc::new(compile(e)?)),
            None => None,
        };
        let f = File::create(&spec.file)
            .with_context(|| format!("creating {}", spec.file.display()))?;
        let mut w = PcapNgWriter::new(BufWriter::new(f)).context("writing the pcapng header")?;
        for name in ports {
            w.write_pcapng_block(InterfaceDescriptionBlock {
                linktype: DataLink::ETHERNET,
                snaplen: SNAPLEN as u32,
                options: vec![
                    InterfaceDescriptionOption::IfName(Cow::Owned(name.clone())),
                    InterfaceDescriptionOption::IfTsResol(9),
                ],
            })
            .context("writing an interface block")?;
        }
        let dropped = Arc::new(AtomicU64::new(0));
        let remaining = (spec.count > 0).then(|| Arc::new(AtomicU64::new(spec.count)));
        let mut rings = Vec::new();
        let mut taps = Vec::new();
        for txq in tx_queues {
            let (p, c) = rtrb::RingBuffer::new(RING);
            rings.push(c);
            let sends = spec.queue.is_none() || *txq == spec.queue;
            taps.push(Tap {
                port: spec.port,
                rx_queue: spec.queue,
                dirs: if sends { spec.dirs } else { spec.dirs & !TX },
                filter: filter.clone(),
                ring: p,
                dropped: dropped.clone(),
                remaining: remaining.clone(),
            });
        }
        let wall0 = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        Ok((
            Capture {
                spec,
                writer: Some(w),
                rings,
                dropped,
                written: 0,
                started: Instant::now(),
                tsc0: pmd::sys::rdtsc(),
                wall0,
                tsc_hz,
            },
            taps,
        ))
    }

    /// Writes what the workers captured, at most [`DRAIN_MAX`] packets a
    /// call (so that the management thread stays responsive; what it cannot
    /// write in time fills the rings and is counted as lost); true when the
    /// capture is complete (its count or duration reached) and the taps
    /// should go.
    pub fn drain(&mut self) -> bool {
        let Some(w) = self.writer.as_mut() else {
            return true;
        };
        let mut budget = DRAIN_MAX;
        for ring in &mut self.rings {
            while budget > 0 {
                let Ok(r) = ring.pop() else { break };
                budget -= 1;
                if self.spec.count > 0 && self.written >= self.spec.count {
                    continue;
                }
                let dt = (r.tsc.wrapping_sub(self.tsc0) as i64) as f64 / self.tsc_hz;
                let ts = if dt >= 0.0 {
                    self.wall0 + Duration::from_secs_f64(dt)
                } else {
                    self.wall0.saturating_sub(Duration::from_secs_f64(-dt))
                };
                let mut options =
                    vec![EnhancedPacketOption::Flags(if r.dir == TX { 2 } else { 1 })];
                if r.dir == DROP {
                    let why = DropReason::ALL
                        .get(usize::from(r.reason))
                        .map_or("?", |d| d.name());
                    options.push(EnhancedPacketOption::Comment(Cow::Owned(format!(
                        "dropped: {why}"
                    ))));
                }
                let n = (r.len as usize).min(SNAPLEN);
                let ok = w
                    .write_pcapng_block(EnhancedPacketBlock {
                        interface_id: u32::from(self.spec.port),
                        timestamp: ts,
                        original_len: r.len,
                        data: Cow::Borrowed(&r.data[..n]),
                        options,
                    })
                    .is_ok();
                if ok {
                    self.written += 1;
                }
            }
        }
        let wanted = self.spec.count;
        // What is written is in the file now (a reader following it, as
        // `sluice ctl capture -w -` does, sees whole blocks).
        let _ = std::io::Write::flush(w.get_mut());
        (wanted > 0 && self.written + self.dropped.load(Ordering::Relaxed) >= wanted)
            || self
                .spec
                .duration
                .is_some_and(|d| self.started.elapsed() >= d)
    }

    /// Flushes and closes the file (after the taps are gone and drained).
    pub fn finish(&mut self) {
        self.drain();
        if let Some(w) = self.writer.take() {
            let _ = w.into_inner().into_inner();
        }
    }

    /// Whether it is still capturing.
    pub fn running(&self) -> bool {
        self.writer.is_some()
    }

    /// Where it stands.
    pub fn status(&self) -> Status {
        Status {
            running: self.running(),
            written: self.written,
            dropped: self.dropped.load(Ordering::Relaxed),
            file: self.spec.file.display().to_string(),
        }
    }
}

/// Parses `capture start` arguments: `--port P` (name), `--queue N`,
/// `--direction rx|tx|drop|all` (default rx), `--count N`, `--duration
/// S`, `--filter EXPR`, `-w FILE` (an absolute path: the client resolves
/// it).
pub fn parse_spec(args: &[String], ports: &[String]) -> Result<Spec, String> {
    let mut port = None;
    let mut queue = None;
    let mut dirs = RX;
    let mut count = 0;
    let mut duration = None;
    let mut filter = None;
    let mut file = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .ok_or_else(|| format!("`{a}` needs a value"))
        };
        match a.as_str() {
            "--port" | "-p" => {
                let v = val()?;
                port = Some(
                    ports
                        .iter()
                        .position(|p| *p == v)
                        .ok_or_else(|| format!("no port `{v}` (ports: {})", ports.join(", ")))?
                        as u16,
                );
            }
            "--queue" | "-q" => {
                let v = val()?;
                queue = Some(
                    v.parse::<u16>()
                        .map_err(|_| format!("--queue `{v}`: a queue number"))?,
                );
            }
            "--direction" | "-d" => {
                dirs = match val()?.as_str() {
                    "rx" => RX,
                    "tx" => TX,
                    "drop" => DROP,
                    "all" => RX | TX | DROP,
                    d => return Err(format!("direction `{d}`: rx, tx, drop or all")),
                }
            }
            "--count" | "-c" => {
                let v = val()?;
                count = v
                    .parse()
                    .map_err(|_| format!("--count `{v}`: a number of packets"))?;
            }
            "--duration" => {
                let v = val()?;
                let s: f64 = v
                    .parse()
                    .ok()
                    .filter(|s: &f64| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
                    .ok_or_else(|| format!("--duration `{v}`: seconds, up to a day"))?;
                duration = Some(Duration::from_secs_f64(s));
            }
            "--filter" | "-f" => filter = Some(val()?),
            "-w" | "--write" => {
                let v = PathBuf::from(val()?);
                if !v.is_absolute() {
                    return Err("-w needs an absolute path".into());
                }
                file = Some(v);
            }
            other => return Err(format!("unknown capture option `{other}`")),
        }
    }
    Ok(Spec {
        port: port.ok_or("--port is required")?,
        queue,
        dirs,
        count,
        duration,
        filter,
        file: file.ok_or("-w FILE is required")?,
    })
}
