/* One AF_XDP socket with its own UMEM, through libxdp (which loads and
 * attaches its default XDP program, redirecting the queue's frames to the
 * socket, and detaches it when the last socket goes). Half the UMEM's
 * frames feed the fill ring, half are a stack of free TX frames. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <linux/if_link.h>
#include <xdp/xsk.h>

struct sl_xsk {
	struct xsk_umem *umem;
	struct xsk_socket *xsk;
	struct xsk_ring_prod fill;
	struct xsk_ring_cons comp;
	struct xsk_ring_cons rx;
	struct xsk_ring_prod tx;
	void *area;
	size_t area_len;
	uint32_t frame_size;
	uint64_t *free_tx;
	uint32_t n_free;
	uint32_t tx_outstanding;
};

void sl_xsk_close(struct sl_xsk *x)
{
	if (!x)
		return;
	if (x->xsk)
		xsk_socket__delete(x->xsk);
	if (x->umem)
		xsk_umem__delete(x->umem);
	if (x->area)
		munmap(x->area, x->area_len);
	free(x->free_tx);
	free(x);
}

/* frames: total UMEM frames (a power of two, >= 64). zerocopy: ask for
 * XDP_ZEROCOPY (else XDP_COPY). skb: generic (skb) XDP mode instead of
 * native. Returns NULL with *err = -errno on failure. */
