/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * vhca: a virtual PCIe InfiniBand HCA (ARCHITECTURE.md §4, §7). The device interface
 * is vhca_abi.h (generated from device/src/abi); this header holds the
 * driver's own objects. One file per topic: main (PCI, bring-up, ib_device),
 * cmdq, eq, uar (doorbells), pbl (page lists), verbs (device, port, PD, AH,
 * ucontext), cq, qp, srq, mr, debugfs, counters (hw counters and the PMA),
 * mad (the device's SMA through MAD_IFC, process_mad).
 */

#ifndef VHCA_H
#define VHCA_H

#include <linux/bitmap.h>
#include <linux/completion.h>
#include <linux/idr.h>
#include <linux/interrupt.h>
#include <linux/mutex.h>
#include <linux/netdevice.h>
#include <linux/pci.h>
#include <linux/refcount.h>
#include <linux/spinlock.h>
#include <linux/workqueue.h>
#include <linux/xarray.h>
#include <rdma/ib_umem.h>
#include <rdma/ib_verbs.h>
#include <rdma/uverbs_ioctl.h>

#include "compat.h"
#include "vhca_abi.h"
#include "vhca-abi-user.h"

/*
 * Every multi-byte ABI field is little-endian and declared as a plain __uN in
 * vhca_abi.h; the driver stores them natively.
 */
#ifdef CONFIG_CPU_BIG_ENDIAN
#error "vhca: the device ABI is little-endian; this driver stores its fields natively"
#endif

#define VHCA_DRV_NAME "vhca"

/* Ring sizes the driver asks for (capped by CAP_MAX_*_LOG2). */
#define VHCA_CMDQ_LOG2      4	/* commands run one at a time (cmdq.c) */
#define VHCA_EQ0_LOG2       12	/* EQ 0 overflow is fatal: keep it roomy */
#define VHCA_CEQ_LOG2       10
#define VHCA_KCQ_MIN_LOG2   6	/* a kernel CQ ring fills at least a page */
#define VHCA_GID_TBL_MAX    128	/* GIDs served (only GID 0 is non-zero) */

/*
 * vhca_port_attr.link_layer (`IBV_LINK_LAYER_*`); the ABI header names only
 * the field.
 */
#define VHCA_LINK_LAYER_IB       1
#define VHCA_LINK_LAYER_ETHERNET 2

/* BAR0 capability registers, read once at probe. */
struct vhca_caps {
	u32 max_qp;
	u32 max_cq;
	u32 max_srq;
	u32 max_mr;
	u32 max_pd;
	u32 max_eq;
	u32 max_qp_wr;
	u32 max_sge;
	u32 max_cqe;
	u32 max_inline;
	u32 num_uars;
	u32 msix_vectors;
	u32 max_cmdq_log2;
	u32 max_eq_log2;
	u32 max_srq_wr;
	u32 num_ports;
	u32 flags;		/* VHCA_DEV_CAP_* */
	u32 dm_size;		/* bytes of device memory in BAR4 (dm.c) */
};

/*
 * Device memory (dm.c; issue 29 item 2): the DM bytes of BAR4 and which of
 * their pages are allocated. npages 0: the device has none.
 */
struct vhca_dm_region {
	resource_size_t start;	/* physical address of DM byte 0 */
	void __iomem *mem;	/* kernel mapping, to zero allocations */
	u32 npages;		/* PAGE_SIZE pages */
	unsigned long *used;	/* one bit a page */
	spinlock_t lock;	/* used */
};

/* A doorbell page: UAR 0 for the kernel, one per user context. */
struct vhca_uar {
	u32 index;
	spinlock_t lock;
	DECLARE_BITMAP(used, VHCA_UAR_SLOTS);
};

/* The command queue (cmdq.c). */
struct vhca_cmdq {
	struct mutex lock;	/* one command at a time */
	struct vhca_cmd *ring;
	dma_addr_t ring_dma;
	u32 log2;
	u32 pi;
	void *in_mb;		/* mailboxes: one page each */
	void *out_mb;
	dma_addr_t in_mb_dma;
	dma_addr_t out_mb_dma;
	struct completion done;
	u16 token;
	u16 wait_token;
	bool events;		/* sleep on COMMAND_DONE instead of polling */
	bool dead;		/* a command timed out or the device is FATAL */
	/* statistics, for debugfs */
	u64 posted;
	u64 failed;
	u16 last_fail_opcode;
	u8 last_fail_status;
	u32 last_fail_syndrome;
};

/* An event queue: EQ 0 (async + command done) or a completion EQ (eq.c). */
struct vhca_eq {
	struct vhca_dev *dev;
	struct vhca_eqe *ring;
	dma_addr_t ring_dma;
	size_t ring_bytes;
	u32 log2;
	u32 ci;
	u32 arm_sn;
	u32 eqn;
	u16 vector;
	u16 slot;		/* doorbell slot in UAR 0 */
	void __iomem *db;
	int irq;
	bool irq_requested;
	bool created;
	u64 eqes;
	u64 interrupts;
	char name[32];
};

/* A page list over user memory, or a contiguous kernel ring (pbl.c). */
struct vhca_pbl_buf {
	struct vhca_pbl desc;
	/* ONE_LEVEL: the list; TWO_LEVEL: the directory. */
	__le64 *dir;
	dma_addr_t dir_dma;
	size_t dir_bytes;
	/* TWO_LEVEL: the second-level tables. */
	u32 ntables;
	__le64 **tables;
	dma_addr_t *tables_dma;
};

/* A ring in coherent memory (kernel CQ, SQ, RQ, SRQ). */
struct vhca_kring {
	void *buf;
	dma_addr_t dma;
	size_t bytes;
};

/* The port as QUERY_PORT last answered (verbs.c). */
struct vhca_port_cache {
	spinlock_t lock;
	struct vhca_port_attr attr;
	/*
	 * PortInfo:CapabilityMask bits ib_core's agents set and clear through
	 * modify_port (IB_PORT_CM_SUP from ib_cm, IB_PORT_SM from ib_umad's
	 * issm), as the device's SMA took them (SET_PORT_CAPS, mad.c).
	 */
	u32 sw_cap_flags;
};

/*
 * Every QUERY_COUNTERS set, as the hw counters list them (counters.c): the
 * port's (the port set and the per-reason drop sets), then the device's
 * (the NAKs sent per reason and the data path's; one netlink reply holds no
 * more on the port: device/src/abi/counters.rs hw_counters_per_port).
 */
#define VHCA_NPORT_STATS (VHCA_COUNTERS_PORT_COUNT + \
			  VHCA_COUNTERS_WIRE_DROP_COUNT + \
			  VHCA_COUNTERS_RX_DROP_COUNT)
