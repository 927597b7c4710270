//! AF_PACKET ports: a Linux interface by name, through `PF_PACKET` sockets.
//!
//! - RX: a memory-mapped ring per queue, `TPACKET_V3` (blocks of frames the
//!   kernel fills and hands over whole, retired at the latest after
//!   [`BLOCK_TIMEOUT_MS`]: few status words and wake-ups, up to a
//!   millisecond's wait each way at low rates) or `TPACKET_V2` (a status
//!   word per 2 KiB frame slot, handed over and waking the reader frame by
//!   frame, as DPDK's af_packet PMD reads; a frame larger than its slot, a
//!   sender's GSO aggregate, is also queued whole on the socket
//!   (`PACKET_COPY_THRESH`) and read from there). Frames are copied into
//!   pool buffers and their block or slot given back when read. With
//!   several RX queues the sockets
//!   join one `PACKET_FANOUT_CBPF` group whose program computes
//!   `pipeline::steer`'s symmetric flow hash, so both directions of a flow
//!   reach one queue, and the gateway can compute which queue (which
//!   worker) a flow's packets reach from a datagram's first fragment,
//!   which the fanout hashes by its addresses alone as it does every
//!   fragment (the kernel's own `PACKET_FANOUT_HASH` uses a secret).
//! - TX: one `sendmmsg` per burst on a socket bound to the interface
//!   (protocol 0, so it receives nothing), `PACKET_QDISC_BYPASS` optional.
//! - The interface is put in promiscuous mode (a membership, dropped with
//!   the socket); the RX sockets ignore the frames the port sends
//!   (`PACKET_IGNORE_OUTGOING`).
//! - Interrupt line: the RX socket itself, readable while a block is ready
//!   (the poll-mode policies block on it).
//! - Counters: the kernel's `PACKET_STATISTICS` (packets and ring-full drops,
//!   accumulated, as reading resets them) as `imissed`.
//!
//! All `unsafe` (socket options, the ring mapping and its shared headers,
//! `sendmmsg`) is in this module, each block with its reason.

use crate::mbuf::{Mbuf, Pool};
use crate::sys::rdtsc;
use crate::{
    Batch, BoxRx, BoxTx, Caps, OpenPort, PacketBuf, PortControl, PortError, PortStats,
    QueueCounters, RxInterrupt, RxQueue, TxQueue, MAX_BURST,
};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_VNET_HDR: libc::c_int = 15;
/// `struct virtio_net_hdr`'s size: with `PACKET_VNET_HDR` the kernel writes
/// one before each received frame (its GSO type and size: how a sender's
/// aggregate is to be cut).
const VNET_HDR_LEN: usize = 10;
/// `VIRTIO_NET_HDR_GSO_TCPV4`, `_TCPV6` and `_UDP_L4` (a UDP GSO
/// aggregate, `UDP_SEGMENT`).
const GSO_TCPV4: u8 = 1;
const GSO_TCPV6: u8 = 4;
const GSO_UDP_L4: u8 = 5;
const PACKET_FANOUT: libc::c_int = 18;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const PACKET_MR_PROMISC: libc::c_ushort = 1;
const PACKET_FANOUT_CBPF: u32 = 6;
const PACKET_FANOUT_DATA: libc::c_int = 22;
const PACKET_COPY_THRESH: libc::c_int = 7;
const TPACKET_V2: libc::c_int = 1;
const TPACKET_V3: libc::c_int = 2;
/// (V2) The frame did not fit its slot: what the slot holds is its head,
/// and the whole frame waits on the socket's receive queue.
const TP_STATUS_COPY: u32 = 1 << 1;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
/// The frame's VLAN tag was taken off by the kernel and is in the header
/// (`tp_vlan_tci`), with its TPID (`tp_vlan_tpid`) when the second is set.
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;
/// The frame's TCP/UDP checksum was left to offload (a local sender or a
/// veth): the field holds only the pseudo-header's sum.
const TP_STATUS_CSUMNOTREADY: u32 = 1 << 3;

/// Bytes per ring block.
pub const BLOCK_SIZE: usize = 1 << 16;
/// Longest a partly filled block waits before the kernel hands it over.
pub const BLOCK_TIMEOUT_MS: u32 = 1;
const FRAME_SIZE: usize = 2048;
/// (V2) The largest frame read whole from the socket (a 64 KiB GSO
/// aggregate, its link header and virtio-net header), and the socket's
/// receive buffer for such frames.
const COPY_LEN: usize = 65536 + 64;
const COPY_RCVBUF: libc::c_int = 4 << 20;

#[repr(C)]
struct TpacketReq3 {
    tp_block_size: u32,
    tp_block_nr: u32,
    tp_frame_size: u32,
    tp_frame_nr: u32,
    tp_retire_blk_tov: u32,
    tp_sizeof_priv: u32,
    tp_feature_req_word: u32,
}

/// `struct tpacket_req` (V2): frames in blocks.
#[repr(C)]
struct TpacketReq {
    tp_block_size: u32,
    tp_block_nr: u32,
    tp_frame_size: u32,
    tp_frame_nr: u32,
}

#[repr(C)]
struct PacketMreq {
    mr_ifindex: libc::c_int,
    mr_type: libc::c_ushort,
    mr_alen: libc::c_ushort,
    mr_address: [u8; 8],
}

#[repr(C)]
#[derive(Default)]
struct TpacketStatsV3 {
    tp_packets: u32,
    tp_drops: u32,
    tp_freeze_q_cnt: u32,
}

/// An RX ring's layout (`PACKET_VERSION`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingVersion {
    /// `TPACKET_V2`: a status word per frame slot; each frame is handed
    /// over (and wakes a blocked reader) on its own.
    V2,
    /// `TPACKET_V3`: blocks handed over whole, when full or after
    /// [`BLOCK_TIMEOUT_MS`].
    V3,
}

/// Settings of an AF_PACKET port.
#[derive(Clone, Debug)]
pub struct AfPacketConfig {
    /// Port index in the appliance.
    pub port: u16,
    /// Interface name.
    pub iface: String,
    /// RX queues (sockets in one fanout group).
    pub rxq: u16,
    /// TX queues (sockets).
    pub txq: u16,
    /// Ring blocks per RX queue (of [`BLOCK_SIZE`] bytes).
    pub blocks: u32,
    /// The RX ring's layout.
    pub ring: RingVersion,
    /// Bypass the qdisc on TX.
    pub qdisc_bypass: bool,
    /// Buffers in the port's pool.
    pub pool_size: usize,
    /// The port's configured MTU: refused when larger than the
    /// interface's (the kernel would neither deliver nor send such
    /// frames).
    pub mtu: u16,
}

