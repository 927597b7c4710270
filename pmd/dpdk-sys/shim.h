/* The DPDK API Sluice uses: real functions through bindgen, and the
 * static-inline functions and macros through the sluice_* shim in shim.c. */
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mbuf_dyn.h>
#include <rte_mempool.h>

uint16_t sluice_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
uint16_t sluice_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
struct rte_mbuf *sluice_pktmbuf_alloc(struct rte_mempool *mp);
void sluice_pktmbuf_free(struct rte_mbuf *m);
int sluice_set_data_len(struct rte_mbuf *m, uint16_t len);
uint32_t sluice_mbuf_rss(const struct rte_mbuf *m);
char *sluice_prepend(struct rte_mbuf *m, uint16_t len);
char *sluice_append(struct rte_mbuf *m, uint16_t len);
int sluice_adj(struct rte_mbuf *m, uint16_t len);
int sluice_trim(struct rte_mbuf *m, uint16_t len);
int sluice_errno(void);
