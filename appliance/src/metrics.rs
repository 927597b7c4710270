//! The Prometheus endpoint (`[management] metrics`): counters, gauges and
//! latency histograms in the Prometheus text format (encoded by the
//! `prometheus` crate), served over HTTP at `/metrics` by the bounded server ([`crate::serve`]).
//!
//! Scraping costs the workers nothing: the HTTP server runs on a thread of
//! its own and asks the management thread, which owns the telemetry, for
//! each scrape ([`Scrapes`]); the management thread takes a snapshot of the
//! counters it reads anyway and renders it ([`render`]). Workers never see
//! a scrape. A scrape the management thread does not answer within
//! [`SCRAPE_TIMEOUT`] gets a 503.
//!
//! Names follow Prometheus' conventions: `sluice_` prefix, base units
//! (seconds, bytes), `_total` counters. Labels stay small: `port`,
//! `core`, `reason` (the drop reasons), `event` (the stages' counters),
//! `rule` (only rules with `counter = true`).

use crate::serve::{serve, Limits, Listener, Parsed, Peer, Protocol, Reply};
use crate::telemetry::{merged, Snapshot, Telemetry};
use anyhow::{Context, Result};
use crossbeam_channel::{Receiver, Sender};
use hdrhistogram::Histogram;
use mio::Waker;
use pipeline::DropReason;
use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram as PHistogram, LabelPair, Metric, MetricFamily, MetricType,
};
use prometheus::{Encoder, TextEncoder};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How long a scrape waits for the management thread.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// What one HTTP client may hold (see [`crate::serve`]): 64 connections
/// (Prometheus keeps one per target), a request head of 8 KiB within 5 s
/// of connecting, 10 s to take the answer.
pub const LIMITS: Limits = Limits {
    max_conns: 64,
    max_request: 8 * 1024,
    read_within: Duration::from_secs(5),
    write_within: Duration::from_secs(10),
};

/// A scrape waiting for its exposition text.
pub type Scrape = Reply<String>;

/// The management thread's end: scrapes to answer.
pub type Scrapes = Receiver<Scrape>;

/// Upper bounds (seconds) of the latency histograms' buckets.
const LATENCY_BUCKETS: [f64; 19] = [
    1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2,
    5e-2, 0.1, 0.25, 0.5, 1.0,
];

/// The running HTTP server; stops when dropped.
pub struct Server {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    /// Listens on `addr` and serves `/metrics` by asking `scrapes`' other
    /// end. Fails (naming the address) when it cannot listen.
    pub fn start(addr: SocketAddr) -> Result<(Server, Scrapes)> {
        let listener = std::net::TcpListener::bind(addr)
            .with_context(|| format!("metrics endpoint: listening on {addr}"))?;
        let addr = listener
            .local_addr()
            .context("metrics endpoint: its address")?;
        let (tx, rx) = crossbeam_channel::bounded::<Scrape>(4);
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || {
                crate::privilege::shed_thread();
                if let Err(e) = serve(Listener::Tcp(listener), Http { scrapes: tx }, LIMITS, &s) {
                    eprintln!("metrics endpoint: stopped: {e}");
                }
            })
            .context("spawning the metrics thread")?;
        Ok((
            Server {
                addr,
                stop,
                thread: Some(thread),
            },
            rx,
        ))
    }

    /// Where it listens (the port chosen when the config said 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// HTTP/1.1, one request a connection (`Connection: close`): `GET` or
/// `HEAD` of `/metrics` (asked of the management thread), `/` (a pointer
/// there); anything else 404 or 405, a malformed head 400, one over the
/// limit 431.
struct Http {
    scrapes: Sender<Scrape>,
}