fn err(what: &str, iface: &str) -> PortError {
    PortError::Io {
        path: format!("AF_PACKET {iface}: {what}"),
        error: io::Error::last_os_error(),
    }
}

fn setopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, v: &T) -> bool {
    // SAFETY: `v` is a live, initialised value of the size passed, which is
    // what setsockopt reads.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            std::ptr::from_ref(v).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        ) == 0
    }
}

fn ifindex(iface: &str) -> Result<i32, PortError> {
    let c = std::ffi::CString::new(iface)
        .map_err(|_| PortError::Config(format!("interface name {iface:?}")))?;
    // SAFETY: `c` is a NUL-terminated string that outlives the call.
    let i = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if i == 0 {
        return Err(err("no such interface", iface));
    }
    Ok(i as i32)
}

/// A packet socket (receiving nothing until bound with a protocol).
fn socket(iface: &str) -> Result<OwnedFd, PortError> {
    // SAFETY: plain socket(2); the descriptor is owned right away.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(err("socket (needs CAP_NET_RAW)", iface));
    }
    // SAFETY: `fd` was just returned by socket(2) and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn bind(fd: RawFd, ifindex: i32, proto: u16, iface: &str) -> Result<(), PortError> {
    // SAFETY: sockaddr_ll is plain data; all-zero is a valid value.
    let mut sa: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sa.sll_family = libc::AF_PACKET as u16;
    sa.sll_protocol = proto;
    sa.sll_ifindex = ifindex;
    // SAFETY: `sa` is a live sockaddr_ll of the size passed.
    let r = unsafe {
        libc::bind(
            fd,
            std::ptr::from_ref(&sa).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(err("bind", iface));
    }
    Ok(())
}

/// The mapped ring of one RX socket: `blocks` blocks of [`BLOCK_SIZE`]
/// bytes (V3), or `slots` frame slots of [`FRAME_SIZE`] bytes laid end to
/// end (V2: blocks are whole numbers of slots).
struct Ring {
    base: *mut u8,
    len: usize,
    blocks: usize,
    slots: usize,
}

// SAFETY: the mapping is owned by the one queue that reads it; the kernel
// is the only other party, synchronised through the block status words.
unsafe impl Send for Ring {}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are the mapping made in `open_rx`, unmapped
        // once.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

impl Ring {
    /// The status word of block `b` (shared with the kernel).
    fn status(&self, b: usize) -> &AtomicU32 {
        // SAFETY: block `b` < blocks lies in the mapping; its header starts
        // with `version`, `offset_to_priv`, then `block_status` at byte 8,
        // 4-aligned (blocks are page-aligned), which the kernel and we
        // access as a 32-bit word.
        unsafe { &*self.base.add(b * BLOCK_SIZE + 8).cast::<AtomicU32>() }
    }

    /// Block `b`'s bytes (valid to read while its status is USER).
    fn block(&self, b: usize) -> &[u8] {
        // SAFETY: block `b` lies in the mapping, which lives as long as
        // `self`; while the status says USER the kernel does not write it.
        unsafe { std::slice::from_raw_parts(self.base.add(b * BLOCK_SIZE), BLOCK_SIZE) }
    }

    /// (V2) The status word of slot `s`: `tp_status`, the first field of
    /// its `tpacket2_hdr`.
    fn slot_status(&self, s: usize) -> &AtomicU32 {
        // SAFETY: slot `s` < slots lies in the mapping; slots start at
        // multiples of FRAME_SIZE from the page-aligned base, so the word
        // is 4-aligned; the kernel and we access it as a 32-bit word.
        unsafe { &*self.base.add(s * FRAME_SIZE).cast::<AtomicU32>() }
    }

    /// (V2) Slot `s`'s bytes (valid to read while its status is USER).
    fn slot(&self, s: usize) -> &[u8] {
        // SAFETY: slot `s` lies in the mapping, which lives as long as
        // `self`; while the status says USER the kernel does not write it.
        unsafe { std::slice::from_raw_parts(self.base.add(s * FRAME_SIZE), FRAME_SIZE) }
    }
}

/// What the ring's header says of a frame, besides its bytes.
#[derive(Clone, Copy)]
struct Meta {
    /// `tp_status`.
    status: u32,
    /// The frame's length on the wire (`tp_len`; more than the bytes
    /// given when truncated).
    len: usize,
    /// The kernel's flow hash (V3; 0 in V2, which has none).
    rss: u32,
    /// The VLAN tag the kernel took off, and its TPID.
    tci: u16,
    tpid: u16,
    /// The GSO type and size from the virtio-net header before the frame.
    gso: Option<(u8, usize)>,
}

struct RxQ {
    intr: Intr,
    ring: Ring,
    /// The ring's layout.
    version: RingVersion,
    /// Block (V3) or slot (V2) being read; (V3) packets left in the
    /// block and offset of the next.
    cur: usize,
    left: u32,
    off: usize,
    stopped: Arc<AtomicBool>,
    /// (V2) A frame larger than its slot, read whole from the socket.
    copy: Vec<u8>,
    p: Take,
}

/// What turns a received frame into buffers, apart from the ring.
struct Take {
    pool: Pool,
    port: u16,
    queue: u16,
    c: Arc<QueueCounters>,
    /// Aggregates split, and those dropped.
    big: Arc<Oversize>,
    /// The interface's MTU: TCP frames larger than it (a veth peer's
    /// TSO/GSO aggregates) are split into segments ([`crate::gso`]).
    mtu: usize,
    /// The longest frame a buffer takes: its pool's data room, sized for
    /// the interface's MTU ([`crate::mbuf::data_room_for`]).
    room: usize,
    /// A virtio-net header precedes each frame (`PACKET_VNET_HDR`): UDP
    /// aggregates are split at the sender's datagram size it gives.
    vnet: bool,
    /// Segments waiting for room in the next burst, and the scratch
    /// buffer they are built in (both allocated once).
    pending: std::collections::VecDeque<Mbuf>,
    seg: Vec<u8>,
}

/// Most segments waiting for the next burst (a 64 KiB aggregate at an
/// MTU of 576 makes about 120).
const PENDING: usize = 256;

