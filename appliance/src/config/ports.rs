//! `[[port]]` checks: queues and rings, the driver and its section, the
//! host (driver compiled in, interface present, its MAC), captures, and
//! the softnic generator's settings.

use super::*;

pub(super) fn check_port(
    cx: &mut Ctx<'_>,
    i: usize,
    p: &RawPort,
    names: &BTreeMap<String, u16>,
    n: u16,
    base: Option<&Path>,
    mirrored: bool,
) -> PortConfig {
    let k = |f: &str| format!("port[{i}].{f}");
    let driver = *p.driver.get_ref();
    if *p.rxq.get_ref() == 0 || *p.rxq.get_ref() > 64 {
        cx.err(&p.rxq, k("rxq"), "must be 1..=64");
    }
    if *p.txq.get_ref() == 0 || *p.txq.get_ref() > 64 {
        cx.err(&p.txq, k("txq"), "must be 1..=64");
    }
    for (v, f) in [(&p.rxd, "rxd"), (&p.txd, "txd")] {
        if !(1..=65536).contains(v.get_ref()) {
            cx.err(v, k(f), "must be 1..=65536 descriptors");
        }
    }
    let sections = [
        (
            p.softnic.as_ref().map(|s| s.span()),
            Driver::Softnic,
            "softnic",
        ),
        (p.null.as_ref().map(|s| s.span()), Driver::Null, "null"),
        (p.pcap.as_ref().map(|s| s.span()), Driver::Pcap, "pcap"),
        (p.dpdk.as_ref().map(|s| s.span()), Driver::Dpdk, "dpdk"),
        (
            p.afpacket.as_ref().map(|s| s.span()),
            Driver::Afpacket,
            "afpacket",
        ),
        (p.afxdp.as_ref().map(|s| s.span()), Driver::Afxdp, "afxdp"),
    ];
    for (span, d, name) in sections {
        if let Some(span) = span {
            if d != driver {
                cx.err(
                    &Spanned::new(span, ()),
                    k(name),
                    format!(
                        "section [port.{name}] does not apply to driver `{}`",
                        driver_name(driver)
                    ),
                );
            }
        }
    }
    let peer = match &p.peer {
        Some(s) => match names.get(s.get_ref()) {
            Some(&pi) => pi,
            None => {
                cx.err(
                    s,
                    k("peer"),
                    format!("port `{}` does not exist", s.get_ref()),
                );
                i as u16
            }
        },
        None => {
            let i = i as u16;
            if i ^ 1 < n {
                i ^ 1
            } else {
                i
            }
        }
    };
    // Host checks: the driver is compiled in, the interface exists (and
    // its MAC is the port's unless `mac` says otherwise).
    if cx.host {
        let missing = match driver {
            Driver::Dpdk if !cfg!(feature = "dpdk") => Some("dpdk"),
            Driver::Afxdp if !cfg!(feature = "afxdp") => Some("afxdp"),
            _ => None,
        };
        if let Some(f) = missing {
            cx.err(
                &p.driver,
                k("driver"),
                format!("this sluice was built without the `{f}` driver: build it with `cargo build --release --features {f}`"),
            );
        }
    }
    let iface = match driver {
        Driver::Afpacket => p.afpacket.as_ref().map(|a| &a.get_ref().iface),
        Driver::Afxdp => p.afxdp.as_ref().map(|a| &a.get_ref().iface),
        _ => None,
    };
    let mut iface_mac = None;
    if let Some(name) = iface.filter(|_| cx.host) {
        let n = name.get_ref();
        let sys = Path::new("/sys/class/net").join(n);
        let sec = driver_name(driver);
        if n.is_empty() || n.contains('/') || !sys.exists() {
            cx.err(
                name,
                k(&format!("{sec}.iface")),
                format!("interface `{n}` does not exist in this network namespace (`ip link` lists them)"),
            );
        } else {
            iface_mac = std::fs::read_to_string(sys.join("address"))
                .ok()
                .and_then(|m| m.trim().parse::<MacAddr>().ok());
        }
    }
    let mac = p
        .mac
        .map(|m| m.0)
        .or(iface_mac)
        .unwrap_or(MacAddr([0x02, 0x51, 0, 0, 0, i as u8]));
    // With TAP mirrors the kernel owns the router's addresses on the TAPs,
    // and a `mac` of the port's own keeps IP frames to Sluice from being
    // the kernel's on the port's interface (docs/router.md): no warning.
    if let (Some(m), Some(im), Some(name), false) = (p.mac, iface_mac, iface, mirrored) {
        if m.0 != im {
            cx.warn(
                name,
                k("mac"),
                format!(
                    "`mac` {} differs from interface {}'s own {im}: the kernel delivers frames to its own MAC (leave `mac` out to use it; with `[control_plane] tap` a MAC of the port's own is right)",
                    m.0,
                    name.get_ref()
                ),
            );
        }
    }
    let peer_mac = p
        .peer_mac
        .map(|m| m.0)
        .unwrap_or(MacAddr([0x02, 0x5e, 0, 0, 0, i as u8]));
    let kind = match driver {
        Driver::Softnic => match &p.softnic {
            Some(s) => check_softnic(cx, i, s.get_ref(), mac),
            None => {
                cx.err(
                    &p.driver,
                    k("driver"),
                    "driver `softnic` needs a [port.softnic] section (at least `rate`)",
                );
                PortKind::Null { size: 64 }
            }
        },
        Driver::Null => {
            let size = p.null.as_ref().map_or(64, |s| *s.get_ref().size.get_ref());
            if let Some(s) = &p.null {
                if !(14..=9000).contains(&size) {
                    cx.err(&s.get_ref().size, k("null.size"), "must be 14..=9000 bytes");
                }
            }
            PortKind::Null { size }
        }
        Driver::Dpdk => match &p.dpdk {
            Some(d) => {
                if d.get_ref().device.get_ref().is_empty() {
                    cx.err(&d.get_ref().device, k("dpdk.device"), "must name a device");
                }
                PortKind::Dpdk {
                    device: d.get_ref().device.get_ref().clone(),
                }
            }
            None => {
                cx.err(
                    &p.driver,
                    k("driver"),
                    "driver `dpdk` needs a [port.dpdk] section with `device`",
                );
                PortKind::Null { size: 64 }
            }
        },
        Driver::Afpacket => afpacket(cx, i, p),
        Driver::Afxdp => afxdp(cx, i, p),
        Driver::Pcap => pcap(cx, i, p, base),
    };
    PortConfig {
        name: p.name.get_ref().clone(),
        kind,
        rxq: *p.rxq.get_ref(),
        txq: *p.txq.get_ref(),
        rxd: *p.rxd.get_ref(),
        txd: *p.txd.get_ref(),
        mac,
        peer_mac,
        peer,
        origin: format!("{}:{}", cx.file, cx.line_col(p.name.span().start).0),
    }
}

