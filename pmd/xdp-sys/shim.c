/* AF_XDP sockets over one shared UMEM, through libxdp (which loads and
 * attaches its default XDP program, redirecting the queue's frames to the
 * socket, and detaches it when the last socket on the interface goes).
 *
 * The UMEM is memory the caller owns (Sluice registers its buffer pool's
 * arena): the shim only moves frame addresses through the rings. Every
 * socket on the UMEM has its own fill and completion rings (the first
 * socket uses the pair made with the UMEM). Aligned chunks: a fill address
 * names a chunk, and the kernel puts a frame XDP_PACKET_HEADROOM (256)
 * bytes into it. */
#include <errno.h>
#include <net/if.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stddef.h>
#include <linux/bpf.h>
#include <linux/if_link.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <xdp/libxdp.h>
#include <xdp/xsk.h>

/* Multi-buffer (jumbo) sockets, Linux >= 6.6; older headers lack them. */
#ifndef XDP_USE_SG
#define XDP_USE_SG (1 << 4)
#endif
#ifndef XDP_PKT_CONTD
#define XDP_PKT_CONTD (1 << 0)
#endif
/* In the lengths the shim passes: the frame goes on in the next
 * descriptor (XDP_PKT_CONTD). */
#define SL_MORE (1u << 31)

/* The XDP programs attached for the sockets, to detach at the end if
 * libxdp could not (see sl_umem_delete); for multi-buffer sockets the
 * shim's own program, its socket map and the BPF link that attaches it
 * (map_fd >= 0), which the kernel detaches when the process ends however
 * it ends. */
#define SL_MAX_ATTACHED 256
struct sl_attached {
	int ifindex;
	uint32_t prog_id;
	uint32_t flags;
	int prog_fd;
	int map_fd;
	int link_fd;
};

struct sl_umem {
	struct xsk_umem *umem;
	struct xsk_ring_prod fill;
	struct xsk_ring_cons comp;
	int first_taken;
	struct sl_attached attached[SL_MAX_ATTACHED];
	int nattached;
};

/* What libxdp and libbpf print: their warnings, with two cases said
 * plainly. Without a BPF file system (bpffs) in the mount namespace (`ip
 * netns exec` gives none) libxdp says three lines as if it had failed: it
 * works, attaching Sluice's program alone instead of behind its dispatcher.
 * Once privileges are dropped (src/privilege.rs) libxdp cannot take its
 * lock in /run/xdp to count the program's sockets at the close: the shim
 * detaches the program itself (sl_umem_delete). libbpf's informational
 * lines (sections it skips in libxdp's object) are left out. */
static int sl_said_no_bpffs;

static int sl_libxdp_print(enum libxdp_print_level level, const char *fmt, va_list args)
{
	if (level == LIBXDP_DEBUG)
		return 0;
	char line[512];
	vsnprintf(line, sizeof(line), fmt, args);
	if (strstr(line, "No bpffs found") || strstr(line, "without a working bpffs") ||
	    strstr(line, "without dispatcher")) {
		if (!sl_said_no_bpffs) {
			sl_said_no_bpffs = 1;
			fprintf(stderr, "AF_XDP: no BPF file system at /sys/fs/bpf here: libxdp "
					"attaches Sluice's XDP program alone (no other XDP program "
					"can share the interface; mount bpffs for its dispatcher)\n");
		}
		return 0;
	}
	if (strstr(line, "Couldn't open lock directory") ||
	    strstr(line, "decrementing xsk XDP prog refcount"))
		return 0;
	return fputs(line, stderr);
}

static int sl_libbpf_print(enum libbpf_print_level level, const char *fmt, va_list args)
{
	if (level != LIBBPF_WARN)
		return 0;
	fprintf(stderr, "libbpf: ");
	return vfprintf(stderr, fmt, args);
}

struct sl_xsk {
	struct xsk_socket *xsk;
	struct xsk_ring_cons rx;
	struct xsk_ring_prod tx;
	struct xsk_ring_prod own_fill;
	struct xsk_ring_cons own_comp;
	struct xsk_ring_prod *fill;
	struct xsk_ring_cons *comp;
};

