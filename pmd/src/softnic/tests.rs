//! Unit tests of the software NIC: rings, generator, sink, interrupts.

use super::*;
use crate::sys::{wait_readable, Tsc};
use crate::{OpenPort, PacketBuf};
use std::time::{Duration, Instant};

fn tsc() -> Tsc {
    Tsc::calibrate(Duration::from_millis(20))
}

fn cfg(rate: Rate, rxd: usize) -> SoftnicConfig {
    SoftnicConfig {
        port: 0,
        rxq: 1,
        txq: 1,
        rxd,
        txd: 1024,
        coalesce: Coalesce::default(),
        gen: GenConfig {
            rate,
            flows: 64,
            tcp_share: 0.5,
            ipv6_share: 0.25,
            pattern: Pattern::Poisson,
            ..GenConfig::default()
        },
    }
}

fn xstat(p: &OpenPort, name: &str) -> u64 {
    p.control
        .xstats()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
        .unwrap()
}

/// Below capacity, an io forwarder loses nothing; the sink checks every
/// packet (UDP/TCP, IPv4/IPv6) and measures latency.
#[test]
fn forwards_everything_below_capacity() {
    let mut g = Generator::new(tsc());
    let (mut port, mut lat) = g.add_port(&cfg(Rate::Pps(20_000.0), 1024)).unwrap();
    let h = g.spawn(|| {}).unwrap();
    let mut b = Batch::new(32);
    let end = Instant::now() + Duration::from_millis(300);
    let mut fwd = 0;
    while Instant::now() < end {
        fwd += port.rx[0].rx_burst(&mut b);
        assert!(b.iter().all(|m| m.port() == 0 && m.queue() == 0));
        port.tx[0].tx_burst(&mut b);
        assert!(b.is_empty(), "TX ring has room");
        std::thread::sleep(Duration::from_micros(50));
    }
    h.stop_generating();
    loop {
        let n = port.rx[0].rx_burst(&mut b);
        if n == 0 {
            break;
        }
        fwd += n;
        port.tx[0].tx_burst(&mut b);
    }
    h.finish();
    let s = port.control.stats();
    let generated = xstat(&port, "generated");
    assert!(
        generated > 3_000,
        "about 6000 offered in 300 ms, got {generated}"
    );
    assert_eq!(s.imissed + s.rx_nombuf, 0);
    assert_eq!(s.ipackets, generated);
    assert_eq!(fwd as u64, generated);
    assert_eq!(xstat(&port, "sink_rx"), generated, "sink got every packet");
    assert_eq!(
        xstat(&port, "sink_bad"),
        0,
        "every packet passed the checks"
    );
    lat.collect();
    assert_eq!(lat.total.len(), generated, "one latency sample per packet");
    assert!(lat.total.value_at_quantile(0.99) > 0);
}

/// With nobody polling, the RX ring fills and the rest is counted missed.
#[test]
fn full_ring_counts_missed() {
    let mut g = Generator::new(tsc());
    let (port, _lat) = g.add_port(&cfg(Rate::Pps(100_000.0), 64)).unwrap();
    let h = g.spawn(|| {}).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    h.finish();
    let s = port.control.stats();
    assert_eq!(s.ipackets, 64, "ring holds rxd packets");
    assert!(s.imissed > 1000);
    assert_eq!(
        xstat(&port, "generated"),
        s.ipackets + s.imissed + s.rx_nombuf
    );
}

/// At the top rate the generator offers whole bursts: every packet it
/// built is received, missed (no room in the ring) or not built (no
/// buffer), and every packet received reaches the sink with its RX
/// metadata (the generator's, as it put the packet on the ring).
#[test]
fn top_rate_accounts_every_offered_packet() {
    let mut g = Generator::new(tsc());
    let (mut port, _lat) = g.add_port(&cfg(Rate::Max, 256)).unwrap();
    let h = g.spawn(|| {}).unwrap();
    let mut b = Batch::new(32);
    let end = Instant::now() + Duration::from_millis(200);
    let mut fwd = 0u64;
    let forward = |b: &mut Batch<Mbuf>, port: &mut OpenPort| {
        let n = port.rx[0].rx_burst(b);
        let now = rdtsc();
        assert!(b
            .iter()
            .all(|m| m.port() == 0 && m.queue() == 0 && m.rx_tsc() > 0 && m.rx_tsc() <= now));
        while !b.is_empty() {
            port.tx[0].tx_burst(b);
        }
        n as u64
    };
    while Instant::now() < end {
        fwd += forward(&mut b, &mut port);
    }
    h.stop_generating();
    loop {
        let n = forward(&mut b, &mut port);
        if n == 0 {
            break;
        }
        fwd += n;
    }
    h.finish();
    let s = port.control.stats();
    let generated = xstat(&port, "generated");
    assert!(s.ipackets > 1000, "{} received", s.ipackets);
    assert_eq!(generated, s.ipackets + s.imissed + s.rx_nombuf);
    assert_eq!(fwd, s.ipackets);
    assert_eq!(xstat(&port, "sink_rx"), fwd, "sink got every packet");
    assert_eq!(xstat(&port, "sink_bad"), 0);
}