/// `[port.afpacket]`: the interface, the ring's blocks and version.
fn afpacket(cx: &mut Ctx<'_>, i: usize, p: &RawPort) -> PortKind {
    let k = |f: &str| format!("port[{i}].{f}");
    match &p.afpacket {
        Some(a) => {
            let a = a.get_ref();
            if a.iface.get_ref().is_empty() || a.iface.get_ref().len() > 15 {
                cx.err(
                    &a.iface,
                    k("afpacket.iface"),
                    "must name an interface (1-15 characters)",
                );
            }
            let blocks = a.blocks.as_ref().map_or(256, |b| *b.get_ref());
            if let Some(b) = &a.blocks {
                if !(2..=4096).contains(b.get_ref()) {
                    cx.err(b, k("afpacket.blocks"), "must be 2..=4096");
                }
            }
            PortKind::AfPacket {
                iface: a.iface.get_ref().clone(),
                blocks,
                ring: match a.ring {
                    Some(RawRing::V2) => pmd::afpacket::RingVersion::V2,
                    Some(RawRing::V3) | None => pmd::afpacket::RingVersion::V3,
                },
                qdisc_bypass: a.qdisc_bypass,
            }
        }
        None => {
            cx.err(
                &p.driver,
                k("driver"),
                "driver `afpacket` needs a [port.afpacket] section with `iface`",
            );
            PortKind::Null { size: 64 }
        }
    }
}