#define VHCA_NSTATS (VHCA_NPORT_STATS + VHCA_COUNTERS_NAK_SENT_COUNT + \
		     VHCA_COUNTERS_DEVICE_COUNT)
#define VHCA_NCOUNTER_SETS 5	/* enum vhca_counter_set */

/*
 * On-demand paging (odp.c): the ODP MRs by key index (the PageFault EQE names
 * the key), the work queue faults and asynchronous prefetches run on, the
 * page list MAP_ODP reads (one, under list_lock), and counters for debugfs.
 */
struct vhca_odp {
	struct xarray mrs;
	struct workqueue_struct *wq;	/* NULL: ODP off */
	struct mutex list_lock;
	__le64 *list;
	dma_addr_t list_dma;
	atomic_t faults_queued;
	int max_faults;
	atomic_t prefetch_queued;
	atomic64_t faults;
	atomic64_t faults_resolved;
	atomic64_t faults_failed;	/* ODP_FAULT_FAIL sent */
	atomic64_t faults_no_mr;	/* key no longer an ODP MR: ignored */
	atomic64_t faults_dropped;	/* queue full or ODP off */
	atomic64_t pages_mapped;
	atomic64_t invalidations;	/* UNMAP_ODP sent */
	atomic64_t children_refused;	/* implicit MR at VHCA_IMR_MAX_CHILDREN */
	atomic64_t prefetches;
	atomic64_t prefetches_failed;
	atomic64_t prefetches_dropped;
};

