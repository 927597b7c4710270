//! Every header view's checked constructor and accessors on arbitrary
//! bytes: nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pipeline::fwd::{FiveTupleSwap, ForwardMode, MacSwap, Peers};
use pipeline::wire::{EthernetFrame, Ipv4Packet, Ipv6Packet, L4Ports};

fuzz_target!(|data: &[u8]| {
    if let Ok(eth) = EthernetFrame::new_checked(data) {
        let _ = (eth.src(), eth.dst(), eth.ethertype());
        let p = eth.payload();
        if let Ok(ip) = Ipv4Packet::new_checked(p) {
            let _ = (ip.src(), ip.dst(), ip.ttl(), ip.verify_checksum());
            if let Ok(l4) = L4Ports::new_checked(ip.payload()) {
                let _ = (l4.src_port(), l4.dst_port());
            }
        }
        if let Ok(ip) = Ipv6Packet::new_checked(p) {
            let _ = (ip.src(), ip.dst(), ip.hop_limit(), ip.payload().len());
        }
    }
    let mut v = data.to_vec();
    let _ = FiveTupleSwap(Peers::paired(2)).process(&mut v, 0);
    let mut v = data.to_vec();
    let _ = MacSwap(Peers::paired(2)).process(&mut v, 1);
});