/// `[port.afxdp]`: one queue, the UMEM's frames, native or skb mode.
fn afxdp(cx: &mut Ctx<'_>, i: usize, p: &RawPort) -> PortKind {
    let k = |f: &str| format!("port[{i}].{f}");
    match &p.afxdp {
        Some(a) => {
            let a = a.get_ref();
            if *p.rxq.get_ref() != 1 || *p.txq.get_ref() != 1 {
                cx.err(
                    &p.rxq,
                    k("rxq"),
                    "an AF_XDP port has one RX and one TX queue (queue 0)",
                );
            }
            let frames = a.frames.as_ref().map_or(16384, |f| *f.get_ref());
            if let Some(f) = &a.frames {
                if !(64..=1 << 20).contains(f.get_ref()) || !f.get_ref().is_power_of_two() {
                    cx.err(f, k("afxdp.frames"), "must be a power of two, 64..=1048576");
                }
            }
            let skb_mode = match a.mode.as_ref().map(|m| m.get_ref().as_str()) {
                None | Some("native") => false,
                Some("skb") => true,
                Some(o) => {
                    cx.err(
                        a.mode.as_ref().unwrap(),
                        k("afxdp.mode"),
                        format!("`{o}`: expected native or skb"),
                    );
                    false
                }
            };
            PortKind::AfXdp {
                iface: a.iface.get_ref().clone(),
                frames,
                zerocopy: a.zerocopy,
                skb_mode,
            }
        }
        None => {
            cx.err(
                &p.driver,
                k("driver"),
                "driver `afxdp` needs a [port.afxdp] section with `iface`",
            );
            PortKind::Null { size: 64 }
        }
    }
}

/// `[port.pcap]`: one queue; the capture to replay and the file to write, checked now (a capture of a known link type; a writable place that is not a directory, a device or a pipe).
fn pcap(cx: &mut Ctx<'_>, i: usize, p: &RawPort, base: Option<&Path>) -> PortKind {
    let k = |f: &str| format!("port[{i}].{f}");
    {
        if *p.rxq.get_ref() != 1 || *p.txq.get_ref() != 1 {
            cx.err(
                &p.rxq,
                k("rxq"),
                "a pcap port has exactly one RX and one TX queue",
            );
        }
        let resolve = |f: &Option<Spanned<String>>| {
            f.as_ref().map(|f| super::files::beside(base, f.get_ref()))
        };
        let (rx_file, tx_file, loops) = p.pcap.as_ref().map_or((None, None, 1), |s| {
            let s = s.get_ref();
            (resolve(&s.rx_file), resolve(&s.tx_file), s.loops)
        });
        // What `run` will read and write, checked now.
        let raw = p.pcap.as_ref().map(|s| s.get_ref());
        if let (Some(path), Some(at)) = (&rx_file, raw.and_then(|r| r.rx_file.as_ref())) {
            if let Err(e) = regular_file(path, "capture", u64::MAX) {
                cx.err(at, k("pcap.rx_file"), e);
            } else if let Err(e) = pmd::pcap::inspect(path) {
                cx.err(at, k("pcap.rx_file"), pcap_error(&e));
            }
        }
        if let (Some(path), Some(at)) = (&tx_file, raw.and_then(|r| r.tx_file.as_ref())) {
            let dir = path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            if path.is_dir() {
                cx.err(
                    at,
                    k("pcap.tx_file"),
                    format!("{} is a directory; name a file to write", path.display()),
                );
            } else if !dir.is_dir() {
                cx.err(
                    at,
                    k("pcap.tx_file"),
                    format!("directory {} does not exist", dir.display()),
                );
            } else if path.exists() && !path.is_file() {
                // A pipe would block the start; a device is no capture.
                cx.err(
                    at,
                    k("pcap.tx_file"),
                    format!(
                        "{} is not a regular file (a device or a pipe)",
                        path.display()
                    ),
                );
            }
        }
        // A port that reads what it writes feeds itself without end.
        if let (Some(rx), Some(tx), Some(at)) =
            (&rx_file, &tx_file, raw.and_then(|r| r.tx_file.as_ref()))
        {
            if super::files::same_file(rx, tx) {
                cx.err(
                at,
                k("pcap.tx_file"),
                format!(
                    "{} is also this port's rx_file: the port would read its own output; write elsewhere",
                    tx.display()
                ),
            );
            }
        }
        PortKind::Pcap {
            rx_file,
            tx_file,
            loops,
        }
    }
}