/// An HTTP response with `body`, closing the connection.
fn response(status: &str, content_type: &str, body: &str, head_only: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

fn plain(status: &str, body: &str) -> Vec<u8> {
    response(status, "text/plain; charset=utf-8", body, false)
}

impl Protocol for Http {
    type Answer = String;

    fn parse(&mut self, buf: &[u8], _: Peer, waker: &Arc<Waker>) -> Parsed<String> {
        let mut headers = [httparse::EMPTY_HEADER; 64];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(buf) {
            Ok(httparse::Status::Partial) => Parsed::More,
            Err(httparse::Error::TooManyHeaders) => Parsed::Now(plain(
                "431 Request Header Fields Too Large",
                "too many header fields\n",
            )),
            Err(e) => Parsed::Now(plain("400 Bad Request", &format!("{e}\n"))),
            Ok(httparse::Status::Complete(_)) => {
                let head_only = req.method == Some("HEAD");
                if !matches!(req.method, Some("GET" | "HEAD")) {
                    return Parsed::Now(plain("405 Method Not Allowed", "only GET\n"));
                }
                let path = req.path.unwrap_or("").split('?').next().unwrap_or("");
                match path {
                    // A HEAD is answered here, without asking for a
                    // text it would not send (and so without its length).
                    "/metrics" if head_only => Parsed::Now(
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: {}\r\nConnection: close\r\n\r\n",
                            prometheus::TEXT_FORMAT
                        )
                        .into_bytes(),
                    ),
                    "/metrics" => {
                        let (reply, rx) = Reply::new(waker);
                        if self.scrapes.try_send(reply).is_err() {
                            return Parsed::Now(plain(
                                "503 Service Unavailable",
                                "sluice: scrapes are queued already; try again\n",
                            ));
                        }
                        Parsed::Later {
                            rx,
                            within: SCRAPE_TIMEOUT,
                            late: plain(
                                "503 Service Unavailable",
                                "sluice: no answer from the management thread\n",
                            ),
                        }
                    }
                    "/" => Parsed::Now(response(
                        "200 OK",
                        "text/plain; charset=utf-8",
                        "sluice: metrics at /metrics\n",
                        head_only,
                    )),
                    _ => Parsed::Now(plain(
                        "404 Not Found",
                        "not found; metrics are at /metrics\n",
                    )),
                }
            }
        }
    }

    fn encode(&self, text: String) -> Vec<u8> {
        response("200 OK", prometheus::TEXT_FORMAT, &text, false)
    }

    fn too_long(&self) -> Vec<u8> {
        plain(
            "431 Request Header Fields Too Large",
            "request head over 8 KiB\n",
        )
    }

    fn too_slow(&self) -> Vec<u8> {
        plain("408 Request Timeout", "request not sent in time\n")
    }

    fn busy(&self) -> Vec<u8> {
        plain(
            "503 Service Unavailable",
            "sluice: too many connections; try again\n",
        )
    }
}

fn label(name: &str, value: &str) -> LabelPair {
    let mut l = LabelPair::default();
    l.set_name(name.to_string());
    l.set_value(value.to_string());
    l
}

/// Metric families under construction, in order of first use.
#[derive(Default)]
struct Families(Vec<MetricFamily>);

impl Families {
    fn family(&mut self, name: &str, help: &str, t: MetricType) -> &mut MetricFamily {
        if let Some(i) = self.0.iter().position(|f| f.name() == name) {
            return &mut self.0[i];
        }
        let mut f = MetricFamily::default();
        f.set_name(name.to_string());
        f.set_help(help.to_string());
        f.set_field_type(t);
        self.0.push(f);
        self.0.last_mut().expect("just pushed")
    }

    fn counter(&mut self, name: &str, help: &str, labels: &[(&str, &str)], v: f64) {
        let mut c = Counter::default();
        c.set_value(v);
        let mut m = Metric::from_label(labels.iter().map(|(k, v)| label(k, v)).collect());
        m.set_counter(c);
        self.family(name, help, MetricType::COUNTER)
            .mut_metric()
            .push(m);
    }

    fn gauge(&mut self, name: &str, help: &str, labels: &[(&str, &str)], v: f64) {
        let mut g = Gauge::default();
        g.set_value(v);
        let mut m = Metric::from_label(labels.iter().map(|(k, v)| label(k, v)).collect());
        m.set_gauge(g);
        self.family(name, help, MetricType::GAUGE)
            .mut_metric()
            .push(m);
    }

    /// A latency histogram from an HdrHistogram of TSC cycles.
    fn latency(
        &mut self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        h: &Histogram<u64>,
        cycles_per_s: f64,
    ) {
        let mut p = PHistogram::default();
        p.set_sample_count(h.len());
        p.set_sample_sum(h.mean() * h.len() as f64 / cycles_per_s);
        let buckets = LATENCY_BUCKETS
            .iter()
            .map(|&le| {
                let mut b = Bucket::default();
                b.set_upper_bound(le);
                let top = (le * cycles_per_s) as u64;
                b.set_cumulative_count(if h.is_empty() {
                    0
                } else {
                    h.count_between(0, top)
                });
                b
            })
            .collect();
        p.set_bucket(buckets);
        let mut m = Metric::from_label(labels.iter().map(|(k, v)| label(k, v)).collect());
        m.set_histogram(p);
        self.family(name, help, MetricType::HISTOGRAM)
            .mut_metric()
            .push(m);
    }
}

