//! AF_XDP ports (feature `afxdp`): an interface's queue 0 through an
//! AF_XDP socket made by libxdp (Debian's `libxdp-dev`), which loads and
//! attaches its default XDP program (redirecting the queue's frames to the
//! socket) and detaches it when the socket closes.
//!
//! The socket has its own UMEM (`frames` frames of 2 KiB): half feed the
//! fill ring, half are TX frames. Frames are copied between the UMEM and
//! the port's pool buffers (the worker's buffers stay `Mbuf`s, so AF_XDP
//! ports mix with the others); the socket binds in XDP copy mode unless
//! `zerocopy` is asked for, and uses `need_wakeup`. RX and TX share the
//! socket but not its rings (RX: rx + fill; TX: tx + completion), so the
//! two queues may live on different workers. The socket is the RX queue's
//! interrupt line.

use crate::mbuf::{Mbuf, Pool};
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

const FRAME_SIZE: u32 = 2048;

/// Settings of an AF_XDP port.
#[derive(Clone, Debug)]
pub struct AfXdpConfig {
    /// Port index in the appliance.
    pub port: u16,
    /// Interface name.
    pub iface: String,
    /// UMEM frames (a power of two, at least 64).
    pub frames: u32,
    /// Ask for zero-copy binding (drivers that support it).
    pub zerocopy: bool,
    /// Generic (skb) XDP instead of native.
    pub skb_mode: bool,
    /// Buffers in the port's pool.
    pub pool_size: usize,
}

/// The socket, shared by the RX and TX queue.
struct Xsk(*mut ffi::SlXsk);

// SAFETY: the RX queue uses only the rx and fill rings and the TX queue
// only the tx and completion rings and the free-frame stack; each queue is
// owned by one worker, so no ring has two users. The handle is closed once,
// when the last owner drops it.
unsafe impl Send for Xsk {}
// SAFETY: as above; `fd` is read-only.
unsafe impl Sync for Xsk {}

impl Drop for Xsk {
    fn drop(&mut self) {
        // SAFETY: the handle came from sl_xsk_open and is closed once.
        unsafe { ffi::sl_xsk_close(self.0) };
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
    pool: Pool,
    port: u16,
    c: Arc<QueueCounters>,
    stopped: Arc<AtomicBool>,
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
        let mut data = [const { MaybeUninit::<*const u8>::uninit() }; MAX_BURST];
        let mut lens = [const { MaybeUninit::<u32>::uninit() }; MAX_BURST];
        // SAFETY: the arrays have room for `room` entries; this queue is
        // the socket's only RX user.
        let n = unsafe {
            ffi::sl_xsk_rx(
                self.xsk.0,
                data.as_mut_ptr().cast(),
                lens.as_mut_ptr().cast(),
                room as u32,
            )
        } as usize;
        let now = rdtsc();
        let mut got = 0;
        let mut bytes = 0;
        for (p, len) in data.iter().zip(&lens).take(n) {
            // SAFETY: the shim initialised the first n entries with a
            // pointer into the UMEM and the frame's length; the frame stays
            // ours until sl_xsk_rx_done.
            let frame =
                unsafe { std::slice::from_raw_parts(p.assume_init(), len.assume_init() as usize) };
            match self.pool.alloc() {
                Some(mut m) => {
                    if m.copy_from(frame) {
                        m.set_rx_meta(self.port, 0, now, 0);
                        bytes += frame.len();
                        let _ = out.push(m);
                        got += 1;
                    } else {
                        self.c.nombuf.add(1);
                    }
                }
                None => self.c.nombuf.add(1),
            }
        }
        // SAFETY: gives back exactly the frames of the last sl_xsk_rx.
        unsafe { ffi::sl_xsk_rx_done(self.xsk.0, n as u32) };
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
}

impl TxQueue for XdpTx {
    type Buf = Mbuf;

