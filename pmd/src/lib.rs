//! Sluice's poll-mode driver layer.
//!
//! The API is DPDK's: a port has RX and TX queues; [`RxQueue::rx_burst`]
//! appends up to a burst of packets to a reusable fixed-capacity [`Batch`],
//! [`TxQueue::tx_burst`] takes packets from the front of a batch and returns
//! how many it took (the rest stay in the batch for the caller to retry or
//! drop). Packet buffers come from preallocated pools: nothing is allocated
//! per packet or per burst.
//!
//! # Buffers and the DPDK backend
//!
//! The worker loop and the pipeline are generic over [`PacketBuf`]: bytes
//! plus the metadata a NIC fills in (in-port, queue, RX timestamp, RSS hash)
//! and the headroom operations of `rte_pktmbuf_{prepend,adj,append,trim}`.
//! The native buffer, [`Mbuf`], is laid out like an `rte_mbuf`: a 64-byte
//! header (pool, `data_off`, `data_len`, port, queue, RSS hash, timestamp)
//! followed by 128 bytes of headroom and the data room, one slot per buffer
//! in one contiguous arena, recycled through per-thread caches in front of a
//! shared free list (the same scheme as `rte_mempool`'s per-lcore cache).
//!
//! The DPDK backend (module `dpdk`, feature `dpdk`) adds a second buffer type,
//! `DpdkMbuf`, wrapping a `NonNull<rte_mbuf>`: `data()` is `rte_pktmbuf_mtod` over `data_len`,
//! `port()`/`rss_hash()` read `mbuf.port`/`mbuf.hash.rss`, the RX timestamp
//! lives in a registered dynfield (or is taken per burst as here), `Drop`
//! calls `rte_pktmbuf_free`, and its queues implement [`RxQueue`]/[`TxQueue`]
//! by handing the batch's storage straight to `rte_eth_{rx,tx}_burst` (a
//! `Batch<DpdkMbuf>` is an array of `*mut rte_mbuf` with the same layout as
//! the `rx_pkts` argument). Nothing is copied; the worker loop is
//! monomorphised over that buffer type, one backend family per process.
//!
//! # Backends
//!
//! - [`null`]: DPDK's `net_null`: RX hands out ready buffers, TX frees them.
//! - [`softnic`]: a software NIC with descriptor rings, an interrupt line
//!   with coalescing, and a traffic generator / sink thread.
//! - [`pcap`]: RX replays a capture, TX writes one.
//!
//! # Safety
//!
//! `unsafe` lives in these modules, each block with a `SAFETY` comment
//! saying why it is sound: [`mbuf`] (the buffer arena: raw slots handed
//! out with unique ownership), [`batch`] (filling a burst in place for
//! drivers), [`alloc`] (the huge-page global allocator), [`sys`] (FFI for
//! the TSC, eventfd, epoll, thread CPU time, madvise), [`afpacket`] (the
//! TPACKET_V3 ring), and with their features `afxdp` (libxdp rings and the
//! UMEM) and `dpdk` (calls into DPDK through `dpdk-sys`). Miri checks
//! `mbuf` and `batch` (`scripts/test.sh`).

pub mod afpacket;
#[cfg(feature = "afxdp")]
pub mod afxdp;
pub mod alloc;
pub mod batch;
#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod gso;
pub mod hist;
pub mod mbuf;
pub mod null;
pub mod pcap;
pub mod probe;
pub mod softnic;
pub mod sys;
pub mod tap;

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

pub use batch::{Batch, MAX_BURST};
pub use mbuf::{free_bulk, Mbuf, Pool, PoolError};

