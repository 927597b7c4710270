//! The DPDK backend (feature `dpdk`): EAL, mempools and ethdev ports of any
//! PMD (vdevs such as `net_null`, `net_ring`, `net_tap`, or PCI devices),
//! with `rte_mbuf`s as the worker's buffers — zero copy: [`DpdkMbuf`] is a
//! pointer to the mbuf, its bytes are the mbuf's data room.
//!
//! Every `unsafe` block calls into DPDK through `dpdk-sys`; the invariants
//! are stated at each one. With `stamp_rx`, the RX timestamp goes into
//! DPDK's registered rx-timestamp dynamic field (otherwise `rx_tsc()` is 0;
//! the worker keeps its own RX times); the queue an mbuf came from is not
//! recorded (`queue()` is 0).
//!
//! With several RX queues the port is configured for RSS over IPv4/IPv6
//! TCP/UDP with the symmetric Toeplitz key (0x6d5a repeated), so both
//! directions of a flow reach one queue (and one worker's conntrack).
//! With `rx_intr`, each queue's interrupt line is its
//! `rte_eth_dev_rx_intr_ctl_q_get_fd` descriptor, armed and disarmed with
//! `rte_eth_dev_rx_intr_enable/disable`; devices without rx interrupts
//! (net_null, net_ring) have none, and the poll-mode policies sleep.
//! `rte_eth_xstats` are the port's xstats.

use crate::sys::rdtsc;
use crate::{
    Batch, Caps, OpenPort, PacketBuf, PortControl, PortError, PortStats, RxQueue, TxQueue,
    MAX_BURST,
};
use dpdk_sys as ffi;
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, Ordering};
use std::sync::Arc;

fn err(what: &str) -> PortError {
    // SAFETY: sluice_errno reads the calling thread's rte_errno;
    // rte_strerror returns a pointer to a static or thread-local string.
    let msg = unsafe {
        let e = ffi::sluice_errno();
        CStr::from_ptr(ffi::rte_strerror(e))
            .to_string_lossy()
            .into_owned()
    };
    PortError::Config(format!("{what}: {msg}"))
}

static EAL_UP: AtomicBool = AtomicBool::new(false);
static TS_OFFSET: AtomicI32 = AtomicI32::new(-1);

/// The initialised Environment Abstraction Layer (once per process).
#[derive(Debug)]
pub struct Eal(());

impl Eal {
    /// Initialises EAL with `args` (`argv[0]` included). Fails if EAL was
    /// already initialised in this process.
    pub fn init(args: &[&str]) -> Result<Eal, PortError> {
        if EAL_UP.swap(true, Ordering::AcqRel) {
            return Err(PortError::Config("EAL is already initialised".into()));
        }
        let cargs: Vec<CString> = args
            .iter()
            .map(|a| {
                CString::new(*a).map_err(|_| PortError::Config(format!("bad EAL argument {a:?}")))
            })
            .collect::<Result<_, _>>()?;
        // EAL may permute argv and keep pointers into it: leak the strings.
        let mut argv: Vec<*mut c_char> = cargs.into_iter().map(|c| c.into_raw()).collect();
        // SAFETY: argv holds argc valid NUL-terminated strings that live for
        // the rest of the process.
        let r = unsafe { ffi::rte_eal_init(argv.len() as c_int, argv.as_mut_ptr()) };
        std::mem::forget(argv);
        if r < 0 {
            EAL_UP.store(false, Ordering::Release);
            return Err(err("rte_eal_init"));
        }
        let mut off: c_int = -1;
        // SAFETY: registers DPDK's rx-timestamp dynamic field after EAL init;
        // writes the field's offset into `off`; no flag is requested.
        let r = unsafe { ffi::rte_mbuf_dyn_rx_timestamp_register(&mut off, std::ptr::null_mut()) };
        if r == 0 {
            TS_OFFSET.store(off, Ordering::Release);
        }
        Ok(Eal(()))
    }
}

/// Registers the calling (non-EAL) thread with EAL, giving it an lcore id
/// so that mempool per-lcore caches serve it; call at the start of each
/// worker thread. Failure (no free lcore id) leaves it working without a
/// cache.
pub fn register_thread() {
    // SAFETY: EAL is initialised before workers start; registering a thread
    // has no other precondition.
    unsafe { ffi::rte_thread_register() };
}

/// An mbuf pool.
#[derive(Clone, Copy, Debug)]
pub struct Mempool(NonNull<ffi::rte_mempool>, u16);

/// DPDK's headroom in every mbuf (`RTE_PKTMBUF_HEADROOM`, Debian's build).
pub const RTE_PKTMBUF_HEADROOM: usize = 128;

