//! AF_XDP ports (feature `afxdp`): an interface's queue 0 through an
//! AF_XDP socket made by libxdp (Debian's `libxdp-dev`), which loads and
//! attaches its default XDP program (redirecting the queue's frames to the
//! socket) and detaches it when the socket closes.
//!
//! The UMEM is a buffer pool ([`Umem`]): the pool's arena, 2 KiB slots, is
//! registered with the kernel, and all the process's AF_XDP sockets share
//! it (each with its own fill and completion rings). A slot is an [`Mbuf`]
//! (its 64-byte header, then the room); the kernel writes a frame 256
//! bytes into the slot, after the header and in the room. So receiving
//! hands the worker the very buffer the kernel wrote, and sending a buffer
//! that came from any AF_XDP port of the process puts that buffer on the
//! TX ring: no copies in user space. Buffers from other drivers' pools are
//! copied into a UMEM buffer to be sent.
//!
//! Jumbo frames (a port `mtu` above [`MAX_FRAME`] less the Ethernet
//! header) take AF_XDP multi-buffer (`XDP_USE_SG`, Linux >= 6.6): the
//! socket binds with it, behind the shim's own XDP program (loaded with
//! `BPF_F_XDP_HAS_FRAGS`: libxdp 1.3's program takes no fragments, and a
//! veth refuses one that does not at an MTU above a page). A frame the
//! kernel writes across several chunks is copied whole into a buffer of
//! the port's jumbo pool (sized for the MTU) and its chunks go back to
//! the fill ring; one longer than a chunk is sent from as many chunks,
//! chained. Frames that fit one chunk take the zero-copy path as before.
//!
//! Buffer ownership follows the rings: a buffer posted on a fill or TX
//! ring is given up ([`Mbuf::into_slot`]) and taken back
//! ([`Mbuf::from_slot`]) from the RX or completion ring. The socket binds
//! in XDP copy mode unless `zerocopy` is asked for (the kernel copies
//! between the frame and the UMEM; a zero-copy driver does not), and uses
//! `need_wakeup`. RX and TX share the socket but not its rings (RX: rx +
//! fill; TX: tx + completion), so the two queues may live on different
//! workers. The socket is the RX queue's interrupt line.

use crate::mbuf::{Mbuf, Pool, HDR_LEN, HEADROOM};
use crate::sys::rdtsc;
use crate::{
    Batch, BoxRx, BoxTx, Caps, OpenPort, PacketBuf, PortControl, PortError, PortStats,
    QueueCounters, RxInterrupt, RxQueue, TxQueue, MAX_BURST,
};
use std::ffi::CString;
use std::mem::MaybeUninit;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use xdp_sys as ffi;
use xdp_sys::SL_MORE;

/// UMEM chunk: one pool slot.
pub const CHUNK: usize = 2048;
/// Where the kernel puts a frame in its chunk (`XDP_PACKET_HEADROOM`).
const XDP_HEADROOM: usize = 256;
/// The largest frame a chunk takes.
pub const MAX_FRAME: usize = CHUNK - XDP_HEADROOM;
/// Fill-ring postings are batched at least this many.
const FILL_BATCH: usize = 32;

// A slot is exactly one chunk, and the kernel's frame lands in the room.
const _: () = assert!(HDR_LEN + HEADROOM <= XDP_HEADROOM);

/// Settings of an AF_XDP port.
#[derive(Clone, Debug)]
pub struct AfXdpConfig {
    /// Port index in the appliance.
    pub port: u16,
    /// Interface name.
    pub iface: String,
    /// Ask for zero-copy binding (drivers that support it).
    pub zerocopy: bool,
    /// Generic (skb) XDP instead of native.
    pub skb_mode: bool,
    /// The port's MTU (largest IP packet): above [`MAX_FRAME`] less 14
    /// the socket takes frames in several chunks (multi-buffer), and the
    /// interface's MTU must be at least this.
    pub mtu: u16,
}

/// The process's UMEM: a buffer pool whose arena is registered with the
/// kernel. Sockets opened on it keep it alive.
pub struct Umem {
    raw: *mut ffi::SlUmem,
    /// Held across every use of `raw` through `&self` (socket creation):
    /// libxdp's shared-UMEM bookkeeping is not thread-safe.
    open_lock: std::sync::Mutex<()>,
    pool: Pool,
    base: usize,
    len: usize,
    ring: u32,
}