/* The device's counters as QUERY_COUNTERS last gave them (counters.c). */
struct vhca_counters {
	struct mutex lock;	/* the cache and its refresh */
	unsigned long valid;	/* bit per set: values read */
	unsigned long expires[VHCA_NCOUNTER_SETS]; /* per set (jiffies) */
	u64 values[VHCA_NSTATS];
};

struct vhca_dev {
	struct ib_device ibdev;	/* first: ib_alloc_device */
	struct pci_dev *pdev;
	void __iomem *bar0;
	void __iomem *bar2;	/* every UAR page, kernel mapping */
	resource_size_t bar2_start;
	resource_size_t bar2_len;
	void __iomem *wake;	/* BAR4, the WAKE page; NULL: ring BAR0 WAKE */
	resource_size_t wake_start;
	struct vhca_dm_region dm;
	struct vhca_caps caps;
	struct vhca_device_attr attr;	/* QUERY_DEVICE */
	struct vhca_cmdq cmdq;
	struct vhca_eq eq0;
	struct vhca_eq *ceqs;		/* completion EQs, vectors 1.. */
	u32 nceqs;
	int nvec;
	struct vhca_uar kuar;		/* UAR 0 */
	struct ida uar_ida;		/* user UAR pages 1.. */
	struct xarray qp_xa;		/* QPN -> vhca_qp (events, poll_cq) */
	struct xarray cq_xa;		/* CQN -> vhca_cq */
	struct xarray srq_xa;		/* SRQN -> vhca_srq */
	struct vhca_port_cache port;
	struct work_struct port_work;
	unsigned long port_events;	/* pending enum vhca_eqe_type bits */
	bool registered;
	/*
	 * The device has a Subnet Management Agent (MAD_IFC answered at
	 * probe, mad.c): QP0 and RDMA_CORE_CAP_IB_SMI on the IB port.
	 */
	bool sma;
	bool sma_gone_logged;	/* MAD_IFC NOT_SUPPORTED after probe: once */
	/*
	 * SET_PORT_CAPS and SET_NODE_DESC with what they change here
	 * (port.sw_cap_flags, ibdev.node_desc), in one order (mad.c).
	 */
	struct mutex sma_lock;
	/*
	 * RoCEv2 port (WF-10, roce.c): chosen by QUERY_PORT's link layer at
	 * probe. ndev, link_active and unpairing change under RTNL only.
	 */
	bool roce;
	u8 mac[ETH_ALEN];		/* the port's MAC (QUERY_PORT) */
	struct net_device *ndev;	/* paired NIC; ib_core holds it */
	bool link_active;		/* last PORT_ACTIVE/ERR reported */
	bool unpairing;			/* remove: no more pairing */
	struct notifier_block netdev_nb;
	struct work_struct rescan_work;	/* GID rescan after a late pairing */
	struct mutex ctx_lock;		/* the BAR0 context window */
	struct dentry *debugfs;
	struct vhca_dbg_ctx {
		struct vhca_dev *dev;
		u32 table;	/* enum vhca_ctx_table */
		u32 index;	/* last number written to the file */
	} dbg_ctx[VHCA_CTX_EQC + 1];
	struct vhca_counters counters;	/* hw counters and PMA (counters.c) */
	struct vhca_odp odp;		/* on-demand paging (odp.c) */
};

struct vhca_ucontext {
	struct ib_ucontext ibuctx;
	struct vhca_uar uar;
};