// SAFETY: DPDK mempools are thread-safe (lock-free ring plus per-lcore
// caches); the pointer stays valid for the process (never freed here).
unsafe impl Send for Mempool {}
// SAFETY: as above.
unsafe impl Sync for Mempool {}

impl Mempool {
    /// Creates a pool of `n` mbufs with `data_room` bytes each (headroom
    /// included), with a per-lcore cache of `cache`.
    pub fn create(
        _eal: &Eal,
        name: &str,
        n: u32,
        cache: u32,
        data_room: u16,
    ) -> Result<Self, PortError> {
        let cname = CString::new(name).map_err(|_| PortError::Config("bad pool name".into()))?;
        // SAFETY: EAL is initialised (we hold an `Eal`); the name is a valid
        // C string; DPDK copies it.
        let p = unsafe {
            ffi::rte_pktmbuf_pool_create(
                cname.as_ptr(),
                n,
                cache,
                0,
                data_room,
                ffi::rte_socket_id() as c_int,
            )
        };
        NonNull::new(p)
            .map(|p| Mempool(p, data_room))
            .ok_or_else(|| err("rte_pktmbuf_pool_create"))
    }

    /// The longest frame one of its mbufs holds (its data room less
    /// DPDK's headroom): no scattered receive, so the longest a port on
    /// it takes.
    pub fn max_frame(&self) -> usize {
        usize::from(self.1).saturating_sub(RTE_PKTMBUF_HEADROOM)
    }

    /// Allocates one mbuf with an empty packet.
    pub fn alloc(&self) -> Option<DpdkMbuf> {
        // SAFETY: the pool pointer is valid; a null return means exhausted.
        NonNull::new(unsafe { ffi::sluice_pktmbuf_alloc(self.0.as_ptr()) }).map(DpdkMbuf)
    }

    /// Allocates `n` mbufs (at most `out.room()`, and 64) with empty
    /// packets in one call, appended to `out`; returns how many (0 when
    /// the pool has fewer: all or none, as `rte_pktmbuf_alloc_bulk`).
    pub fn alloc_bulk(&self, out: &mut crate::Batch<DpdkMbuf>, n: usize) -> usize {
        // At most 64 a call: the pointer array is zeroed each time (a
        // MAX_BURST one costs a 4 KiB memset per call).
        const MOST: usize = 64;
        let n = n.min(out.room()).min(MOST);
        let mut raw = [std::ptr::null_mut::<ffi::rte_mbuf>(); MOST];
        // SAFETY: the pool pointer is valid; `raw` has room for n pointers,
        // which the call fills only on success (returning 0).
        if n == 0
            || unsafe {
                ffi::sluice_pktmbuf_alloc_bulk(self.0.as_ptr(), raw.as_mut_ptr(), n as u32)
            } != 0
        {
            return 0;
        }
        for p in &raw[..n] {
            // Non-null on success; each a fresh mbuf we now own.
            if let Some(p) = NonNull::new(*p) {
                // Cannot fail: n <= out.room().
                let _ = out.push(DpdkMbuf(p));
            }
        }
        n
    }
}

/// An `rte_mbuf` owned by Sluice (single segment). Dropping it frees it.
#[repr(transparent)]
pub struct DpdkMbuf(NonNull<ffi::rte_mbuf>);

// SAFETY: a DpdkMbuf is the only handle to its mbuf, header and data,
// like Box: mbufs come from `Mempool::alloc` (fresh, refcnt 1, direct) or
// from `DpdkRx`, which hands on only mbufs that are exclusive (refcnt 1,
// neither indirect nor on an external buffer: see `exclusive`) and frees
// and counts the others; Sluice never takes a second reference. So
// moving it to another thread moves sole ownership, and DPDK mbufs may be
// freed from any thread (the mempool is thread-safe).
unsafe impl Send for DpdkMbuf {}

/// PMDs whose RX fills every descriptor with a fresh mbuf from the port's
/// own pool (`rte_pktmbuf_alloc`: one reference, direct, internal data),
/// so what they hand out is exclusive by construction and RX skips the
/// check. Others (net_ring passes on whatever was enqueued; hardware PMDs
/// may attach external buffers) are checked.
const FRESH_RX: [&str; 4] = ["net_null", "net_af_packet", "net_tap", "net_pcap"];

/// PMDs on kernel interfaces, which hand over TCP and UDP with the
/// checksum a local sender (a veth's peer) left to offload, and say
/// nothing of it: their frames are finished on receive
/// ([`crate::afpacket::complete_if_partial`]). NIC PMDs receive whole
/// frames from the wire and pay nothing.
const KERNEL_RX: [&str; 3] = ["net_af_packet", "net_af_xdp", "net_tap"];

