//! Generates bindings to the system DPDK with bindgen and compiles the shim
//! for its static-inline functions. Needs Debian's `dpdk-dev`,
//! `libdpdk-dev` and `libclang-dev`.

fn main() {
    println!("cargo:rerun-if-changed=shim.h");
    println!("cargo:rerun-if-changed=shim.c");
    let lib = pkg_config::Config::new()
        .atleast_version("22.11")
        .probe("libdpdk")
        .unwrap_or_else(|e| {
            panic!(
                "DPDK 22.11 or newer not found through pkg-config ({e}).\n\
                 Install Debian's packages: apt-get install dpdk dpdk-dev libdpdk-dev libclang-dev"
            )
        });
    // rte_vdev_init (creating vdevs after EAL init) lives in the vdev bus
    // driver, which libdpdk.pc's link line leaves to the plugins.
    println!("cargo:rustc-link-lib=rte_bus_vdev");
    // pkg-config's cflags carry `-include rte_config.h` and `-march`, which
    // both the shim and bindgen need.
    let cflags = std::process::Command::new("pkg-config")
        .args(["--cflags", "libdpdk"])
        .output()
        .expect("pkg-config runs");
    let cflags: Vec<String> = String::from_utf8_lossy(&cflags.stdout)
        .split_whitespace()
        .map(String::from)
        .collect();
    let mut cc = cc::Build::new();
    cc.file("shim.c").opt_level(3);
    for f in &cflags {
        cc.flag(f);
    }
    // The shim is linked into executables: DPDK's per-lcore variables
    // (rte_lcore_id() in the mempool cache lookup of every bulk
    // allocation and free) are read through the initial-exec TLS model, as
    // in testpmd, instead of a __tls_get_addr call each time.
    cc.flag("-ftls-model=initial-exec");
    cc.compile("sluice_dpdk_shim");

    let bindings = bindgen::Builder::default()
        .header("shim.h")
        .clang_args(&cflags)
        .clang_args(lib.include_paths.iter().map(|p| format!("-I{}", p.display())))
        .allowlist_function("sluice_.*")
        .allowlist_function(
            "rte_(eal_init|eal_cleanup|strerror|socket_id|lcore_id|pktmbuf_pool_create|mempool_free|mempool_avail_count|eth_dev_configure|eth_rx_queue_setup|eth_tx_queue_setup|eth_dev_start|eth_dev_stop|eth_dev_close|eth_dev_count_avail|eth_dev_socket_id|eth_stats_get|eth_promiscuous_enable|eth_dev_info_get|eth_macaddr_get|eth_dev_get_port_by_name|mbuf_dyn_rx_timestamp_register|thread_register|eth_dev_rx_intr_enable|eth_dev_rx_intr_disable|eth_dev_rx_intr_ctl_q_get_fd|vdev_init)",
        )
        .allowlist_type("rte_mbuf|rte_eth_fp_ops|rte_eth_conf|rte_eth_stats|rte_eth_dev_info|rte_ether_addr|rte_eth_rxconf|rte_eth_txconf")
        .opaque_type("rte_mempool|rte_arp_hdr|rte_l2tpv2_combined_msg_hdr")
        .blocklist_type("max_align_t")
        .layout_tests(false)
        .generate_comments(false)
        .derive_default(true)
        .generate()
        .unwrap_or_else(|e| {
            panic!("bindgen failed on the DPDK headers ({e}); is libclang-dev installed?")
        });
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("writing bindings");
}