// SAFETY: the C object is used only to open sockets, with `open_lock`
// held (so never by two threads at once, whatever the callers do), and to
// delete it once, in Drop (which has `&mut self`). The pool is Sync; the
// other fields are plain values.
unsafe impl Send for Umem {}
// SAFETY: as above: every access to `raw` through `&self` holds the lock.
unsafe impl Sync for Umem {}

impl Umem {
    /// A UMEM of `frames` 2 KiB frames whose sockets' rings (fill,
    /// completion, RX, TX) have `ring` entries (a power of two).
    pub fn new(frames: u32, ring: u32) -> Result<Arc<Umem>, PortError> {
        let bad = |what: String| PortError::Config(format!("AF_XDP UMEM: {what}"));
        if !ring.is_power_of_two() || ring > frames {
            return Err(bad(format!("{frames} frames, rings of {ring}")));
        }
        let pool = Pool::new("afxdp-umem", frames as usize, CHUNK - HDR_LEN - HEADROOM)?;
        let (base, len, slot) = pool.arena();
        if slot != CHUNK {
            return Err(bad(format!("pool slots of {slot} bytes, not {CHUNK}")));
        }
        let mut err = 0;
        // SAFETY: the arena is page-aligned (2 MiB), `len` bytes long, a
        // whole number of chunks, and lives for the rest of the process
        // (pools are never freed), so the kernel may keep it registered as
        // long as it likes.
        let raw = unsafe {
            ffi::sl_umem_create(base as *mut _, len as u64, CHUNK as u32, ring, &mut err)
        };
        if raw.is_null() {
            return Err(PortError::Io {
                path: "AF_XDP UMEM".into(),
                error: std::io::Error::from_raw_os_error(-err),
            });
        }
        Ok(Arc::new(Umem {
            raw,
            open_lock: std::sync::Mutex::new(()),
            pool,
            base,
            len,
            ring,
        }))
    }

    /// The pool whose buffers are the UMEM's frames.
    pub fn pool(&self) -> Pool {
        self.pool
    }

    /// The buffer whose chunk holds UMEM address `addr`, with its packet
    /// set to the `len` bytes at `addr`; `None` for an address that is not
    /// a frame of this UMEM.
    ///
    /// # Safety
    /// The chunk must be one this process gave the kernel and the kernel
    /// has now given back (RX or completion ring).
    #[inline(always)]
    unsafe fn take(&self, addr: u64, len: usize) -> Option<Mbuf> {
        let addr = addr as usize;
        let off = addr % CHUNK;
        if addr >= self.len || off < HDR_LEN {
            return None;
        }
        // SAFETY: per the contract, a slot given up with into_slot whose
        // header the kernel did not write (frames go 256 bytes in).
        let mut m = unsafe { Mbuf::from_slot(self.base + addr - off) };
        if m.set_data(off - HDR_LEN, len) {
            Some(m)
        } else {
            // Longer than the slot's room: drop the frame, keep the buffer.
            None
        }
    }

    /// Gives `m` up and returns the UMEM address of its packet data.
    #[inline(always)]
    fn give(&self, m: Mbuf) -> u64 {
        let off = m.data_offset_in_slot();
        (m.into_slot() - self.base + off) as u64
    }
}

impl Drop for Umem {
    fn drop(&mut self) {
        // SAFETY: every socket holds an Arc of the UMEM, so all of them
        // are closed by now; deleted once. Buffers still posted to the
        // kernel at the sockets' close stay out of the pool (given up).
        unsafe { ffi::sl_umem_delete(self.raw) };
    }
}

/// The socket, shared by the RX and TX queue.
struct Xsk {
    raw: *mut ffi::SlXsk,
    umem: Arc<Umem>,
}

// SAFETY: the RX queue uses only the rx and fill rings and the TX queue
// only the tx and completion rings; each queue is owned by one worker, so
// no ring has two users. The handle is closed once, when the last owner
// drops it.
unsafe impl Send for Xsk {}
// SAFETY: as above; `fd` and the statistics are read-only.
unsafe impl Sync for Xsk {}

impl Drop for Xsk {
    fn drop(&mut self) {
        // SAFETY: the handle came from sl_xsk_open and is closed once.
        unsafe { ffi::sl_xsk_close(self.raw) };
    }
}

struct Intr(RawFd);

impl RxInterrupt for Intr {
    fn fd(&self) -> RawFd {
        self.0
    }
    // Readable while the RX ring holds frames: nothing to arm.
    fn enable(&self) {}
    fn disable(&self) {}
    fn ack(&self) {}
}