/* Registers [area, area + len) as a UMEM of `chunk`-byte chunks; every
 * socket's fill and completion rings get `ring` entries. NULL with
 * *err = -errno on failure. */
struct sl_umem *sl_umem_create(void *area, uint64_t len, uint32_t chunk, uint32_t ring, int *err)
{
	struct sl_umem *u = calloc(1, sizeof(*u));
	if (!u) {
		*err = -ENOMEM;
		return NULL;
	}
	libxdp_set_print(sl_libxdp_print);
	libbpf_set_print(sl_libbpf_print);
	struct xsk_umem_config uc = {
		.fill_size = ring,
		.comp_size = ring,
		.frame_size = chunk,
		.frame_headroom = 0,
		.flags = 0,
	};
	int r = xsk_umem__create(&u->umem, area, len, &u->fill, &u->comp, &uc);
	if (r) {
		*err = r;
		free(u);
		return NULL;
	}
	return u;
}

/* After every socket on it is closed. */
void sl_umem_delete(struct sl_umem *u)
{
	if (!u)
		return;
	xsk_umem__delete(u->umem);
	/* libxdp detaches a program when its last socket closes, unless it
	 * could not take its lock (privileges dropped): then each program it
	 * attached is detached here, if it is still the one on the interface
	 * (CAP_NET_ADMIN is enough). */
	for (int i = 0; i < u->nattached; i++) {
		struct sl_attached *a = &u->attached[i];
		uint32_t now = 0;
		if (a->map_fd >= 0) {
			close(a->link_fd);
			close(a->map_fd);
			close(a->prog_fd);
			continue;
		}
		if (bpf_xdp_query_id(a->ifindex, a->flags, &now) || now != a->prog_id)
			continue;
		int r = bpf_xdp_detach(a->ifindex, a->flags, NULL);
		if (r) {
			char name[IF_NAMESIZE] = "?";
			if_indextoname(a->ifindex, name);
			fprintf(stderr, "AF_XDP: %s: detaching the XDP program (id %u): %s\n", name,
				a->prog_id, strerror(-r));
		}
	}
	free(u);
}

void sl_xsk_close(struct sl_xsk *x)
{
	if (!x)
		return;
	if (x->xsk)
		xsk_socket__delete(x->xsk);
	free(x);
}

/* The shim's XDP program for multi-buffer sockets on `ifindex` (libxdp
 * 1.3's default program does not take frames in fragments, and a veth
 * refuses a program that does not at an MTU above a page): redirects
 * each frame to the socket of its RX queue in a socket map, or to the
 * kernel's stack (XDP_PASS) where the queue has none, as libxdp's does.
 * Loaded with BPF_F_XDP_HAS_FRAGS and attached through a BPF link (so
 * that a killed process leaves nothing behind), unless the interface has
 * a program already. Its record in `u`, or NULL with *err = -errno. */
static struct sl_attached *sl_frags_prog(struct sl_umem *u, int ifindex, uint32_t flags, int *err)
{
	for (int i = 0; i < u->nattached; i++)
		if (u->attached[i].ifindex == ifindex && u->attached[i].map_fd >= 0)
			return &u->attached[i];
	if (u->nattached == SL_MAX_ATTACHED) {
		*err = -ENOSPC;
		return NULL;
	}
	int map_fd = bpf_map_create(BPF_MAP_TYPE_XSKMAP, "sl_xsks", 4, 4, 64, NULL);
	if (map_fd < 0) {
		*err = -errno;
		return NULL;
	}
	struct bpf_insn prog[] = {
		/* r2 = ctx->rx_queue_index */
		{ .code = BPF_LDX | BPF_MEM | BPF_W, .dst_reg = BPF_REG_2, .src_reg = BPF_REG_1,
		  .off = offsetof(struct xdp_md, rx_queue_index) },
		/* r1 = the socket map */
		{ .code = BPF_LD | BPF_DW | BPF_IMM, .dst_reg = BPF_REG_1,
		  .src_reg = BPF_PSEUDO_MAP_FD, .imm = map_fd },
		{ .code = 0 },
		/* r3 = XDP_PASS, the answer when the queue has no socket */
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_3, .imm = XDP_PASS },
		{ .code = BPF_JMP | BPF_CALL, .imm = BPF_FUNC_redirect_map },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	LIBBPF_OPTS(bpf_prog_load_opts, o, .prog_flags = BPF_F_XDP_HAS_FRAGS);
	int prog_fd = bpf_prog_load(BPF_PROG_TYPE_XDP, "sl_xsk_frags", "Dual MIT/GPL", prog,
				    sizeof(prog) / sizeof(prog[0]), &o);
	if (prog_fd < 0) {
		*err = -errno;
		close(map_fd);
		return NULL;
	}
	LIBBPF_OPTS(bpf_link_create_opts, lo, .flags = flags);
	int link_fd = bpf_link_create(prog_fd, ifindex, BPF_XDP, &lo);
	if (link_fd < 0) {
		*err = -errno;
		close(prog_fd);
		close(map_fd);
		return NULL;
	}
	struct sl_attached *a = &u->attached[u->nattached++];
	*a = (struct sl_attached){ .ifindex = ifindex,
				   .flags = flags,
				   .prog_fd = prog_fd,
				   .map_fd = map_fd,
				   .link_fd = link_fd };
	return a;
}