/// The interrupt line fires only while armed, after rx_frames packets
/// wait (here before rx_usecs passes), and disarms itself.
#[test]
fn interrupt_coalesces_by_frames() {
    let mut g = Generator::new(tsc());
    let mut c = cfg(Rate::Pps(10_000.0), 1024);
    c.coalesce = Coalesce {
        rx_usecs: 500_000,
        rx_frames: 16,
    };
    let (mut port, _lat) = g.add_port(&c).unwrap();
    let h = g.spawn(|| {}).unwrap();
    let mut b = Batch::new(512);
    for round in 0..3 {
        // Drain, arm, re-check, block.
        port.rx[0].rx_burst(&mut b);
        b.clear();
        let intr = port.rx[0].interrupt().unwrap();
        intr.enable();
        port.rx[0].rx_burst(&mut b);
        b.clear();
        let t = Instant::now();
        let intr = port.rx[0].interrupt().unwrap();
        assert!(
            wait_readable(intr.fd(), Some(Duration::from_secs(2))),
            "round {round}: woke"
        );
        intr.ack();
        let n = port.rx[0].rx_burst(&mut b);
        b.clear();
        assert!(
            n >= 16,
            "round {round}: woke with {n} waiting, rx_frames is 16"
        );
        assert!(
            t.elapsed() < Duration::from_millis(400),
            "by frames, not by rx_usecs"
        );
    }
    // Not re-armed: no more interrupts.
    let fd = port.rx[0].interrupt().unwrap().fd();
    assert!(!wait_readable(fd, Some(Duration::from_millis(20))));
    h.finish();
    assert_eq!(xstat(&port, "rx_interrupts"), 3);
}

/// At a low rate the rx_usecs timer fires before rx_frames is reached.
#[test]
fn interrupt_coalesces_by_time() {
    let mut g = Generator::new(tsc());
    let mut c = cfg(Rate::Pps(1_000.0), 1024);
    c.coalesce = Coalesce {
        rx_usecs: 3_000,
        rx_frames: 1_000,
    };
    let (mut port, _lat) = g.add_port(&c).unwrap();
    let h = g.spawn(|| {}).unwrap();
    let mut b = Batch::new(512);
    let intr = port.rx[0].interrupt().unwrap();
    intr.enable();
    port.rx[0].rx_burst(&mut b);
    b.clear();
    let intr = port.rx[0].interrupt().unwrap();
    assert!(wait_readable(intr.fd(), Some(Duration::from_secs(2))));
    intr.ack();
    let n = port.rx[0].rx_burst(&mut b);
    assert!((1..100).contains(&n), "fired by time with {n} waiting");
    h.finish();
}

/// The sink counts frames that do not carry a valid signature as bad.
#[test]
fn sink_counts_bad_packets() {
    let mut g = Generator::new(tsc());
    let (mut port, _lat) = g.add_port(&cfg(Rate::Pps(5_000.0), 1024)).unwrap();
    let h = g.spawn(|| {}).unwrap();
    let mut b = Batch::new(32);
    let mut n = 0;
    while n < 20 {
        n += port.rx[0].rx_burst(&mut b);
        for m in b.iter_mut() {
            let d = m.data_mut();
            let last = d.len() - 1;
            d[14] = 0x47; // IPv4: IHL 7 breaks the checksum; IPv6: version 4
            d[last] ^= 0xff;
        }
        port.tx[0].tx_burst(&mut b);
    }
    h.stop_generating();
    while port.rx[0].rx_burst(&mut b) > 0 {
        b.clear();
    }
    h.finish();
    assert!(xstat(&port, "sink_bad") >= 20);
}