struct XdpRx {
    xsk: Arc<Xsk>,
    intr: Intr,
    port: u16,
    c: Arc<QueueCounters>,
    stopped: Arc<AtomicBool>,
    /// Chunks posted to the fill ring and not yet received back.
    in_fill: usize,
    /// Scratch for fill-ring allocations.
    spare: Batch<Mbuf>,
    /// Frames the kernel gave back that were not this UMEM's or too long.
    bad: Arc<crate::Counter>,
    /// Multi-buffer frames are put together in this pool's buffers
    /// (jumbo ports only).
    jumbo: Option<crate::Pool>,
    /// Multi-buffer frames dropped with the jumbo pool dry.
    nobuf: Arc<crate::Counter>,
}

impl XdpRx {
    /// Tops the fill ring up from the pool, in batches of at least
    /// FILL_BATCH chunks.
    fn refill(&mut self) {
        let umem = &*self.xsk.umem;
        let mut addrs = [0u64; MAX_BURST];
        while (umem.ring as usize) - self.in_fill >= FILL_BATCH {
            let want = (umem.ring as usize - self.in_fill).min(MAX_BURST);
            let got = umem.pool.alloc_bulk(&mut self.spare, want);
            if got == 0 {
                return;
            }
            for (a, m) in addrs.iter_mut().zip(self.spare.drain()) {
                *a = umem.give(m);
            }
            // SAFETY: `got` addresses of chunks now given to the kernel;
            // this queue is the socket's only fill-ring user.
            let posted = unsafe { ffi::sl_xsk_fill(self.xsk.raw, addrs.as_ptr(), got as u32) };
            if posted == 0 {
                // No room after all: take the buffers back.
                for &a in &addrs[..got] {
                    // SAFETY: given up just above and never posted.
                    drop(unsafe { umem.take(a, 0) });
                }
                return;
            }
            self.in_fill += got;
            if got < want {
                return;
            }
        }
    }
}

impl XdpRx {
    /// Puts the frame whose descriptors start `addrs`/`lens` (the first
    /// with SL_MORE) together in a jumbo buffer, giving its chunks back
    /// to the pool; returns it (None: cut short, too long or not this
    /// UMEM's, counted as bad; the pool dry, counted as no buffer) and how
    /// many descriptors it took.
    ///
    /// # Safety
    /// The entries are initialised from RX descriptors: chunks this queue
    /// posted to the fill ring, now given back.
    #[cold]
    unsafe fn gather(
        &mut self,
        addrs: &[MaybeUninit<u64>],
        lens: &[MaybeUninit<u32>],
    ) -> (Option<Mbuf>, usize) {
        let umem = &*self.xsk.umem;
        // SAFETY: per the contract.
        let len_at = |k: usize| unsafe { lens[k].assume_init() };
        let used = (0..lens.len())
            .find(|&k| len_at(k) & SL_MORE == 0)
            .map_or(lens.len(), |k| k + 1);
        let whole = len_at(used - 1) & SL_MORE == 0;
        let total: usize = (0..used).map(|k| (len_at(k) & !SL_MORE) as usize).sum();
        let mut out = match (whole, self.jumbo) {
            (true, Some(pool)) => {
                let m = pool.alloc();
                if m.is_none() {
                    self.nobuf.add(1);
                }
                m
            }
            _ => None,
        };
        let mut bad = !whole || self.jumbo.is_none();
        if let Some(m) = out.as_mut() {
            if !m.reset_len(total) {
                out = None;
                bad = true;
            }
        }
        let mut at = 0;
        for (k, a) in addrs.iter().enumerate().take(used) {
            let len = (len_at(k) & !SL_MORE) as usize;
            // SAFETY: per the contract, a chunk given back; dropped after
            // its bytes are copied.
            let Some(c) = (unsafe { umem.take(a.assume_init(), len) }) else {
                out = None;
                bad = true;
                continue;
            };
            if let Some(m) = out.as_mut() {
                m.data_mut()[at..at + len].copy_from_slice(c.data());
            }
            at += len;
        }
        if bad {
            self.bad.add(1);
        }
        (out, used)
    }
}

impl RxQueue for XdpRx {
    type Buf = Mbuf;