struct vhca_pd {
	struct ib_pd ibpd;
	u32 pdn;
};

struct vhca_ah {
	struct ib_ah ibah;
	struct vhca_av av;
};

struct vhca_cq {
	struct ib_cq ibcq;
	u32 cqn;
	u32 log2;
	u32 ci;
	u32 arm_sn;
	spinlock_t lock;		/* poll_cq, req_notify_cq, destroy_qp */
	struct mutex resize_lock;	/* one resize_cq at a time */
	struct vhca_kring ring;		/* kernel CQ */
	struct ib_umem *umem;		/* user CQ */
	struct vhca_pbl_buf pbl;
	struct vhca_uar *uar;
	u16 slot;
	void __iomem *db;
	refcount_t ref;			/* event dispatch vs destroy */
	struct completion freed;
};

/* A kernel work queue (SQ, RQ or SRQ ring). */
struct vhca_wq {
	struct vhca_kring ring;
	spinlock_t lock;
	u32 log2;
	u32 shift;		/* log2 of the WQE stride */
	u32 pi;			/* WQEs posted (free-running) */
	u32 ci;			/* WQEs completed (SQ, RQ) */
	atomic_t done;		/* SRQ: receive completions seen */
	u32 max_sge;
	u32 max_inline;
	u64 *wrid;		/* SQ, RQ: caller's wr_id by ring slot */
};

struct vhca_qp {
	struct ib_qp ibqp;
	u32 qpn;
	u8 type;			/* enum vhca_qp_type */
	u8 state;			/* enum ib_qp_state last set */
	u8 port;
	bool user;
	struct vhca_wq sq;		/* kernel QP */
	struct vhca_wq rq;
	struct ib_umem *sq_umem;	/* user QP */
	struct ib_umem *rq_umem;
	struct vhca_pbl_buf sq_pbl;
	struct vhca_pbl_buf rq_pbl;
	struct vhca_uar *uar;
	u16 slot;
	void __iomem *db;
	refcount_t ref;
	struct completion freed;
};

struct vhca_srq {
	struct ib_srq ibsrq;
	u32 srqn;
	u32 limit;
	bool user;
	struct mutex resize_lock;	/* one modify_srq at a time */
	struct vhca_wq wq;		/* kernel SRQ; user SRQ: log2, shift only */
	struct ib_umem *umem;		/* user SRQ */
	struct vhca_pbl_buf pbl;
	struct vhca_uar *uar;
	u16 slot;
	void __iomem *db;
	refcount_t ref;
	struct completion freed;
};

struct vhca_mr {
	struct ib_mr ibmr;
	struct ib_umem *umem;
	int access;		/* IB_ACCESS_* it was registered with (rereg) */
	/*
	 * A fast-registration MR (MP-08, alloc_mr): the page list map_mr_sg
	 * fills and a REG_MR WQE names; the device reads it when the WQE
	 * runs, so it is DMA-able memory of the MR's own.
	 */
	__le64 *pages;
	dma_addr_t pages_dma;
	u32 max_pages;
	u32 npages;
	/*
	 * On-demand paging (odp.c): umem is &odp->umem (an implicit MR's: the
	 * root, its pages in per-chunk children). odp_ref is held by fault and
	 * prefetch work; dereg waits for odp_idle.
	 */
	struct ib_umem_odp *odp;
	bool odp_implicit;
	bool odp_dead;			/* DEREG_MR done */
	u64 odp_iova;			/* iova of umem.address */
	refcount_t odp_ref;
	struct completion odp_idle;
	struct mutex odp_child_lock;	/* making children */
	struct xarray odp_children;	/* chunk index -> ib_umem_odp */
	u32 odp_nchildren;
};

/*
 * A memory window (MP-06, MP-07). Binds are WQEs the provider posts; the
 * kernel only allocates and frees (ibmw.rkey: the R_Key ALLOC_MW gave).
 */
struct vhca_mw {
	struct ib_mw ibmw;
};