/* A socket on queue `queue` of `ifname`, with RX and TX rings of `ring`
 * entries. zerocopy: ask for XDP_ZEROCOPY (else XDP_COPY). skb: generic
 * (skb) XDP instead of native. sg: frames longer than a chunk, in
 * several descriptors (XDP_USE_SG, with the shim's program instead of
 * libxdp's). NULL with *err = -errno on failure. */
struct sl_xsk *sl_xsk_open(struct sl_umem *u, const char *ifname, uint32_t queue, uint32_t ring,
			   int zerocopy, int skb, int sg, int *err)
{
	struct sl_xsk *x = calloc(1, sizeof(*x));
	if (!x) {
		*err = -ENOMEM;
		return NULL;
	}
	if (!u->first_taken) {
		x->fill = &u->fill;
		x->comp = &u->comp;
	} else {
		x->fill = &x->own_fill;
		x->comp = &x->own_comp;
	}
	int ifindex = if_nametoindex(ifname);
	uint32_t flags = skb ? XDP_FLAGS_SKB_MODE : XDP_FLAGS_DRV_MODE, id = 0;
	struct sl_attached *own = NULL;
	if (sg) {
		if (ifindex <= 0) {
			*err = -ENODEV;
			sl_xsk_close(x);
			return NULL;
		}
		own = sl_frags_prog(u, ifindex, flags, err);
		if (!own) {
			sl_xsk_close(x);
			return NULL;
		}
	}
	struct xsk_socket_config sc;
	memset(&sc, 0, sizeof(sc));
	sc.rx_size = ring;
	sc.tx_size = ring;
	sc.bind_flags = (zerocopy ? XDP_ZEROCOPY : XDP_COPY) | XDP_USE_NEED_WAKEUP;
	if (sg) {
		sc.bind_flags |= XDP_USE_SG;
		sc.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD;
	}
	sc.xdp_flags = flags;
	int r = xsk_socket__create_shared(&x->xsk, ifname, queue, u->umem, &x->rx, &x->tx,
					  x->fill, x->comp, &sc);
	if (r) {
		*err = r;
		x->xsk = NULL;
		sl_xsk_close(x);
		return NULL;
	}
	u->first_taken = 1;
	if (own) {
		int fd = xsk_socket__fd(x->xsk);
		if (bpf_map_update_elem(own->map_fd, &queue, &fd, BPF_ANY)) {
			*err = -errno;
			sl_xsk_close(x);
			return NULL;
		}
		return x;
	}
	/* The program now on the interface, once per interface. */
	if (ifindex > 0 && !bpf_xdp_query_id(ifindex, flags, &id) && id) {
		int seen = 0;
		for (int i = 0; i < u->nattached; i++)
			seen |= u->attached[i].ifindex == ifindex;
		if (!seen && u->nattached < SL_MAX_ATTACHED)
			u->attached[u->nattached++] = (struct sl_attached){
				.ifindex = ifindex, .prog_id = id, .flags = flags, .prog_fd = -1, .map_fd = -1, .link_fd = -1
			};
	}
	return x;
}

