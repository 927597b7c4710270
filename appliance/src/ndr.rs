//! `sluice bench ndr`: an RFC 2544 throughput search ("no-drop rate")
//! with a running Sluice tester (a `txonly`/`flowgen` worker sending to
//! the device under test, a probe receiving what it forwards), driven over
//! its control socket, as TRex's or MoonGen's NDR scripts drive theirs.
//!
//! For each frame size: one trial at the top rate finds the tester's own
//! ceiling (and the NDR, if the device loses nothing there); then a binary
//! search between 0 and that ceiling for the highest rate whose loss is at
//! most the allowed ratio, to the given resolution; then trials at
//! fractions of that rate (10, 50, 90, 100% by default) for latency. A
//! trial: `clear stats`, `gen start RATE size N duration T`, wait until the
//! generators stop and the in-flight packets have drained (`settle`),
//! `stats`. Sent = packets generated less those the tester's own TX ring
//! refused; received = stamped packets the probes saw (duplicates not
//! counted); loss = 1 − received/sent. A trial whose tester fell short of
//! the rate asked (it was late or out of buffers) says so: the rate found
//! is then the tester's limit, not the device's.

use crate::ctl::{request, Response};
use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

/// Bytes of the Ethernet FCS, which RFC 2544's frame sizes count and the
/// generator's do not (the NIC appends it).
pub const FCS: usize = 4;

/// The frame sizes `sluice bench ndr` accepts (with FCS).
pub const SIZES: std::ops::RangeInclusive<usize> = 62..=crate::txgen::MAX_FRAME + FCS;

/// A row of the search: one frame size (bytes with FCS, as RFC 2544
/// counts them), or the simple IMIX (64, 594 and 1518-byte frames, 7:4:1,
/// as a datasheet's IMIX row; the tester's flows must be a multiple of
/// 12). JSON: the number, or `"imix"`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FrameSize {
    /// Bytes with FCS.
    Bytes(usize),
    /// The simple IMIX.
    Imix,
}

impl FrameSize {
    /// Its mean length on the wire, FCS included (IMIX: 361.8 bytes).
    pub fn mean(self) -> f64 {
        match self {
            FrameSize::Bytes(n) => n as f64,
            FrameSize::Imix => {
                let l = &pmd::probe::IMIX;
                l.iter().sum::<usize>() as f64 / l.len() as f64 + FCS as f64
            }
        }
    }

    /// What `sluice ctl gen start … size` takes (bytes without FCS).
    fn ctl_arg(self) -> String {
        match self {
            FrameSize::Bytes(n) => (n - FCS).to_string(),
            FrameSize::Imix => "imix".into(),
        }
    }
}

impl std::fmt::Display for FrameSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameSize::Bytes(n) => write!(f, "{n}"),
            FrameSize::Imix => f.write_str("imix"),
        }
    }
}

impl std::str::FromStr for FrameSize {
    type Err = String;
    /// A size in bytes with FCS (62 to the largest frame plus FCS), or
    /// `imix`.
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "imix" {
            return Ok(FrameSize::Imix);
        }
        match s.parse::<usize>() {
            Ok(n) if SIZES.contains(&n) => Ok(FrameSize::Bytes(n)),
            _ => Err(format!(
                "`{s}`: frame bytes with FCS, {} to {}, or imix",
                SIZES.start(),
                SIZES.end()
            )),
        }
    }
}

impl Serialize for FrameSize {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            FrameSize::Bytes(n) => s.serialize_u64(*n as u64),
            FrameSize::Imix => s.serialize_str("imix"),
        }
    }
}

