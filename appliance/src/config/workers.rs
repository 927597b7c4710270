//! `[[worker]]` checks: cores, the RX queues each polls (each queue of
//! every port polled by exactly one worker), the TX queue it gets on every
//! port its packets leave by, its poll policy, its generator and probe;
//! the generators' flows across the process.

use super::*;

/// Checks the workers of `raw` against the checked `ports` (`names`:
/// port name to index; `machine`: the cores there are).
pub(super) fn check(
    cx: &mut Ctx<'_>,
    raw: &RawFile,
    ports: &[PortConfig],
    names: &BTreeMap<String, u16>,
    machine: &BTreeSet<usize>,
) -> Vec<WorkerConfig> {
    if raw.worker.is_empty() {
        cx.err_whole("worker", "no [[worker]] defined");
    }
    let mut cores: BTreeMap<usize, usize> = BTreeMap::new();
    let mut owner: BTreeMap<(u16, u16), usize> = BTreeMap::new();
    let mut tx_next: Vec<u16> = vec![0; ports.len()];
    let mut workers = Vec::new();
    for (wi, w) in raw.worker.iter().enumerate() {
        let core = *w.core.get_ref();
        if let Some(prev) = cores.insert(core, wi) {
            cx.err(
                &w.core,
                format!("worker[{wi}].core"),
                format!("core {core} is already used by worker[{prev}]"),
            );
        } else if !machine.contains(&core) {
            cx.err(
                &w.core,
                format!("worker[{wi}].core"),
                format!("core {core} does not exist on this machine (cores: {machine:?})"),
            );
        }
        if w.rx.get_ref().is_empty() {
            cx.err(
                &w.rx,
                format!("worker[{wi}].rx"),
                "a worker needs at least one RX queue",
            );
        }
        let mut rx = Vec::new();
        for q in w.rx.get_ref() {
            let QueueRef { port, queue } = &q.get_ref().0;
            let key = format!("worker[{wi}].rx");
            let Some(&pi) = names.get(port) else {
                cx.err(
                    q,
                    key,
                    format!(
                        "port `{port}` does not exist (ports: {:?})",
                        names.keys().collect::<Vec<_>>()
                    ),
                );
                continue;
            };
            let rxq = ports[usize::from(pi)].rxq;
            if !(1..=64).contains(&rxq) {
                continue; // the port's own error says why
            }
            if *queue >= rxq {
                cx.err(
                    q,
                    key,
                    format!("port `{port}` has {rxq} RX queue(s); queue {queue} does not exist"),
                );
                continue;
            }
            if let Some(prev) = owner.insert((pi, *queue), wi) {
                cx.err(
                    q,
                    key,
                    format!("RX queue {port}:{queue} is already polled by worker[{prev}]"),
                );
                continue;
            }
            rx.push((pi, *queue));
        }
        // One TX queue on every port this worker's packets leave on: the
        // peers of its RX ports (icmpecho: those ports themselves; rxonly
        // sends nothing; a router: every port, as l3fwd gives each lcore
        // a queue on each port, since a route, an ARP or echo reply or an
        // ICMP error can leave by any, the receiving one included).
        let mut tx = Vec::new();
        let outs: BTreeSet<u16> = match *w.mode.get_ref() {
            FwdMode::RxOnly => BTreeSet::new(),
            FwdMode::IcmpEcho => rx.iter().map(|&(p, _)| p).collect(),
            FwdMode::L3fwd => (0..ports.len() as u16).collect(),
            _ => rx
                .iter()
                .map(|&(p, _)| ports[usize::from(p)].peer)
                .collect(),
        };
        for out in outs {
            let pc = &ports[usize::from(out)];
            let q = tx_next[usize::from(out)];
            tx_next[usize::from(out)] += 1;
            if q >= pc.txq {
                cx.err(&w.rx, format!("worker[{wi}].rx"), format!("port `{}` needs a TX queue per worker sending on it, and has only {} (set txq)", pc.name, pc.txq));
            }
            tx.push((out, q));
        }
        let poll = match &w.poll {
            Some(p) => check_poll(cx, wi, p.get_ref()),
            None => Policy::Busy,
        };
        let mode = *w.mode.get_ref();
        if let (true, Some(p)) = (mode.generates(), &w.poll) {
            if poll != Policy::Busy {
                cx.err(
                    p,
                    format!("worker[{wi}].poll"),
                    "a generating worker busy-polls: its pacing needs the core (mode = \"busy\")",
                );
            }
        }
        let gen = check_worker_gen(cx, wi, w, mode);
        let measure = match &w.measure {
            Some(m) if mode == FwdMode::RxOnly || mode.generates() => {
                *m.get_ref() || mode.generates()
            }
            Some(m) => {
                cx.err(
                    m,
                    format!("worker[{wi}].measure"),
                    "only an rxonly worker measures (txonly and flowgen always do)",
                );
                false
            }
            None => mode.generates(),
        };
        workers.push(WorkerConfig {
            core,
            mode,
            rx,
            tx,
            poll,
            gen,
            measure,
        });
    }
    // Generators number their flows across the process (16 bits).
    let flows: u64 = workers
        .iter()
        .filter_map(|w| Some(u64::from(w.gen.as_ref()?.flows) * w.tx.len() as u64))
        .sum();
    if flows > u64::from(pmd::probe::MAX_FLOWS) {
        if let Some((wi, w)) = raw.worker.iter().enumerate().find(|(_, w)| w.gen.is_some()) {
            cx.err(
                &w.mode,
                format!("worker[{wi}].gen.flows"),
                format!(
                    "the generators have {flows} flows in all (flows x TX ports of each); at most {}",
                    pmd::probe::MAX_FLOWS
                ),
            );
        }
    }
    // Unpolled queues: one error per port, and none when a worker's own
    // errors (a bad queue reference, say) may be the cause.
    let worker_errs = cx
        .errs
        .iter()
        .any(|e| e.key.starts_with("worker") || e.key.ends_with(".name"));
    for (pi, p) in ports.iter().enumerate() {
        let idle: Vec<u16> = (0..p.rxq)
            .filter(|&q| !owner.contains_key(&(pi as u16, q)))
            .collect();
        if idle.is_empty() || worker_errs || !(1..=64).contains(&p.rxq) {
            continue;
        }
        let rp = &raw.port[pi];
        // Point at rxq if it was written, else at the port's name.
        let at = if rp.rxq.span().is_empty() {
            rp.name.span()
        } else {
            rp.rxq.span()
        };
        let which = match idle.as_slice() {
            [q] => format!("RX queue {}:{q} is", p.name),
            [a, .., b] if usize::from(b - a) + 1 == idle.len() => {
                format!("RX queues {}:{a}-{b} are", p.name)
            }
            _ => format!(
                "RX queues {} of port {} are",
                idle.iter()
                    .map(u16::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                p.name
            ),
        };
        cx.err(
            &Spanned::new(at, ()),
            format!("port[{pi}].rxq"),
            format!(
                "{which} not polled by any worker: give each to a worker's `rx`, or lower `rxq`"
            ),
        );
    }
    workers
}

/// A `txonly`/`flowgen` worker's generator (`[worker.gen]`; without
/// one, at the top rate: one flow for txonly, 1024 for flowgen, as
/// testpmd); an error for other modes.
fn check_worker_gen(
    cx: &mut Ctx<'_>,
    wi: usize,
    w: &RawWorker,
    mode: FwdMode,
) -> Option<GenConfig> {
    let flows = if mode == FwdMode::TxOnly { 1 } else { 1024 };
    let Some(g) = &w.gen else {
        return mode.generates().then(|| GenConfig {
            rate: Rate::Max,
            flows,
            ..GenConfig::default()
        });
    };
    let at = format!("worker[{wi}].gen");
    if !mode.generates() {
        cx.err(g, &at, "only txonly and flowgen workers generate");
        return None;
    }
    let raw = g.get_ref();
    if raw.rx_usecs.is_some() || raw.rx_frames.is_some() {
        cx.err(
            g,
            &at,
            "rx_usecs and rx_frames are a softnic port's interrupt coalescing, not a generator's",
        );
    }
    Some(ports::check_gen(
        cx,
        &at,
        raw,
        MacAddr::default(),
        true,
        flows,
    ))
}
