/* The DPDK API Sluice uses: real functions through bindgen, and the
 * static-inline functions and macros through the sluice_* shim in shim.c. */
#include <rte_bus_vdev.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mbuf_dyn.h>
#include <rte_mempool.h>

uint16_t sluice_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
uint16_t sluice_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
/* The port's fast-path entry (rte_eth_fp_ops[port], what rte_eth_rx_burst
 * and rte_eth_tx_burst read): its address is fixed for the process. */
struct rte_eth_fp_ops *sluice_fp_ops(uint16_t port);
struct rte_mbuf *sluice_pktmbuf_alloc(struct rte_mempool *mp);
/* n mbufs at once, all or none: 0, or -1 when the pool has fewer. */
int sluice_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned int n);
void sluice_pktmbuf_free(struct rte_mbuf *m);
int sluice_set_data_len(struct rte_mbuf *m, uint16_t len);
uint32_t sluice_mbuf_rss(const struct rte_mbuf *m);
char *sluice_prepend(struct rte_mbuf *m, uint16_t len);
char *sluice_append(struct rte_mbuf *m, uint16_t len);
int sluice_adj(struct rte_mbuf *m, uint16_t len);
int sluice_trim(struct rte_mbuf *m, uint16_t len);
int sluice_errno(void);

/* Configures `port` with `rxq`/`txq` queues; with `rss` and several RX
 * queues, RSS over IPv4/IPv6 TCP/UDP (what the device supports of it) with
 * the symmetric Toeplitz key (0x6d5a repeated), so both directions of a
 * flow reach one queue; with `rx_intr`, per-queue rx interrupts. Returns
 * rte_eth_dev_configure's result; *rss_hf gets the hash types in use.
 * Where the device offers it, the NIC verifies IPv4 header checksums
 * (RTE_ETH_RX_OFFLOAD_IPV4_CKSUM: each mbuf's RX_IP_CKSUM_GOOD or _BAD),
 * and *ip_csum is 1. The MTU goes in rxmode (what PMDs apply at start;
 * check it against sluice_max_mtu first). */
int sluice_configure(uint16_t port, uint16_t rxq, uint16_t txq, int rss, int rx_intr,
		     uint16_t mtu, uint64_t *rss_hf, int *ip_csum);
/* The largest MTU the port takes: its max_mtu, and no more than its
 * largest frame (max_rx_pktlen) less the overhead ethdev counts. */
uint16_t sluice_max_mtu(uint16_t port);
/* The RSS hash of a 5-tuple the way the symmetric key gives it (software
 * Toeplitz, for tests): addresses and ports in network order. */
uint32_t sluice_toeplitz_v4(uint32_t src, uint32_t dst, uint16_t sport, uint16_t dport);
/* Extended statistics: count, names and values (up to n). */
/* 1: link up, 0: down, -1: unknown (rte_eth_link_get_nowait). */
int sluice_link_up(uint16_t port);
int sluice_xstats_count(uint16_t port);
int sluice_xstat_name(uint16_t port, unsigned idx, char *out, unsigned len);
int sluice_xstats_values(uint16_t port, uint64_t *out, unsigned n);