/// `RTE_MBUF_F_RX_IP_CKSUM_BAD`: the NIC found the IPv4 header checksum
/// wrong (with `_GOOD` too, `_NONE`: not verified in the packet).
const MBUF_F_RX_IP_CKSUM_BAD: u64 = 1 << 4;
/// `RTE_MBUF_F_RX_IP_CKSUM_GOOD`: the NIC verified it.
const MBUF_F_RX_IP_CKSUM_GOOD: u64 = 1 << 7;
// `IpCsum` is those two bits of `ol_flags` as they are.
const _: () = assert!(
    pipeline::fwd::IpCsum::GOOD.0 as u64 == MBUF_F_RX_IP_CKSUM_GOOD
        && pipeline::fwd::IpCsum::BAD.0 as u64 == MBUF_F_RX_IP_CKSUM_BAD
);

/// `RTE_MBUF_F_EXTERNAL`: the data is in an external buffer, which other
/// mbufs may share (rte_mbuf_core.h, DPDK 22.11).
const MBUF_F_EXTERNAL: u64 = 1 << 61;
/// `RTE_MBUF_F_INDIRECT`: the mbuf is attached to another's data.
const MBUF_F_INDIRECT: u64 = 1 << 62;

/// Whether a received mbuf is Sluice's alone: one reference, its own
/// (direct, internal) data. Reads the first cache line, which the driver
/// has just written.
///
/// # Safety
/// `m` must be a valid mbuf.
#[inline(always)]
unsafe fn exclusive(m: *const ffi::rte_mbuf) -> bool {
    // SAFETY: per the contract; plain fields of the mbuf header.
    unsafe { ((*m).refcnt == 1) & ((*m).ol_flags & (MBUF_F_EXTERNAL | MBUF_F_INDIRECT) == 0) }
}

impl Drop for DpdkMbuf {
    fn drop(&mut self) {
        // SAFETY: we own the mbuf; it is not used after this.
        unsafe { ffi::sluice_pktmbuf_free(self.0.as_ptr()) }
    }
}

impl DpdkMbuf {
    fn raw(&self) -> *mut ffi::rte_mbuf {
        self.0.as_ptr()
    }

    #[inline(always)]
    fn m(&self) -> &ffi::rte_mbuf {
        // SAFETY: we own a valid mbuf; its header is plain data (the struct
        // layout comes from bindgen on the same headers DPDK was built with).
        unsafe { self.0.as_ref() }
    }
}

/// Writes the rx-timestamp dynamic field (`RTE_MBUF_DYNFIELD`).
///
/// # Safety
/// `m` must be a valid mbuf and `off` the registered field's offset.
#[inline(always)]
unsafe fn set_ts(m: *mut ffi::rte_mbuf, off: i32, ts: u64) {
    // SAFETY: per the contract the 8 bytes at `off` are the timestamp field.
    unsafe {
        m.cast::<u8>()
            .add(off as usize)
            .cast::<u64>()
            .write_unaligned(ts)
    }
}

impl pipeline::fwd::Frame for DpdkMbuf {
    #[inline(always)]
    fn prefetch(addr: *const u8) {
        crate::sys::prefetch(addr);
    }
    #[inline]
    fn bytes(&self) -> &[u8] {
        let m = self.m();
        // SAFETY: buf_addr + data_off is rte_pktmbuf_mtod; data_len bytes
        // there belong to the single-segment mbuf we own.
        unsafe {
            let p = m.buf_addr.cast::<u8>().add(usize::from(m.data_off));
            std::slice::from_raw_parts(p, usize::from(m.data_len))
        }
    }
    #[inline]
    fn bytes_mut(&mut self) -> &mut [u8] {
        let m = self.m();
        let (p, len) = (m.buf_addr.cast::<u8>(), usize::from(m.data_len));
        let off = usize::from(m.data_off);
        // SAFETY: as in bytes(); &mut self makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(p.add(off), len) }
    }
    fn set_len(&mut self, len: usize) -> bool {
        let Ok(len) = u16::try_from(len) else {
            return false;
        };
        // SAFETY: the shim checks the length against the buffer.
        unsafe { ffi::sluice_set_data_len(self.raw(), len) == 0 }
    }
    fn cut_front(&mut self, n: usize) -> bool {
        PacketBuf::adj(self, n)
    }
    fn grow_front(&mut self, n: usize) -> bool {
        PacketBuf::prepend(self, n).is_some()
    }
    /// The mbuf's RX IP checksum flags, set by a port configured with
    /// `RTE_ETH_RX_OFFLOAD_IPV4_CKSUM` (`sluice_configure` asks for it
    /// where the device offers it); UNKNOWN (neither flag) and NONE (both)
    /// leave the check to software.
    #[inline(always)]
    fn ip4_csum(&self) -> pipeline::fwd::IpCsum {
        pipeline::fwd::IpCsum::from_ol_flags(self.m().ol_flags)
    }
}