    fn rx_burst(&mut self, out: &mut Batch<Mbuf>) -> usize {
        if self.stopped.load(Ordering::Relaxed) {
            return 0;
        }
        let room = out.room().min(MAX_BURST);
        // Not zeroed (zeroing both per poll cost 40% of a busy worker): the
        // shim writes the first n entries, and only those are read.
        let mut addrs = [const { MaybeUninit::<u64>::uninit() }; MAX_BURST];
        let mut lens = [const { MaybeUninit::<u32>::uninit() }; MAX_BURST];
        // Descriptors: one a frame, or several for a jumbo frame (at most
        // room frames in all).
        let descs = if self.jumbo.is_some() {
            MAX_BURST
        } else {
            room
        };
        // SAFETY: the arrays have room for `descs` entries; this queue is
        // the socket's only RX user.
        let n = unsafe {
            ffi::sl_xsk_rx(
                self.xsk.raw,
                addrs.as_mut_ptr().cast(),
                lens.as_mut_ptr().cast(),
                descs as u32,
                room as u32,
            )
        } as usize;
        if n == 0 {
            if self.in_fill < self.xsk.umem.ring as usize {
                self.refill();
            }
            return 0;
        }
        self.in_fill -= n;
        let now = rdtsc();
        let mut bytes = 0;
        let mut got = 0;
        let mut i = 0;
        while i < n {
            // SAFETY: the shim initialised the first n entries from RX
            // descriptors: chunks this queue posted to the fill ring.
            let (a, len) = unsafe { (addrs[i].assume_init(), lens[i].assume_init()) };
            let m = if len & SL_MORE == 0 {
                i += 1;
                // SAFETY: a chunk the kernel has given back.
                let m = unsafe { self.xsk.umem.take(a, len as usize) };
                if m.is_none() {
                    self.bad.add(1);
                }
                m
            } else {
                // SAFETY: as above, entries i.. of the first n.
                let (m, used) = unsafe { self.gather(&addrs[i..n], &lens[i..n]) };
                i += used;
                m
            };
            // None: dropped, counted above.
            if let Some(mut m) = m {
                // A veth whose peer offloads TX checksums hands TCP and
                // UDP over unfinished, and AF_XDP says nothing of it
                // (AF_PACKET does): told by the field, finished.
                crate::afpacket::complete_if_partial(m.data_mut());
                m.set_rx_meta(self.port, 0, now, 0);
                bytes += m.len();
                got += 1;
                // Cannot fail: at most room frames.
                let _ = out.push(m);
            }
        }
        self.refill();
        self.c.packets.add(got as u64);
        self.c.bytes.add(bytes as u64);
        got
    }

    fn interrupt(&self) -> Option<&dyn RxInterrupt> {
        Some(&self.intr)
    }
}

struct XdpTx {
    xsk: Arc<Xsk>,
    c: Arc<QueueCounters>,
    /// Frames taken but not sent (no UMEM buffer for a copy, too long).
    dropped: Arc<crate::Counter>,
    /// Descriptors on the TX ring or in flight, not yet completed.
    outstanding: usize,
    /// Multi-buffer socket: frames longer than a chunk go chained.
    sg: bool,
}

impl XdpTx {
    /// Takes completed frames back into the pool.
    fn complete(&mut self) {
        let umem = &*self.xsk.umem;
        let mut addrs = [const { MaybeUninit::<u64>::uninit() }; MAX_BURST];
        while self.outstanding > 0 {
            // SAFETY: room for MAX_BURST entries; this queue is the
            // socket's only completion-ring user.
            let k = unsafe {
                ffi::sl_xsk_complete(self.xsk.raw, addrs.as_mut_ptr().cast(), MAX_BURST as u32)
            } as usize;
            self.outstanding -= k.min(self.outstanding);
            crate::mbuf::free_bulk(addrs.iter().take(k).filter_map(|a| {
                // SAFETY: the shim initialised the first k entries from the
                // completion ring: frames this queue sent, now done.
                unsafe { umem.take(a.assume_init(), 0) }
            }));
            if k < MAX_BURST {
                break;
            }
        }
    }
}

impl TxQueue for XdpTx {
    type Buf = Mbuf;

