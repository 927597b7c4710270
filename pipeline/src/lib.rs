//! I/O-free packet processing for Sluice.
//!
//! Everything here works on plain byte slices: header views over buffer bytes
//! ([`wire`]), Internet checksums ([`checksum`]), per-packet verdicts and drop
//! reasons ([`verdict`]), the testpmd-style forwarding transforms ([`fwd`],
//! and the receiving tester modes in [`tester`])
//! and the stages of a router: [`lpm`] tables, the [`router`], the rule
//! classifier ([`acl`]) and [`firewall`], [`conntrack`], [`nat`], and the
//! [`gateway`] that chains them; [`bpf`] runs capture filters. Leaves every module may use: [`prefix`]
//! (prefixes), [`route_cache`] (a flow's resolved next hop), [`events`]
//! (named counters; each stage owns its own), [`copies`] (frame copies that
//! wait: for a neighbour, for a datagram's first fragment).
//!
//! Never here: I/O, `unsafe`, allocation per packet, or a panic on
//! malformed input: views are created with checked constructors and a
//! packet that does not parse gets a [`verdict::DropReason`]. The modules'
//! imports form no circle (`appliance/tests/structure.rs` checks).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod acl;
pub mod bpf;
pub mod checksum;
pub mod conntrack;
pub mod copies;
pub mod events;
pub mod fib;
pub mod firewall;
pub mod fwd;
pub mod gateway;
pub mod lpm;
pub mod nat;
pub mod nat64;
pub mod npt;
pub mod prefix;
pub mod rcu;
pub mod route_cache;
pub mod router;
pub mod steer;
pub mod tester;
pub mod verdict;
pub mod wire;

pub use verdict::{DropReason, Verdict};