impl PacketBuf for DpdkMbuf {
    #[inline]
    fn data(&self) -> &[u8] {
        pipeline::fwd::Frame::bytes(self)
    }
    #[inline]
    fn data_mut(&mut self) -> &mut [u8] {
        pipeline::fwd::Frame::bytes_mut(self)
    }
    #[inline]
    fn port(&self) -> u16 {
        self.m().port
    }
    #[inline]
    fn len(&self) -> usize {
        usize::from(self.m().data_len)
    }
    fn queue(&self) -> u16 {
        0
    }
    #[inline]
    fn rx_tsc(&self) -> u64 {
        let off = TS_OFFSET.load(Ordering::Relaxed);
        if off < 0 {
            return 0;
        }
        // SAFETY: `off` is the registered rx-timestamp dynfield of every
        // mbuf, 8 bytes inside the mbuf we own.
        unsafe {
            self.raw()
                .cast::<u8>()
                .add(off as usize)
                .cast::<u64>()
                .read_unaligned()
        }
    }
    fn rss_hash(&self) -> u32 {
        // SAFETY: reads a field of the mbuf we own.
        unsafe { ffi::sluice_mbuf_rss(self.raw()) }
    }
    fn prepend(&mut self, n: usize) -> Option<&mut [u8]> {
        let n16 = u16::try_from(n).ok()?;
        // SAFETY: rte_pktmbuf_prepend returns null when the headroom is too
        // small, else a pointer to the n new front bytes of our mbuf.
        let p = unsafe { ffi::sluice_prepend(self.raw(), n16) };
        // SAFETY: non-null p points at n bytes we own exclusively.
        NonNull::new(p)
            .map(|p| unsafe { std::slice::from_raw_parts_mut(p.as_ptr().cast::<u8>(), n) })
    }
    fn append(&mut self, n: usize) -> Option<&mut [u8]> {
        // rte_pktmbuf_append for Sluice's single-segment mbufs, inline (no
        // call per packet: a generator appends to every mbuf it makes).
        // SAFETY: we own the mbuf exclusively (see `DpdkMbuf`); its header
        // is plain data.
        let m = unsafe { self.0.as_mut() };
        if m.nb_segs != 1 {
            let n16 = u16::try_from(n).ok()?;
            // SAFETY: as prepend, at the tail (the shim walks the segments).
            let p = unsafe { ffi::sluice_append(self.raw(), n16) };
            // SAFETY: non-null p points at n bytes we own exclusively.
            return NonNull::new(p)
                .map(|p| unsafe { std::slice::from_raw_parts_mut(p.as_ptr().cast::<u8>(), n) });
        }
        let tail = usize::from(m.data_off) + usize::from(m.data_len);
        if tail + n > usize::from(m.buf_len) {
            return None;
        }
        // Cannot truncate: tail + n fits a u16 buffer length.
        m.data_len += n as u16;
        m.pkt_len += n as u32;
        // SAFETY: buf_addr + tail .. + n lies inside the mbuf's buffer
        // (checked against buf_len above), which we own exclusively.
        Some(unsafe { std::slice::from_raw_parts_mut(m.buf_addr.cast::<u8>().add(tail), n) })
    }
    fn adj(&mut self, n: usize) -> bool {
        // SAFETY: the shim returns -1 (no change) when n > data_len.
        u16::try_from(n).is_ok_and(|n| unsafe { ffi::sluice_adj(self.raw(), n) } == 0)
    }
    fn trim(&mut self, n: usize) -> bool {
        // SAFETY: as adj, at the tail.
        u16::try_from(n).is_ok_and(|n| unsafe { ffi::sluice_trim(self.raw(), n) } == 0)
    }
}

struct Control {
    port: u16,
    _dev: Arc<Device>,
    /// Shared mbufs the RX queues refused: received by the device, never
    /// handed to a worker, so reported as missed rather than received.
    shared: Arc<crate::Counter>,
    caps: Caps,
    stopped: Arc<AtomicBool>,
    /// xstat names (leaked once per port: the report wants `'static`).
    xnames: Vec<&'static str>,
    /// RSS hash types in use (0: no RSS).
    rss_hf: u64,
    /// The NIC verifies IPv4 header checksums (RX offload on).
    ip_csum: bool,
}