    fn tx_burst(&mut self, pkts: &mut Batch<Mbuf>) -> usize {
        self.complete();
        let umem = &*self.xsk.umem;
        let room = MAX_BURST.min(umem.ring as usize - self.outstanding);
        // Frames whose descriptors fit: one each, or (jumbo ports) one a
        // chunk for a frame longer than a chunk.
        let mut n = pkts.len().min(room);
        if self.sg {
            let mut descs = 0;
            n = 0;
            for m in pkts.iter() {
                descs += m.len().div_ceil(MAX_FRAME).max(1);
                if descs > room {
                    break;
                }
                n += 1;
            }
        }
        if n == 0 {
            return 0;
        }
        let taken = n;
        let mut addrs = [0u64; MAX_BURST];
        let mut lens = [0u32; MAX_BURST];
        let mut bytes = 0;
        let mut sent_frames = 0;
        let mut k = 0;
        for m in pkts.drain_front(n) {
            // A buffer from another pool is copied into a UMEM buffer (and
            // freed), or into several chained ones if longer than a chunk
            // on a jumbo port; with the pool dry or the frame too long it
            // is dropped and counted.
            if umem.pool.owns(&m) {
                lens[k] = m.len() as u32;
                bytes += m.len();
                addrs[k] = umem.give(m);
                k += 1;
                sent_frames += 1;
                continue;
            }
            let data = m.data();
            if data.is_empty() || (data.len() > MAX_FRAME && !self.sg) {
                self.dropped.add(1);
                continue;
            }
            let first = k;
            let mut ok = true;
            for piece in data.chunks(MAX_FRAME) {
                let Some(mut u) = umem.pool.alloc() else {
                    ok = false;
                    break;
                };
                if !u.copy_from(piece) {
                    ok = false;
                    break;
                }
                lens[k] = piece.len() as u32 | SL_MORE;
                addrs[k] = umem.give(u);
                k += 1;
            }
            if ok {
                lens[k - 1] &= !SL_MORE;
                bytes += data.len();
                sent_frames += 1;
            } else {
                for &a in &addrs[first..k] {
                    // SAFETY: given up just above and never posted.
                    drop(unsafe { umem.take(a, 0) });
                }
                k = first;
                self.dropped.add(1);
            }
        }
        let n = k;
        // SAFETY: n descriptors of this UMEM's buffers, given up above;
        // the TX ring has room for them (at most `ring` outstanding), and
        // this queue is the socket's only TX user.
        let sent = unsafe { ffi::sl_xsk_tx(self.xsk.raw, addrs.as_ptr(), lens.as_ptr(), n as u32) };
        if sent == 0 && n > 0 {
            // Cannot happen with the room check above; free, do not leak.
            for &a in &addrs[..n] {
                // SAFETY: given up above and never posted.
                drop(unsafe { umem.take(a, 0) });
            }
            self.dropped.add(sent_frames);
            return taken;
        }
        self.outstanding += n;
        self.c.packets.add(sent_frames);
        self.c.bytes.add(bytes as u64);
        taken
    }
}

struct Control {
    iface: String,
    /// Multi-buffer socket (jumbo frames).
    sg: bool,
    nobuf: Arc<crate::Counter>,
    xsk: Arc<Xsk>,
    rx: Arc<QueueCounters>,
    tx: Arc<QueueCounters>,
    bad: Arc<crate::Counter>,
    dropped: Arc<crate::Counter>,
    stopped: Arc<AtomicBool>,
}

impl Control {
    /// rx_dropped, rx_ring_full, rx_fill_ring_empty_descs,
    /// rx_invalid_descs, tx_invalid_descs.
    fn kernel(&self) -> [u64; 5] {
        let mut v = [0u64; 5];
        // SAFETY: a live socket and room for the five counters; reading
        // them (getsockopt) does not touch the rings.
        unsafe { ffi::sl_xsk_stats(self.xsk.raw, v.as_mut_ptr()) };
        v
    }
}

impl PortControl for Control {
    fn driver(&self) -> &'static str {
        "afxdp"
    }
    fn stats(&self) -> PortStats {
        let k = self.kernel();
        PortStats {
            // Frames the kernel could not hand to the socket (its
            // rx_dropped already counts those that found the fill ring
            // empty), and any it handed back that were no frame of ours.
            imissed: k[0] + k[1] + self.bad.get(),
            rx_nombuf: self.nobuf.get(),
            ..PortStats::from_queues([&*self.rx], [&*self.tx])
        }
    }
    /// One queue: the port's.
    fn rx_queue_stats(&self) -> Vec<PortStats> {
        let s = self.stats();
        vec![PortStats {
            opackets: 0,
            obytes: 0,
            ..s
        }]
    }
    fn caps(&self) -> Caps {
        Caps {
            max_burst: MAX_BURST,
            rx_interrupt: true,
            max_frame: if self.sg {
                crate::probe::MAX_FRAME_LEN
            } else {
                MAX_FRAME
            },
        }
    }
    fn stop_rx(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }
    fn link_up(&self) -> Option<bool> {
        crate::carrier(&self.iface)
    }
    fn xstats(&self) -> Vec<(&'static str, u64)> {
        let k = self.kernel();
        vec![
            ("xdp_rx_dropped", k[0]),
            ("xdp_rx_ring_full", k[1]),
            ("xdp_rx_fill_ring_empty", k[2]),
            ("xdp_rx_invalid_descs", k[3]),
            ("xdp_tx_invalid_descs", k[4]),
            ("rx_bad_frames", self.bad.get()),
            ("rx_jumbo_nobuf", self.nobuf.get()),
            ("tx_dropped", self.dropped.get()),
            ("umem_free", self.xsk.umem.pool.available_shared() as u64),
        ]
    }
}