static inline struct vhca_dev *to_vdev(struct ib_device *ibdev)
{
	return container_of(ibdev, struct vhca_dev, ibdev);
}

static inline struct vhca_ucontext *to_vuctx(struct ib_ucontext *c)
{
	return container_of(c, struct vhca_ucontext, ibuctx);
}

static inline struct vhca_pd *to_vpd(struct ib_pd *pd)
{
	return container_of(pd, struct vhca_pd, ibpd);
}

static inline struct vhca_ah *to_vah(struct ib_ah *ah)
{
	return container_of(ah, struct vhca_ah, ibah);
}

static inline struct vhca_cq *to_vcq(struct ib_cq *cq)
{
	return container_of(cq, struct vhca_cq, ibcq);
}

static inline struct vhca_qp *to_vqp(struct ib_qp *qp)
{
	return container_of(qp, struct vhca_qp, ibqp);
}

/* An XRC domain (SR-02). */
struct vhca_xrcd {
	struct ib_xrcd ibxrcd;
	u32 xrcdn;
};

static inline struct vhca_xrcd *to_vxrcd(struct ib_xrcd *x)
{
	return container_of(x, struct vhca_xrcd, ibxrcd);
}

static inline struct vhca_srq *to_vsrq(struct ib_srq *srq)
{
	return container_of(srq, struct vhca_srq, ibsrq);
}

static inline struct vhca_mr *to_vmr(struct ib_mr *mr)
{
	return container_of(mr, struct vhca_mr, ibmr);
}

static inline u32 vhca_rd(struct vhca_dev *dev, u32 reg)
{
	return readl(dev->bar0 + reg);
}

static inline void vhca_wr(struct vhca_dev *dev, u32 reg, u32 val)
{
	writel(val, dev->bar0 + reg);
}

/* cmdq.c */
int vhca_cmdq_init(struct vhca_dev *dev);
void vhca_cmdq_free(struct vhca_dev *dev);
int vhca_cmd(struct vhca_dev *dev, u16 opcode, const void *in, size_t in_len,
	     void *out, size_t out_len, u8 *status);
void vhca_cmdq_event(struct vhca_dev *dev, u16 token);
void vhca_cmdq_kill(struct vhca_dev *dev, const char *why);

/* eq.c */
int vhca_eq0_alloc(struct vhca_dev *dev);
int vhca_eq0_start(struct vhca_dev *dev);
void vhca_eq0_stop(struct vhca_dev *dev);
void vhca_eq0_free(struct vhca_dev *dev);
int vhca_ceqs_create(struct vhca_dev *dev);
void vhca_ceqs_destroy(struct vhca_dev *dev);
u32 vhca_comp_eqn(struct vhca_dev *dev, int comp_vector);

/* uar.c */
void vhca_uar_init(struct vhca_uar *uar, u32 index);
int vhca_slot_alloc(struct vhca_uar *uar);
void vhca_slot_free(struct vhca_uar *uar, u16 slot);
void __iomem *vhca_slot_addr(struct vhca_dev *dev, u32 uar, u16 slot);
void vhca_db_flag(struct vhca_dev *dev, u32 uar, u16 slot);
void vhca_db_produce(struct vhca_dev *dev, u32 uar, void __iomem *word,
		     u32 pi);
void vhca_wake(struct vhca_dev *dev);

/* pbl.c */
int vhca_kring_alloc(struct vhca_dev *dev, struct vhca_kring *r, size_t bytes,
		     struct vhca_pbl *desc);
void vhca_kring_free(struct vhca_dev *dev, struct vhca_kring *r);
int vhca_pbl_from_umem(struct vhca_dev *dev, struct ib_umem *umem,
		       unsigned long pgsz, struct vhca_pbl_buf *pbl);