/// A packet buffer as the worker loop and the pipeline see it (the
/// pipeline sees it through its `Frame` trait).
pub trait PacketBuf: Send + 'static + pipeline::fwd::Frame {
    /// The packet bytes.
    fn data(&self) -> &[u8];
    /// The packet bytes, mutable.
    fn data_mut(&mut self) -> &mut [u8];
    /// Packet length in bytes.
    fn len(&self) -> usize {
        self.data().len()
    }
    /// True for a zero-length packet.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Port the packet arrived on.
    fn port(&self) -> u16;
    /// RX queue the packet arrived on.
    fn queue(&self) -> u16;
    /// TSC when the NIC received it (taken once per burst).
    fn rx_tsc(&self) -> u64;
    /// RSS hash the NIC computed (0 if none).
    fn rss_hash(&self) -> u32;
    /// Grows the packet at the front by `n` bytes of headroom; returns the new
    /// front bytes, or `None` when the headroom is too small.
    fn prepend(&mut self, n: usize) -> Option<&mut [u8]>;
    /// Grows the packet at the end by `n` bytes; returns the new tail bytes,
    /// or `None` when the buffer is too small.
    fn append(&mut self, n: usize) -> Option<&mut [u8]>;
    /// Removes `n` bytes from the front; false (unchanged) if `n > len`.
    fn adj(&mut self, n: usize) -> bool;
    /// Removes `n` bytes from the end; false (unchanged) if `n > len`.
    fn trim(&mut self, n: usize) -> bool;
}

/// What a queue can do, like smoltcp's `DeviceCapabilities` for bursts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Largest burst one call handles.
    pub max_burst: usize,
    /// The RX queues have an interrupt line ([`RxQueue::interrupt`]).
    pub rx_interrupt: bool,
    /// Largest frame the port sends or receives.
    pub max_frame: usize,
}

/// A receive queue, owned by exactly one worker.
pub trait RxQueue: Send {
    /// The buffer type this queue hands out.
    type Buf: PacketBuf;
    /// Appends up to `out.room()` packets to `out`; returns how many.
    fn rx_burst(&mut self, out: &mut Batch<Self::Buf>) -> usize;
    /// The queue's interrupt line, if the device has one.
    fn interrupt(&self) -> Option<&dyn RxInterrupt> {
        None
    }
}

/// A transmit queue, owned by exactly one worker.
pub trait TxQueue: Send {
    /// The buffer type this queue takes.
    type Buf: PacketBuf;
    /// Takes packets from the front of `pkts` (at most the ring's free
    /// space); returns how many. Those not taken stay in `pkts`.
    fn tx_burst(&mut self, pkts: &mut Batch<Self::Buf>) -> usize;
    /// Whether the last `tx_burst` left packets because the link is down
    /// (the kernel said `ENETDOWN`), not for want of room: they are then
    /// dropped as `link_down`, before the management side has heard of
    /// the link (it used to count them `tx_full` for up to a second).
    #[inline]
    fn link_down(&self) -> bool {
        false
    }
}

/// A boxed queue is a queue (dynamic dispatch, for workers over mixed
/// drivers).
impl<Q: RxQueue + ?Sized> RxQueue for Box<Q> {
    type Buf = Q::Buf;
    #[inline]
    fn rx_burst(&mut self, out: &mut Batch<Self::Buf>) -> usize {
        (**self).rx_burst(out)
    }
    #[inline]
    fn interrupt(&self) -> Option<&dyn RxInterrupt> {
        (**self).interrupt()
    }
}

impl<Q: TxQueue + ?Sized> TxQueue for Box<Q> {
    type Buf = Q::Buf;
    #[inline]
    fn tx_burst(&mut self, pkts: &mut Batch<Self::Buf>) -> usize {
        (**self).tx_burst(pkts)
    }
    #[inline]
    fn link_down(&self) -> bool {
        (**self).link_down()
    }
}

/// The interrupt line of one RX queue, as `rte_eth_dev_rx_intr_*` offers it:
/// a file descriptor that becomes readable when the device raises the
/// interrupt, which it does only while enabled. The poll-mode policies block
/// on [`fd`](RxInterrupt::fd) with poll/epoll; AF_PACKET sockets and DPDK
/// rx interrupts implement the same trait.
pub trait RxInterrupt: Send + Sync {
    /// Descriptor to wait on (readable = interrupt raised).
    fn fd(&self) -> RawFd;
    /// Arms the interrupt. Check the queue once more after arming: packets
    /// that arrived before it was armed do not raise it.
    fn enable(&self);
    /// Disarms the interrupt (back to polling).
    fn disable(&self);
    /// Acknowledges a raised interrupt (clears the descriptor).
    fn ack(&self);
}