/// Rule hit counts the engine adds (rules with `counter = true`: where the
/// rule was written, packets it matched).
pub type RuleHits = Vec<(String, u64)>;

/// The netlink and TAP mirrors' families.
fn control_plane(f: &mut Families, tel: &Telemetry, cp: &ControlPlane<'_>) {
    use std::sync::atomic::Ordering::Relaxed;
    let r = cp.reloads;
    f.gauge(
        "sluice_config_last_reload_successful",
        "1 when the last reload (SIGHUP or `sluice ctl reload`) was installed or none was asked for, 0 when it was refused.",
        &[],
        f64::from(u8::from(r.last_ok)),
    );
    f.gauge(
        "sluice_config_last_reload_success_timestamp_seconds",
        "When the running config was loaded: the start or the last reload installed (Unix time).",
        &[],
        r.last_success,
    );
    for (result, v) in [("success", r.succeeded), ("failure", r.failed)] {
        f.counter(
            "sluice_config_reloads_total",
            "Reloads asked for since the start, by result (failure: refused, the running config unchanged).",
            &[("result", result)],
            v as f64,
        );
    }
    if let Some((st, m)) = cp.netlink {
        let msgs = "Netlink messages the mirror received, by kind (route: route messages and dumped routes; interface: neighbour, address and link messages about the ports' interfaces; undecoded: skipped).";
        for (kind, v) in [
            ("route", st.messages.load(Relaxed)),
            ("interface", st.iface_messages.load(Relaxed)),
            ("undecoded", st.undecoded.load(Relaxed)),
        ] {
            f.counter(
                "sluice_netlink_messages_total",
                msgs,
                &[("kind", kind)],
                v as f64,
            );
        }
        let ign = "Kernel routes not mirrored, by reason (unmapped: next hop on no port's interface; other: another table or type; refused: the FIB had no room).";
        for (reason, v) in [
            ("unmapped", st.unmapped.load(Relaxed)),
            ("other", st.other.load(Relaxed)),
            ("refused", m.failed),
        ] {
            f.counter(
                "sluice_netlink_routes_ignored_total",
                ign,
                &[("reason", reason)],
                v as f64,
            );
        }
        f.gauge(
            "sluice_netlink_routes",
            "Routes mirrored from the kernel table into the FIB.",
            &[],
            m.len() as f64,
        );
        f.gauge(
            "sluice_netlink_neighbors",
            "Kernel neighbours mirrored into the workers.",
            &[],
            m.neighbors.len() as f64,
        );
        f.gauge(
            "sluice_netlink_addresses",
            "Kernel addresses on the ports' interfaces, mirrored.",
            &[],
            m.addresses.len() as f64,
        );
        f.counter(
            "sluice_netlink_resyncs_total",
            "Full dumps of the kernel's state applied (the start-up one included).",
            &[],
            st.resyncs.load(Relaxed) as f64,
        );
        f.counter(
            "sluice_netlink_overruns_total",
            "Netlink socket overruns (ENOBUFS), each recovered by a resync.",
            &[],
            st.overruns.load(Relaxed) as f64,
        );
        f.gauge(
            "sluice_netlink_last_resync_timestamp_seconds",
            "When the last resync happened (Unix time).",
            &[],
            st.last_resync.load(Relaxed) as f64,
        );
        f.counter(
            "sluice_netlink_link_changes_total",
            "Link state changes of the ports' kernel interfaces.",
            &[],
            m.link_changes as f64,
        );
        for (p, up) in &m.links {
            let name = tel
                .ports
                .get(usize::from(*p))
                .map_or("?", |v| v.name.as_str());
            f.gauge(
                "sluice_netlink_link_up",
                "1 when the port's kernel interface is up with a carrier.",
                &[("port", name)],
                f64::from(u8::from(*up)),
            );
        }
    }
    if let Some(t) = cp.taps {
        let help = "Frames the TAP mirror thread moved, by direction (to_kernel: punted frames written to the TAPs; from_kernel: the kernel's frames handed to a worker; lost: a TAP write failed or a worker's ring was full).";
        for (dir, v) in [
            ("to_kernel", t.to_kernel.load(Relaxed)),
            ("from_kernel", t.from_kernel.load(Relaxed)),
            ("lost", t.lost.load(Relaxed)),
        ] {
            f.counter(
                "sluice_tap_frames_total",
                help,
                &[("direction", dir)],
                v as f64,
            );
        }
        f.counter(
            "sluice_tap_carrier_changes_total",
            "TAP carriers switched to follow their port's link.",
            &[],
            t.carrier_changes.load(Relaxed) as f64,
        );
    }
}