impl PortControl for Control {
    fn driver(&self) -> &'static str {
        "dpdk"
    }
    fn stats(&self) -> PortStats {
        let mut s = ffi::rte_eth_stats::default();
        // SAFETY: valid port id and a pointer to a live rte_eth_stats.
        unsafe { ffi::rte_eth_stats_get(self.port, &mut s) };
        let shared = self.shared.get();
        PortStats {
            ipackets: s.ipackets.saturating_sub(shared),
            ibytes: s.ibytes,
            imissed: s.imissed + shared,
            rx_nombuf: s.rx_nombuf,
            opackets: s.opackets,
            obytes: s.obytes,
        }
    }
    fn caps(&self) -> Caps {
        self.caps
    }
    fn stop_rx(&self) {
        // The device keeps running (stopping it under a polling worker is
        // not allowed); the queues stop handing out packets.
        self.stopped.store(true, Ordering::Relaxed);
    }
    fn link_up(&self) -> Option<bool> {
        // SAFETY: a valid port id; the shim reads the link without waiting.
        match unsafe { ffi::sluice_link_up(self.port) } {
            r if r < 0 => None,
            r => Some(r == 1),
        }
    }
    fn xstats(&self) -> Vec<(&'static str, u64)> {
        let mut v = vec![0u64; self.xnames.len()];
        // SAFETY: `v` has room for as many values as the port has xstats.
        let n = unsafe { ffi::sluice_xstats_values(self.port, v.as_mut_ptr(), v.len() as u32) };
        let mut out: Vec<(&'static str, u64)> = if n < 0 {
            Vec::new()
        } else {
            self.xnames.iter().copied().zip(v).collect()
        };
        out.push(("rss_hash_types", self.rss_hf));
        out.push(("rx_ipv4_cksum_offload", u64::from(self.ip_csum)));
        out.push(("rx_shared_refused", self.shared.get()));
        out
    }
}

/// The interrupt line of an RX queue: DPDK's per-queue descriptor.
struct DpdkIntr {
    port: u16,
    queue: u16,
    fd: c_int,
    /// An eventfd (VFIO MSI-X): reading it acknowledges; other kinds (the
    /// tap PMD's queue fd) must not be read.
    eventfd: bool,
}

impl crate::RxInterrupt for DpdkIntr {
    fn fd(&self) -> std::os::fd::RawFd {
        self.fd
    }
    fn enable(&self) {
        // SAFETY: a started port and one of its queues; the device was
        // configured with rx interrupts.
        unsafe { ffi::rte_eth_dev_rx_intr_enable(self.port, self.queue) };
    }
    fn disable(&self) {
        // SAFETY: as in `enable`.
        unsafe { ffi::rte_eth_dev_rx_intr_disable(self.port, self.queue) };
    }
    fn ack(&self) {
        if self.eventfd {
            let mut v = 0u64;
            // SAFETY: an 8-byte read of an eventfd into a live u64; the fd
            // is non-blocking in DPDK's hands, and a failed read is fine.
            unsafe { libc::read(self.fd, std::ptr::from_mut(&mut v).cast(), 8) };
        }
    }
}

fn is_eventfd(fd: c_int) -> bool {
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .is_ok_and(|l| l.to_string_lossy().contains("eventfd"))
}

/// The started device. Its control and every one of its queues hold it,
/// so it is stopped and closed when the last of them goes: no queue can
/// transmit or receive on a closed port, whatever the order of drops.
struct Device {
    port: u16,
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: this is the last handle: every queue of the port (which
        // hold one each) and its control are gone, so nothing polls it;
        // stop then close is the documented teardown, and their errors
        // leave nothing to undo.
        unsafe {
            ffi::rte_eth_dev_stop(self.port);
            ffi::rte_eth_dev_close(self.port);
        }
    }
}

/// A port's fast-path entry, `rte_eth_fp_ops[port]`: the driver's burst
/// functions and queue pointers, which DPDK's inline `rte_eth_rx_burst`
/// and `rte_eth_tx_burst` read on every call. Reading it here saves the
/// shim's call layer on each burst.
#[derive(Clone, Copy)]
struct FpOps(*const ffi::rte_eth_fp_ops);

// SAFETY: the pointer is to an element of a global array that lives for the
// process; DPDK writes it only at port start and stop, while no worker
// polls the port.
unsafe impl Send for FpOps {}

impl FpOps {
    fn of(port: u16) -> FpOps {
        // SAFETY: the address of an element of a static array.
        FpOps(unsafe { ffi::sluice_fp_ops(port) })
    }

    /// `rte_eth_rx_burst` (the shim's when the queue has an RX callback).
    ///
    /// # Safety
    /// As `rte_eth_rx_burst`: a started port, a queue this thread owns,
    /// room for `n` pointers at `pkts`.
    #[inline(always)]
    unsafe fn rx(self, port: u16, queue: u16, pkts: *mut *mut ffi::rte_mbuf, n: u16) -> u16 {
        // SAFETY: per the contract; `queue` is below the configured count,
        // for which DPDK sized the queue arrays. The callback slot is read
        // with the relaxed atomic load DPDK's inline function uses.
        unsafe {
            let p = &*self.0;
            let q = usize::from(queue);
            let cb = AtomicPtr::from_ptr(p.rxq.clbk.add(q)).load(Ordering::Relaxed);
            match p.rx_pkt_burst {
                Some(f) if cb.is_null() => f(*p.rxq.data.add(q), pkts, n),
                _ => ffi::sluice_rx_burst(port, queue, pkts, n),
            }
        }
    }

