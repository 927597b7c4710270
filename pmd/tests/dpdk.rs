//! The DPDK backend on vdevs (needs Debian's DPDK; runs without hugepages):
//! `net_null` RX/TX (2 KiB and jumbo mbufs), counters and xstats, RSS
//! configuration with the symmetric key, a `net_ring` loopback carrying
//! real frames through the forwarding modes, and (as root, with
//! /dev/net/tun) a `net_tap` port whose rx interrupt wakes an epoll wait
//! when the kernel sends it a frame.
//! One test: EAL initialises once per process.
#![cfg(feature = "dpdk")]

use pipeline::fwd::{FiveTupleSwap, ForwardMode, Frame, MacSwap, Peers};
use pmd::dpdk::{self, DpdkPortConfig, Eal, Mempool};
use pmd::{Batch, PacketBuf, RxQueue, TxQueue};

fn frame() -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[0..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14..34].copy_from_slice(&[
        0x45, 0, 0, 46, 0, 1, 0x40, 0, 64, 17, 0, 0, 198, 18, 0, 1, 198, 19, 0, 7,
    ]);
    let c = pipeline::checksum::checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
    f[34..42].copy_from_slice(&[0x04, 0x00, 0x00, 0x35, 0, 26, 0, 0]);
    f
}

#[test]
fn null_and_ring_vdevs() {
    let prefix = format!("sluice-test-{}", std::process::id());
    let eal = Eal::init(&[
        "sluice-test",
        "--no-huge",
        "--no-pci",
        "-m",
        "512",
        "-l",
        "0",
        "--file-prefix",
        &prefix,
        "--log-level",
        "*:error",
        "--vdev",
        "net_null0",
        "--vdev",
        "net_null1",
        "--vdev",
        "net_ring0",
        "--vdev",
        "net_null2",
        "--vdev",
        "net_null3,size=9014",
    ])
    .expect("EAL initialises without hugepages");
    assert!(Eal::init(&["again"]).is_err(), "EAL initialises once");
    let pool = Mempool::create(&eal, "sluice-test", 4095, 256, 2048 + 128).unwrap();
    let cfg = |d: &str| DpdkPortConfig {
        device: d.into(),
        rxq: 1,
        txq: 1,
        rxd: 512,
        txd: 512,
        stamp_rx: true,
        rss: true,
        rx_intr: false,
        mtu: 1500,
    };

    // net_null: RX hands out packets, TX takes them, the counters agree.
    let mut n0 = dpdk::open(&eal, &cfg("net_null0"), &pool).unwrap();
    let mut n1 = dpdk::open(&eal, &cfg("net_null1"), &pool).unwrap();
    let mut b = Batch::new(32);
    let mut moved = 0;
    for _ in 0..100 {
        let n = n0.rx[0].rx_burst(&mut b);
        assert!(b.iter().all(|m| m.len() == 64));
        assert!(
            b.iter().all(|m| m.rx_tsc() > 0),
            "RX timestamp in the dynfield"
        );
        moved += n;
        let sent = n1.tx[0].tx_burst(&mut b);
        assert_eq!(sent, n);
    }
    assert!(moved > 0);
    assert_eq!(n0.control.stats().ipackets, moved as u64);
    assert_eq!(n1.control.stats().opackets, moved as u64);
    assert!(dpdk::open(&eal, &cfg("net_null7"), &pool).is_err());
    assert_eq!(n0.control.caps().max_frame, 2048, "2 KiB mbufs");

    // Jumbo frames: mbufs sized for the MTU (as appliance::eal sizes
    // them), the MTU configured on the device, 9,014-byte frames whole.
    let room = pmd::mbuf::data_room_for(9000) + dpdk::RTE_PKTMBUF_HEADROOM;
    let jumbo = Mempool::create(&eal, "sluice-jumbo", 1023, 64, room as u16).unwrap();
    assert!(jumbo.max_frame() >= 9014, "{}", jumbo.max_frame());
    let mut j = dpdk::open(
        &eal,
        &DpdkPortConfig {
            mtu: 9000,
            ..cfg("net_null3")
        },
        &jumbo,
    )
    .unwrap();
    assert_eq!(j.control.caps().max_frame, jumbo.max_frame());
    let got = j.rx[0].rx_burst(&mut b);
    assert!(got > 0);
    assert!(b.iter().all(|m| m.len() == 9014), "received whole");
    assert_eq!(n1.tx[0].tx_burst(&mut b), got);

    // net_ring: what goes out comes back, unchanged in io, swapped in 5tswap.
    let mut r = dpdk::open(&eal, &cfg("net_ring0"), &pool).unwrap();
    let f = frame();
    for _ in 0..8 {
        let mut m = pool.alloc().unwrap();
        assert!(m.set_len(f.len()));
        m.bytes_mut().copy_from_slice(&f);
        b.push(m).ok().unwrap();
    }
    assert_eq!(r.tx[0].tx_burst(&mut b), 8);
    assert_eq!(r.rx[0].rx_burst(&mut b), 8);
    assert!(
        b.iter().all(|m| m.data() == &f[..]),
        "io: bytes unchanged, zero copy"
    );
    let mut swap = FiveTupleSwap(Peers::paired(1));
    for m in b.iter_mut() {
        swap.process(m, 0);
    }
    assert_eq!(r.tx[0].tx_burst(&mut b), 8);
    assert_eq!(r.rx[0].rx_burst(&mut b), 8);
    for m in b.iter() {
        let d = m.data();
        assert_eq!(&d[26..30], &[198, 19, 0, 7], "addresses swapped");
        assert_eq!(&d[34..38], &[0x00, 0x35, 0x04, 0x00], "ports swapped");
        assert_eq!(
            pipeline::checksum::checksum(&d[14..34]),
            0,
            "checksum still valid"
        );
    }
    // macswap's burst loop on the mbufs: MACs swapped, one verdict.
    let before: Vec<Vec<u8>> = b.iter().map(|m| m.data().to_vec()).collect();
    let mut verdicts = vec![pipeline::verdict::Verdict::Forward(9); 8];
    let v = MacSwap(Peers::paired(1)).process_burst(b.as_mut_slice(), 0, &mut verdicts);
    assert_eq!(v, Some(pipeline::verdict::Verdict::Forward(0)));
    assert_eq!(r.tx[0].tx_burst(&mut b), 8);
    assert_eq!(r.rx[0].rx_burst(&mut b), 8);
    for (m, f) in b.iter().zip(&before) {
        let d = m.data();
        assert_eq!(&d[..6], &f[6..12], "macswap: new destination");
        assert_eq!(&d[6..12], &f[..6], "macswap: new source");
        assert_eq!(&d[12..], &f[12..], "macswap: the rest as it was");
    }
    // An mbuf another handle also references (refcnt 2, as
    // rte_mbuf_refcnt_update or rte_pktmbuf_clone would leave it) is not
    // handed to a worker: RX refuses it, counts it as missed and in
    // `rx_shared_refused`, and drops only its own reference.
    let missed0 = r.control.stats().imissed;
    let shared = pool.alloc().unwrap();
    // SAFETY: DpdkMbuf is repr(transparent) over the mbuf pointer; the
    // test takes the second reference by hand and releases it below.
    let raw: *mut dpdk_sys::rte_mbuf = unsafe { std::mem::transmute_copy(&shared) };
    unsafe { (*raw).refcnt = 2 };
    let mut one = Batch::new(32);
    one.push(shared).ok().unwrap();
    assert_eq!(r.tx[0].tx_burst(&mut one), 1);
    assert_eq!(r.rx[0].rx_burst(&mut one), 0, "a shared mbuf is refused");
    assert_eq!(r.control.stats().imissed, missed0 + 1);
    let xs = r.control.xstats();
    assert!(xs.contains(&("rx_shared_refused", 1)), "{xs:?}");
    // SAFETY: RX dropped its reference; this is the last one.
    unsafe {
        assert_eq!((*raw).refcnt, 1);
        dpdk_sys::sluice_pktmbuf_free(raw);
    }

    // Headroom operations on an mbuf.
    let mut m = b.pop().unwrap();
    assert_eq!(m.prepend(4).map(|h| h.len()), Some(4));
    assert_eq!(m.len(), 64);
    assert!(m.adj(4) && m.trim(4));
    assert_eq!(m.len(), 56);

    drop(m);

    // xstats: the generic ones agree with the counters.
    let xs = n0.control.xstats();
    let get = |k: &str| xs.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
    assert_eq!(get("rx_good_packets"), Some(moved as u64), "{xs:?}");

    // RSS: the symmetric key hashes both directions alike; a two-queue
    // port is configured for RSS.
    for (a, b, pa, pb) in [
        (0xc612_0001u32, 0xcb00_7107u32, 40000u16, 80u16),
        (0x0a00_0001, 0x0a00_0002, 1, 65535),
        (0x0102_0304, 0xfffe_fdfc, 12345, 54321),
    ] {
        let h = dpdk::symmetric_rss_v4(a, b, pa, pb);
        assert_eq!(h, dpdk::symmetric_rss_v4(b, a, pb, pa), "symmetric");
        assert_ne!(h, dpdk::symmetric_rss_v4(a, b, pa, pb ^ 1));
    }
    let mq = dpdk::open(
        &eal,
        &DpdkPortConfig {
            rxq: 2,
            txq: 2,
            ..cfg("net_null2")
        },
        &pool,
    )
    .unwrap();
    let xs = mq.control.xstats();
    let rss = xs.iter().find(|(n, _)| *n == "rss_hash_types").unwrap().1;
    assert_ne!(rss, 0, "RSS configured over two queues: {xs:?}");
    assert_eq!(mq.rx.len(), 2);

    tap_interrupt(&eal, &pool);
}