/// What the control-plane mirror reports, where it runs.
pub struct ControlPlane<'a> {
    /// The netlink mirror's counters and state.
    pub netlink: Option<(&'a crate::netlink::Stats, &'a crate::rib::Rib)>,
    /// The TAP mirror thread's counters.
    pub taps: Option<&'a crate::taps::MirrorCounters>,
    /// How the reloads went.
    pub reloads: &'a crate::reload::Outcomes,
    /// The HA sync thread's counters, when it runs.
    pub ha: Option<&'a crate::ha::Stats>,
    /// The flow exporter's counters, when it runs.
    pub export: Option<&'a crate::export::Stats>,
}

/// The flow exporter's families (`[export]`).
fn export(f: &mut Families, st: &crate::export::Stats) {
    use std::sync::atomic::Ordering::Relaxed;
    let g = |a: &std::sync::atomic::AtomicU64| a.load(Relaxed) as f64;
    f.counter(
        "sluice_export_records_total",
        "IPFIX flow records sent (each message to every collector).",
        &[],
        g(&st.records),
    );
    f.counter(
        "sluice_export_messages_total",
        "IPFIX messages sent, by kind (data, template).",
        &[("kind", "data")],
        g(&st.messages),
    );
    f.counter(
        "sluice_export_messages_total",
        "IPFIX messages sent, by kind (data, template).",
        &[("kind", "template")],
        g(&st.templates),
    );
    f.counter(
        "sluice_export_bytes_total",
        "Bytes of IPFIX data messages sent.",
        &[],
        g(&st.bytes),
    );
    f.counter(
        "sluice_export_syslog_lines_total",
        "NAT events sent as syslog lines.",
        &[],
        g(&st.syslog_lines),
    );
    f.counter(
        "sluice_export_send_errors_total",
        "IPFIX messages the kernel would not send to a collector (no route, its port closed).",
        &[],
        g(&st.send_errors),
    );
}

/// The HA sync thread's families (`[ha]` state sync).
fn ha(f: &mut Families, st: &crate::ha::Stats) {
    use std::sync::atomic::Ordering::Relaxed;
    let g = |a: &std::sync::atomic::AtomicU64| a.load(Relaxed) as f64;
    for (dir, m, r, b) in [
        ("sent", &st.sent_messages, &st.sent_records, &st.sent_bytes),
        (
            "received",
            &st.received_messages,
            &st.received_records,
            &st.received_bytes,
        ),
    ] {
        f.counter(
            "sluice_ha_messages_total",
            "State-sync datagrams to and from the HA peer (received: those taken).",
            &[("direction", dir)],
            g(m),
        );
        f.counter(
            "sluice_ha_records_total",
            "Flow changes in the state-sync datagrams, each way.",
            &[("direction", dir)],
            g(r),
        );
        f.counter(
            "sluice_ha_bytes_total",
            "Bytes of state-sync datagrams, each way (received: all that came).",
            &[("direction", dir)],
            g(b),
        );
    }
    for (reason, v) in [
        ("stranger", &st.strangers),
        ("bad_tag", &st.bad_tag),
        ("malformed", &st.malformed),
        ("stale", &st.stale),
        ("replayed", &st.replayed),
    ] {
        f.counter(
            "sluice_ha_refused_total",
            "State-sync datagrams refused, by reason (stranger: not from the peer's address; bad_tag: the HMAC did not verify; stale: sent over 30 s from now; replayed: a sequence number seen).",
            &[("reason", reason)],
            g(v),
        );
    }
    if let Some((q, _)) = st.lag() {
        for (stat, v) in [("p50", q[0]), ("p99", q[1]), ("max", q[2])] {
            f.gauge(
                "sluice_ha_sync_lag_seconds",
                "State sync: from the peer's send time to this box's receipt of its messages of changes, since start: median (p50), 99th percentile (p99), maximum (max).",
                &[("stat", stat)],
                v,
            );
        }
    }
    f.counter(
        "sluice_ha_gaps_total",
        "State-sync messages the peer sent that never came (sequence gaps).",
        &[],
        g(&st.gaps),
    );
    for (kind, v) in [
        ("requested", &st.bulk_requested),
        ("served", &st.bulk_served),
    ] {
        f.counter(
            "sluice_ha_bulk_syncs_total",
            "Bulk syncs (the whole table) asked of the peer and served to it.",
            &[("kind", kind)],
            g(v),
        );
    }
    f.counter(
        "sluice_ha_apply_dropped_total",
        "Changes from the peer dropped because a worker's ring was full (a bulk sync is asked for).",
        &[],
        g(&st.apply_dropped),
    );
    f.counter(
        "sluice_ha_send_errors_total",
        "State-sync datagrams the kernel would not send (the sync link down, no route).",
        &[],
        g(&st.send_errors),
    );
    let last = st.last_received_ns.load(Relaxed);
    if last > 0 {
        f.gauge(
            "sluice_ha_peer_last_message_timestamp_seconds",
            "When the last state-sync message from the peer came (Unix time).",
            &[],
            last as f64 / 1e9,
        );
    }
}