void vhca_pbl_free(struct vhca_dev *dev, struct vhca_pbl_buf *pbl);
struct ib_umem *vhca_umem_ring(struct vhca_dev *dev, u64 addr, u32 buf_size,
			       size_t need, struct vhca_pbl_buf *pbl);

/* dm.c */
extern const struct uapi_definition vhca_dm_defs[];
void vhca_dm_init(struct vhca_dev *dev);
void vhca_dm_fini(struct vhca_dev *dev);
struct ib_dm *vhca_alloc_dm(struct ib_device *ibdev, struct ib_ucontext *uctx,
			    struct ib_dm_alloc_attr *attr,
			    struct uverbs_attr_bundle *attrs);
int vhca_dealloc_dm(struct ib_dm *ibdm, struct uverbs_attr_bundle *attrs);
struct ib_mr *vhca_reg_dm_mr(struct ib_pd *pd, struct ib_dm *ibdm,
			     struct ib_dm_mr_attr *attr,
			     struct uverbs_attr_bundle *attrs);
int vhca_dm_mmap(struct ib_ucontext *uctx, struct vm_area_struct *vma);
void vhca_mmap_free(struct rdma_user_mmap_entry *entry);

/* verbs.c */
int vhca_query_device_cmd(struct vhca_dev *dev);
int vhca_refresh_port(struct vhca_dev *dev);
void vhca_port_work(struct work_struct *work);
int vhca_query_device(struct ib_device *ibdev, struct ib_device_attr *attr,
		      struct ib_udata *udata);
int vhca_query_port(struct ib_device *ibdev, u32 port,
		    struct ib_port_attr *attr);
int vhca_modify_port(struct ib_device *ibdev, u32 port, int mask,
		     struct ib_port_modify *props);
int vhca_get_port_immutable(struct ib_device *ibdev, u32 port,
			    struct ib_port_immutable *imm);
enum rdma_link_layer vhca_get_link_layer(struct ib_device *ibdev, u32 port);
int vhca_query_pkey(struct ib_device *ibdev, u32 port, u16 index, u16 *pkey);
int vhca_query_gid(struct ib_device *ibdev, u32 port, int index,
		   union ib_gid *gid);
void vhca_get_dev_fw_str(struct ib_device *ibdev, char *str);
int vhca_alloc_ucontext(struct ib_ucontext *uctx, struct ib_udata *udata);
void vhca_dealloc_ucontext(struct ib_ucontext *uctx);
int vhca_query_ucontext(struct ib_ucontext *uctx,
			struct uverbs_attr_bundle *attrs);
extern const struct uapi_definition vhca_uapi_defs[];
void vhca_disassociate_ucontext(struct ib_ucontext *uctx);
int vhca_mmap(struct ib_ucontext *uctx, struct vm_area_struct *vma);
int vhca_alloc_pd(struct ib_pd *pd, struct ib_udata *udata);
int vhca_alloc_xrcd(struct ib_xrcd *ibxrcd, struct ib_udata *udata);
int vhca_dealloc_xrcd(struct ib_xrcd *ibxrcd, struct ib_udata *udata);
int vhca_create_xrc_tgt(struct vhca_dev *dev, struct vhca_qp *qp,
			struct ib_qp_init_attr *init);
int vhca_dealloc_pd(struct ib_pd *pd, struct ib_udata *udata);
int vhca_create_ah(struct ib_ah *ah, struct rdma_ah_init_attr *init,
		   struct ib_udata *udata);
int vhca_query_ah(struct ib_ah *ah, struct rdma_ah_attr *attr);
int vhca_destroy_ah(struct ib_ah *ah, u32 flags);
int vhca_ah_to_av(struct vhca_dev *dev, const struct rdma_ah_attr *ah,
		  struct vhca_av *av);
void vhca_av_to_ah(struct vhca_dev *dev, const struct vhca_av *av,
		   struct rdma_ah_attr *ah);
u32 vhca_access_to_dev(int ib_access);
int vhca_access_to_ib(u32 access);
struct vhca_uar *vhca_uar_of(struct vhca_dev *dev, struct ib_udata *udata);

