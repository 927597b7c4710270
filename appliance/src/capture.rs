//! Packet capture (`sluice ctl capture`): the packets a port receives,
//! sends or drops, optionally filtered by a tcpdump expression, written to
//! a pcapng file (one interface block per port, nanosecond timestamps, the
//! direction in `epb_flags`, a dropped packet's reason as its comment).
//!
//! The workers copy matching packets into a ring each ([`Tap`]: bounded,
//! never blocking; a full ring counts the packet as a capture drop) and a
//! writer thread of the capture's own writes them out ([`Capture`]): the
//! management thread never compiles a filter or touches the file. The
//! file is created new (never an existing file, symlink, FIFO or device)
//! and a write error ends the capture and is reported in its status. A worker without a tap
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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// Bytes kept of each packet (longer ones are cut, their length kept).
pub const SNAPLEN: usize = 1600;

/// Packets each worker's ring holds.
const RING: usize = 4096;

/// How often the writer empties the rings.
const DRAIN_EVERY: Duration = Duration::from_millis(5);

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

/// How long libpcap may take to compile a filter (`tcpdump -ddd`): a
/// filter of hundreds of ports takes it minutes and hundreds of MB, so it
/// is stopped here and the capture refused.
pub const COMPILE_LIMIT: Duration = Duration::from_secs(3);

/// The most `tcpdump -ddd` may print (a program of 4,096 instructions,
/// BPF's limit, is about 100 KB).
const COMPILE_OUTPUT: u64 = 4 << 20;

/// Compiles a tcpdump expression for Ethernet frames with libpcap (through
/// `tcpdump -ddd`), within [`COMPILE_LIMIT`] (then tcpdump is killed).
pub fn compile(expr: &str) -> Result<Program> {
    compile_within(expr, COMPILE_LIMIT)
}

fn compile_within(expr: &str, limit: Duration) -> Result<Program> {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let mut child = Command::new("tcpdump")
        .args(["-ddd", "-y", "EN10MB", "--", expr])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("capture filters are compiled by libpcap through tcpdump, which is not installed (apt-get install tcpdump)")?;
    // Both pipes read on threads of their own (bounded), so that tcpdump
    // never blocks on a full pipe while it is waited on here.
    let reader = |p: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut out = Vec::new();
            if let Some(p) = p {
                let _ = p.take(COMPILE_OUTPUT).read_to_end(&mut out);
            }
            out
        })
    };
    let out = reader(child.stdout.take().map(|p| Box::new(p) as _));
    let err = reader(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                bail!(
                    "filter `{expr}`: libpcap did not compile it within {} s (a filter this large would be slow on every packet too; narrow it)",
                    limit.as_secs_f64()
                );
            }
        }
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    if !status.success() {
        bail!("filter `{expr}`: {}", String::from_utf8_lossy(&err).trim());
    }
    Program::from_ddd(&String::from_utf8_lossy(&out))
        .map_err(|e| anyhow::anyhow!("filter `{expr}`: {e}"))
}

/// Creates the capture file: a new regular file (`O_CREAT|O_EXCL`: an
/// existing file, a symlink, a FIFO or a device at the path is refused,
/// never followed, truncated or blocked on), mode 0640.
pub fn create(path: &std::path::Path) -> Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o640)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => anyhow::anyhow!(
                "{} exists: a capture writes a new file, never over another (remove it or name another)",
                path.display()
            ),
            _ => anyhow::anyhow!("creating {}: {e}", path.display()),
        })
}

/// What a capture's writer tells its asker: its start, or why it did not;
/// false when the asker is no longer there to be told (its deadline
/// passed while libpcap compiled), and then the capture does not start.
pub type Started = Box<dyn FnOnce(Result<Status, String>) -> bool + Send>;

/// What a capture's writer tells those who asked it to stop, once it has.
pub type Stopped = Box<dyn FnOnce(Status) + Send>;

/// A running capture, as the management thread sees it: the writer runs on
/// a thread of its own ([`Capture::start`]), so that neither a slow filter
/// compilation nor a slow or failing file ever holds the management thread.
pub struct Capture {
    /// What was asked.
    pub spec: Spec,
    shared: Arc<Shared>,
}

/// What the writer and the management thread share.
struct Shared {
    written: AtomicU64,
    dropped: Arc<AtomicU64>,
    /// Until the writer is done (the file closed, the taps gone).
    running: AtomicBool,
    /// Asked to stop.
    stop: AtomicBool,
    /// Why it stopped early (a write error).
    error: Mutex<Option<String>>,
    /// Those waiting for it to stop.
    stopped: Mutex<Vec<Stopped>>,
    file: String,
}

