//! Zero-copy header views over buffer bytes, in the style of smoltcp's
//! `wire` module: byte ranges in a private `field` module, a checked
//! constructor that validates the length once so that every accessor is
//! panic-free, then plain getters and setters.
//!
//! Views: Ethernet, 802.1Q/802.1ad tags ([`l3_offset`] skips up to two),
//! ARP, IPv4 (options are inside `header_len`), IPv6 with an extension-
//! header walk to the upper layer ([`Ipv6Packet::upper_layer`]), ICMPv4 and
//! ICMPv6, UDP, TCP, and the port pair common to UDP and TCP.

mod arp;
mod ethernet;
mod icmp;
mod ip;
mod l4;
mod vlan;

pub use arp::{ArpPacket, ARP_LEN, ARP_REPLY, ARP_REQUEST};
pub use ethernet::{EtherType, EthernetFrame, MacAddr, ETHERNET_HEADER_LEN};
pub use icmp::{IcmpPacket, ICMP_HEADER_LEN};
pub use ip::{
    IpProto, Ipv4Packet, Ipv6Packet, L4Ports, IPV4_MIN_HEADER_LEN, IPV6_HEADER_LEN, L4_PORTS_LEN,
};
pub use l4::{TcpFlags, TcpPacket, UdpPacket, TCP_MIN_HEADER_LEN, UDP_HEADER_LEN};
pub use vlan::{l3_offset, VlanTag, VLAN_TAG_LEN};

/// A view could not be created: the buffer is too short or a field that
/// fixes the layout (version, header length) is invalid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Fewer bytes than the header needs.
    Truncated,
    /// A layout field is invalid.
    Malformed,
}

impl From<WireError> for crate::DropReason {
    fn from(e: WireError) -> Self {
        match e {
            WireError::Truncated => crate::DropReason::Truncated,
            WireError::Malformed => crate::DropReason::Malformed,
        }
    }
}