/// A capture's error as an operator reads it.
pub(super) fn pcap_error(e: &pmd::PortError) -> String {
    match e {
        pmd::PortError::Io { path, error } if error.kind() == std::io::ErrorKind::NotFound => {
            format!("capture {path} does not exist")
        }
        pmd::PortError::Io { path, error } => format!("cannot read capture {path}: {error}"),
        pmd::PortError::Pcap { path, msg } if msg.contains("Error reading bytes") => format!(
            "capture {path} is cut short: it ends inside a packet record (a truncated file?)"
        ),
        pmd::PortError::Pcap { path, msg } if msg.contains("magic number") => format!(
            "{path} is not a pcap or pcapng capture (its first bytes are no capture header)"
        ),
        pmd::PortError::Pcap { path, msg } => format!("capture {path} cannot be replayed: {msg}"),
        other => other.to_string(),
    }
}

pub(super) fn driver_name(d: Driver) -> &'static str {
    match d {
        Driver::Softnic => "softnic",
        Driver::Null => "null",
        Driver::Pcap => "pcap",
        Driver::Dpdk => "dpdk",
        Driver::Afpacket => "afpacket",
        Driver::Afxdp => "afxdp",
    }
}

pub(super) fn check_softnic(cx: &mut Ctx<'_>, i: usize, s: &RawSoftnic, mac: MacAddr) -> PortKind {
    let flows = GenConfig::default().flows;
    let g = check_gen(cx, &format!("port[{i}].softnic"), s, mac, false, flows);
    let d = Coalesce::default();
    PortKind::Softnic {
        gen: g,
        coalesce: Coalesce {
            rx_usecs: s.rx_usecs.unwrap_or(d.rx_usecs),
            rx_frames: s.rx_frames.unwrap_or(d.rx_frames),
        },
    }
}

/// A generator's settings (`[port.softnic]`, or a `txonly`/`flowgen`
/// worker's `[worker.gen]` at `at`, where a rate of 0 means idle until
/// `sluice ctl gen start`), sending to `dst_mac`; `default_flows` when
/// `flows` is not given (rounded up to whole rounds of a size mix).
/// The longest frame a generator makes (a 9,000-byte packet).
const MAX_FRAME_LEN: usize = pmd::probe::MAX_FRAME_LEN;