/// An RX queue's frames larger than the MTU (the `rx_too_big`,
/// `rx_gso_frames`, `rx_gso_segments` xstats).
#[derive(Default)]
struct Oversize {
    /// Not split (not TCP, or truncated by the ring): dropped.
    too_big: crate::Counter,
    /// Split into segments ([`crate::gso`]).
    frames: crate::Counter,
    /// The segments made.
    segments: crate::Counter,
}

fn rd32(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn rd16(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

impl RxQueue for RxQ {
    type Buf = Mbuf;

    fn rx_burst(&mut self, out: &mut Batch<Mbuf>) -> usize {
        if self.stopped.load(Ordering::Relaxed) {
            return 0;
        }
        let mut got = 0;
        let mut bytes = 0;
        let now = rdtsc();
        while out.room() > 0 {
            let Some(m) = self.p.pending.pop_front() else {
                break;
            };
            bytes += m.len();
            let _ = out.push(m);
            got += 1;
        }
        match self.version {
            RingVersion::V3 => self.rx_v3(out, &mut got, &mut bytes, now),
            RingVersion::V2 => self.rx_v2(out, &mut got, &mut bytes, now),
        }
        self.p.c.packets.add(got as u64);
        self.p.c.bytes.add(bytes as u64);
        got
    }

    fn interrupt(&self) -> Option<&dyn RxInterrupt> {
        Some(&self.intr)
    }
}

/// The GSO type and size in the virtio-net header that ends at `at` in
/// `b` (where the frame starts), if there is one.
fn gso_at(vnet: bool, b: &[u8], at: usize) -> Option<(u8, usize)> {
    (vnet && at >= VNET_HDR_LEN && at <= b.len()).then(|| {
        let v = &b[at - VNET_HDR_LEN..at];
        (v[1] & 0x7f, usize::from(u16::from_le_bytes([v[4], v[5]])))
    })
}

impl RxQ {
    /// V3: frames from the blocks the kernel handed over, in order.
    fn rx_v3(&mut self, out: &mut Batch<Mbuf>, got: &mut usize, bytes: &mut usize, now: u64) {
        while out.room() > 0 {
            if self.left == 0 {
                let st = self.ring.status(self.cur);
                if st.load(Ordering::Acquire) & TP_STATUS_USER == 0 {
                    break;
                }
                let blk = self.ring.block(self.cur);
                self.left = rd32(blk, 12);
                self.off = rd32(blk, 16) as usize;
                if self.left == 0 {
                    self.release();
                    continue;
                }
            }
            let blk = self.ring.block(self.cur);
            let h = self.off;
            let next = rd32(blk, h) as usize;
            let snap = rd32(blk, h + 12) as usize;
            let mac = usize::from(rd16(blk, h + 24));
            let frame = &blk[(h + mac).min(BLOCK_SIZE)..(h + mac + snap).min(BLOCK_SIZE)];
            let meta = Meta {
                status: rd32(blk, h + 20),
                len: rd32(blk, h + 16) as usize,
                rss: rd32(blk, h + 28),
                tci: rd32(blk, h + 32) as u16,
                tpid: rd16(blk, h + 36),
                gso: gso_at(self.p.vnet, blk, h + mac),
            };
            self.p.take(frame, meta, out, got, bytes, now);
            self.left -= 1;
            self.off = h + next;
            if self.left == 0 {
                self.release();
            }
        }
    }

    /// V2: frame slots in order, each given back once read. A slot marked
    /// `TP_STATUS_COPY` holds only the head of a frame that did not fit;
    /// the frame itself is the next one waiting on the socket.
    fn rx_v2(&mut self, out: &mut Batch<Mbuf>, got: &mut usize, bytes: &mut usize, now: u64) {
        while out.room() > 0 {
            let status = self.ring.slot_status(self.cur).load(Ordering::Acquire);
            if status & TP_STATUS_USER == 0 {
                break;
            }
            let slot = self.ring.slot(self.cur);
            let snap = rd32(slot, 8) as usize;
            let mac = usize::from(rd16(slot, 12));
            let meta = Meta {
                status,
                len: rd32(slot, 4) as usize,
                rss: 0,
                tci: rd16(slot, 24),
                tpid: rd16(slot, 26),
                gso: gso_at(self.p.vnet, slot, mac),
            };
            if status & TP_STATUS_COPY != 0 {
                match recv_whole(self.intr.0.as_raw_fd(), &mut self.copy) {
                    Some(n) => {
                        let skip = if self.p.vnet { VNET_HDR_LEN } else { 0 };
                        let whole = &self.copy[skip.min(n)..n.min(self.copy.len())];
                        let meta = Meta {
                            // Its real length: a frame longer than the
                            // buffer is not whole, and is dropped as too
                            // big.
                            len: n.saturating_sub(skip),
                            gso: gso_at(self.p.vnet, &self.copy, skip),
                            ..meta
                        };
                        self.p.take(whole, meta, out, got, bytes, now);
                    }
                    None => {
                        // Gone from the socket: counted as too big.
                        self.p.big.too_big.add(1);
                        self.p.c.nombuf.add(1);
                    }
                }
            } else {
                let frame = &slot[mac.min(FRAME_SIZE)..(mac + snap).min(FRAME_SIZE)];
                self.p.take(frame, meta, out, got, bytes, now);
            }
            self.ring
                .slot_status(self.cur)
                .store(TP_STATUS_KERNEL, Ordering::Release);
            self.cur = (self.cur + 1) % self.ring.slots;
        }
    }
}

/// Reads the next packet waiting on socket `fd` into `buf` (its virtio-net
/// header first when the socket has one), without blocking: its real
/// length (more than `buf` holds when it was truncated), or `None` when
/// nothing waits.
fn recv_whole(fd: RawFd, buf: &mut [u8]) -> Option<usize> {
    // SAFETY: `buf` is a live, writable buffer of `buf.len()` bytes; the
    // kernel writes at most that many (a longer packet is truncated, and
    // MSG_TRUNC makes the return value its real length).
    let n = unsafe {
        libc::recv(
            fd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT | libc::MSG_TRUNC,
        )
    };
    usize::try_from(n).ok()
}

impl Take {
    /// Turns one received frame into buffers on `out` (or waiting in
    /// `pending`): as it is, or an aggregate cut into its segments.
    fn take(
        &mut self,
        frame: &[u8],
        meta: Meta,
        out: &mut Batch<Mbuf>,
        got: &mut usize,
        bytes: &mut usize,
        now: u64,
    ) {
        if frame.len() > self.mtu + 22 || frame.len() > self.room {
            // An aggregate: split if it is whole TCP or UDP (GSO), else
            // dropped.
            let (pool, pending, port, queue) =
                (&self.pool, &mut self.pending, self.port, self.queue);
            let mut made = 0u64;
            let mut refused = false;
            // Segments no larger than a buffer holds (with two tags).
            let mtu = self.mtu.min(self.room - 22);
            let split = (meta.len == frame.len())
                .then(|| {
                    let emit = |s: &[u8]| {
                        let Some(mut m) = pool.alloc() else {
                            refused = true;
                            return false;
                        };
                        if !m.copy_from(s) || !retag(&mut m, &meta) {
                            refused = true;
                            return false;
                        }
                        m.set_rx_meta(port, queue, now, meta.rss);
                        made += 1;
                        if out.room() > 0 {
                            *bytes += s.len();
                            *got += 1;
                            let _ = out.push(m);
                            true
                        } else if pending.len() < PENDING {
                            pending.push_back(m);
                            true
                        } else {
                            refused = true;
                            false
                        }
                    };
                    match meta.gso {
                        Some((GSO_UDP_L4, size)) => {
                            crate::gso::segment_udp(frame, size, &mut self.seg, emit)
                        }
                        Some((GSO_TCPV4 | GSO_TCPV6, mss)) => {
                            crate::gso::segment_tcp(frame, mtu, Some(mss), &mut self.seg, emit)
                        }
                        _ => crate::gso::segment_tcp(frame, mtu, None, &mut self.seg, emit),
                    }
                })
                .flatten();
            match split {
                Some(_) => {
                    self.big.frames.add(1);
                    self.big.segments.add(made);
                    if refused {
                        // The rest of the aggregate: no buffer.
                        self.c.nombuf.add(1);
                    }
                }
                None => {
                    self.big.too_big.add(1);
                    self.c.nombuf.add(1);
                }
            }
            return;
        }
        match self.pool.alloc() {
            Some(mut m) => {
                if m.copy_from(frame) && retag(&mut m, &meta) {
                    if meta.status & TP_STATUS_CSUMNOTREADY != 0 {
                        complete_checksum(m.data_mut());
                    }
                    m.set_rx_meta(self.port, self.queue, now, meta.rss);
                    *bytes += frame.len();
                    let _ = out.push(m);
                    *got += 1;
                } else {
                    self.big.too_big.add(1);
                    self.c.nombuf.add(1);
                }
            }
            None => self.c.nombuf.add(1),
        }
    }
}

/// Puts back the VLAN tag the kernel took off a received frame (its
/// receive path always moves the outer tag to the packet's metadata, and
/// AF_PACKET reports it in the frame header, as libpcap reads it): the
/// router's sub-interfaces match frames by their tags. False when the
/// buffer has no headroom for it.
fn retag(m: &mut Mbuf, meta: &Meta) -> bool {
    if meta.status & TP_STATUS_VLAN_VALID == 0 {
        return true;
    }
    let tci = meta.tci;
    let tpid = if meta.status & TP_STATUS_VLAN_TPID_VALID != 0 {
        meta.tpid
    } else {
        0x8100
    };
    if m.len() < 12 || m.prepend(4).is_none() {
        return false;
    }
    let b = m.data_mut();
    b.copy_within(4..16, 0);
    b[12..14].copy_from_slice(&tpid.to_be_bytes());
    b[14..16].copy_from_slice(&tci.to_be_bytes());
    true
}

/// Where a frame's TCP or UDP checksum is: the protocol, the segment's
/// bounds, the field's offset and the pseudo-header's sum; `None` for
/// frames it cannot parse (fragments, IPv6 extension headers, other
/// protocols, short ones).
fn l4_checksum(f: &[u8]) -> Option<(u8, usize, usize, usize, u64)> {
    use pipeline::checksum::{pseudo_v4, pseudo_v6};
    let mut l3 = 12;
    while f.len() >= l3 + 2 && matches!(u16::from_be_bytes([f[l3], f[l3 + 1]]), 0x8100 | 0x88a8) {
        l3 += 4;
    }
    if f.len() < l3 + 2 {
        return None;
    }
    let et = u16::from_be_bytes([f[l3], f[l3 + 1]]);
    l3 += 2;
    let (proto, l4, end) = match et {
        0x0800 if f.len() >= l3 + 20 => {
            let ihl = usize::from(f[l3] & 0x0f) * 4;
            let total = usize::from(u16::from_be_bytes([f[l3 + 2], f[l3 + 3]]));
            if u16::from_be_bytes([f[l3 + 6], f[l3 + 7]]) & 0x3fff != 0 || ihl < 20 {
                return None; // a fragment, or a broken header
            }
            (f[l3 + 9], l3 + ihl, l3 + total)
        }
        0x86dd if f.len() >= l3 + 40 => {
            let plen = usize::from(u16::from_be_bytes([f[l3 + 4], f[l3 + 5]]));
            (f[l3 + 6], l3 + 40, l3 + 40 + plen)
        }
        _ => return None,
    };
    let at = match proto {
        6 => l4 + 16,
        17 => l4 + 6,
        _ => return None,
    };
    if end > f.len() || at + 2 > end || l4 > end {
        return None;
    }
    let len = end - l4;
    let pseudo = if et == 0x0800 {
        let a = |i: usize| [f[i], f[i + 1], f[i + 2], f[i + 3]];
        pseudo_v4(a(l3 + 12), a(l3 + 16), proto, len as u16)
    } else {
        let mut src = [0; 16];
        let mut dst = [0; 16];
        src.copy_from_slice(&f[l3 + 8..l3 + 24]);
        dst.copy_from_slice(&f[l3 + 24..l3 + 40]);
        pseudo_v6(src, dst, proto, len as u32)
    };
    Some((proto, l4, end, at, pseudo))
}

fn finish(f: &mut [u8], proto: u8, l4: usize, end: usize, at: usize) {
    let mut c = !pipeline::checksum::fold(pipeline::checksum::sum(&f[l4..end], 0));
    if proto == 17 && c == 0 {
        c = 0xffff;
    }
    f[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

/// Finishes a TCP or UDP checksum the sender left to offload, as the
/// NIC would have: the ones-complement sum of the segment from its
/// header on, the field holding the pseudo-header's sum, inverted into
/// the field. Frames it cannot parse (fragments, IPv6 extension headers,
/// other protocols, short) are left as they are.
pub fn complete_checksum(f: &mut [u8]) {
    if let Some((proto, l4, end, at, _)) = l4_checksum(f) {
        finish(f, proto, l4, end, at);
    }
}

/// [`complete_checksum`] for a frame that may or may not have been left
/// to offload, with nothing to say which (AF_XDP passes no checksum
/// status: a veth whose peer offloads TX checksums hands it TCP and UDP
/// with the field holding only the pseudo-header's sum). Finishes it only
/// when the field is exactly that sum, which costs a frame that is not
/// partial a pseudo-header sum (a few additions). Safe on a complete
/// frame whose field happens to equal it: finishing a correct checksum
/// gives the same value back. True when it finished one.
pub fn complete_if_partial(f: &mut [u8]) -> bool {
    let Some((proto, l4, end, at, pseudo)) = l4_checksum(f) else {
        return false;
    };
    let field = u16::from_be_bytes([f[at], f[at + 1]]);
    if field != pipeline::checksum::fold(pseudo) {
        return false;
    }
    finish(f, proto, l4, end, at);
    true
}

impl RxQ {
    fn release(&mut self) {
        self.ring
            .status(self.cur)
            .store(TP_STATUS_KERNEL, Ordering::Release);
        self.cur = (self.cur + 1) % self.ring.blocks;
        self.left = 0;
    }
}

/// The interrupt line of an RX queue: its socket.
struct Intr(Arc<OwnedFd>);

impl RxInterrupt for Intr {
    fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
    // The socket is readable while a block is ready: nothing to arm.
    fn enable(&self) {}
    fn disable(&self) {}
    fn ack(&self) {}
}

struct TxQ {
    fd: OwnedFd,
    c: Arc<QueueCounters>,
    iov: Box<[libc::iovec; MAX_BURST]>,
    msgs: Box<[libc::mmsghdr; MAX_BURST]>,
    /// The last send failed with the interface down.
    down: bool,
}

// SAFETY: the iovec/mmsghdr arrays hold pointers only while `tx_burst`
// runs (into buffers it owns); between calls they are dead values.
unsafe impl Send for TxQ {}

impl TxQueue for TxQ {
    type Buf = Mbuf;

    fn tx_burst(&mut self, pkts: &mut Batch<Mbuf>) -> usize {
        let n = pkts.len();
        if n == 0 {
            return 0;
        }
        for (i, m) in pkts.iter().enumerate() {
            let d = m.data();
            self.iov[i] = libc::iovec {
                iov_base: d.as_ptr() as *mut libc::c_void,
                iov_len: d.len(),
            };
            // SAFETY: msghdr is plain data; all-zero is valid (no name, no
            // control).
            let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
            h.msg_iov = std::ptr::from_mut(&mut self.iov[i]);
            h.msg_iovlen = 1;
            self.msgs[i] = libc::mmsghdr {
                msg_hdr: h,
                msg_len: 0,
            };
        }
        // SAFETY: `msgs[..n]` point at `iov[..n]`, which point at the bytes
        // of the `n` buffers in `pkts`; all live until the call returns.
        let r = unsafe {
            libc::sendmmsg(
                self.fd.as_raw_fd(),
                self.msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        let sent = if r < 0 { 0 } else { r as usize };
        // Only on a failed send (rare): the interface down, or gone.
        self.down = r < 0
            && matches!(
                io::Error::last_os_error().raw_os_error(),
                Some(libc::ENETDOWN | libc::ENXIO)
            );
        let bytes: usize = pkts.iter().take(sent).map(|m| m.len()).sum();
        crate::mbuf::free_bulk(pkts.drain_front(sent));
        self.c.packets.add(sent as u64);
        self.c.bytes.add(bytes as u64);
        sent
    }

    fn link_down(&self) -> bool {
        self.down
    }
}

struct Control {
    iface: String,
    rx: Vec<Arc<QueueCounters>>,
    tx: Vec<Arc<QueueCounters>>,
    /// RX sockets (for PACKET_STATISTICS), shared with the queues.
    fds: Vec<Arc<OwnedFd>>,
    kernel_packets: AtomicU64,
    /// Per RX socket (queue), what the kernel dropped for want of room
    /// in its ring (PACKET_STATISTICS resets on each read: summed here).
    kernel_drops: Vec<AtomicU64>,
    stopped: Arc<AtomicBool>,
    /// Each RX queue's oversize frames.
    big: Vec<Arc<Oversize>>,
    /// Offloads turned off while open (put back on drop).
    _offloads: Offloads,
    /// The buffers' data room (the longest frame).
    room: usize,
}

/// `SIOCETHTOOL` commands: GRO get/set, flags (LRO) get/set.
const ETHTOOL_GGRO: u32 = 0x2b;
const ETHTOOL_SGRO: u32 = 0x2c;
const ETHTOOL_GFLAGS: u32 = 0x25;
const ETHTOOL_SFLAGS: u32 = 0x26;
const ETH_FLAG_LRO: u32 = 1 << 15;

/// GRO and LRO of an interface, turned off by [`Offloads::off`] and put
/// back as they were when dropped.
struct Offloads {
    iface: String,
    gro: bool,
    lro: bool,
}

/// One `struct ethtool_value` exchange with the interface: `None` when
/// the driver does not support it (or the ioctl fails).
fn ethtool_value(iface: &str, cmd: u32, data: u32) -> Option<u32> {
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    #[repr(C)]
    struct IfReq {
        name: [u8; libc::IFNAMSIZ],
        data: *mut EthtoolValue,
        _pad: [u8; 16],
    }
    if iface.len() >= libc::IFNAMSIZ {
        return None;
    }
    let mut v = EthtoolValue { cmd, data };
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        data: &mut v,
        _pad: [0; 16],
    };
    req.name[..iface.len()].copy_from_slice(iface.as_bytes());
    // SAFETY: a plain socket call; the result is checked.
    let s = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if s < 0 {
        return None;
    }
    // SAFETY: `s` was just created and is owned here only.
    let sock = unsafe { OwnedFd::from_raw_fd(s) };
    // SAFETY: `req` is a live `struct ifreq` whose data pointer points at a
    // live `struct ethtool_value`, which the kernel reads and writes.
    let r = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL as _, &mut req) };
    (r == 0).then_some(v.data)
}

impl Offloads {
    fn off(iface: &str) -> Offloads {
        let gro = ethtool_value(iface, ETHTOOL_GGRO, 0) == Some(1)
            && ethtool_value(iface, ETHTOOL_SGRO, 0).is_some();
        let flags = ethtool_value(iface, ETHTOOL_GFLAGS, 0).unwrap_or(0);
        let lro = flags & ETH_FLAG_LRO != 0
            && ethtool_value(iface, ETHTOOL_SFLAGS, flags & !ETH_FLAG_LRO).is_some();
        if gro || lro {
            eprintln!(
                "afpacket {iface}: {} off while Sluice has the port (aggregated frames cannot be forwarded)",
                match (gro, lro) {
                    (true, true) => "GRO and LRO",
                    (true, false) => "GRO",
                    _ => "LRO",
                }
            );
        }
        Offloads {
            iface: iface.to_string(),
            gro,
            lro,
        }
    }
}

impl Drop for Offloads {
    fn drop(&mut self) {
        if self.gro {
            let _ = ethtool_value(&self.iface, ETHTOOL_SGRO, 1);
        }
        if self.lro {
            if let Some(f) = ethtool_value(&self.iface, ETHTOOL_GFLAGS, 0) {
                let _ = ethtool_value(&self.iface, ETHTOOL_SFLAGS, f | ETH_FLAG_LRO);
            }
        }
    }
}

impl Control {
    fn poll_kernel(&self) {
        for (fd, drops) in self.fds.iter().zip(&self.kernel_drops) {
            let mut s = TpacketStatsV3::default();
            let mut len = std::mem::size_of::<TpacketStatsV3>() as libc::socklen_t;
            // SAFETY: `s` is a live tpacket_stats_v3 and `len` its size; the
            // kernel writes at most `len` bytes; `fd` is open (shared).
            let r = unsafe {
                libc::getsockopt(
                    fd.as_raw_fd(),
                    libc::SOL_PACKET,
                    PACKET_STATISTICS,
                    std::ptr::from_mut(&mut s).cast(),
                    &mut len,
                )
            };
            if r == 0 {
                self.kernel_packets
                    .fetch_add(u64::from(s.tp_packets), Ordering::Relaxed);
                drops.fetch_add(u64::from(s.tp_drops), Ordering::Relaxed);
            }
        }
    }
}

impl PortControl for Control {
    fn driver(&self) -> &'static str {
        "afpacket"
    }
    fn stats(&self) -> PortStats {
        self.poll_kernel();
        PortStats {
            imissed: self
                .kernel_drops
                .iter()
                .map(|d| d.load(Ordering::Relaxed))
                .sum(),
            ..PortStats::from_queues(self.rx.iter().map(|q| &**q), self.tx.iter().map(|q| &**q))
        }
    }
    fn rx_queue_stats(&self) -> Vec<PortStats> {
        self.poll_kernel();
        let mut v = PortStats::per_rx_queue(self.rx.iter().map(|q| &**q));
        for (s, d) in v.iter_mut().zip(&self.kernel_drops) {
            s.imissed = d.load(Ordering::Relaxed);
        }
        v
    }
    fn caps(&self) -> Caps {
        Caps {
            max_burst: MAX_BURST,
            rx_interrupt: true,
            max_frame: self.room,
        }
    }
    fn flow_hash_spread(&self) -> bool {
        self.rx.len() > 1
    }
    fn stop_rx(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }
    fn link_up(&self) -> Option<bool> {
        crate::carrier(&self.iface)
    }
    fn xstats(&self) -> Vec<(&'static str, u64)> {
        vec![
            (
                "kernel_rx_packets",
                self.kernel_packets.load(Ordering::Relaxed),
            ),
            ("rx_too_big", self.big.iter().map(|b| b.too_big.get()).sum()),
            (
                "rx_gso_frames",
                self.big.iter().map(|b| b.frames.get()).sum(),
            ),
            (
                "rx_gso_segments",
                self.big.iter().map(|b| b.segments.get()).sum(),
            ),
        ]
    }
}

#[allow(clippy::too_many_arguments)]
fn open_rx(
    cfg: &AfPacketConfig,
    ifi: i32,
    q: u16,
    fanout: u32,
    pool: Pool,
    (mtu, room): (usize, usize),
    stopped: &Arc<AtomicBool>,
    big: &Arc<Oversize>,
) -> Result<(RxQ, Arc<QueueCounters>), PortError> {
    let iface = &cfg.iface;
    let proto = (libc::ETH_P_ALL as u16).to_be();
    let fd = socket(iface)?;
    let raw = fd.as_raw_fd();
    let version = match cfg.ring {
        RingVersion::V2 => TPACKET_V2,
        RingVersion::V3 => TPACKET_V3,
    };
    if !setopt(raw, libc::SOL_PACKET, PACKET_VERSION, &version) {
        return Err(err("PACKET_VERSION", iface));
    }
    // A virtio-net header before each frame (before the ring exists, as
    // the kernel requires): a UDP GSO aggregate's datagram size. Without
    // it (an older kernel) such aggregates are dropped as too big.
    let one: libc::c_int = 1;
    let vnet = setopt(raw, libc::SOL_PACKET, PACKET_VNET_HDR, &one);
    let blocks = cfg.blocks.max(2);
    let slots = BLOCK_SIZE / FRAME_SIZE * blocks as usize;
    let ok = match cfg.ring {
        RingVersion::V3 => setopt(
            raw,
            libc::SOL_PACKET,
            PACKET_RX_RING,
            &TpacketReq3 {
                tp_block_size: BLOCK_SIZE as u32,
                tp_block_nr: blocks,
                tp_frame_size: FRAME_SIZE as u32,
                tp_frame_nr: slots as u32,
                tp_retire_blk_tov: BLOCK_TIMEOUT_MS,
                tp_sizeof_priv: 0,
                tp_feature_req_word: 0,
            },
        ),
        RingVersion::V2 => {
            // A frame larger than a slot (a GSO aggregate) is also queued
            // whole on the socket, with room for a few of them.
            let _ = setopt(raw, libc::SOL_PACKET, PACKET_COPY_THRESH, &one);
            let rcvbuf: libc::c_int = COPY_RCVBUF;
            if !setopt(raw, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &rcvbuf) {
                let _ = setopt(raw, libc::SOL_SOCKET, libc::SO_RCVBUF, &rcvbuf);
            }
            setopt(
                raw,
                libc::SOL_PACKET,
                PACKET_RX_RING,
                &TpacketReq {
                    tp_block_size: BLOCK_SIZE as u32,
                    tp_block_nr: blocks,
                    tp_frame_size: FRAME_SIZE as u32,
                    tp_frame_nr: slots as u32,
                },
            )
        }
    };
    if !ok {
        return Err(err("PACKET_RX_RING", iface));
    }
    let len = BLOCK_SIZE * blocks as usize;
    // SAFETY: maps the ring the kernel just allocated for this socket,
    // shared, at the length it was configured with.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            raw,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(err("mmap of the RX ring", iface));
    }
    let ring = Ring {
        base: base.cast(),
        len,
        blocks: blocks as usize,
        slots,
    };
    // Our own transmissions are not input.
    let _ = setopt(raw, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, &one);
    let mreq = PacketMreq {
        mr_ifindex: ifi,
        mr_type: PACKET_MR_PROMISC,
        mr_alen: 0,
        mr_address: [0; 8],
    };
    if !setopt(raw, libc::SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mreq) {
        return Err(err("promiscuous mode", iface));
    }
    bind(raw, ifi, proto, iface)?;
    if cfg.rxq > 1 {
        let arg: u32 = fanout | PACKET_FANOUT_CBPF << 16;
        if !setopt(raw, libc::SOL_PACKET, PACKET_FANOUT, &arg) {
            return Err(err("PACKET_FANOUT", iface));
        }
        let mut prog: Vec<libc::sock_filter> = pipeline::steer::fanout_program()
            .insns()
            .iter()
            .map(|i| libc::sock_filter {
                code: i.code,
                jt: i.jt,
                jf: i.jf,
                k: i.k,
            })
            .collect();
        let fprog = libc::sock_fprog {
            len: prog.len() as u16,
            filter: prog.as_mut_ptr(),
        };
        // The group's program (each socket sets the same one): the kernel
        // copies it in.
        if !setopt(raw, libc::SOL_PACKET, PACKET_FANOUT_DATA, &fprog) {
            return Err(err("PACKET_FANOUT_DATA", iface));
        }
    }
    let c = Arc::new(QueueCounters::default());
    Ok((
        RxQ {
            intr: Intr(Arc::new(fd)),
            ring,
            version: cfg.ring,
            cur: 0,
            left: 0,
            off: 0,
            stopped: stopped.clone(),
            copy: match cfg.ring {
                RingVersion::V2 => vec![0; COPY_LEN],
                RingVersion::V3 => Vec::new(),
            },
            p: Take {
                vnet,
                pool,
                port: cfg.port,
                queue: q,
                c: c.clone(),
                big: big.clone(),
                mtu,
                room,
                pending: std::collections::VecDeque::with_capacity(PENDING),
                seg: Vec::with_capacity(room),
            },
        },
        c,
    ))
}

/// Opens an AF_PACKET port (needs CAP_NET_RAW).
pub fn open(cfg: &AfPacketConfig) -> Result<OpenPort, PortError> {
    let ifi = ifindex(&cfg.iface)?;
    // Buffers for the interface's MTU (jumbo frames: larger ones), and
    // a configured MTU the interface cannot carry refused.
    let mtu = iface_mtu(&cfg.iface).unwrap_or(1500);
    check_port_mtu("AF_PACKET", &cfg.iface, cfg.mtu, mtu)?;
    let room = crate::mbuf::data_room_for(mtu);
    let pool = Pool::new(&format!("afpacket{}", cfg.port), cfg.pool_size, room)?;
    let stopped = Arc::new(AtomicBool::new(false));
    let fanout = (std::process::id() ^ u32::from(cfg.port) << 8) & 0xffff;
    let mut rx = Vec::new();
    let mut rxc = Vec::new();
    let mut fds = Vec::new();
    let mut big = Vec::new();
    // Aggregated frames (GRO, LRO) are larger than the MTU and than a
    // buffer: turned off while the port is open, as a NIC given to a
    // poll-mode driver would have them; restored at close.
    let offloads = Offloads::off(&cfg.iface);
    for q in 0..cfg.rxq {
        let b = Arc::new(Oversize::default());
        let (r, c) = open_rx(cfg, ifi, q, fanout, pool, (mtu, room), &stopped, &b)?;
        big.push(b);
        fds.push(r.intr.0.clone());
        rx.push(Box::new(r) as BoxRx);
        rxc.push(c);
    }
    let mut tx = Vec::new();
    let mut txc = Vec::new();
    for _ in 0..cfg.txq {
        let fd = socket(&cfg.iface)?;
        if cfg.qdisc_bypass {
            let one: libc::c_int = 1;
            let _ = setopt(fd.as_raw_fd(), libc::SOL_PACKET, PACKET_QDISC_BYPASS, &one);
        }
        bind(fd.as_raw_fd(), ifi, 0, &cfg.iface)?;
        let c = Arc::new(QueueCounters::default());
        txc.push(c.clone());
        // SAFETY: iovec and mmsghdr are plain data; all-zero values are
        // valid and are overwritten before use.
        let (iov, msgs) = unsafe { (Box::new(std::mem::zeroed()), Box::new(std::mem::zeroed())) };
        tx.push(Box::new(TxQ {
            fd,
            c,
            iov,
            msgs,
            down: false,
        }) as BoxTx);
    }
    let kernel_drops = fds.iter().map(|_| AtomicU64::new(0)).collect();
    Ok(OpenPort {
        control: Arc::new(Control {
            iface: cfg.iface.clone(),
            rx: rxc,
            tx: txc,
            fds,
            kernel_packets: AtomicU64::new(0),
            kernel_drops,
            stopped,
            big,
            _offloads: offloads,
            room,
        }),
        rx,
        tx,
        _buf: std::marker::PhantomData,
    })
}

/// The interface's MTU (from sysfs).
pub(crate) fn iface_mtu(iface: &str) -> Option<usize> {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/mtu"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Refuses a port `mtu` above its interface's (`iface_mtu`): the
/// interface would drop every larger frame the router sends it. `driver`
/// names the port's kind in the error.
pub(crate) fn check_port_mtu(
    driver: &str,
    iface: &str,
    mtu: u16,
    iface_mtu: usize,
) -> Result<(), PortError> {
    if usize::from(mtu) > iface_mtu {
        return Err(PortError::Config(format!(
            "{driver} {iface}: the port's mtu is {mtu} but the interface's is {iface_mtu}: raise the interface's (`ip link set {iface} mtu {mtu}`) or lower the port's"
        )));
    }
    Ok(())
}

/// The interface's MAC address (from sysfs).
pub fn iface_mac(iface: &str) -> Option<[u8; 6]> {
    let s = std::fs::read_to_string(format!("/sys/class/net/{iface}/address")).ok()?;
    let mut m = [0u8; 6];
    let mut it = s.trim().split(':');
    for b in &mut m {
        *b = u8::from_str_radix(it.next()?, 16).ok()?;
    }
    Some(m)
}

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "afpacket {}", self.iface)
    }
}

