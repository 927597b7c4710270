//! The DPDK backend on vdevs (needs Debian's DPDK; runs without hugepages):
//! `net_null` RX/TX and counters, and a `net_ring` loopback carrying real
//! frames through the forwarding modes. One test: EAL initialises once per
//! process.
#![cfg(feature = "dpdk")]

use pipeline::fwd::{FiveTupleSwap, ForwardMode, Frame, Peers};
use pmd::dpdk::{self, DpdkPortConfig, Eal, Mempool};
use pmd::{Batch, PacketBuf};

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
    // Headroom operations on an mbuf.
    let mut m = b.pop().unwrap();
    assert_eq!(m.prepend(4).map(|h| h.len()), Some(4));
    assert_eq!(m.len(), 64);
    assert!(m.adj(4) && m.trim(4));
    assert_eq!(m.len(), 56);
}