    /// `rte_eth_tx_burst` (the shim's when the queue has a TX callback).
    ///
    /// # Safety
    /// As `rte_eth_tx_burst`: a started port, a queue this thread owns, `n`
    /// mbufs at `pkts`.
    #[inline(always)]
    unsafe fn tx(self, port: u16, queue: u16, pkts: *mut *mut ffi::rte_mbuf, n: u16) -> u16 {
        // SAFETY: as in `rx`.
        unsafe {
            let p = &*self.0;
            let q = usize::from(queue);
            let cb = AtomicPtr::from_ptr(p.txq.clbk.add(q)).load(Ordering::Relaxed);
            match p.tx_pkt_burst {
                Some(f) if cb.is_null() => f(*p.txq.data.add(q), pkts, n),
                _ => ffi::sluice_tx_burst(port, queue, pkts, n),
            }
        }
    }
}

/// A DPDK RX queue (what [`open`] gives; workers call it directly).
pub struct DpdkRx {
    fp: FpOps,
    port: u16,
    queue: u16,
    _dev: Arc<Device>,
    /// Shared mbufs received and refused (see `exclusive`).
    shared: Arc<crate::Counter>,
    /// Check received mbufs (the driver is not one of `FRESH_RX`).
    check: bool,
    intr: Option<DpdkIntr>,
    stopped: Arc<AtomicBool>,
    /// Write the RX timestamp dynfield (it is on the mbuf's second cache
    /// line; the worker keeps its own RX times, so it is off there).
    stamp: bool,
    /// Finish checksums left to offload (a PMD of `KERNEL_RX`).
    partial: bool,
}

impl RxQueue for DpdkRx {
    type Buf = DpdkMbuf;

    #[inline]
    fn rx_burst(&mut self, out: &mut Batch<DpdkMbuf>) -> usize {
        if self.stopped.load(Ordering::Relaxed) {
            return 0;
        }
        let room = out.room().min(MAX_BURST) as u16;
        // The driver writes the mbuf pointers straight into the batch:
        // `DpdkMbuf` is `repr(transparent)` over a non-null `*mut rte_mbuf`.
        let slots = out.spare_ptr().cast::<*mut ffi::rte_mbuf>();
        // SAFETY: this worker owns (port, queue) exclusively; `slots` has
        // room for `room` pointers in the batch's storage.
        let got = unsafe { self.fp.rx(self.port, self.queue, slots, room) };
        // Keep only mbufs Sluice owns alone (what makes DpdkMbuf Send and
        // its data ours to write); free and count shared ones. The burst
        // is checked with a branch-free AND and compacted only when that
        // fails. Ports whose driver fills every descriptor with a fresh
        // mbuf from the port's own pool skip it (`FRESH_RX`): on net_null
        // io the check cost about 8% (46.1 vs 50.5 Mpps, medians of 6
        // alternating 5 s runs).
        let mut all = true;
        for i in (0..usize::from(got)).filter(|_| self.check) {
            // SAFETY: the driver initialised slots[..got] with valid mbufs.
            all &= unsafe { exclusive(*slots.add(i)) };
        }
        let n = if all {
            got
        } else {
            // SAFETY: as above: slots[..got] hold the mbufs received.
            unsafe { self.refuse_shared(slots, got) }
        };
        // SAFETY: the first n slots hold non-null mbufs we own alone, and
        // n <= room.
        unsafe { out.grow(usize::from(n)) };
        if self.partial {
            let len = out.len();
            for m in &mut out.as_mut_slice()[len - usize::from(n)..] {
                crate::afpacket::complete_if_partial(m.data_mut());
            }
        }
        let off = TS_OFFSET.load(Ordering::Relaxed);
        if self.stamp && off >= 0 && n > 0 {
            let now = rdtsc();
            let len = out.len();
            for m in &out.as_slice()[len - usize::from(n)..] {
                // SAFETY: a fresh mbuf from the driver; off is the
                // registered timestamp dynfield.
                unsafe { set_ts(m.raw(), off, now) };
            }
        }
        usize::from(n)
    }

    fn interrupt(&self) -> Option<&dyn crate::RxInterrupt> {
        self.intr.as_ref().map(|i| i as &dyn crate::RxInterrupt)
    }
}