pub(super) fn check_gen(
    cx: &mut Ctx<'_>,
    at: &str,
    s: &RawSoftnic,
    dst_mac: MacAddr,
    idle_ok: bool,
    default_flows: u32,
) -> GenConfig {
    let k = |f: &str| format!("{at}.{f}");
    let mut g = GenConfig {
        dst_mac,
        flows: default_flows,
        ..GenConfig::default()
    };
    g.rate = match s.rate.get_ref() {
        RawRate::Pps(p) if (MIN_RATE_PPS..=MAX_RATE_PPS).contains(p) => Rate::Pps(*p),
        RawRate::Pps(p) if idle_ok && *p == 0.0 => Rate::Pps(0.0),
        RawRate::Word(w) if w == "max" => Rate::Max,
        _ => {
            cx.err(
                &s.rate,
                k("rate"),
                if idle_ok {
                    "must be packets per second (0: idle until `sluice ctl gen start`, or 0.001 to 1e9) or \"max\""
                } else {
                    "must be packets per second (0.001 to 1e9) or \"max\""
                },
            );
            Rate::Max
        }
    };
    if let Some(v) = &s.size {
        if !(58..=MAX_FRAME_LEN).contains(v.get_ref()) {
            cx.err(
                v,
                k("size"),
                format!("must be 58..={MAX_FRAME_LEN} bytes (frame without FCS)"),
            );
        }
        g.size = *v.get_ref();
    }
    if let Some(v) = &s.flows {
        if !(1..=65536).contains(v.get_ref()) {
            cx.err(v, k("flows"), "must be 1..=65536");
        }
        g.flows = *v.get_ref();
    }
    if let Some(v) = &s.sizes {
        if s.size.is_some() {
            cx.err(v, k("sizes"), "give `size` or `sizes`, not both");
        }
        g.sizes = match v.get_ref() {
            RawSizes::Word(w) if w == "imix" => pmd::probe::IMIX.to_vec(),
            RawSizes::List(l) if !l.is_empty() && l.len() <= 64 => {
                if let Some(x) = l.iter().find(|x| !(58..=MAX_FRAME_LEN).contains(*x)) {
                    cx.err(
                        v,
                        k("sizes"),
                        format!("{x}: each must be 58..={MAX_FRAME_LEN} bytes (frame without FCS)"),
                    );
                }
                l.clone()
            }
            _ => {
                cx.err(
                    v,
                    k("sizes"),
                    "must be \"imix\" (64, 594 and 1518-byte frames with FCS, 7:4:1) or a list of 1 to 64 frame lengths without FCS, one per flow in turn (repeat a length to weigh it)",
                );
                Vec::new()
            }
        };
        let n = g.sizes.len() as u32;
        if n > 0 {
            match &s.flows {
                Some(f) if *f.get_ref() % n != 0 => cx.err(
                    f,
                    k("flows"),
                    format!("must be a multiple of the {n} lengths of `sizes` (each flow has one length; the mix is exact over whole rounds of them)"),
                ),
                Some(_) => {}
                // Unset: the default rounded up to whole rounds.
                None => g.flows = g.flows.div_ceil(n) * n,
            }
        }
    }
    for (v, f, slot) in [
        (&s.tcp_share, "tcp_share", &mut g.tcp_share),
        (&s.ipv6_share, "ipv6_share", &mut g.ipv6_share),
    ] {
        if let Some(v) = v {
            if !(0.0..=1.0).contains(v.get_ref()) {
                cx.err(v, k(f), "must be a share between 0 and 1");
            }
            *slot = *v.get_ref();
        }
    }
    if let Some(p) = s.pattern {
        g.pattern = match p {
            RawPattern::Constant => Pattern::Constant,
            RawPattern::Poisson => Pattern::Poisson,
        };
    }
    if let Some(w) = s.walk {
        g.walk = match w {
            RawWalk::Random => Walk::Random,
            RawWalk::Sequential => Walk::Sequential,
        };
    }
    if let Some(p) = s.src_ip {
        g.src_ip = p.0 .0;
    }
    if let Some(p) = s.dst_ip {
        g.dst_ip = p.0 .0;
    }
    if let Some(p) = s.src_ip6 {
        g.src_ip6 = p.0 .0;
    }
    if let Some(p) = s.dst_ip6 {
        g.dst_ip6 = p.0 .0;
    }
    if let Some(r) = s.src_port {
        g.src_port = Span {
            first: r.0 .0,
            last: r.0 .1,
        };
    }
    if let Some(r) = s.dst_port {
        g.dst_port = Span {
            first: r.0 .0,
            last: r.0 .1,
        };
    }
    if let Some(seed) = s.seed {
        g.seed = seed;
    }
    if let Some(sig) = s.signature {
        g.signature = sig;
    }
    g
}