/// Device-level counters of a port, like `rte_eth_stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Packets the device delivered to RX queues.
    pub ipackets: u64,
    /// Bytes the device delivered to RX queues.
    pub ibytes: u64,
    /// Packets the device dropped because an RX ring was full.
    pub imissed: u64,
    /// Packets the device dropped because no buffer was available.
    pub rx_nombuf: u64,
    /// Packets the device took from TX queues.
    pub opackets: u64,
    /// Bytes the device took from TX queues.
    pub obytes: u64,
}

impl PortStats {
    /// The sums of a port's RX and TX queue counters (`imissed` from the
    /// RX queues' `missed`).
    pub fn from_queues<'a>(
        rx: impl IntoIterator<Item = &'a QueueCounters>,
        tx: impl IntoIterator<Item = &'a QueueCounters>,
    ) -> PortStats {
        let mut s = PortStats::default();
        for q in rx {
            s.ipackets += q.packets.get();
            s.ibytes += q.bytes.get();
            s.imissed += q.missed.get();
            s.rx_nombuf += q.nombuf.get();
        }
        for q in tx {
            s.opackets += q.packets.get();
            s.obytes += q.bytes.get();
        }
        s
    }

    /// Each RX queue's counters as device counters of their own (TX
    /// fields zero), for [`PortControl::rx_queue_stats`].
    pub fn per_rx_queue<'a>(rx: impl IntoIterator<Item = &'a QueueCounters>) -> Vec<PortStats> {
        rx.into_iter()
            .map(|q| PortStats::from_queues([q], []))
            .collect()
    }
}

