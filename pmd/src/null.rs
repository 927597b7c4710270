//! The null port, like DPDK's `net_null`: RX hands out ready buffers of a
//! fixed length at once (their bytes are not written), TX frees whatever it
//! is given. It measures the framework's own cost per packet.

use crate::mbuf::{Mbuf, Pool};
use crate::sys::rdtsc;
use crate::{
    Batch, BoxRx, BoxTx, Caps, OpenPort, PacketBuf, PortControl, PortError, PortStats,
    QueueCounters, RxQueue, TxQueue, MAX_BURST,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Settings of a null port.
#[derive(Clone, Debug)]
pub struct NullConfig {
    /// Port index in the appliance.
    pub port: u16,
    /// Packet length handed out by RX.
    pub size: usize,
    /// RX queues.
    pub rxq: u16,
    /// TX queues.
    pub txq: u16,
    /// Buffers in the port's pool.
    pub pool_size: usize,
}

struct Control {
    rx: Vec<Arc<QueueCounters>>,
    tx: Vec<Arc<QueueCounters>>,
    stopped: Arc<AtomicBool>,
}

impl PortControl for Control {
    fn driver(&self) -> &'static str {
        "null"
    }
    fn stats(&self) -> PortStats {
        PortStats::from_queues(self.rx.iter().map(|q| &**q), self.tx.iter().map(|q| &**q))
    }
    fn rx_queue_stats(&self) -> Vec<PortStats> {
        PortStats::per_rx_queue(self.rx.iter().map(|q| &**q))
    }
    fn caps(&self) -> Caps {
        Caps {
            max_burst: MAX_BURST,
            rx_interrupt: false,
            max_frame: crate::probe::MAX_FRAME_LEN,
        }
    }
    fn stop_rx(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }
}

struct NullRx {
    pool: Pool,
    port: u16,
    queue: u16,
    size: usize,
    c: Arc<QueueCounters>,
    stopped: Arc<AtomicBool>,
}

impl RxQueue for NullRx {
    type Buf = Mbuf;

    #[inline]
    fn rx_burst(&mut self, out: &mut Batch<Mbuf>) -> usize {
        if self.stopped.load(Ordering::Relaxed) {
            return 0;
        }
        let start = out.len();
        let want = out.room();
        let got = self.pool.alloc_bulk(out, want);
        let now = rdtsc();
        for m in &mut out.as_mut_slice()[start..] {
            m.reset_len(self.size);
            m.set_rx_meta(self.port, self.queue, now, 0);
        }
        self.c.packets.add(got as u64);
        self.c.bytes.add((got * self.size) as u64);
        if got < want {
            self.c.nombuf.add((want - got) as u64);
        }
        got
    }
}

struct NullTx {
    c: Arc<QueueCounters>,
}

impl TxQueue for NullTx {
    type Buf = Mbuf;

    #[inline]
    fn tx_burst(&mut self, pkts: &mut Batch<Mbuf>) -> usize {
        let n = pkts.len();
        let bytes: usize = pkts.iter().map(|m| m.len()).sum();
        crate::mbuf::free_bulk(pkts.drain());
        self.c.packets.add(n as u64);
        self.c.bytes.add(bytes as u64);
        n
    }
}

/// Opens a null port.
pub fn open(cfg: &NullConfig) -> Result<OpenPort, PortError> {
    let pool = Pool::new(
        &format!("null{}", cfg.port),
        cfg.pool_size,
        cfg.size.max(64),
    )?;
    let rxc: Vec<_> = (0..cfg.rxq)
        .map(|_| Arc::new(QueueCounters::default()))
        .collect();
    let txc: Vec<_> = (0..cfg.txq)
        .map(|_| Arc::new(QueueCounters::default()))
        .collect();
    let stopped = Arc::new(AtomicBool::new(false));
    let rx = rxc
        .iter()
        .enumerate()
        .map(|(q, c)| {
            Box::new(NullRx {
                pool,
                port: cfg.port,
                queue: q as u16,
                size: cfg.size,
                c: c.clone(),
                stopped: stopped.clone(),
            }) as BoxRx
        })
        .collect();
    let tx = txc
        .iter()
        .map(|c| Box::new(NullTx { c: c.clone() }) as BoxTx)
        .collect();
    Ok(OpenPort {
        control: Arc::new(Control {
            rx: rxc,
            tx: txc,
            stopped,
        }),
        rx,
        tx,
        _buf: std::marker::PhantomData,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rx_fills_tx_frees() {
        let mut p = open(&NullConfig {
            port: 2,
            size: 64,
            rxq: 1,
            txq: 1,
            pool_size: 1024,
        })
        .unwrap();
        let mut b = Batch::new(32);
        for _ in 0..100 {
            assert_eq!(p.rx[0].rx_burst(&mut b), 32);
            assert!(b.iter().all(|m| m.len() == 64 && m.port() == 2));
            assert_eq!(p.tx[0].tx_burst(&mut b), 32);
            assert!(b.is_empty());
        }
        let s = p.control.stats();
        assert_eq!((s.ipackets, s.opackets, s.obytes), (3200, 3200, 3200 * 64));
        assert_eq!(s.rx_nombuf, 0);
        p.control.stop_rx();
        assert_eq!(p.rx[0].rx_burst(&mut b), 0, "stopped");
    }
}