impl Shared {
    /// A capture of `file`, running.
    fn new(file: String) -> Self {
        Shared {
            written: AtomicU64::new(0),
            dropped: Arc::new(AtomicU64::new(0)),
            running: AtomicBool::new(true),
            stop: AtomicBool::new(false),
            error: Mutex::new(None),
            stopped: Mutex::new(Vec::new()),
            file,
        }
    }

    fn status(&self) -> Status {
        Status {
            running: self.running.load(Ordering::Acquire),
            written: self.written.load(Ordering::Acquire),
            dropped: self.dropped.load(Ordering::Relaxed),
            file: self.file.clone(),
            error: self.error.lock().ok().and_then(|e| e.clone()),
        }
    }
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
    /// Why it ended early: the file could not be written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Capture {
    /// Starts a capture on a writer thread of its own: it compiles the
    /// filter (within [`COMPILE_LIMIT`]), creates the file ([`create`]),
    /// writes one interface block per port of `ports`, hands one tap per
    /// worker to `taps` (`tx_queues[w]`: the TX queue worker `w` sends on
    /// through the port, if any; with `--queue`, only the worker whose TX
    /// queue it is captures what is sent), then tells `started`; and
    /// writes what the taps catch until its count or duration is reached,
    /// it is stopped, or the file fails, when it takes the taps back.
    pub fn start(
        spec: Spec,
        ports: Vec<String>,
        tx_queues: Vec<Option<u16>>,
        taps: Vec<crossbeam_channel::Sender<Option<Tap>>>,
        tsc_hz: f64,
        started: Started,
    ) -> Capture {
        let shared = Arc::new(Shared::new(spec.file.display().to_string()));
        let sh = shared.clone();
        let sp = spec.clone();
        let spawned = std::thread::Builder::new()
            .name("capture".into())
            .spawn(move || {
                let writer = open(&sp, &ports).map_err(|e| format!("{e:#}"));
                let writer = match writer {
                    Ok(w) => w,
                    Err(e) => {
                        sh.running.store(false, Ordering::Release);
                        let _ = started(Err(e));
                        finished(&sh);
                        return;
                    }
                };
                if !started(Ok(sh.status())) {
                    // Nobody was told it runs: it does not (the file it
                    // made, empty but for its header, goes too).
                    drop(writer);
                    let _ = std::fs::remove_file(&sp.file);
                    sh.running.store(false, Ordering::Release);
                    finished(&sh);
                    return;
                }
                let (writer, new_taps) = writer.with_taps(&sp, &tx_queues, &sh, tsc_hz);
                for (tx, tap) in taps.iter().zip(new_taps) {
                    let _ = tx.send(Some(tap));
                }
                writer.run(&sh, &taps);
            });
        if spawned.is_err() {
            shared.running.store(false, Ordering::Release);
        }
        Capture { spec, shared }
    }

    /// Asks it to stop; `stopped` is told once it has (at once if it has).
    pub fn stop(&self, stopped: Stopped) {
        self.shared.stop.store(true, Ordering::Release);
        if let Ok(mut s) = self.shared.stopped.lock() {
            if self.shared.running.load(Ordering::Acquire) {
                s.push(stopped);
                return;
            }
        }
        stopped(self.shared.status());
    }

    /// Whether it is still capturing.
    pub fn running(&self) -> bool {
        self.shared.running.load(Ordering::Acquire)
    }

    /// Where it stands.
    pub fn status(&self) -> Status {
        self.shared.status()
    }

    /// Stops it and waits up to `within` for the file to be closed (at
    /// shutdown); false if it was not.
    pub fn finish_within(&self, within: Duration) -> bool {
        self.shared.stop.store(true, Ordering::Release);
        let until = Instant::now() + within;
        while self.running() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(2));
        }
        !self.running()
    }
}

/// The writer is done: those waiting for its stop are told.
fn finished(sh: &Shared) {
    let waiting = sh
        .stopped
        .lock()
        .map(|mut s| std::mem::take(&mut *s))
        .unwrap_or_default();
    let st = sh.status();
    for w in waiting {
        w(st.clone());
    }
}

fn open(spec: &Spec, ports: &[String]) -> Result<Writer<BufWriter<File>>> {
    let filter = match &spec.filter {
        Some(e) => Some(Arc::new(compile(e)?)),
        None => None,
    };
    let f = create(&spec.file)?;
    let mut w = Writer::new(BufWriter::new(f), ports, spec.port)
        .with_context(|| format!("writing {}", spec.file.display()))?;
    w.filter = filter;
    Ok(w)
}