impl DpdkRx {
    /// Frees and counts the shared mbufs among the `got` at `slots`, moves
    /// the others to the front, and returns how many those are.
    ///
    /// # Safety
    /// `slots[..got]` must hold valid mbufs this queue just received.
    #[cold]
    unsafe fn refuse_shared(&self, slots: *mut *mut ffi::rte_mbuf, got: u16) -> u16 {
        let mut n = 0u16;
        for i in 0..usize::from(got) {
            // SAFETY: per the contract; slot n <= i is within them.
            unsafe {
                let m = *slots.add(i);
                if exclusive(m) {
                    *slots.add(usize::from(n)) = m;
                    n += 1;
                } else {
                    ffi::sluice_pktmbuf_free(m);
                    self.shared.add(1);
                }
            }
        }
        n
    }
}

/// A DPDK TX queue.
pub struct DpdkTx {
    fp: FpOps,
    port: u16,
    queue: u16,
    _dev: Arc<Device>,
}

impl TxQueue for DpdkTx {
    type Buf = DpdkMbuf;

    #[inline]
    fn tx_burst(&mut self, pkts: &mut Batch<DpdkMbuf>) -> usize {
        let n = pkts.len().min(MAX_BURST);
        // The batch is an array of `DpdkMbuf`, each `repr(transparent)` over
        // a non-null `*mut rte_mbuf`: hand it to the driver as it is.
        let raw = pkts
            .as_mut_slice()
            .as_mut_ptr()
            .cast::<*mut ffi::rte_mbuf>();
        // SAFETY: this worker owns (port, queue); raw points at n valid mbuf
        // pointers we own, laid out as `struct rte_mbuf **`.
        let sent = usize::from(unsafe { self.fp.tx(self.port, self.queue, raw, n as u16) });
        // The driver owns the sent mbufs now: forget our handles to them.
        pkts.forget_front(sent);
        sent
    }
}

/// The RSS hash DPDK's software Toeplitz gives an IPv4 5-tuple (addresses
/// and ports as numbers) with the symmetric key the ports are configured
/// with: equal for a flow's two directions.
pub fn symmetric_rss_v4(src: u32, dst: u32, sport: u16, dport: u16) -> u32 {
    // SAFETY: a pure computation on its arguments.
    unsafe { ffi::sluice_toeplitz_v4(src.to_be(), dst.to_be(), sport.to_be(), dport.to_be()) }
}

/// Creates a virtual device after EAL init (`rte_vdev_init`), e.g.
/// `("net_tap0", "iface=t0")`.
pub fn vdev_init(_eal: &Eal, name: &str, args: &str) -> Result<(), PortError> {
    let n = CString::new(name).map_err(|_| PortError::Config("bad vdev name".into()))?;
    let a = CString::new(args).map_err(|_| PortError::Config("bad vdev args".into()))?;
    // SAFETY: valid C strings; EAL is initialised (`_eal`).
    if unsafe { ffi::rte_vdev_init(n.as_ptr(), a.as_ptr()) } != 0 {
        return Err(err(&format!("rte_vdev_init {name}")));
    }
    Ok(())
}

/// Settings of a DPDK port.
#[derive(Clone, Debug)]
pub struct DpdkPortConfig {
    /// Device name (`net_null0`, a PCI address, ...).
    pub device: String,
    /// RX queues.
    pub rxq: u16,
    /// TX queues.
    pub txq: u16,
    /// RX descriptors per queue.
    pub rxd: u16,
    /// TX descriptors per queue.
    pub txd: u16,
    /// Stamp each received mbuf's rx-timestamp dynamic field (costs a
    /// second cache line per packet).
    pub stamp_rx: bool,
    /// RSS with the symmetric key when there are several RX queues.
    pub rss: bool,
    /// Ask for rx interrupts (falls back to none if the device has none).
    pub rx_intr: bool,
    /// The port's MTU, configured on the device (refused, with the
    /// device's largest named, if it cannot take it); the mempool's
    /// mbufs must hold the frames.
    pub mtu: u16,
}