int sl_xsk_fd(struct sl_xsk *x)
{
	return xsk_socket__fd(x->xsk);
}

/* Takes the descriptors of up to `frames` received frames, at most n
 * descriptors: their UMEM addresses (of the packet data) and lengths,
 * SL_MORE set where a multi-buffer frame goes on in the next. Only whole
 * frames are taken, unless n descriptors hold no whole frame (taken all,
 * the last with SL_MORE: the caller drops them). The buffers are the
 * caller's from now on. With nothing received and the kernel asking for
 * it, wakes the kernel to refill. */
uint32_t sl_xsk_rx(struct sl_xsk *x, uint64_t *addrs, uint32_t *lens, uint32_t n, uint32_t frames)
{
	uint32_t idx = 0;
	uint32_t got = xsk_ring_cons__peek(&x->rx, n, &idx);
	if (got == 0) {
		if (xsk_ring_prod__needs_wakeup(x->fill))
			recvfrom(xsk_socket__fd(x->xsk), NULL, 0, MSG_DONTWAIT, NULL, NULL);
		return 0;
	}
	uint32_t whole = 0, seen = 0;
	for (uint32_t i = 0; i < got && seen < frames; i++) {
		const struct xdp_desc *d = xsk_ring_cons__rx_desc(&x->rx, idx + i);
		addrs[i] = d->addr;
		lens[i] = d->len;
		if (d->options & XDP_PKT_CONTD) {
			lens[i] |= SL_MORE;
		} else {
			whole = i + 1;
			seen++;
		}
	}
	if (whole == 0 && got == n)
		whole = got;
	if (whole < got)
		xsk_ring_cons__cancel(&x->rx, got - whole);
	xsk_ring_cons__release(&x->rx, whole);
	return whole;
}

/* Gives the kernel n chunks to receive into: all of them (n) or, if the
 * fill ring has no room for all, none (0). */
uint32_t sl_xsk_fill(struct sl_xsk *x, const uint64_t *addrs, uint32_t n)
{
	uint32_t idx = 0;
	if (n == 0 || xsk_ring_prod__reserve(x->fill, n, &idx) != n)
		return 0;
	for (uint32_t i = 0; i < n; i++)
		*xsk_ring_prod__fill_addr(x->fill, idx + i) = addrs[i];
	xsk_ring_prod__submit(x->fill, n);
	return n;
}

/* Queues n descriptors (UMEM address of the data, length; SL_MORE where
 * the frame goes on in the next) for sending and kicks the kernel if it
 * asks for it: all of them (n) or, if the TX ring has no room for all,
 * none (0). */
uint32_t sl_xsk_tx(struct sl_xsk *x, const uint64_t *addrs, const uint32_t *lens, uint32_t n)
{
	uint32_t idx = 0;
	if (n == 0 || xsk_ring_prod__reserve(&x->tx, n, &idx) != n)
		return 0;
	for (uint32_t i = 0; i < n; i++) {
		struct xdp_desc *d = xsk_ring_prod__tx_desc(&x->tx, idx + i);
		d->addr = addrs[i];
		d->len = lens[i] & ~SL_MORE;
		d->options = (lens[i] & SL_MORE) ? XDP_PKT_CONTD : 0;
	}
	xsk_ring_prod__submit(&x->tx, n);
	if (xsk_ring_prod__needs_wakeup(&x->tx))
		sendto(xsk_socket__fd(x->xsk), NULL, 0, MSG_DONTWAIT, NULL, 0);
	return n;
}

/* Takes up to n sent frames' addresses back (the completion ring). */
uint32_t sl_xsk_complete(struct sl_xsk *x, uint64_t *addrs, uint32_t n)
{
	uint32_t idx = 0;
	uint32_t done = xsk_ring_cons__peek(x->comp, n, &idx);
	for (uint32_t i = 0; i < done; i++)
		addrs[i] = *xsk_ring_cons__comp_addr(x->comp, idx + i);
	xsk_ring_cons__release(x->comp, done);
	return done;
}

/* The kernel's counters for the socket: rx_dropped, rx_ring_full,
 * rx_fill_ring_empty_descs, rx_invalid_descs, tx_invalid_descs. */
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
	out[4] = st.tx_invalid_descs;
	return 0;
}