/// Control-path view of a port: its counters and capabilities.
pub trait PortControl: Send + Sync {
    /// Driver name (`softnic`, `null`, `pcap`, ...).
    fn driver(&self) -> &'static str;
    /// Current device counters.
    fn stats(&self) -> PortStats;
    /// What the port can do.
    fn caps(&self) -> Caps;
    /// Whether the port spreads received packets over its RX queues by
    /// `pipeline::steer::flow_hash` modulo their number (AF_PACKET's
    /// fanout with several queues), so that the queue a flow reaches can
    /// be computed.
    fn flow_hash_spread(&self) -> bool {
        false
    }
    /// Stops delivering packets to the RX queues (like `rte_eth_dev_stop` on
    /// the receive side), so that workers can drain them at shutdown.
    fn stop_rx(&self) {}
    /// Driver-specific counters as name/value pairs, like `rte_eth_xstats`.
    fn xstats(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// The device's counters per RX queue, in queue order (received,
    /// bytes, missed, no buffer; TX fields zero), as `rte_eth_stats`'
    /// `q_ipackets`/`q_errors` or `ethtool -S`'s per-queue lines: where one
    /// queue of a port misses packets that the others do not, RSS
    /// loads it more. Empty where the driver does not count per queue.
    fn rx_queue_stats(&self) -> Vec<PortStats> {
        Vec::new()
    }
    /// The link: up with a carrier (`Some(true)`), down, or `None` where
    /// the port has no link to speak of (software ports). A control-path
    /// call (a syscall or a driver query), never per packet.
    fn link_up(&self) -> Option<bool> {
        None
    }
}

/// The carrier of kernel interface `iface` (sysfs): `None` when there is
/// no such interface; down when it is administratively down too.
pub fn carrier(iface: &str) -> Option<bool> {
    let dir = format!("/sys/class/net/{iface}");
    if !std::path::Path::new(&dir).exists() {
        return None;
    }
    // Reading `carrier` fails (EINVAL) while the interface is down.
    Some(std::fs::read_to_string(format!("{dir}/carrier")).is_ok_and(|c| c.trim() == "1"))
}

/// A boxed RX queue of a buffer family (native by default).
pub type BoxRx<B = Mbuf> = Box<dyn RxQueue<Buf = B>>;
/// A boxed TX queue of a buffer family (native by default).
pub type BoxTx<B = Mbuf> = Box<dyn TxQueue<Buf = B>>;

/// Makes a buffer of a family holding a copy of some bytes: how a worker
/// sends packets it did not receive (the router's packets held for ARP,
/// sent once resolved). `None` when the pool is dry or the frame does not
/// fit. A slow path: called per such packet, never per received one.
pub type Injector<B = Mbuf> = std::sync::Arc<dyn Fn(&[u8]) -> Option<B> + Send + Sync>;

/// Fresh empty buffers in bulk: appends up to `n` to the batch and returns
/// how many (a generator's buffers, one call per burst).
pub type BulkAlloc<B = Mbuf> = std::sync::Arc<dyn Fn(&mut Batch<B>, usize) -> usize + Send + Sync>;

/// `fresh` (an empty buffer just allocated) holding a copy of `bytes`.
pub fn filled<B: PacketBuf>(fresh: Option<B>, bytes: &[u8]) -> Option<B> {
    let mut m = fresh?;
    m.append(bytes.len())?.copy_from_slice(bytes);
    Some(m)
}

/// An [`Injector`] over a native pool.
pub fn pool_injector(pool: Pool) -> Injector {
    std::sync::Arc::new(move |b: &[u8]| filled(pool.alloc(), b))
}

/// A port opened by a backend: its control handle and its queues, which the
/// appliance hands out to workers (each queue to exactly one). Queues are
/// boxed (`BoxRx`, `BoxTx`) unless a backend gives its own types (DPDK:
/// the workers then call the driver without dynamic dispatch).
pub struct OpenPort<B: PacketBuf = Mbuf, R = BoxRx<B>, T = BoxTx<B>> {
    /// Counters and capabilities.
    pub control: Arc<dyn PortControl>,
    /// RX queues, index = queue id.
    pub rx: Vec<R>,
    /// TX queues, index = queue id.
    pub tx: Vec<T>,
    /// The buffer type.
    pub _buf: std::marker::PhantomData<fn() -> B>,
}

/// Errors opening a port.
#[derive(Debug, thiserror::Error)]
pub enum PortError {
    /// The buffer pool could not be created.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// A file could not be read or written.
    #[error("{path}: {error}")]
    Io {
        /// The file.
        path: String,
        /// What went wrong (said in the message, so not a `source`: a
        /// chain printed whole would say it twice).
        error: std::io::Error,
    },
    /// A capture file could not be parsed.
    #[error("{path}: {msg}")]
    Pcap {
        /// The file.
        path: String,
        /// What went wrong.
        msg: String,
    },
    /// A setting is out of range.
    #[error("{0}")]
    Config(String),
}

/// A single-writer counter: the owning thread adds with a plain load and
/// store (no locked instruction), readers load it at any time. Never share a
/// `Counter` between two writers.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n`. Only the single owning writer may call this.
    #[inline(always)]
    pub fn add(&self, n: u64) {
        self.0.store(self.0.load(Relaxed).wrapping_add(n), Relaxed);
    }
    /// Sets the value. Only the single owning writer may call this.
    #[inline(always)]
    pub fn set(&self, v: u64) {
        self.0.store(v, Relaxed);
    }
    /// Reads the value.
    #[inline(always)]
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// Counters of one queue, written by the one thread that owns the queue's
/// producing side, on a cache line of their own.
#[derive(Debug, Default)]
#[repr(align(64))]
pub struct QueueCounters {
    /// Packets delivered (RX) or taken (TX).
    pub packets: Counter,
    /// Bytes delivered or taken.
    pub bytes: Counter,
    /// Packets dropped because the ring was full.
    pub missed: Counter,
    /// Packets dropped because no buffer was available.
    pub nombuf: Counter,
}