/// What to search.
#[derive(Clone, Debug)]
pub struct Options {
    /// Ethernet frame sizes as RFC 2544 counts them (bytes with the
    /// 4-byte FCS: 64 to 1518 on a 1500-byte MTU), or IMIX.
    pub sizes: Vec<FrameSize>,
    /// Length of one trial.
    pub trial: Duration,
    /// Loss ratio allowed (0: none).
    pub loss: f64,
    /// Search until the bracket is this close (relative to its top).
    pub resolution: f64,
    /// The highest rate tried, packets per second per generating port
    /// (`None`: the tester's top rate).
    pub max_rate: Option<f64>,
    /// Fractions of the NDR at which latency is measured.
    pub latency_at: Vec<f64>,
    /// Wait after a trial for packets in flight.
    pub settle: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            sizes: [64, 128, 256, 512, 1024, 1280, 1518]
                .map(FrameSize::Bytes)
                .to_vec(),
            trial: Duration::from_secs(2),
            loss: 0.0,
            resolution: 0.01,
            max_rate: None,
            latency_at: vec![0.1, 0.5, 0.9, 1.0],
            settle: Duration::from_millis(300),
        }
    }
}

/// One trial's outcome.
#[derive(Clone, Debug, Serialize)]
pub struct Trial {
    /// The rate asked (packets per second per generating port; `None`:
    /// the top rate).
    pub rate: Option<f64>,
    /// Packets the tester put on the wire.
    pub sent: u64,
    /// Stamped packets its probes received (each once).
    pub received: u64,
    /// 1 − received / sent.
    pub loss: f64,
    /// What the tester sent per second (all its ports).
    pub sent_pps: f64,
    /// The tester fell short of the rate asked (late or out of buffers).
    pub tester_limited: bool,
    /// Received packets reordered within their flow.
    pub reordered: u64,
    /// One-way latency percentiles (ns) of the received packets.
    pub latency_ns: Option<serde_json::Value>,
    /// Within the allowed loss.
    pub pass: bool,
}

/// The result for one frame size.
#[derive(Clone, Debug, Serialize)]
pub struct SizeResult {
    /// Frame bytes (with FCS, as RFC 2544 counts them), or `"imix"`.
    pub size: FrameSize,
    /// The highest rate within the allowed loss, packets per second (all
    /// generating ports).
    pub ndr_pps: f64,
    /// The same on the wire, bits per second (frame with FCS, plus
    /// preamble and inter-frame gap: 20 bytes more per frame).
    pub ndr_l1_bps: f64,
    /// The NDR is the tester's ceiling (the device lost nothing there).
    pub tester_limited: bool,
    /// The trial at the NDR.
    pub at_ndr: Option<Trial>,
    /// Latency trials: (fraction of the NDR, trial).
    pub latency: Vec<(f64, Trial)>,
    /// Every search trial, in order.
    pub search: Vec<Trial>,
}

fn ask(sock: &Path, args: &[&str]) -> Result<Response> {
    let a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let r = request(sock, &a)?;
    if !r.ok {
        bail!(
            "`sluice ctl {}`: {}",
            args.join(" "),
            r.error.unwrap_or_default()
        );
    }
    Ok(r)
}

/// The testers' figures in a `stats` answer: generated, refused by the
/// tester's TX, signed, duplicates, reordered, late, no buffer, running,
/// and the receiving core's latency (the one that received most).
struct Figures {
    generated: u64,
    tx_full: u64,
    signed: u64,
    duplicate: u64,
    reordered: u64,
    late: u64,
    nombuf: u64,
    running: bool,
    latency: Option<serde_json::Value>,
}

fn figures(stats: &serde_json::Value) -> Result<Figures> {
    let cores = stats["cores"]
        .as_array()
        .ok_or_else(|| anyhow!("no cores in the stats"))?;
    let mut f = Figures {
        generated: 0,
        tx_full: 0,
        signed: 0,
        duplicate: 0,
        reordered: 0,
        late: 0,
        nombuf: 0,
        running: false,
        latency: None,
    };
    let mut most = 0;
    let mut testers = 0;
    for c in cores {
        let t = &c["tester"];
        if t.is_null() {
            continue;
        }
        testers += 1;
        let n = |k: &str| t[k].as_u64().unwrap_or(0);
        f.generated += n("generated");
        f.signed += n("signed");
        f.duplicate += n("duplicate");
        f.reordered += n("reordered");
        f.late += n("gen_late");
        f.nombuf += n("gen_nombuf");
        f.running |= t["running"].as_bool().unwrap_or(false);
        if n("signed") > most && !t["latency_ns"].is_null() {
            most = n("signed");
            f.latency = Some(t["latency_ns"].clone());
        }
    }
    if testers == 0 {
        bail!("the instance has no tester worker (mode txonly, flowgen, or rxonly with measure = true)");
    }
    for p in stats["ports"].as_array().into_iter().flatten() {
        f.tx_full += p["drops"]["tx_full"].as_u64().unwrap_or(0);
    }
    Ok(f)
}