/// `[[port]]`s: their names (unique, usable in `rx`), each port's
/// checks, and the pcap files between them; the checked ports and the
/// index of each name.
pub(super) fn check_ports(
    cx: &mut Ctx<'_>,
    raw: &RawFile,
    base: Option<&Path>,
) -> (Vec<PortConfig>, BTreeMap<String, u16>) {
    if raw.port.is_empty() {
        cx.err_whole("port", "no [[port]] defined");
    }
    let mut names: BTreeMap<String, u16> = BTreeMap::new();
    for (i, p) in raw.port.iter().enumerate() {
        let k = format!("port[{i}].name");
        let n = p.name.get_ref();
        let ok = (1..=32).contains(&n.len())
            && n.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
        if !ok {
            cx.err(
                &p.name,
                k.clone(),
                format!("`{n}`: a port name is 1 to 32 letters, digits, `_`, `-` or `.` (`:` separates the queue in `rx`)"),
            );
        }
        if names.insert(p.name.get_ref().clone(), i as u16).is_some() {
            cx.err(
                &p.name,
                k,
                format!("port name `{}` is used twice", p.name.get_ref()),
            );
        }
    }
    let n = raw.port.len() as u16;
    let mirrored = raw
        .control_plane
        .as_ref()
        .and_then(|c| c.get_ref().tap.as_ref())
        .is_some_and(|t| *t.get_ref());
    let mut ports = Vec::new();
    for (i, p) in raw.port.iter().enumerate() {
        ports.push(check_port(cx, i, p, &names, n, base, mirrored));
    }
    check_pcap_outputs(cx, raw, &ports);
    (ports, names)
}

/// No pcap output is another port's input (the ports would feed each
/// other without end) or another port's output (two writers of one file);
/// a port's own input is checked with the port.
fn check_pcap_outputs(cx: &mut Ctx<'_>, raw: &RawFile, ports: &[PortConfig]) {
    let files = |p: &PortConfig| match &p.kind {
        PortKind::Pcap {
            rx_file, tx_file, ..
        } => (rx_file.clone(), tx_file.clone()),
        _ => (None, None),
    };
    for (i, p) in ports.iter().enumerate() {
        let Some(tx) = files(p).1 else { continue };
        let Some(at) = raw.port[i]
            .pcap
            .as_ref()
            .and_then(|s| s.get_ref().tx_file.as_ref())
        else {
            continue;
        };
        for (j, q) in ports.iter().enumerate().filter(|&(j, _)| j != i) {
            let (rx, other_tx) = files(q);
            let clash = if rx.as_deref().is_some_and(|r| files::same_file(r, &tx)) {
                Some("rx_file: the two ports would feed each other without end")
            } else if j < i
                && other_tx
                    .as_deref()
                    .is_some_and(|t| files::same_file(t, &tx))
            {
                Some("tx_file: two ports cannot write one file")
            } else {
                None
            };
            if let Some(why) = clash {
                cx.err(
                    at,
                    format!("port[{i}].pcap.tx_file"),
                    format!("{} is also port `{}`'s {why}", tx.display(), q.name),
                );
                break;
            }
        }
    }
}

/// One buffer family per process: DPDK ports cannot mix with the others.
pub(super) fn check_buffer_family(cx: &mut Ctx<'_>, raw: &RawFile) {
    let dpdk_ports = raw
        .port
        .iter()
        .filter(|p| *p.driver.get_ref() == Driver::Dpdk)
        .count();
    if dpdk_ports > 0 && dpdk_ports < raw.port.len() {
        if let Some((i, p)) = raw
            .port
            .iter()
            .enumerate()
            .find(|(_, p)| *p.driver.get_ref() != Driver::Dpdk)
        {
            cx.err(
                &p.driver,
                format!("port[{i}].driver"),
                "DPDK ports cannot be mixed with other drivers in one process",
            );
        }
    }
}

/// `[dpdk] mbufs`: the pool must at least fill every RX ring at start.
pub(super) fn check_mbufs(cx: &mut Ctx<'_>, raw: &RawFile, ports: &[PortConfig]) -> Option<u32> {
    raw.dpdk.mbufs.as_ref().and_then(|m| {
        let rings: usize = ports.iter().map(|p| usize::from(p.rxq) * p.rxd).sum();
        let n = *m.get_ref();
        if !(1024..=1 << 24).contains(&n) {
            cx.err(m, "dpdk.mbufs", "must be 1024..=16777216 mbufs");
            None
        } else if (n as usize) < rings {
            cx.err(
                m,
                "dpdk.mbufs",
                format!("must hold every port's RX descriptors ({rings} here)"),
            );
            None
        } else {
            Some(n)
        }
    })
}