/// The ports' families: link, packets, bytes, drops by reason, queues,
/// latency.
fn ports(f: &mut Families, tel: &Telemetry, cur: &Snapshot) {
    let hz = tel.tsc_hz();
    for (view, p) in tel.ports.iter().zip(cur.ports()) {
        let port = view.name.as_str();
        let l = [("port", port)];
        if let Some(up) = view.control.link_up() {
            f.gauge(
                "sluice_port_link_up",
                "1 when the port's link is up (carrier), 0 when down.",
                &l,
                f64::from(u8::from(up)),
            );
        }
        f.counter(
            "sluice_port_rx_packets_total",
            "Packets the workers received from the port.",
            &l,
            p.rx_pkts as f64,
        );
        for (q, s) in p.dev_rx_queues.iter().enumerate() {
            let queue = q.to_string();
            f.counter(
                "sluice_port_rx_queue_missed_total",
                "Packets the device dropped on one RX queue of the port for want of room in its ring (drivers that count per queue).",
                &[("port", port), ("queue", queue.as_str())],
                s.imissed as f64,
            );
        }
        f.counter(
            "sluice_port_tx_packets_total",
            "Packets the port's TX queues took from the workers.",
            &l,
            p.tx_pkts as f64,
        );
        f.counter(
            "sluice_port_rx_bytes_total",
            "Bytes the device delivered to the RX queues (frames, no FCS).",
            &l,
            p.dev.ibytes as f64,
        );
        f.counter(
            "sluice_port_tx_bytes_total",
            "Bytes the device took from the TX queues (frames, no FCS).",
            &l,
            p.dev.obytes as f64,
        );
        let help = "Packets dropped on the port, by reason (NIC, TX ring, routing, and each forwarding stage's reasons).";
        for (reason, v) in [
            ("rx_missed", p.dev.imissed),
            ("rx_nombuf", p.dev.rx_nombuf),
            ("tx_full", p.tx_full),
            ("unroutable", p.unroutable),
        ] {
            f.counter(
                "sluice_port_drops_total",
                help,
                &[("port", port), ("reason", reason)],
                v as f64,
            );
        }
        for &r in DropReason::ALL {
            if r != DropReason::Consumed {
                f.counter(
                    "sluice_port_drops_total",
                    help,
                    &[("port", port), ("reason", r.name())],
                    p.drops[r as usize] as f64,
                );
            }
        }
        f.counter(
            "sluice_port_consumed_total",
            "Packets the router's slow path used up (ARP, ND): not drops.",
            &l,
            p.drops[DropReason::Consumed as usize] as f64,
        );
        f.counter(
            "sluice_port_injected_total",
            "Packets the workers sent on this port in fresh buffers (held for ARP/ND, sent once resolved).",
            &l,
            p.injected as f64,
        );
        f.counter(
            "sluice_port_punted_total",
            "Packets received on this port and handed to the kernel through its TAP mirror.",
            &l,
            p.punted as f64,
        );
        f.counter(
            "sluice_port_handed_off_total",
            "Packets handed to the worker that owns their NAT state (counted there).",
            &l,
            p.handed_off as f64,
        );
        for (name, v) in &p.xstats {
            f.counter(
                "sluice_port_driver_stat_total",
                "Driver-specific counters (the driver's xstats).",
                &[("port", port), ("stat", name)],
                *v as f64,
            );
        }
        if let Some(h) = merged(view.resid.iter().map(|r| &r.total)) {
            f.latency(
                "sluice_port_residency_seconds",
                "Time from rx_burst to the TX flush of packets sent on the port.",
                &l,
                &h,
                hz,
            );
        }
        if let Some(r) = &view.e2e {
            f.latency(
                "sluice_port_e2e_latency_seconds",
                "Generator-to-sink latency through the software NIC.",
                &l,
                &r.total,
                hz,
            );
        }
    }
}