/// Runs one trial at `rate` per port (`None`: the top rate) with
/// `size`-byte frames (with FCS: the generator makes them 4 bytes
/// shorter, the NIC adds the FCS), `ports` generating.
fn trial(
    sock: &Path,
    o: &Options,
    rate: Option<f64>,
    size: FrameSize,
    ports: f64,
) -> Result<Trial> {
    ask(sock, &["gen", "stop"])?;
    std::thread::sleep(o.settle);
    ask(sock, &["clear", "stats"])?;
    let r = rate.map_or("max".to_string(), |r| format!("{r:.3}"));
    let secs = format!("{:.6}", o.trial.as_secs_f64());
    let s = size.ctl_arg();
    ask(sock, &["gen", "start", &r, "size", &s, "duration", &secs])?;
    let started = Instant::now();
    std::thread::sleep(o.trial);
    // The generators stop by themselves; wait for it (at most 5 s more).
    loop {
        let st = ask(sock, &["stats"])?;
        if !figures(&st.data)?.running {
            break;
        }
        if started.elapsed() > o.trial + Duration::from_secs(5) {
            bail!("the generators did not stop after the trial");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(o.settle);
    let f = figures(&ask(sock, &["stats"])?.data)?;
    let sent = f.generated.saturating_sub(f.tx_full);
    let received = f.signed.saturating_sub(f.duplicate).min(sent);
    let loss = if sent == 0 {
        1.0
    } else {
        1.0 - received as f64 / sent as f64
    };
    let sent_pps = sent as f64 / o.trial.as_secs_f64();
    // The tester sent less than asked (by more than 1%): it fell behind
    // its schedule, ran out of buffers, or its own TX ring refused.
    let tester_limited = rate.is_some_and(|r| sent_pps < 0.99 * r * ports);
    Ok(Trial {
        rate,
        sent,
        received,
        loss,
        sent_pps,
        tester_limited,
        reordered: f.reordered,
        latency_ns: f.latency,
        pass: sent > 0 && loss <= o.loss,
    })
}

/// Searches one frame size; `log` gets a line per trial.
pub fn search(
    sock: &Path,
    o: &Options,
    size: FrameSize,
    log: &mut dyn FnMut(&str),
) -> Result<SizeResult> {
    let mut trials = Vec::new();
    let note = |t: &Trial, log: &mut dyn FnMut(&str)| {
        log(&format!(
            "  {size} B at {}: sent {} received {} loss {:.4}%{} {}",
            t.rate
                .map_or("max".to_string(), |r| format!("{r:.0} pps/port")),
            t.sent,
            t.received,
            t.loss * 100.0,
            if t.tester_limited {
                " (tester limited)"
            } else {
                ""
            },
            if t.pass { "pass" } else { "FAIL" }
        ))
    };
    let ports = ask(sock, &["gen", "stop"])?.data["ports"]
        .as_u64()
        .unwrap_or(1)
        .max(1) as f64;
    let top = trial(sock, o, o.max_rate, size, ports)?;
    note(&top, log);
    trials.push(top.clone());
    // The tester's ceiling per generating port: what it sent at the top
    // (or the highest rate asked).
    let ceiling = match o.max_rate {
        Some(r) => r,
        None => top.sent_pps / ports,
    };
    let (mut lo, mut hi) = (0.0f64, ceiling);
    let mut best: Option<Trial> = None;
    if top.pass {
        lo = ceiling;
        best = Some(top.clone());
    }
    let mut rounds = 0;
    while !top.pass && hi > 0.0 && (hi - lo) / hi > o.resolution && rounds < 24 {
        rounds += 1;
        let mid = (lo + hi) / 2.0;
        let t = trial(sock, o, Some(mid), size, ports)?;
        note(&t, log);
        if t.pass {
            lo = mid;
            best = Some(t.clone());
        } else {
            hi = mid;
        }
        trials.push(t);
    }
    let ndr_per_port = lo;
    let ndr_pps = best.as_ref().map_or(0.0, |t| t.sent_pps);
    let mut latency = Vec::new();
    if ndr_per_port > 0.0 {
        for &f in &o.latency_at {
            let t = trial(sock, o, Some(ndr_per_port * f), size, ports)?;
            note(&t, log);
            latency.push((f, t));
        }
    }
    Ok(SizeResult {
        size,
        ndr_pps,
        ndr_l1_bps: ndr_pps * (size.mean() + 20.0) * 8.0,
        tester_limited: top.pass,
        at_ndr: best,
        latency,
        search: trials,
    })
}

/// Runs the search over every size; stops the generators at the end.
pub fn run(sock: &Path, o: &Options, log: &mut dyn FnMut(&str)) -> Result<Vec<SizeResult>> {
    let mut out = Vec::new();
    for &size in &o.sizes {
        log(&format!("frame size {size} B:"));
        let r = search(sock, o, size, log).with_context(|| format!("{size} frames"))?;
        out.push(r);
    }
    ask(sock, &["gen", "stop"])?;
    Ok(out)
}

fn us(v: &Option<serde_json::Value>, k: &str) -> String {
    v.as_ref()
        .and_then(|l| l[k].as_f64())
        .map_or("-".to_string(), |ns| format!("{:.1}", ns / 1e3))
}

/// The results as a datasheet table.
pub fn table(rs: &[SizeResult], o: &Options) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "RFC 2544 throughput (frame sizes with FCS; loss <= {}%, {:.1} s trials, resolution {}%), one-way latency p50/p99 in µs at fractions of the NDR",
        o.loss * 100.0,
        o.trial.as_secs_f64(),
        o.resolution * 100.0
    );
    let mut head = format!(
        "{:>6} {:>12} {:>12} {:>10}",
        "size", "NDR pps", "L1 Mbit/s", "loss"
    );
    for f in &o.latency_at {
        head += &format!(" {:>15}", format!("{:.0}%", f * 100.0));
    }
    let _ = writeln!(s, "{head}");
    for r in rs {
        let mut line = format!(
            "{:>6} {:>12.0} {:>12.1} {:>9.4}%{}",
            r.size.to_string(),
            r.ndr_pps,
            r.ndr_l1_bps / 1e6,
            r.at_ndr.as_ref().map_or(0.0, |t| t.loss * 100.0),
            if r.tester_limited { "*" } else { " " }
        );
        for (_, t) in &r.latency {
            line += &format!(
                " {:>15}",
                format!("{}/{}", us(&t.latency_ns, "p50"), us(&t.latency_ns, "p99"))
            );
        }
        let _ = writeln!(s, "{line}");
    }
    if rs.iter().any(|r| r.tester_limited) {
        let _ = writeln!(
            s,
            "* no loss at the tester's top rate: the NDR is at least this (the tester's limit)"
        );
    }
    s
}