/// The pcapng writer and the rings it empties.
struct Writer<W: std::io::Write> {
    out: PcapNgWriter<W>,
    port: u16,
    filter: Option<Arc<Program>>,
    rings: Vec<rtrb::Consumer<Record>>,
    count: u64,
    duration: Option<Duration>,
    started: Instant,
    /// TSC and wall clock at the same instant, to date the records.
    tsc0: u64,
    wall0: Duration,
    tsc_hz: f64,
}

impl<W: std::io::Write> Writer<W> {
    /// The section header and one interface block per port.
    fn new(out: W, ports: &[String], port: u16) -> Result<Self> {
        let mut out = PcapNgWriter::new(out).context("writing the pcapng header")?;
        for name in ports {
            out.write_pcapng_block(InterfaceDescriptionBlock {
                linktype: DataLink::ETHERNET,
                snaplen: SNAPLEN as u32,
                options: vec![
                    InterfaceDescriptionOption::IfName(Cow::Owned(name.clone())),
                    InterfaceDescriptionOption::IfTsResol(9),
                ],
            })
            .context("writing an interface block")?;
        }
        std::io::Write::flush(out.get_mut()).context("writing the pcapng header")?;
        Ok(Writer {
            out,
            port,
            filter: None,
            rings: Vec::new(),
            count: 0,
            duration: None,
            started: Instant::now(),
            tsc0: pmd::sys::rdtsc(),
            wall0: Duration::ZERO,
            tsc_hz: 1.0,
        })
    }

    /// One tap per worker, whose rings this writer empties.
    fn with_taps(
        mut self,
        spec: &Spec,
        tx_queues: &[Option<u16>],
        sh: &Shared,
        tsc_hz: f64,
    ) -> (Self, Vec<Tap>) {
        let remaining = (spec.count > 0).then(|| Arc::new(AtomicU64::new(spec.count)));
        let mut taps = Vec::new();
        for txq in tx_queues {
            let (p, c) = rtrb::RingBuffer::new(RING);
            self.rings.push(c);
            let sends = spec.queue.is_none() || *txq == spec.queue;
            taps.push(Tap {
                port: spec.port,
                rx_queue: spec.queue,
                dirs: if sends { spec.dirs } else { spec.dirs & !TX },
                filter: self.filter.clone(),
                ring: p,
                dropped: sh.dropped.clone(),
                remaining: remaining.clone(),
            });
        }
        self.count = spec.count;
        self.duration = spec.duration;
        self.started = Instant::now();
        self.tsc0 = pmd::sys::rdtsc();
        self.wall0 = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        self.tsc_hz = tsc_hz;
        (self, taps)
    }

    /// Writes until done, stopped or failed; then takes the taps back,
    /// writes what they left and closes the file.
    fn run(mut self, sh: &Shared, taps: &[crossbeam_channel::Sender<Option<Tap>>]) {
        let mut failed = None;
        loop {
            let done = match self.drain(sh) {
                Ok(done) => done,
                Err(e) => {
                    failed = Some(e);
                    true
                }
            };
            if done || sh.stop.load(Ordering::Acquire) {
                break;
            }
            std::thread::sleep(DRAIN_EVERY);
        }
        for t in taps {
            let _ = t.send(None);
        }
        if failed.is_none() {
            // What the workers put in before they let go of the taps.
            std::thread::sleep(DRAIN_EVERY);
            if let Err(e) = self.drain(sh) {
                failed = Some(e);
            }
        }
        if failed.is_none() {
            if let Err(e) = self.out.into_inner().flush() {
                failed = Some(e);
            }
        }
        if let Some(e) = failed {
            if let Ok(mut err) = sh.error.lock() {
                *err = Some(format!("writing {}: {e}", sh.file));
            }
        }
        sh.running.store(false, Ordering::Release);
        finished(sh);
    }