struct sl_xsk *sl_xsk_open(const char *ifname, uint32_t queue, uint32_t frames,
			   uint32_t frame_size, int zerocopy, int skb, int *err)
{
	struct sl_xsk *x = calloc(1, sizeof(*x));
	if (!x) {
		*err = -ENOMEM;
		return NULL;
	}
	x->frame_size = frame_size;
	x->area_len = (size_t)frames * frame_size;
	x->area = mmap(NULL, x->area_len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (x->area == MAP_FAILED) {
		x->area = NULL;
		*err = -errno;
		sl_xsk_close(x);
		return NULL;
	}
	struct xsk_umem_config uc = {
		.fill_size = frames / 2,
		.comp_size = frames / 2,
		.frame_size = frame_size,
		.frame_headroom = 0,
		.flags = 0,
	};
	int r = xsk_umem__create(&x->umem, x->area, x->area_len, &x->fill, &x->comp, &uc);
	if (r) {
		*err = r;
		sl_xsk_close(x);
		return NULL;
	}
	struct xsk_socket_config sc;
	memset(&sc, 0, sizeof(sc));
	sc.rx_size = frames / 2;
	sc.tx_size = frames / 2;
	sc.bind_flags = (zerocopy ? XDP_ZEROCOPY : XDP_COPY) | XDP_USE_NEED_WAKEUP;
	sc.xdp_flags = skb ? XDP_FLAGS_SKB_MODE : XDP_FLAGS_DRV_MODE;
	r = xsk_socket__create(&x->xsk, ifname, queue, x->umem, &x->rx, &x->tx, &sc);
	if (r) {
		*err = r;
		sl_xsk_close(x);
		return NULL;
	}
	/* First half: fill ring. Second half: free TX frames. */
	uint32_t half = frames / 2, idx = 0;
	if (xsk_ring_prod__reserve(&x->fill, half, &idx) != half) {
		*err = -ENOSPC;
		sl_xsk_close(x);
		return NULL;
	}
	for (uint32_t i = 0; i < half; i++)
		*xsk_ring_prod__fill_addr(&x->fill, idx + i) = (uint64_t)i * frame_size;
	xsk_ring_prod__submit(&x->fill, half);
	x->free_tx = calloc(half, sizeof(uint64_t));
	if (!x->free_tx) {
		*err = -ENOMEM;
		sl_xsk_close(x);
		return NULL;
	}
	for (uint32_t i = 0; i < half; i++)
		x->free_tx[x->n_free++] = (uint64_t)(half + i) * frame_size;
	return x;
}

int sl_xsk_fd(struct sl_xsk *x)
{
	return xsk_socket__fd(x->xsk);
}

/* Up to n received frames: their data pointers and lengths. They stay the
 * caller's until sl_xsk_rx_done(n). */
uint32_t sl_xsk_rx(struct sl_xsk *x, const uint8_t **data, uint32_t *lens, uint32_t n)
{
	uint32_t idx = 0;
	uint32_t got = xsk_ring_cons__peek(&x->rx, n, &idx);
	for (uint32_t i = 0; i < got; i++) {
		const struct xdp_desc *d = xsk_ring_cons__rx_desc(&x->rx, idx + i);
		data[i] = xsk_umem__get_data(x->area, d->addr);
		lens[i] = d->len;
	}
	return got;
}

/* Gives the n frames from the last sl_xsk_rx back to the kernel (fill). */
void sl_xsk_rx_done(struct sl_xsk *x, uint32_t n)
{
	if (n == 0) {
		/* Nothing received: with need_wakeup, let the kernel refill. */
		if (xsk_ring_prod__needs_wakeup(&x->fill))
			recvfrom(xsk_socket__fd(x->xsk), NULL, 0, MSG_DONTWAIT, NULL, NULL);
		return;
	}
	uint32_t idx = 0, rx_idx = x->rx.cached_cons - n;
	while (xsk_ring_prod__reserve(&x->fill, n, &idx) != n)
		;
	for (uint32_t i = 0; i < n; i++) {
		const struct xdp_desc *d = xsk_ring_cons__rx_desc(&x->rx, rx_idx + i);
		*xsk_ring_prod__fill_addr(&x->fill, idx + i) = xsk_umem__extract_addr(d->addr);
	}
	xsk_ring_prod__submit(&x->fill, n);
	xsk_ring_cons__release(&x->rx, n);
}

/* Reclaims completed TX frames. */
static void complete(struct sl_xsk *x)
{
	uint32_t idx = 0;
	uint32_t done = xsk_ring_cons__peek(&x->comp, x->tx_outstanding, &idx);
	for (uint32_t i = 0; i < done; i++)
		x->free_tx[x->n_free++] = *xsk_ring_cons__comp_addr(&x->comp, idx + i);
	xsk_ring_cons__release(&x->comp, done);
	x->tx_outstanding -= done;
}

/* Sends n frames (copied from data/lens); returns how many went. */
uint32_t sl_xsk_tx(struct sl_xsk *x, const uint8_t *const *data, const uint32_t *lens, uint32_t n)
{
	complete(x);
	if (n > x->n_free)
		n = x->n_free;
	uint32_t idx = 0;
	n = xsk_ring_prod__reserve(&x->tx, n, &idx);
	for (uint32_t i = 0; i < n; i++) {
		uint64_t addr = x->free_tx[--x->n_free];
		uint32_t len = lens[i] < x->frame_size ? lens[i] : x->frame_size;
		memcpy(xsk_umem__get_data(x->area, addr), data[i], len);
		struct xdp_desc *d = xsk_ring_prod__tx_desc(&x->tx, idx + i);
		d->addr = addr;
		d->len = len;
	}
	xsk_ring_prod__submit(&x->tx, n);
	x->tx_outstanding += n;
	if (n && xsk_ring_prod__needs_wakeup(&x->tx))
		sendto(xsk_socket__fd(x->xsk), NULL, 0, MSG_DONTWAIT, NULL, 0);
	return n;
}

/* The kernel's counters for the socket: rx_dropped, rx_ring_full,
 * rx_fill_ring_empty_descs, rx_invalid_descs. */
int sl_xsk_stats(struct sl_xsk *x, uint64_t *out)
{
	struct xdp_statistics st;
	socklen_t len = sizeof(st);
	memset(&st, 0, sizeof(st));
	if (getsockopt(xsk_socket__fd(x->xsk), SOL_XDP, XDP_STATISTICS, &st, &len))
		return -errno;
	out[0] = st.rx_dropped;
	out[1] = st.rx_ring_full;
	out[2] = st.rx_fill_ring_empty_descs;
	out[3] = st.rx_invalid_descs;
	return 0;
}