/// The results as an SVG chart: NDR (Mpps) and latency p50/p99 (µs, at
/// 100% of the NDR... or the highest fraction measured) against frame
/// size, as a datasheet plots them.
pub fn svg(rs: &[SizeResult]) -> String {
    let (w, h, m) = (720.0, 420.0, 60.0);
    // IMIX sits at its mean frame length.
    let xs: Vec<f64> = rs.iter().map(|r| r.size.mean()).collect();
    let (xmin, xmax) = (
        xs.iter().copied().fold(f64::INFINITY, f64::min),
        xs.iter().copied().fold(0.0, f64::max),
    );
    let x = |v: f64| m + (v - xmin) / (xmax - xmin).max(1.0) * (w - 2.0 * m);
    let mpps: Vec<f64> = rs.iter().map(|r| r.ndr_pps / 1e6).collect();
    let lat = |k: &str| -> Vec<f64> {
        rs.iter()
            .map(|r| {
                r.latency
                    .last()
                    .and_then(|(_, t)| t.latency_ns.as_ref()?[k].as_f64())
                    .unwrap_or(0.0)
                    / 1e3
            })
            .collect()
    };
    let (p50, p99) = (lat("p50"), lat("p99"));
    let top_r = mpps.iter().copied().fold(0.0, f64::max).max(1e-6) * 1.1;
    let top_l = p99.iter().copied().fold(0.0, f64::max).max(1e-6) * 1.1;
    let y = |v: f64, top: f64| h - m - v / top * (h - 2.0 * m);
    let line = |vals: &[f64], top: f64, color: &str, dash: &str| {
        let pts: Vec<String> = xs
            .iter()
            .zip(vals)
            .map(|(a, b)| format!("{:.1},{:.1}", x(*a), y(*b, top)))
            .collect();
        format!(
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" stroke-dasharray=\"{dash}\" points=\"{}\"/>\n",
            pts.join(" ")
        )
    };
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <line x1=\"{m}\" y1=\"{b}\" x2=\"{r}\" y2=\"{b}\" stroke=\"black\"/>\n\
         <line x1=\"{m}\" y1=\"{m}\" x2=\"{m}\" y2=\"{b}\" stroke=\"black\"/>\n\
         <line x1=\"{r}\" y1=\"{m}\" x2=\"{r}\" y2=\"{b}\" stroke=\"black\"/>\n\
         <text x=\"{cx}\" y=\"{t}\" text-anchor=\"middle\">frame size (bytes, with FCS)</text>\n\
         <text x=\"{m}\" y=\"{ty}\" fill=\"#1f77b4\">NDR (Mpps, max {top_r:.3})</text>\n\
         <text x=\"{r}\" y=\"{ty}\" text-anchor=\"end\" fill=\"#d62728\">latency at the NDR, p50 solid, p99 dashed (µs, max {top_l:.1})</text>\n",
        b = h - m,
        r = w - m,
        cx = w / 2.0,
        t = h - 20.0,
        ty = m - 20.0,
    );
    for ((a, v), r) in xs.iter().zip(&mpps).zip(rs) {
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text><circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"#1f77b4\"/>",
            x(*a),
            h - m + 16.0,
            r.size,
            x(*a),
            y(*v, top_r)
        );
    }
    s += &line(&mpps, top_r, "#1f77b4", "none");
    s += &line(&p50, top_l, "#d62728", "none");
    s += &line(&p99, top_l, "#d62728", "6,4");
    s += "</svg>\n";
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sizes parse as bytes with FCS or `imix`; IMIX's mean on the wire is
    /// the mix's (4,342 / 12 bytes); the control socket gets bytes without
    /// FCS or `imix`; JSON holds the number or the word; the table and
    /// the chart label the row.
    #[test]
    fn frame_sizes_and_imix() {
        assert_eq!("64".parse(), Ok(FrameSize::Bytes(64)));
        assert_eq!("9018".parse(), Ok(FrameSize::Bytes(9018)), "jumbo");
        assert_eq!("imix".parse(), Ok(FrameSize::Imix));
        for bad in ["61", "9019", "IMIX", ""] {
            assert!(bad.parse::<FrameSize>().is_err(), "{bad}");
        }
        assert!((FrameSize::Imix.mean() - 4342.0 / 12.0).abs() < 1e-9);
        assert_eq!(FrameSize::Bytes(1518).ctl_arg(), "1514");
        assert_eq!(FrameSize::Imix.ctl_arg(), "imix");
        assert_eq!(
            serde_json::to_string(&[FrameSize::Bytes(64), FrameSize::Imix]).unwrap(),
            r#"[64,"imix"]"#
        );
        let row = |size| SizeResult {
            size,
            ndr_pps: 1e6,
            ndr_l1_bps: 1e6 * (size.mean() + 20.0) * 8.0,
            tester_limited: false,
            at_ndr: None,
            latency: Vec::new(),
            search: Vec::new(),
        };
        let rs = [row(FrameSize::Bytes(64)), row(FrameSize::Imix)];
        let t = table(&rs, &Options::default());
        assert!(t.contains("\n  imix "), "{t}");
        // 1 Mpps of IMIX on the wire: (361.8 + 20) × 8 bits per frame.
        assert!(t.contains("3054.7"), "{t}");
        assert!(svg(&rs).contains(">imix<"));
    }
}