/* roce.c */
int vhca_roce_init(struct vhca_dev *dev);
void vhca_roce_fini(struct vhca_dev *dev);
void vhca_roce_query_port(struct vhca_dev *dev, struct ib_port_attr *a);
int vhca_add_gid(const struct ib_gid_attr *attr, void **context);
int vhca_del_gid(const struct ib_gid_attr *attr, void **context);

/* cq.c */
int vhca_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
		   vhca_cq_attrs *attrs);
int vhca_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata);
int vhca_poll_cq(struct ib_cq *ibcq, int num, struct ib_wc *wc);
int vhca_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags);
int vhca_resize_cq(struct ib_cq *ibcq, vhca_cqe_count entries,
		   struct ib_udata *udata);
void vhca_cq_clean(struct vhca_cq *cq, u32 qpn, struct vhca_srq *srq);
void vhca_cq_event(struct vhca_dev *dev, u32 cqn, u8 kind);

/* qp.c */
int vhca_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init,
		   struct ib_udata *udata);
int vhca_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		   struct ib_udata *udata);
int vhca_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		  struct ib_qp_init_attr *init);
int vhca_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata);
int vhca_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
		   const struct ib_send_wr **bad_wr);
int vhca_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
		   const struct ib_recv_wr **bad_wr);
void vhca_qp_event(struct vhca_dev *dev, u32 qpn, u8 kind);
int vhca_wq_post_recv(struct vhca_dev *dev, struct vhca_wq *wq,
		      const struct ib_recv_wr *wr, bool use_index);
int vhca_wq_alloc(struct vhca_dev *dev, struct vhca_wq *wq, u32 entries,
		  u32 shift, struct vhca_pbl *desc);
void vhca_wq_free(struct vhca_dev *dev, struct vhca_wq *wq);

/* srq.c */
int vhca_create_srq(struct ib_srq *ibsrq, struct ib_srq_init_attr *init,
		    struct ib_udata *udata);
int vhca_modify_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr,
		    enum ib_srq_attr_mask mask, struct ib_udata *udata);
int vhca_query_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr);
int vhca_destroy_srq(struct ib_srq *ibsrq, struct ib_udata *udata);
int vhca_post_srq_recv(struct ib_srq *ibsrq, const struct ib_recv_wr *wr,
		       const struct ib_recv_wr **bad_wr);
void vhca_srq_event(struct vhca_dev *dev, u32 srqn, u8 kind);

/* mr.c */
struct ib_mr *vhca_reg_mr(struct vhca_dev *dev, struct vhca_mr *mr,
			  struct vhca_reg_mr_in *in);
struct ib_mr *vhca_get_dma_mr(struct ib_pd *pd, int access);
struct ib_mr *vhca_reg_user_mr(struct ib_pd *pd, u64 start, u64 length,
			       u64 virt, int access, VHCA_REG_MR_DMAH
			       struct ib_udata *udata);
int vhca_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata);
struct ib_mr *vhca_rereg_user_mr(struct ib_mr *ibmr, int flags, u64 start,
				 u64 length, u64 virt, int access,
				 struct ib_pd *pd, struct ib_udata *udata);
struct ib_mr *vhca_alloc_mr(struct ib_pd *pd, enum ib_mr_type mr_type,
			   u32 max_num_sg);
int vhca_map_mr_sg(struct ib_mr *ibmr, struct scatterlist *sg, int sg_nents,
		   unsigned int *sg_offset);
int vhca_alloc_mw(struct ib_mw *ibmw, struct ib_udata *udata);
int vhca_dealloc_mw(struct ib_mw *ibmw);
int vhca_attach_mcast(struct ib_qp *ibqp, union ib_gid *gid, u16 lid);
int vhca_detach_mcast(struct ib_qp *ibqp, union ib_gid *gid, u16 lid);

