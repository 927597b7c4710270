#include "shim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rte_thash.h>

uint16_t sluice_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
	return rte_eth_rx_burst(port, queue, pkts, n);
}

uint16_t sluice_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
	return rte_eth_tx_burst(port, queue, pkts, n);
}

struct rte_eth_fp_ops *sluice_fp_ops(uint16_t port)
{
	return &rte_eth_fp_ops[port];
}

struct rte_mbuf *sluice_pktmbuf_alloc(struct rte_mempool *mp)
{
	return rte_pktmbuf_alloc(mp);
}

int sluice_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned int n)
{
	return rte_pktmbuf_alloc_bulk(mp, mbufs, n) == 0 ? 0 : -1;
}

void sluice_pktmbuf_free(struct rte_mbuf *m)
{
	rte_pktmbuf_free(m);
}

/* Sets the length of a single-segment mbuf; -1 if it does not fit. */
int sluice_set_data_len(struct rte_mbuf *m, uint16_t len)
{
	if ((uint32_t)m->data_off + len > m->buf_len)
		return -1;
	m->data_len = len;
	m->pkt_len = len;
	return 0;
}

uint32_t sluice_mbuf_rss(const struct rte_mbuf *m)
{
	return m->hash.rss;
}

char *sluice_prepend(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_prepend(m, len);
}

char *sluice_append(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_append(m, len);
}

int sluice_adj(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_adj(m, len) == NULL ? -1 : 0;
}

int sluice_trim(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_trim(m, len);
}

int sluice_errno(void)
{
	return rte_errno;
}


/* 0x6d5a repeated: Toeplitz with this key hashes (a, b) and (b, a) alike
 * (Woo and Park, "Scalable TCP Session Monitoring with Symmetric
 * Receive-side Scaling"). */
static uint8_t sym_key[40] = {
	0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a,
	0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a,
	0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a,
	0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a, 0x6d, 0x5a,
};

int sluice_configure(uint16_t port, uint16_t rxq, uint16_t txq, int rss, int rx_intr,
		     uint16_t mtu, uint64_t *rss_hf, int *ip_csum)
{
	struct rte_eth_conf conf;
	struct rte_eth_dev_info info;
	memset(&conf, 0, sizeof(conf));
	*rss_hf = 0;
	*ip_csum = 0;
	if (rte_eth_dev_info_get(port, &info) != 0)
		return -1;
	if (info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_IPV4_CKSUM) {
		conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_IPV4_CKSUM;
		*ip_csum = 1;
	}
	if (rss && rxq > 1) {
		uint64_t want = RTE_ETH_RSS_IPV4 | RTE_ETH_RSS_NONFRAG_IPV4_TCP |
				RTE_ETH_RSS_NONFRAG_IPV4_UDP | RTE_ETH_RSS_IPV6 |
				RTE_ETH_RSS_NONFRAG_IPV6_TCP | RTE_ETH_RSS_NONFRAG_IPV6_UDP;
		conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
		conf.rx_adv_conf.rss_conf.rss_key = sym_key;
		conf.rx_adv_conf.rss_conf.rss_key_len = sizeof(sym_key);
		conf.rx_adv_conf.rss_conf.rss_hf = want & info.flow_type_rss_offloads;
		*rss_hf = conf.rx_adv_conf.rss_conf.rss_hf;
	}
	if (rx_intr)
		conf.intr_conf.rxq = 1;
	conf.rxmode.mtu = mtu;
	return rte_eth_dev_configure(port, rxq, txq, &conf);
}

uint16_t sluice_max_mtu(uint16_t port)
{
	struct rte_eth_dev_info info;
	if (rte_eth_dev_info_get(port, &info) != 0)
		return 0;
	/* ethdev's overhead: what the device's frame and MTU limits differ
	 * by, else an Ethernet header and CRC. */
	uint32_t overhead = RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN;
	if (info.max_mtu != UINT16_MAX && info.max_rx_pktlen > info.max_mtu)
		overhead = info.max_rx_pktlen - info.max_mtu;
	uint32_t m = info.max_rx_pktlen > overhead ? info.max_rx_pktlen - overhead : 0;
	if (m > info.max_mtu)
		m = info.max_mtu;
	return (uint16_t)m;
}

uint32_t sluice_toeplitz_v4(uint32_t src, uint32_t dst, uint16_t sport, uint16_t dport)
{
	uint32_t tuple[3] = { rte_be_to_cpu_32(src), rte_be_to_cpu_32(dst),
			      ((uint32_t)rte_be_to_cpu_16(sport) << 16) | rte_be_to_cpu_16(dport) };
	return rte_softrss(tuple, 3, sym_key);
}

int sluice_link_up(uint16_t port)
{
	struct rte_eth_link l;
	if (rte_eth_link_get_nowait(port, &l) != 0)
		return -1;
	return l.link_status == RTE_ETH_LINK_UP;
}

int sluice_xstats_count(uint16_t port)
{
	return rte_eth_xstats_get(port, NULL, 0);
}

int sluice_xstat_name(uint16_t port, unsigned idx, char *out, unsigned len)
{
	int n = rte_eth_xstats_get_names(port, NULL, 0);
	if (n <= 0 || idx >= (unsigned)n || len == 0)
		return -1;
	struct rte_eth_xstat_name *names = calloc(n, sizeof(*names));
	if (names == NULL)
		return -1;
	int r = rte_eth_xstats_get_names(port, names, n);
	if (r > 0 && idx < (unsigned)r)
		snprintf(out, len, "%s", names[idx].name);
	free(names);
	return r > 0 ? 0 : -1;
}

int sluice_xstats_values(uint16_t port, uint64_t *out, unsigned n)
{
	struct rte_eth_xstat xs[512];
	if (n > 512)
		n = 512;
	int r = rte_eth_xstats_get(port, xs, n);
	if (r < 0 || (unsigned)r > n)
		return -1;
	for (int i = 0; i < r; i++)
		out[xs[i].id] = xs[i].value;
	return r;
}