/// Configures and starts an ethdev port.
pub fn open(
    _eal: &Eal,
    cfg: &DpdkPortConfig,
    pool: &Mempool,
) -> Result<OpenPort<DpdkMbuf, DpdkRx, DpdkTx>, PortError> {
    let name = CString::new(cfg.device.as_str())
        .map_err(|_| PortError::Config("bad device name".into()))?;
    let mut port: u16 = 0;
    // SAFETY: valid C string and out pointer.
    if unsafe { ffi::rte_eth_dev_get_port_by_name(name.as_ptr(), &mut port) } != 0 {
        return Err(PortError::Config(format!(
            "no DPDK port named {}",
            cfg.device
        )));
    }
    // SAFETY: valid port id.
    let max_mtu = unsafe { ffi::sluice_max_mtu(port) };
    if cfg.mtu > max_mtu {
        return Err(PortError::Config(format!(
            "DPDK port {}: mtu {} is more than the device takes (at most {max_mtu}{})",
            cfg.device,
            cfg.mtu,
            if cfg.device.starts_with("net_af_packet") || cfg.device.starts_with("net_tap") {
                ": this DPDK's kernel-interface PMDs take no jumbo frames"
            } else {
                ""
            }
        )));
    }
    let mut rss_hf = 0u64;
    let mut ip_csum: c_int = 0;
    let mut configure = |intr: bool| {
        // SAFETY: valid port id; the shim builds the configuration and
        // writes the two outputs.
        unsafe {
            ffi::sluice_configure(
                port,
                cfg.rxq,
                cfg.txq,
                c_int::from(cfg.rss),
                c_int::from(intr),
                cfg.mtu,
                &mut rss_hf,
                &mut ip_csum,
            )
        }
    };
    let mut intr = cfg.rx_intr;
    let mut r = configure(intr);
    if r < 0 && intr {
        // No rx interrupts on this device: configure without them.
        intr = false;
        r = configure(false);
    }
    if r < 0 {
        return Err(err("rte_eth_dev_configure"));
    }
    // SAFETY: valid port id.
    let socket = unsafe { ffi::rte_eth_dev_socket_id(port) }.max(0) as u32;
    for q in 0..cfg.rxq {
        // SAFETY: valid port and queue ids, default queue config (null),
        // and a live mempool.
        let r = unsafe {
            ffi::rte_eth_rx_queue_setup(port, q, cfg.rxd, socket, std::ptr::null(), pool.0.as_ptr())
        };
        if r < 0 {
            return Err(err("rte_eth_rx_queue_setup"));
        }
    }
    for q in 0..cfg.txq {
        // SAFETY: as above, TX side.
        let r = unsafe { ffi::rte_eth_tx_queue_setup(port, q, cfg.txd, socket, std::ptr::null()) };
        if r < 0 {
            return Err(err("rte_eth_tx_queue_setup"));
        }
    }
    // SAFETY: a configured port.
    if unsafe { ffi::rte_eth_dev_start(port) } < 0 {
        return Err(err("rte_eth_dev_start"));
    }
    // SAFETY: a started port; failure (not supported) is harmless.
    unsafe { ffi::rte_eth_promiscuous_enable(port) };
    let dev = Arc::new(Device { port });
    let shared = Arc::new(crate::Counter::default());
    let stopped = Arc::new(AtomicBool::new(false));
    let intrs: Vec<Option<DpdkIntr>> = (0..cfg.rxq)
        .map(|q| {
            if !intr {
                return None;
            }
            // SAFETY: a started port configured with rx interrupts.
            let fd = unsafe { ffi::rte_eth_dev_rx_intr_ctl_q_get_fd(port, q) };
            (fd >= 0).then(|| DpdkIntr {
                port,
                queue: q,
                fd,
                eventfd: is_eventfd(fd),
            })
        })
        .collect();
    let all_intr = intr && intrs.iter().all(Option::is_some);
    let rx = intrs
        .into_iter()
        .enumerate()
        .map(|(q, i)| DpdkRx {
            fp: FpOps::of(port),
            port,
            queue: q as u16,
            _dev: dev.clone(),
            shared: shared.clone(),
            check: !FRESH_RX.iter().any(|d| cfg.device.starts_with(d)),
            partial: KERNEL_RX.iter().any(|d| cfg.device.starts_with(d)),
            intr: i.filter(|_| all_intr),
            stopped: stopped.clone(),
            stamp: cfg.stamp_rx,
        })
        .collect();
    // SAFETY: valid port id.
    let nx = unsafe { ffi::sluice_xstats_count(port) }.max(0) as u32;
    let xnames = (0..nx)
        .map(|i| {
            let mut buf = [0 as c_char; 64];
            // SAFETY: `buf` has room for 64 bytes, the length passed.
            unsafe { ffi::sluice_xstat_name(port, i, buf.as_mut_ptr(), 64) };
            // SAFETY: the shim NUL-terminates within the buffer.
            let name = unsafe { CStr::from_ptr(buf.as_ptr()) }
                .to_string_lossy()
                .into_owned();
            &*Box::leak(name.into_boxed_str())
        })
        .collect();
    let tx = (0..cfg.txq)
        .map(|q| DpdkTx {
            fp: FpOps::of(port),
            port,
            queue: q,
            _dev: dev.clone(),
        })
        .collect();
    Ok(OpenPort {
        control: Arc::new(Control {
            port,
            _dev: dev,
            shared,
            stopped,
            caps: Caps {
                max_burst: MAX_BURST,
                rx_interrupt: all_intr,
                // The mempool's data room (`appliance::eal` sizes it for
                // the largest `mtu`): no scattered receive.
                max_frame: pool.max_frame(),
            },
            xnames,
            rss_hf,
            ip_csum: ip_csum != 0,
        }),
        rx,
        tx,
        _buf: std::marker::PhantomData,
    })
}
