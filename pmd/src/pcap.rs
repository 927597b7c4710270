//! The pcap port: RX replays a capture file (classic pcap or pcapng), TX
//! writes a classic pcap file. For golden tests: pcap in, pcap out.
//!
//! The capture is read into memory when the port opens, so RX does no file
//! I/O. Ethernet captures replay as they are; raw-IP captures (link types
//! RAW, IPV4, IPV6) get an Ethernet header (02:00:00:00:00:02 →
//! 02:00:00:00:00:01, EtherType from the IP version) and Linux cooked
//! captures (LINUX_SLL) one built from their header, so the pipeline sees
//! Ethernet frames. Other link types are refused with an error.

use crate::mbuf::{Mbuf, Pool, DEFAULT_DATA_ROOM, MAX_DATA_ROOM};
use crate::sys::rdtsc;
use crate::{
    Batch, BoxRx, BoxTx, Caps, OpenPort, PacketBuf, PortControl, PortError, PortStats,
    QueueCounters, RxQueue, TxQueue, MAX_BURST,
};
use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::DataLink;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// Settings of a pcap port.
#[derive(Clone, Debug)]
pub struct PcapConfig {
    /// Port index in the appliance.
    pub port: u16,
    /// Capture to replay on RX (none: RX never yields packets).
    pub rx_file: Option<PathBuf>,
    /// File to write TX packets to (none: TX drops them, counted as sent).
    pub tx_file: Option<PathBuf>,
    /// Times to replay the capture (0: forever).
    pub loops: u64,
    /// Buffers in the port's pool.
    pub pool_size: usize,
}

/// Checks that a capture can be replayed (what [`open`] will read):
/// the number of frames and their bytes.
pub fn inspect(path: &Path) -> Result<(usize, u64), PortError> {
    let frames = read_frames(path)?;
    Ok((frames.len(), frames.iter().map(|f| f.len() as u64).sum()))
}

/// Reads every frame of a pcap or pcapng file as Ethernet frames.
pub fn read_frames(path: &Path) -> Result<Vec<Vec<u8>>, PortError> {
    let io = |e: std::io::Error| PortError::Io {
        path: path.display().to_string(),
        error: e,
    };
    let perr = |msg: String| PortError::Pcap {
        path: path.display().to_string(),
        msg,
    };
    let mut f = crate::sys::open_regular(path).map_err(io)?;
    let mut magic = [0u8; 4];
    let n = f.read(&mut magic).map_err(io)?;
    if n == 0 {
        return Ok(Vec::new()); // an empty file holds no packets
    }
    let f = BufReader::new(crate::sys::open_regular(path).map_err(io)?);
    let mut out = Vec::new();
    if magic == [0x0a, 0x0d, 0x0d, 0x0a] {
        let mut r = PcapNgReader::new(f).map_err(|e| perr(e.to_string()))?;
        let mut links: Vec<DataLink> = Vec::new();
        while let Some(b) = r.next_block() {
            let b = b.map_err(|e| perr(e.to_string()))?;
            let (link, data) = match &b {
                Block::InterfaceDescription(i) => {
                    links.push(i.linktype);
                    continue;
                }
                Block::EnhancedPacket(p) => {
                    let l = links.get(p.interface_id as usize).copied().ok_or_else(|| {
                        perr(format!("packet names unknown interface {}", p.interface_id))
                    })?;
                    (l, p.data.as_ref())
                }
                Block::SimplePacket(p) => (
                    links.first().copied().unwrap_or(DataLink::ETHERNET),
                    p.data.as_ref(),
                ),
                _ => continue,
            };
            out.push(to_ethernet(link, data).map_err(perr)?);
        }
    } else {
        let mut r = PcapReader::new(f).map_err(|e| perr(e.to_string()))?;
        let link = r.header().datalink;
        // Raw records: the captured bytes as they are, even where a record
        // claims more than the snapshot length (fuzzed captures do).
        while let Some(p) = r.next_raw_packet() {
            let p = p.map_err(|e| perr(e.to_string()))?;
            out.push(to_ethernet(link, &p.data).map_err(perr)?);
        }
    }
    Ok(out)
}

