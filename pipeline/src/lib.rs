//! I/O-free packet processing for Sluice.
//!
//! Everything here works on plain byte slices: header views over buffer bytes
//! ([`wire`]), Internet checksums ([`checksum`]), per-packet verdicts and drop
//! reasons ([`verdict`]) and the testpmd-style forwarding transforms
//! ([`fwd`]). Nothing in this crate allocates per packet, performs I/O or
//! panics on malformed input: views are created with checked constructors
//! and a packet that does not parse gets a [`verdict::DropReason`].
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod acl;
pub mod checksum;
pub mod conntrack;
pub mod events;
pub mod firewall;
pub mod fwd;
pub mod gateway;
pub mod lpm;
pub mod nat;
pub mod prefix;
pub mod route_cache;
pub mod router;
pub mod verdict;
pub mod wire;

pub use verdict::{DropReason, Verdict};