    fn tx_burst(&mut self, pkts: &mut Batch<Mbuf>) -> usize {
        let n = pkts.len().min(MAX_BURST);
        if n == 0 {
            return 0;
        }
        let mut data = [const { MaybeUninit::<*const u8>::uninit() }; MAX_BURST];
        let mut lens = [const { MaybeUninit::<u32>::uninit() }; MAX_BURST];
        let mut bytes = 0usize;
        for (i, m) in pkts.iter().take(n).enumerate() {
            data[i].write(m.data().as_ptr());
            lens[i].write(m.len() as u32);
        }
        // SAFETY: the first n entries describe n live buffers in `pkts`,
        // which the shim copies into UMEM frames before returning; this
        // queue is the socket's only TX user.
        let sent = unsafe {
            ffi::sl_xsk_tx(
                self.xsk.0,
                data.as_ptr().cast(),
                lens.as_ptr().cast(),
                n as u32,
            )
        } as usize;
        for m in pkts.iter().take(sent) {
            bytes += m.len();
        }
        crate::mbuf::free_bulk(pkts.drain_front(sent));
        self.c.packets.add(sent as u64);
        self.c.bytes.add(bytes as u64);
        sent
    }
}

struct Control {
    xsk: Arc<Xsk>,
    rx: Arc<QueueCounters>,
    tx: Arc<QueueCounters>,
    stopped: Arc<AtomicBool>,
}

impl Control {
    /// rx_dropped, rx_ring_full, rx_fill_ring_empty_descs, rx_invalid_descs.
    fn kernel(&self) -> [u64; 4] {
        let mut v = [0u64; 4];
        // SAFETY: a live socket and room for the four counters; reading
        // them (getsockopt) does not touch the rings.
        unsafe { ffi::sl_xsk_stats(self.xsk.0, v.as_mut_ptr()) };
        v
    }
}

impl PortControl for Control {
    fn driver(&self) -> &'static str {
        "afxdp"
    }
    fn stats(&self) -> PortStats {
        PortStats {
            // Frames the kernel could not hand to the socket (its
            // rx_dropped already counts those that found the fill ring
            // empty).
            imissed: {
                let k = self.kernel();
                k[0] + k[1]
            },
            ..PortStats::from_queues([&*self.rx], [&*self.tx])
        }
    }
    fn caps(&self) -> Caps {
        Caps {
            max_burst: MAX_BURST,
            rx_interrupt: true,
            max_frame: FRAME_SIZE as usize,
        }
    }
    fn stop_rx(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }
    fn xstats(&self) -> Vec<(&'static str, u64)> {
        let k = self.kernel();
        vec![
            ("xdp_rx_dropped", k[0]),
            ("xdp_rx_ring_full", k[1]),
            ("xdp_rx_fill_ring_empty", k[2]),
            ("xdp_rx_invalid_descs", k[3]),
        ]
    }
}

/// Opens an AF_XDP port on queue 0 of the interface (needs CAP_NET_ADMIN
/// and CAP_BPF or root).
pub fn open(cfg: &AfXdpConfig) -> Result<OpenPort, PortError> {
    let name = CString::new(cfg.iface.as_str())
        .map_err(|_| PortError::Config(format!("interface name {:?}", cfg.iface)))?;
    let mut err = 0;
    let frames = cfg.frames.max(64).next_power_of_two();
    // SAFETY: a valid C string and an out pointer for the error.
    let x = unsafe {
        ffi::sl_xsk_open(
            name.as_ptr(),
            0,
            frames,
            FRAME_SIZE,
            i32::from(cfg.zerocopy),
            i32::from(cfg.skb_mode),
            &mut err,
        )
    };
    if x.is_null() {
        return Err(PortError::Io {
            path: format!("AF_XDP {}", cfg.iface),
            source: std::io::Error::from_raw_os_error(-err),
        });
    }
    let xsk = Arc::new(Xsk(x));
    // SAFETY: a live socket handle.
    let fd = unsafe { ffi::sl_xsk_fd(xsk.0) };
    let pool = Pool::new(
        &format!("afxdp{}", cfg.port),
        cfg.pool_size,
        FRAME_SIZE as usize,
    )?;
    let (rxc, txc) = (
        Arc::new(QueueCounters::default()),
        Arc::new(QueueCounters::default()),
    );
    let stopped = Arc::new(AtomicBool::new(false));
    let rx = Box::new(XdpRx {
        xsk: xsk.clone(),
        intr: Intr(fd),
        pool,
        port: cfg.port,
        c: rxc.clone(),
        stopped: stopped.clone(),
    }) as BoxRx;
    let xsk_ctl = xsk.clone();
    let tx = Box::new(XdpTx {
        xsk,
        c: txc.clone(),
    }) as BoxTx;
    Ok(OpenPort {
        control: Arc::new(Control {
            xsk: xsk_ctl,
            rx: rxc,
            tx: txc,
            stopped,
        }),
        rx: vec![rx],
        tx: vec![tx],
    })
}