fn to_ethernet(link: DataLink, data: &[u8]) -> Result<Vec<u8>, String> {
    let with_header = |ethertype: u16, src: &[u8], payload: &[u8]| {
        let mut f = Vec::with_capacity(14 + payload.len());
        f.extend_from_slice(&[2, 0, 0, 0, 0, 1]);
        f.extend_from_slice(src);
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(payload);
        f
    };
    const SYNTH_SRC: [u8; 6] = [2, 0, 0, 0, 0, 2];
    match link {
        DataLink::ETHERNET => Ok(data.to_vec()),
        // The upper bits of the link-type field carry FCS information
        // (pcap-linktype(7)); the low 16 bits are the type.
        DataLink::Unknown(v) if v & 0xffff == 1 => Ok(data.to_vec()),
        DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => {
            let ethertype: u16 = match data.first().map(|b| b >> 4) {
                Some(6) => 0x86dd,
                _ => 0x0800,
            };
            Ok(with_header(ethertype, &SYNTH_SRC, data))
        }
        // Linux cooked capture: 16-byte header with the sender's address
        // (bytes 6..12 for Ethernet) and the EtherType at bytes 14..16.
        DataLink::LINUX_SLL => {
            if data.len() < 16 {
                return Err(format!(
                    "a LINUX_SLL record of {} bytes is shorter than its header",
                    data.len()
                ));
            }
            let ethertype = u16::from_be_bytes([data[14], data[15]]);
            Ok(with_header(ethertype, &data[6..12], &data[16..]))
        }
        other => Err(format!(
            "link type {other:?} is not supported (Ethernet, raw IP or Linux cooked only)"
        )),
    }
}

struct Control {
    rx: Arc<QueueCounters>,
    tx: Arc<QueueCounters>,
    stopped: Arc<AtomicBool>,
}

impl PortControl for Control {
    fn driver(&self) -> &'static str {
        "pcap"
    }
    fn stats(&self) -> PortStats {
        PortStats::from_queues([&*self.rx], [&*self.tx])
    }
    fn rx_queue_stats(&self) -> Vec<PortStats> {
        PortStats::per_rx_queue([&*self.rx])
    }
    fn caps(&self) -> Caps {
        Caps {
            max_burst: MAX_BURST,
            rx_interrupt: false,
            max_frame: usize::from(u16::MAX),
        }
    }
    fn stop_rx(&self) {
        self.stopped.store(true, Ordering::Relaxed);
    }
}

struct PcapRx {
    frames: Vec<Vec<u8>>,
    /// The pool's data room.
    room: usize,
    next: usize,
    loops_left: u64,
    forever: bool,
    pool: Pool,
    port: u16,
    c: Arc<QueueCounters>,
    stopped: Arc<AtomicBool>,
}

impl RxQueue for PcapRx {
    type Buf = Mbuf;

    fn rx_burst(&mut self, out: &mut Batch<Mbuf>) -> usize {
        if self.stopped.load(Ordering::Relaxed) {
            return 0;
        }
        let now = rdtsc();
        let mut n = 0;
        while out.room() > 0 && !self.frames.is_empty() {
            if self.next == self.frames.len() {
                if !self.forever {
                    self.loops_left = self.loops_left.saturating_sub(1);
                    if self.loops_left == 0 {
                        break;
                    }
                }
                self.next = 0;
            }
            let Some(mut m) = self.pool.alloc() else {
                self.c.nombuf.add(1);
                break;
            };
            let f = &self.frames[self.next];
            self.next += 1;
            // The pool's data room is the largest frame, up to
            // MAX_DATA_ROOM; beyond that the frame is cut.
            let f = &f[..f.len().min(self.room)];
            m.copy_from(f);
            m.set_rx_meta(self.port, 0, now, 0);
            self.c.bytes.add(f.len() as u64);
            let _ = out.push(m);
            n += 1;
        }
        self.c.packets.add(n as u64);
        n
    }
}

