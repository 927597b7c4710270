//! Every header view's checked constructor and accessors on arbitrary
//! bytes: nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pipeline::fwd::{FiveTupleSwap, ForwardMode, MacSwap, Peers};
use pipeline::wire::{
    l3_offset, ArpPacket, EthernetFrame, IcmpPacket, Ipv4Packet, Ipv6Packet, L4Ports, TcpPacket,
    UdpPacket,
};

fn l4(proto: u8, b: &[u8]) {
    if let Ok(p) = L4Ports::new_checked(b) {
        let _ = (p.src_port(), p.dst_port());
    }
    match proto {
        6 => {
            if let Ok(t) = TcpPacket::new_checked(b) {
                let _ = (t.seq(), t.flags(), t.payload().len());
            }
        }
        17 => {
            if let Ok(u) = UdpPacket::new_checked(b) {
                let _ = (u.len(), u.payload().len());
            }
        }
        1 | 58 => {
            if let Ok(i) = IcmpPacket::new_checked(b) {
                let _ = (i.msg_type(), i.rest(), i.verify_v4(), i.body().len());
            }
        }
        _ => {}
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(eth) = EthernetFrame::new_checked(data) {
        let _ = (eth.src(), eth.dst(), eth.ethertype());
    }
    if let Ok((ethertype, off, _)) = l3_offset(data) {
        let p = &data[off..];
        match ethertype {
            0x0800 => {
                if let Ok(ip) = Ipv4Packet::new_checked(p) {
                    let _ = (ip.src(), ip.dst(), ip.ttl(), ip.verify_checksum());
                    l4(ip.protocol(), ip.payload());
                }
            }
            0x86dd => {
                if let Ok(ip) = Ipv6Packet::new_checked(p) {
                    let _ = (ip.src(), ip.dst(), ip.hop_limit());
                    if let Ok((proto, o)) = ip.upper_layer() {
                        l4(proto, &p[o..]);
                    }
                }
            }
            0x0806 => {
                if let Ok(a) = ArpPacket::new_checked(p) {
                    let _ = (a.oper(), a.sha(), a.spa(), a.tha(), a.tpa());
                }
            }
            _ => {}
        }
    }
    let mut v = data.to_vec();
    let _ = FiveTupleSwap(Peers::paired(2)).process(&mut v, 0);
    let mut v = data.to_vec();
    let _ = MacSwap(Peers::paired(2)).process(&mut v, 1);
});
