#include "shim.h"

uint16_t sluice_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
	return rte_eth_rx_burst(port, queue, pkts, n);
}

uint16_t sluice_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{
	return rte_eth_tx_burst(port, queue, pkts, n);
}

struct rte_mbuf *sluice_pktmbuf_alloc(struct rte_mempool *mp)
{
	return rte_pktmbuf_alloc(mp);
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