/// The workers' families: their queues, poll state and policy, cycles,
/// CPU, events and gauges by stage.
fn cores(f: &mut Families, tel: &Telemetry, cur: &Snapshot) {
    let hz = tel.tsc_hz();
    for (w, c) in tel.workers.iter().zip(cur.cores()) {
        let core = w.core.to_string();
        let l = [("core", core.as_str())];
        for (&(port, queue), &(pkts, bursts)) in w.rx.iter().zip(&c.rx_queues) {
            let Some(view) = tel.ports.get(usize::from(port)) else {
                continue;
            };
            let queue = queue.to_string();
            let ql = [
                ("port", view.name.as_str()),
                ("queue", queue.as_str()),
                ("core", core.as_str()),
            ];
            f.counter(
                "sluice_port_rx_queue_packets_total",
                "Packets a worker received from one RX queue of the port.",
                &ql,
                pkts as f64,
            );
            f.counter(
                "sluice_port_rx_queue_bursts_total",
                "Bursts that received packets from one RX queue (packets per burst: its load).",
                &ql,
                bursts as f64,
            );
        }
        f.gauge(
            "sluice_core_info",
            "A worker core's forwarding mode and poll policy (value 1).",
            &[
                ("core", core.as_str()),
                ("mode", w.mode),
                (
                    "policy",
                    crate::poll::Policy::NAMES
                        .get(c.policy as usize)
                        .copied()
                        .unwrap_or(w.policy),
                ),
            ],
            1.0,
        );
        let state = crate::poll::State::name_of(c.state);
        for s in crate::poll::State::NAMES {
            f.gauge(
                "sluice_core_state",
                "What the worker is doing (1 for the current state).",
                &[("core", core.as_str()), ("state", s)],
                f64::from(u8::from(*s == state)),
            );
        }
        for (name, help, v) in [
            (
                "sluice_core_busy_cycles_total",
                "TSC cycles in poll rounds that received packets.",
                c.busy,
            ),
            (
                "sluice_core_idle_cycles_total",
                "TSC cycles in poll rounds that received nothing, sleeping or blocked.",
                c.idle,
            ),
            ("sluice_core_polls_total", "Poll rounds.", c.polls),
            (
                "sluice_core_empty_polls_total",
                "Poll rounds that received nothing.",
                c.empty_polls,
            ),
            (
                "sluice_core_rx_packets_total",
                "Packets the worker received.",
                c.rx,
            ),
            (
                "sluice_core_blocks_total",
                "Times the worker armed interrupts and blocked.",
                c.blocks,
            ),
            (
                "sluice_core_wakeups_total",
                "Blocks ended by an interrupt.",
                c.wakeups,
            ),
            (
                "sluice_core_sleeps_total",
                "Sleeps between polls.",
                c.sleeps,
            ),
            (
                "sluice_core_policy_switches_total",
                "`auto` switches between interrupt and busy polling.",
                c.switches,
            ),
            (
                "sluice_core_timer_ticks_total",
                "`timer` ticks run.",
                c.ticks,
            ),
            (
                "sluice_core_timer_late_ticks_total",
                "`timer` ticks that started late.",
                c.late_ticks,
            ),
        ] {
            f.counter(name, help, &l, v as f64);
        }
        f.counter(
            "sluice_core_cpu_seconds_total",
            "CPU time of the worker thread.",
            &l,
            c.cpu_ns as f64 / 1e9,
        );
        f.gauge(
            "sluice_core_timer_quota",
            "`timer`: the per-queue quota of the next tick.",
            &l,
            c.burst as f64,
        );
        for (k, name) in w.counters.gauge_names.iter().enumerate() {
            f.gauge(
                &format!("sluice_{name}"),
                "A level the forwarding stage keeps (conntrack_entries: flows tracked; conntrack_limit: the table's size; nat_mappings: flows translated; nat_ports: NAT ports in this worker's share; nat_blocks_held: port blocks its inside hosts hold).",
                &l,
                c.gauges.get(k).copied().unwrap_or(0) as f64,
            );
        }
        let t = &c.tester;
        if w.probe_hist.is_some() || *t != Default::default() {
            for (what, v) in [
                ("made", t.generated),
                ("late", t.late),
                ("nombuf", t.nombuf),
            ] {
                f.counter(
                    "sluice_tester_generated_packets_total",
                    "A tester worker's generators: packets made (made), skipped behind schedule (late), not made for want of a buffer (nombuf).",
                    &[("core", core.as_str()), ("outcome", what)],
                    v as f64,
                );
            }
            for (what, v) in [
                ("signed", t.signed),
                ("unsigned", t.unsigned),
                ("lost", t.lost),
                ("reordered", t.reordered),
                ("duplicate", t.duplicate),
            ] {
                f.counter(
                    "sluice_tester_received_packets_total",
                    "A tester worker's probe: received packets with the signature (signed), without (unsigned); sequence numbers missing net of late ones (lost), packets after a later one of their flow (reordered), seen twice (duplicate).",
                    &[("core", core.as_str()), ("kind", what)],
                    v as f64,
                );
            }
            f.gauge(
                "sluice_tester_sending",
                "1 while the worker's generators send.",
                &l,
                f64::from(u8::from(t.running)),
            );
            if let Some(h) = &w.probe_hist {
                f.latency(
                    "sluice_tester_latency_seconds",
                    "One-way latency of the stamped packets the tester's probe received (since the last `gen start`).",
                    &l,
                    &h.total,
                    hz,
                );
            }
        }
        if !w.counters.stage_names.is_empty() {
            f.gauge(
                "sluice_stage_clock",
                "1 while the worker's stage clock runs (`sluice ctl set runtime on`).",
                &l,
                f64::from(u8::from(c.stage_on)),
            );
            f.counter(
                "sluice_stage_packets_total",
                "Packets the worker's stages processed since its stage clock was last switched on.",
                &l,
                c.stage_packets as f64,
            );
            for (k, name) in w.counters.stage_names.iter().enumerate() {
                f.counter(
                    "sluice_stage_cycles_total",
                    "TSC cycles each stage spent since the worker's stage clock was last switched on (less the clock's reads).",
                    &[("core", core.as_str()), ("stage", name)],
                    c.stage_cycles.get(k).copied().unwrap_or(0) as f64,
                );
            }
        }
        for (k, name) in w.counters.event_names.iter().enumerate() {
            f.counter(
                "sluice_core_events_total",
                "Slow-path work of the forwarding stages, by the stages' names.",
                &[("core", core.as_str()), ("event", name)],
                c.events.get(k).copied().unwrap_or(0) as f64,
            );
        }
    }
}