    /// Writes what the workers captured; true when the capture is complete
    /// (its count or duration reached); an error when the file fails.
    fn drain(&mut self, sh: &Shared) -> std::io::Result<bool> {
        for ring in &mut self.rings {
            // At most a ring's worth a turn: the workers refill it as fast
            // as this empties it, and a stop must be seen.
            for _ in 0..RING {
                let Ok(r) = ring.pop() else { break };
                let written = sh.written.load(Ordering::Relaxed);
                if self.count > 0 && written >= self.count {
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
                self.out
                    .write_pcapng_block(EnhancedPacketBlock {
                        interface_id: u32::from(self.port),
                        timestamp: ts,
                        original_len: r.len,
                        data: Cow::Borrowed(&r.data[..n]),
                        options,
                    })
                    .map_err(|e| match e {
                        pcap_file::PcapError::IoError(e) => e,
                        e => std::io::Error::other(e.to_string()),
                    })?;
                sh.written.store(written + 1, Ordering::Release);
            }
        }
        // What is written is in the file now (a reader following it, as
        // `sluice ctl capture -w -` does, sees whole blocks).
        self.out.get_mut().flush()?;
        let written = sh.written.load(Ordering::Relaxed);
        Ok(
            (self.count > 0 && written + sh.dropped.load(Ordering::Relaxed) >= self.count)
                || self.duration.is_some_and(|d| self.started.elapsed() >= d),
        )
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A file that takes `room` bytes, then fails as a full disk does.
    struct Full {
        room: usize,
    }

    impl std::io::Write for Full {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if self.room == 0 {
                return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
            }
            let n = b.len().min(self.room);
            self.room -= n;
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn spec(count: u64) -> Spec {
        Spec {
            port: 0,
            queue: None,
            dirs: RX,
            count,
            duration: None,
            filter: None,
            file: PathBuf::from("/nowhere.pcapng"),
        }
    }

    fn shared() -> Shared {
        Shared::new("/nowhere.pcapng".into())
    }

    /// A write error ends the capture and is reported (it used to be
    /// ignored: "done: 5 packets" with nothing written, or never done);
    /// the taps are taken back and whoever asked to stop is told.
    #[test]
    fn a_write_error_ends_the_capture_and_is_reported() {
        let sh = shared();
        let w = Writer::new(
            BufWriter::with_capacity(64, Full { room: 2000 }),
            &["p0".into()],
            0,
        )
        .unwrap();
        let (w, mut taps) = w.with_taps(&spec(0), &[None], &sh, 2.3e9);
        let frame = [0x5au8; 200];
        for _ in 0..100 {
            taps[0].burst(0, RX, pmd::sys::rdtsc(), std::iter::once((&frame[..], 0)));
        }
        let (told_tx, told) = crossbeam_channel::bounded(1);
        sh.stopped
            .lock()
            .unwrap()
            .push(Box::new(move |s| drop(told_tx.send(s))));
        let (tap_tx, tap_rx) = crossbeam_channel::unbounded();
        w.run(&sh, &[tap_tx]);
        let s = sh.status();
        assert!(!s.running);
        assert!(s.written < 100, "{s:?}");
        let e = s.error.expect("the error reported");
        assert!(e.contains("No space left on device"), "{e}");
        assert!(matches!(tap_rx.try_recv(), Ok(None)), "the tap taken back");
        assert_eq!(told.try_recv().unwrap().error, Some(e));
    }

    /// What fits is written and counted, and the count ends it.
    #[test]
    fn a_count_is_written_whole() {
        let sh = shared();
        let w = Writer::new(BufWriter::new(Vec::new()), &["p0".into()], 0).unwrap();
        let (w, mut taps) = w.with_taps(&spec(10), &[None], &sh, 2.3e9);
        let frame = [0x5au8; 100];
        for _ in 0..20 {
            taps[0].burst(0, RX, pmd::sys::rdtsc(), std::iter::once((&frame[..], 0)));
        }
        let (tap_tx, _tap_rx) = crossbeam_channel::unbounded();
        w.run(&sh, &[tap_tx]);
        let s = sh.status();
        assert_eq!((s.written, s.running, s.error), (10, false, None));
    }

    /// A filter libpcap takes too long over is refused at the limit, and
    /// tcpdump killed (a 1,000-port filter took it minutes).
    #[test]
    fn a_slow_filter_is_refused_at_the_limit() {
        if std::process::Command::new("tcpdump")
            .arg("--version")
            .output()
            .is_err()
        {
            assert!(std::env::var_os("CI").is_none(), "CI has tcpdump");
            eprintln!("skipping: tcpdump is not installed");
            return;
        }
        let expr = (1..=1000)
            .map(|p| format!("port {p}"))
            .collect::<Vec<_>>()
            .join(" or ");
        let t = Instant::now();
        let e = compile_within(&expr, Duration::from_millis(500)).unwrap_err();
        assert!(e.to_string().contains("did not compile it within"), "{e}");
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        // A small one still compiles.
        assert!(compile("tcp port 22").is_ok());
    }
}
