//! Compiles the shim over libxdp's xsk API (its ring helpers are
//! static-inline) and links libxdp and libbpf. Needs Debian's `libxdp-dev`
//! and `libbpf-dev`.

fn main() {
    println!("cargo:rerun-if-changed=shim.c");
    let xdp = pkg_config::Config::new()
        .probe("libxdp")
        .unwrap_or_else(|e| {
            panic!(
                "libxdp not found through pkg-config ({e}).\n\
                 Install Debian's packages: apt-get install libxdp-dev libbpf-dev"
            )
        });
    let bpf = pkg_config::Config::new()
        .probe("libbpf")
        .unwrap_or_else(|e| {
            panic!("libbpf not found through pkg-config ({e}): apt-get install libbpf-dev")
        });
    let mut cc = cc::Build::new();
    cc.file("shim.c").opt_level(3);
    for p in xdp.include_paths.iter().chain(&bpf.include_paths) {
        cc.include(p);
    }
    cc.compile("sluice_xdp_shim");
}