struct PcapTx {
    w: Option<PcapWriter<BufWriter<File>>>,
    c: Arc<QueueCounters>,
}

impl TxQueue for PcapTx {
    type Buf = Mbuf;

    fn tx_burst(&mut self, pkts: &mut Batch<Mbuf>) -> usize {
        let n = pkts.len();
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        for m in pkts.drain() {
            self.c.bytes.add(m.len() as u64);
            if let Some(w) = &mut self.w {
                let d = m.data();
                // A write error leaves the packet counted as sent; the file
                // is a trace, not a wire.
                let _ = w.write_packet(&PcapPacket::new(ts, d.len() as u32, d));
            }
        }
        self.c.packets.add(n as u64);
        n
    }
}

/// Opens a pcap port (one RX and one TX queue).
pub fn open(cfg: &PcapConfig) -> Result<OpenPort, PortError> {
    let frames = match &cfg.rx_file {
        Some(p) => read_frames(p)?,
        None => Vec::new(),
    };
    // A buffer holds at most MAX_DATA_ROOM bytes; a longer record (a
    // 65,535-byte frame is legal in pcap) is received cut to that, and the
    // pipeline drops it as truncated, counted by reason.
    let room = frames
        .iter()
        .map(Vec::len)
        .max()
        .unwrap_or(0)
        .clamp(DEFAULT_DATA_ROOM, MAX_DATA_ROOM);
    let pool = Pool::new(&format!("pcap{}", cfg.port), cfg.pool_size, room)?;
    let w = match &cfg.tx_file {
        Some(p) => {
            let f = File::create(p).map_err(|e| PortError::Io {
                path: p.display().to_string(),
                error: e,
            })?;
            let hdr = PcapHeader {
                datalink: DataLink::ETHERNET,
                snaplen: u32::from(u16::MAX),
                ..PcapHeader::default()
            };
            Some(
                PcapWriter::with_header(BufWriter::new(f), hdr).map_err(|e| PortError::Pcap {
                    path: p.display().to_string(),
                    msg: e.to_string(),
                })?,
            )
        }
        None => None,
    };
    let rxc = Arc::new(QueueCounters::default());
    let txc = Arc::new(QueueCounters::default());
    let stopped = Arc::new(AtomicBool::new(false));
    let rx = Box::new(PcapRx {
        frames,
        room,
        next: 0,
        loops_left: cfg.loops.max(1),
        forever: cfg.loops == 0,
        pool,
        port: cfg.port,
        c: rxc.clone(),
        stopped: stopped.clone(),
    }) as BoxRx;
    let tx = Box::new(PcapTx { w, c: txc.clone() }) as BoxTx;
    Ok(OpenPort {
        control: Arc::new(Control {
            rx: rxc,
            tx: txc,
            stopped,
        }),
        rx: vec![rx],
        tx: vec![tx],
        _buf: std::marker::PhantomData,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(name: &str) -> Option<PathBuf> {
        testdata::shared(&format!("pcaps/tcpdump_tests/{name}"))
    }

    #[test]
    fn replay_and_write_round_trip() {
        let Some(input) = data("dns_udp.pcap") else {
            return;
        };
        let dir = std::env::temp_dir().join(format!("sluice-pcap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("out.pcap");
        let frames = read_frames(&input).unwrap();
        assert!(!frames.is_empty());
        {
            let mut p = open(&PcapConfig {
                port: 0,
                rx_file: Some(input.clone()),
                tx_file: Some(out.clone()),
                loops: 2,
                pool_size: 256,
            })
            .unwrap();
            let mut b = Batch::new(32);
            let mut total = 0;
            loop {
                let n = p.rx[0].rx_burst(&mut b);
                if n == 0 {
                    break;
                }
                total += n;
                p.tx[0].tx_burst(&mut b);
            }
            assert_eq!(total, 2 * frames.len(), "two loops of the capture");
            assert_eq!(p.control.stats().opackets, total as u64);
        }
        let written = read_frames(&out).unwrap();
        assert_eq!(written.len(), 2 * frames.len());
        assert_eq!(&written[..frames.len()], &frames[..], "bytes unchanged");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// pcapng with two interfaces of different link types: Ethernet frames
    /// replay as they are, raw IPv4 gets an Ethernet header.
    #[test]
    fn reads_pcapng() {
        use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
        use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock;
        use pcap_file::pcapng::PcapNgWriter;
        use std::borrow::Cow;
        use std::time::Duration;
        let path = std::env::temp_dir().join(format!("sluice-ng-{}.pcapng", std::process::id()));
        let eth: Vec<u8> = (0..60).collect();
        let raw = vec![0x45u8; 20];
        {
            let f = File::create(&path).unwrap();
            let mut w = PcapNgWriter::new(f).unwrap();
            for link in [DataLink::ETHERNET, DataLink::RAW] {
                w.write_pcapng_block(InterfaceDescriptionBlock {
                    linktype: link,
                    snaplen: 65535,
                    options: vec![],
                })
                .unwrap();
            }
            for (iface, data) in [(0, &eth), (1, &raw)] {
                w.write_pcapng_block(EnhancedPacketBlock {
                    interface_id: iface,
                    timestamp: Duration::from_secs(1),
                    original_len: data.len() as u32,
                    data: Cow::Borrowed(data),
                    options: vec![],
                })
                .unwrap();
            }
        }
        let frames = read_frames(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0], eth);
        assert_eq!(&frames[1][12..14], &[0x08, 0x00]);
        assert_eq!(&frames[1][14..], &raw[..]);
    }

    #[test]
    fn raw_ip_gets_ethernet_and_empty_file_is_empty() {
        let Some(raw) = data("LINKTYPE_RAW_ipv6.pcap") else {
            return;
        };
        let f = read_frames(&raw).unwrap();
        assert!(!f.is_empty());
        assert!(f.iter().all(|fr| fr[12..14] == [0x86, 0xdd]));
        let Some(empty) = data("empty.pcap") else {
            return;
        };
        assert!(read_frames(&empty).unwrap().is_empty());
        // Linux cooked capture becomes Ethernet with the IP EtherType.
        let Some(sll) = data("tcp-handshake-nano.pcap") else {
            return;
        };
        let f = read_frames(&sll).unwrap();
        assert!(!f.is_empty());
        assert!(f
            .iter()
            .all(|fr| fr[12..14] == [0x08, 0x00] && fr[14] >> 4 == 4));
        // Ethernet with FCS bits in the link-type field still reads.
        let Some(fcs) = data("udp-length-heapoverflow.pcap") else {
            return;
        };
        assert!(!read_frames(&fcs).unwrap().is_empty());
    }

    /// Every capture in the shared set loads (malformed packets inside are
    /// the pipeline's business, not the reader's).
    #[test]
    fn every_shared_capture_loads() {
        let Some(dir) = testdata::shared("pcaps/tcpdump_tests") else {
            return;
        };
        let mut n = 0;
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "pcap") {
                read_frames(&p).unwrap_or_else(|e| panic!("{e}"));
                n += 1;
            }
        }
        assert!(n >= 40, "{n} captures");
    }

    #[test]
    fn unsupported_link_type_is_an_error() {
        let e = to_ethernet(DataLink::PPP, &[0; 20]).unwrap_err();
        assert!(e.contains("not supported"), "{e}");
        assert!(to_ethernet(DataLink::LINUX_SLL, &[0; 10]).is_err());
    }
}