#[cfg(test)]
mod tests {
    use super::{complete_checksum, complete_if_partial};
    use pipeline::checksum::{fold, pseudo_v4, pseudo_v6, sum};

    /// A frame as a sender that left its checksum to offload hands it
    /// over (the field holds the pseudo-header's folded sum), and the
    /// same frame as the wire should carry it.
    fn frames(v6: bool, tcp: bool, tags: usize) -> (Vec<u8>, Vec<u8>) {
        let mut f = vec![0u8; 12];
        for _ in 0..tags {
            f.extend_from_slice(&[0x81, 0x00, 0, 100]);
        }
        let proto = if tcp { 6u8 } else { 17 };
        let l4len = if tcp { 20 + 11 } else { 8 + 11 };
        let l3 = f.len() + 2;
        let (src4, dst4) = ([198, 18, 0, 2], [198, 19, 0, 9]);
        let (mut src6, mut dst6) = ([0u8; 16], [0u8; 16]);
        src6[..2].copy_from_slice(&[0x20, 0x01]);
        dst6[..2].copy_from_slice(&[0x20, 0x01]);
        src6[15] = 2;
        dst6[15] = 9;
        if v6 {
            f.extend_from_slice(&[0x86, 0xdd]);
            let mut ip = vec![0x60, 0, 0, 0, 0, l4len as u8, proto, 64];
            ip.extend_from_slice(&src6);
            ip.extend_from_slice(&dst6);
            f.extend_from_slice(&ip);
        } else {
            f.extend_from_slice(&[0x08, 0x00]);
            let total = (20 + l4len) as u16;
            let mut ip = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, proto, 0, 0];
            ip[2..4].copy_from_slice(&total.to_be_bytes());
            ip.extend_from_slice(&src4);
            ip.extend_from_slice(&dst4);
            f.extend_from_slice(&ip);
        }
        let l4 = f.len();
        let mut seg = vec![0u8; l4len];
        seg[0..4].copy_from_slice(&[0x30, 0x39, 0x00, 0xb3]);
        if tcp {
            seg[12] = 5 << 4;
        } else {
            seg[4..6].copy_from_slice(&(l4len as u16).to_be_bytes());
        }
        seg[l4len - 11..].copy_from_slice(b"hello world");
        f.extend_from_slice(&seg);
        let ph = if v6 {
            pseudo_v6(src6, dst6, proto, l4len as u32)
        } else {
            pseudo_v4(src4, dst4, proto, l4len as u16)
        };
        let at = l4 + if tcp { 16 } else { 6 };
        let mut whole = f.clone();
        let c = !fold(sum(&whole[l4..], ph));
        whole[at..at + 2].copy_from_slice(&c.to_be_bytes());
        let mut partial = f;
        partial[at..at + 2].copy_from_slice(&fold(ph).to_be_bytes());
        assert!(l3 < l4);
        (partial, whole)
    }

    #[test]
    fn offloaded_checksums_are_completed() {
        for v6 in [false, true] {
            for tcp in [false, true] {
                for tags in [0, 1, 2] {
                    let (mut partial, whole) = frames(v6, tcp, tags);
                    assert_ne!(partial, whole);
                    complete_checksum(&mut partial);
                    assert_eq!(partial, whole, "v6 {v6} tcp {tcp} tags {tags}");
                }
            }
        }
        // Not parsed: left alone (ARP, a fragment, a short frame).
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let before = arp.clone();
        complete_checksum(&mut arp);
        assert_eq!(arp, before);
        let (mut frag, _) = frames(false, false, 0);
        frag[14 + 6] = 0x20; // more fragments
        let before = frag.clone();
        complete_checksum(&mut frag);
        assert_eq!(frag, before);
        let mut short = vec![0x08u8; 13];
        complete_checksum(&mut short);
    }

    /// Without a status to say so (AF_XDP), a partial checksum is told by
    /// its field and finished; a whole frame is left as it is, even one
    /// with a corrupt checksum (a router does not mend those) and one
    /// whose correct checksum equals the pseudo-header's sum.
    #[test]
    fn partial_checksums_are_told_apart_and_finished() {
        for v6 in [false, true] {
            for tcp in [false, true] {
                let (mut partial, whole) = frames(v6, tcp, 1);
                assert!(complete_if_partial(&mut partial));
                assert_eq!(partial, whole, "v6 {v6} tcp {tcp}");
                let mut again = whole.clone();
                assert!(!complete_if_partial(&mut again));
                assert_eq!(again, whole);
                let mut corrupt = whole.clone();
                let n = corrupt.len();
                corrupt[n - 1] ^= 0x55;
                let before = corrupt.clone();
                assert!(!complete_if_partial(&mut corrupt));
                assert_eq!(corrupt, before);
            }
        }
        // A whole frame whose checksum happens to be the pseudo-header's
        // sum: its payload chosen so; finishing it changes nothing.
        let (_, mut whole) = frames(false, false, 0);
        let (l4, at) = (34, 40);
        let ph = pseudo_v4([198, 18, 0, 2], [198, 19, 0, 9], 17, 19);
        let n = whole.len();
        for x in 0..=u16::MAX {
            whole[n - 2..].copy_from_slice(&x.to_be_bytes());
            whole[at..at + 2].copy_from_slice(&[0, 0]);
            let c = !fold(sum(&whole[l4..], ph));
            if c == fold(ph) {
                whole[at..at + 2].copy_from_slice(&c.to_be_bytes());
                let before = whole.clone();
                complete_if_partial(&mut whole);
                assert_eq!(whole, before);
                return;
            }
        }
        panic!("no payload gives that checksum");
    }
}