/// Opens an AF_XDP port on queue 0 of the interface, on `umem` (needs
/// CAP_NET_ADMIN and CAP_BPF or root). Posts a ring's worth of the UMEM's
/// buffers to the socket's fill ring.
pub fn open(cfg: &AfXdpConfig, umem: &Arc<Umem>) -> Result<OpenPort, PortError> {
    let name = CString::new(cfg.iface.as_str())
        .map_err(|_| PortError::Config(format!("interface name {:?}", cfg.iface)))?;
    let sg = usize::from(cfg.mtu) + 14 > MAX_FRAME;
    if let Some(mtu) = crate::afpacket::iface_mtu(&cfg.iface) {
        crate::afpacket::check_port_mtu("AF_XDP", &cfg.iface, cfg.mtu, mtu)?;
    }
    // Jumbo frames put together from chunks: as many buffers as the
    // socket's RX ring holds frames, twice over (committed as used).
    let jumbo = if sg {
        Some(crate::Pool::new(
            &format!("afxdp{}-jumbo", cfg.port),
            2 * umem.ring as usize,
            crate::mbuf::data_room_for(usize::from(cfg.mtu)),
        )?)
    } else {
        None
    };
    let mut err = 0;
    // A poisoned lock only means another open panicked; the UMEM is intact.
    let _serial = umem
        .open_lock
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // SAFETY: a live UMEM, used by this thread alone while `_serial` is
    // held; a valid C string and an out pointer for the error.
    let raw = unsafe {
        ffi::sl_xsk_open(
            umem.raw,
            name.as_ptr(),
            0,
            umem.ring,
            i32::from(cfg.zerocopy),
            i32::from(cfg.skb_mode),
            i32::from(sg),
            &mut err,
        )
    };
    if raw.is_null() {
        return Err(PortError::Io {
            path: if sg {
                format!(
                    "AF_XDP {} (multi-buffer for mtu {}: Linux >= 6.6 and, in zero-copy, a driver that has it)",
                    cfg.iface, cfg.mtu
                )
            } else {
                format!("AF_XDP {}", cfg.iface)
            },
            error: std::io::Error::from_raw_os_error(-err),
        });
    }
    let xsk = Arc::new(Xsk {
        raw,
        umem: umem.clone(),
    });
    // SAFETY: a live socket handle.
    let fd = unsafe { ffi::sl_xsk_fd(xsk.raw) };
    let (rxc, txc) = (
        Arc::new(QueueCounters::default()),
        Arc::new(QueueCounters::default()),
    );
    let bad = Arc::new(crate::Counter::default());
    let dropped = Arc::new(crate::Counter::default());
    let nobuf = Arc::new(crate::Counter::default());
    let stopped = Arc::new(AtomicBool::new(false));
    let mut rx = XdpRx {
        xsk: xsk.clone(),
        intr: Intr(fd),
        port: cfg.port,
        c: rxc.clone(),
        stopped: stopped.clone(),
        in_fill: 0,
        spare: Batch::new(MAX_BURST),
        bad: bad.clone(),
        jumbo,
        nobuf: nobuf.clone(),
    };
    rx.refill();
    // The buffers left in this thread's cache go back for the workers.
    umem.pool.flush_cache();
    let tx = Box::new(XdpTx {
        xsk: xsk.clone(),
        c: txc.clone(),
        dropped: dropped.clone(),
        outstanding: 0,
        sg,
    }) as BoxTx;
    Ok(OpenPort {
        control: Arc::new(Control {
            iface: cfg.iface.clone(),
            sg,
            nobuf,
            xsk,
            rx: rxc,
            tx: txc,
            bad,
            dropped,
            stopped,
        }),
        rx: vec![Box::new(rx) as BoxRx],
        tx: vec![tx],
        _buf: std::marker::PhantomData,
    })
}