/// net_tap with rx interrupts: the queue's interrupt line becomes readable
/// when the kernel sends a frame out of the tap interface, and the frame is
/// then received. Skipped (with a note) where taps cannot be made.
fn tap_interrupt(eal: &Eal, pool: &Mempool) {
    if !std::path::Path::new("/dev/net/tun").exists()
        || dpdk::vdev_init(eal, "net_tap0", "iface=sltap0").is_err()
    {
        assert!(std::env::var_os("CI").is_none(), "net_tap must work in CI");
        eprintln!("skipped: no tap device here");
        return;
    }
    let mut tap = dpdk::open(
        eal,
        &DpdkPortConfig {
            device: "net_tap0".into(),
            rxq: 1,
            txq: 1,
            rxd: 512,
            txd: 512,
            stamp_rx: false,
            rss: false,
            rx_intr: true,
            mtu: 1500,
        },
        pool,
    )
    .unwrap();
    assert!(tap.control.caps().rx_interrupt, "net_tap has rx interrupts");
    let up = std::process::Command::new("ip")
        .args(["link", "set", "sltap0", "up"])
        .status()
        .unwrap();
    assert!(up.success());
    let fd = tap.rx[0].interrupt().expect("an interrupt line").fd();
    let mut ep = pmd::sys::Epoll::new(4).unwrap();
    ep.add(fd, 0).unwrap();

    let mut b = Batch::new(32);
    // Drain what the kernel sent on bringing the interface up.
    std::thread::sleep(std::time::Duration::from_millis(200));
    while tap.rx[0].rx_burst(&mut b) > 0 {
        b.clear();
    }
    tap.rx[0].interrupt().unwrap().enable();
    assert_eq!(
        tap.rx[0].rx_burst(&mut b),
        0,
        "nothing pending after arming"
    );
    // The kernel transmits a frame on sltap0: through an AF_PACKET port.
    let mut k = pmd::afpacket::open(&pmd::afpacket::AfPacketConfig {
        port: 9,
        iface: "sltap0".into(),
        rxq: 1,
        txq: 1,
        blocks: 2,
        ring: pmd::afpacket::RingVersion::V3,
        qdisc_bypass: true,
        pool_size: 256,
        mtu: 1500,
    })
    .unwrap();
    let f = frame();
    let mut out = Batch::new(1);
    let pk = pmd::Pool::new("taptest", 16, 2048).unwrap();
    let mut m = pk.alloc().unwrap();
    assert!(m.copy_from(&f));
    out.push(m).ok().unwrap();
    assert_eq!(k.tx[0].tx_burst(&mut out), 1);
    let woke = ep.wait(2000).count();
    assert!(woke > 0, "the rx interrupt woke the wait");
    tap.rx[0].interrupt().unwrap().disable();
    let mut got = Vec::new();
    for _ in 0..20 {
        tap.rx[0].rx_burst(&mut b);
        got.extend(b.iter().map(|m| m.data().to_vec()));
        b.clear();
        if got.iter().any(|g| g == &f) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(
        got.iter().any(|g| g == &f),
        "the frame arrived: {} frames",
        got.len()
    );
    tap.rx[0].interrupt().unwrap().ack();

    // The tap PMD verifies IPv4 header checksums (RX offload, asked for
    // where a device offers it): each mbuf says what it found, which the
    // router's and gateway's fast paths take instead of their own sum.
    let offload = tap.control.xstats();
    assert!(
        offload.contains(&("rx_ipv4_cksum_offload", 1)),
        "net_tap verifies IPv4 checksums: {offload:?}"
    );
    let mut bad = f.clone();
    bad[24] ^= 0x10;
    for want in [&f, &bad] {
        let mut m = pk.alloc().unwrap();
        assert!(m.copy_from(want));
        out.push(m).ok().unwrap();
        assert_eq!(k.tx[0].tx_burst(&mut out), 1);
    }
    let mut verdicts = Vec::new();
    for _ in 0..50 {
        tap.rx[0].rx_burst(&mut b);
        for m in b.iter() {
            if m.data() == f.as_slice() || m.data() == bad.as_slice() {
                verdicts.push((m.data() == f.as_slice(), m.ip4_csum().ok()));
            }
        }
        b.clear();
        if verdicts.len() == 2 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(
        verdicts,
        [(true, Some(true)), (false, Some(false))],
        "the NIC's verdicts on a sound and a corrupt header"
    );
}