/// The exposition text of `cur` (totals since start) for `tel`'s ports and
/// workers, with `rule_hits` and the control plane's counters.
pub fn render(
    tel: &Telemetry,
    cur: &Snapshot,
    rule_hits: &RuleHits,
    cp: &ControlPlane<'_>,
) -> String {
    let hz = tel.tsc_hz();
    let mut f = Families::default();
    f.gauge(
        "sluice_info",
        "Sluice's version (value 1).",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1.0,
    );
    f.gauge(
        "sluice_uptime_seconds",
        "Seconds since the appliance started forwarding.",
        &[],
        tel.seconds_since_start(cur),
    );
    control_plane(&mut f, tel, cp);
    if let Some(st) = cp.ha {
        ha(&mut f, st);
    }
    if let Some(st) = cp.export {
        export(&mut f, st);
    }
    ports(&mut f, tel, cur);
    cores(&mut f, tel, cur);
    f.gauge(
        "sluice_tsc_hertz",
        "TSC cycles per second (to turn the cycle counters into seconds).",
        &[],
        hz,
    );
    for (rule, n) in rule_hits {
        f.counter(
            "sluice_rule_hits_total",
            "Packets that matched a firewall rule with `counter = true` (by where the rule is written).",
            &[("rule", rule.as_str())],
            *n as f64,
        );
    }
    let mut out = Vec::new();
    // Cannot fail: every family has a name, a type and metrics of it.
    let _ = TextEncoder::new().encode(&f.0, &mut out);
    String::from_utf8(out).unwrap_or_default()
}