/* odp.c (with CONFIG_INFINIBAND_ON_DEMAND_PAGING; else ODP is off) */
#if IS_ENABLED(CONFIG_INFINIBAND_ON_DEMAND_PAGING)
extern const struct mmu_interval_notifier_ops vhca_odp_mn_ops;
bool vhca_odp_enabled(struct vhca_dev *dev);
void vhca_odp_init(struct vhca_dev *dev);
void vhca_odp_fini(struct vhca_dev *dev);
void vhca_odp_eqe(struct vhca_dev *dev, const struct vhca_eqe *e);
struct ib_mr *vhca_reg_odp_mr(struct ib_pd *pd, u64 start, u64 length,
			      u64 virt, int access);
int vhca_dereg_odp_mr(struct vhca_dev *dev, struct vhca_mr *mr);
int vhca_advise_mr(struct ib_pd *pd, enum ib_uverbs_advise_mr_advice advice,
		   u32 flags, struct ib_sge *sg_list, u32 num_sge,
		   struct uverbs_attr_bundle *attrs);
void vhca_odp_query_device(struct vhca_dev *dev, struct ib_device_attr *a);
void vhca_odp_debugfs_add(struct vhca_dev *dev);
#define VHCA_ADVISE_MR_OP .advise_mr = vhca_advise_mr,
#else
static inline bool vhca_odp_enabled(struct vhca_dev *dev) { return false; }
static inline void vhca_odp_init(struct vhca_dev *dev) {}
static inline void vhca_odp_fini(struct vhca_dev *dev) {}
static inline void vhca_odp_eqe(struct vhca_dev *dev,
				const struct vhca_eqe *e) {}
static inline struct ib_mr *vhca_reg_odp_mr(struct ib_pd *pd, u64 start,
					    u64 length, u64 virt, int access)
{
	return ERR_PTR(-EOPNOTSUPP);
}
static inline int vhca_dereg_odp_mr(struct vhca_dev *dev, struct vhca_mr *mr)
{
	return -EINVAL;
}
static inline void vhca_odp_query_device(struct vhca_dev *dev,
					 struct ib_device_attr *a) {}
static inline void vhca_odp_debugfs_add(struct vhca_dev *dev) {}
#define VHCA_ADVISE_MR_OP
#endif

/* debugfs.c */
void vhca_debugfs_init(void);
void vhca_debugfs_exit(void);
void vhca_debugfs_add(struct vhca_dev *dev);
void vhca_debugfs_remove(struct vhca_dev *dev);

/* mad.c */
void vhca_sma_probe(struct vhca_dev *dev);
void vhca_sma_init_node_desc(struct vhca_dev *dev);
int vhca_sma_set_port_caps(struct vhca_dev *dev, u32 set, u32 clear);
int vhca_modify_device(struct ib_device *ibdev, int mask,
		       struct ib_device_modify *props);
int vhca_process_mad(struct ib_device *ibdev, int mad_flags, u32 port,
		     const struct ib_wc *in_wc, const struct ib_grh *in_grh,
		     const struct ib_mad *in, struct ib_mad *out,
		     size_t *out_mad_size, u16 *out_mad_pkey_index);

/* counters.c */
int vhca_counters_init(void);
void vhca_counters_exit(void);
void vhca_counters_dev_init(struct vhca_dev *dev);
struct rdma_hw_stats *vhca_alloc_hw_port_stats(struct ib_device *ibdev,
					       u32 port);
struct rdma_hw_stats *vhca_alloc_hw_device_stats(struct ib_device *ibdev);
int vhca_get_hw_stats(struct ib_device *ibdev, struct rdma_hw_stats *stats,
		      u32 port, int index);
int vhca_pma_process_mad(struct vhca_dev *dev, u32 port,
			 const struct ib_mad *in, struct ib_mad *out,
			 size_t *out_mad_size);

#endif /* VHCA_H */
