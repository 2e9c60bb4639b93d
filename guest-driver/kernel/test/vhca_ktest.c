// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * vhca_ktest.ko: exercises vhca.ko's kernel verbs once, when loaded, on every
 * vhca device (an ib_client): PD with the DMA MR, a CQ polled directly, an
 * SRQ, two RC QPs connected through the port's own LID (the device loops the
 * packets back; on a RoCEv2 port through its GID 0 and its own MAC, as a
 * kernel ULP gives them: resolved), inline and SGE SENDs, unsignaled WQEs wrapping the SQ ring
 * (retired by later signaled CQEs), RDMA WRITE through the PD's global rkey,
 * resize_cq with CQEs not polled, fast registration (MP-08: alloc_mr,
 * map_mr_sg, REG_MR, SEND with Invalidate, LOCAL_INV), query_qp / query_srq / modify_srq, flush in the error state, back through
 * RESET and working again, then teardown. First the MAD layer's QPs: an
 * agent on QP1, and on QP0 (when the port claims SMI) a directed-route
 * SubnGet(NodeInfo) the device's SMA answers (kt_smi; expect_sma=1 or 0
 * says which the device must be). Results go to the kernel
 * log ("vhca_ktest: PASS" or "vhca_ktest: FAIL ...").
 *
 *   make -C /lib/modules/$K/build M=$PWD/guest-driver/kernel/test
 *   insmod vhca_ktest.ko; dmesg | grep vhca_ktest; rmmod vhca_ktest
 */

#include <linux/delay.h>
#include <linux/etherdevice.h>
#include <linux/module.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <rdma/ib_cache.h>
#include <rdma/ib_mad.h>
#include <rdma/ib_smi.h>
#include <rdma/ib_verbs.h>

MODULE_DESCRIPTION("vhca kernel verbs self-test");
MODULE_LICENSE("Dual MIT/GPL");

static int expect_sma = -1;
module_param(expect_sma, int, 0444);
MODULE_PARM_DESC(expect_sma,
		 "1: the device has a subnet management agent (QP0 must answer), 0: it has none, -1: either (default)");

#define BUF_SIZE 8192

struct kt {
	struct ib_device *dev;
	struct ib_pd *pd;
	struct ib_cq *cq;
	struct ib_srq *srq;
	struct ib_qp *qp1, *qp2;
	void *buf;
	u64 dma;
	u16 lid;
	bool roce;		/* RoCEv2 port (WF-10): address by GID + MAC */
	union ib_gid gid;	/* the port's GID 0 */
	u8 mac[ETH_ALEN];	/* the paired netdev's */
};

static int kt_poll(struct kt *t, int want, struct ib_wc *wc)
{
	int got = 0, n, tries;

	for (tries = 0; got < want && tries < 5000; tries++) {
		n = ib_poll_cq(t->cq, want - got, wc + got);
		if (n < 0)
			return n;
		got += n;
		if (got < want)
			usleep_range(1000, 2000);
	}
	return got;
}

static struct ib_qp *kt_qp(struct kt *t, struct ib_srq *srq)
{
	struct ib_qp_init_attr a = {
		.send_cq = t->cq,
		.recv_cq = t->cq,
		.srq = srq,
		.qp_type = IB_QPT_RC,
		.sq_sig_type = IB_SIGNAL_REQ_WR,
		.cap = { .max_send_wr = 16, .max_recv_wr = srq ? 0 : 16,
			 .max_send_sge = 2, .max_recv_sge = srq ? 0 : 2,
			 .max_inline_data = 64 },
	};

	return ib_create_qp(t->pd, &a);
}

static int kt_connect(struct kt *t, struct ib_qp *qp, u32 dest, u32 sq_psn)
{
	struct ib_qp_attr a = {};
	int ret;

	a.qp_state = IB_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	a.qp_access_flags = IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ;
	ret = ib_modify_qp(qp, &a, IB_QP_STATE | IB_QP_PKEY_INDEX |
			   IB_QP_PORT | IB_QP_ACCESS_FLAGS);
	if (ret)
		return ret;
	memset(&a, 0, sizeof(a));
	a.qp_state = IB_QPS_RTR;
	a.path_mtu = IB_MTU_1024;
	a.dest_qp_num = dest;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	if (t->roce) {
		a.ah_attr.type = RDMA_AH_ATTR_TYPE_ROCE;
		rdma_ah_set_grh(&a.ah_attr, &t->gid, 0, 0, 64, 0);
		ether_addr_copy(a.ah_attr.roce.dmac, t->mac);
	} else {
		a.ah_attr.type = RDMA_AH_ATTR_TYPE_IB;
		rdma_ah_set_dlid(&a.ah_attr, t->lid);
	}
	rdma_ah_set_port_num(&a.ah_attr, 1);
	ret = ib_modify_qp(qp, &a, IB_QP_STATE | IB_QP_AV | IB_QP_PATH_MTU |
			   IB_QP_DEST_QPN | IB_QP_RQ_PSN |
			   IB_QP_MAX_DEST_RD_ATOMIC | IB_QP_MIN_RNR_TIMER);
	if (ret)
		return ret;
	memset(&a, 0, sizeof(a));
	a.qp_state = IB_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = sq_psn;
	a.max_rd_atomic = 1;
	return ib_modify_qp(qp, &a, IB_QP_STATE | IB_QP_TIMEOUT |
			    IB_QP_RETRY_CNT | IB_QP_RNR_RETRY | IB_QP_SQ_PSN |
			    IB_QP_MAX_QP_RD_ATOMIC);
}

static int kt_srq_recv(struct kt *t, u64 id, u32 off)
{
	struct ib_sge sge = { .addr = t->dma + off, .length = 256,
			      .lkey = t->pd->local_dma_lkey };
	struct ib_recv_wr wr = { .wr_id = id, .sg_list = &sge, .num_sge = 1 };
	const struct ib_recv_wr *bad;

	return ib_post_srq_recv(t->srq, &wr, &bad);
}

static int kt_send(struct kt *t, u64 id, bool signaled, bool inl, u32 off,
		   u32 len)
{
	struct ib_sge sge = {
		.addr = inl ? (u64)(uintptr_t)t->buf + off : t->dma + off,
		.length = len, .lkey = t->pd->local_dma_lkey };
	struct ib_send_wr wr = {
		.wr_id = id, .sg_list = &sge, .num_sge = 1,
		.opcode = IB_WR_SEND,
		.send_flags = (signaled ? IB_SEND_SIGNALED : 0) |
			      (inl ? IB_SEND_INLINE : 0),
	};
	const struct ib_send_wr *bad;

	return ib_post_send(t->qp1, &wr, &bad);
}

#define CHECK(c, ...)                                                         \
	do {                                                                  \
		if (!(c)) {                                                   \
			pr_err("vhca_ktest: FAIL " __VA_ARGS__);              \
			goto out;                                             \
		}                                                             \
	} while (0)

/*
 * Fast registration (MP-08), as kernel ULPs use it: ib_alloc_mr, ib_map_mr_sg
 * over a DMA range crossing a page boundary, a new key byte, IB_WR_REG_MR
 * then an RDMA WRITE through the MR's rkey on the same send queue (in order),
 * SEND with Invalidate of that rkey (the receive says WITH_INVALIDATE), a
 * second IB_WR_REG_MR (which the device takes only because the MR is free
 * again), IB_WR_LOCAL_INV, dereg. Returns 0 or -EIO after a FAIL line.
 */
static noinline_for_stack int kt_fast_reg(struct kt *t)
{
	const int acc = IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE |
			IB_ACCESS_REMOTE_READ;
	struct ib_sge src = { .addr = t->dma, .length = 16,
			      .lkey = t->pd->local_dma_lkey };
	struct ib_reg_wr reg = {
		.wr = { .wr_id = 800, .opcode = IB_WR_REG_MR,
			.send_flags = IB_SEND_SIGNALED },
		.access = acc,
	};
	struct ib_rdma_wr wr = {
		.wr = { .wr_id = 801, .sg_list = &src, .num_sge = 1,
			.opcode = IB_WR_RDMA_WRITE,
			.send_flags = IB_SEND_SIGNALED },
	};
	struct ib_send_wr sw = {
		.wr_id = 802, .sg_list = &src, .num_sge = 1,
		.opcode = IB_WR_SEND_WITH_INV, .send_flags = IB_SEND_SIGNALED,
	};
	struct ib_send_wr inv = {
		.wr_id = 804, .opcode = IB_WR_LOCAL_INV,
		.send_flags = IB_SEND_SIGNALED,
	};
	const struct ib_send_wr *bad;
	struct scatterlist sg;
	struct ib_wc wc[4];
	struct ib_mr *mr;
	int ret = -EIO, n, i;
	u32 key;

	mr = ib_alloc_mr(t->pd, IB_MR_TYPE_MEM_REG, 4);
	if (IS_ERR(mr)) {
		pr_err("vhca_ktest: FAIL alloc_mr %ld\n", PTR_ERR(mr));
		return -EIO;
	}
	/* 1 KiB across the buffer's first page boundary. */
	sg_init_table(&sg, 1);
	sg_dma_address(&sg) = t->dma + 3584;
	sg_dma_len(&sg) = 1024;
	n = ib_map_mr_sg(mr, &sg, 1, NULL, PAGE_SIZE);
	CHECK(n == 1 && mr->length == 1024, "map_mr_sg %d len %llu\n", n,
	      mr->length);
	ib_update_fast_reg_key(mr, ib_inc_rkey(mr->rkey));
	key = mr->rkey;
	reg.mr = mr;
	reg.key = key;
	reg.wr.next = &wr.wr;
	wr.remote_addr = mr->iova + 100;
	wr.rkey = key;
	memcpy(t->buf, "fast-reg-write16", 16);
	ret = ib_post_send(t->qp1, &reg.wr, &bad);
	CHECK(!ret, "post REG_MR + WRITE %d\n", ret);
	ret = -EIO;
	n = kt_poll(t, 2, wc);
	CHECK(n == 2 && wc[0].wr_id == 800 && wc[0].opcode == IB_WC_REG_MR &&
	      wc[0].status == IB_WC_SUCCESS && wc[1].wr_id == 801 &&
	      wc[1].status == IB_WC_SUCCESS,
	      "REG_MR + WRITE: n %d status %d/%d opcode %d\n", n,
	      wc[0].status, wc[1].status, wc[0].opcode);
	CHECK(!memcmp(t->buf + 3584 + 100, "fast-reg-write16", 16),
	      "WRITE through the fast-registered MR\n");

	/* Remote invalidation: SEND with Invalidate to qp2 (on the SRQ). */
	CHECK(!kt_srq_recv(t, 803, 4096 + 1024), "post_srq_recv\n");
	sw.ex.invalidate_rkey = key;
	CHECK(!ib_post_send(t->qp1, &sw, &bad), "post SEND_WITH_INV\n");
	n = kt_poll(t, 2, wc);
	CHECK(n == 2, "SEND_WITH_INV: %d CQEs\n", n);
	for (i = 0; i < 2; i++) {
		CHECK(wc[i].status == IB_WC_SUCCESS, "SEND_WITH_INV wc %d: %s\n",
		      i, ib_wc_status_msg(wc[i].status));
		if (wc[i].opcode == IB_WC_RECV)
			CHECK(wc[i].wr_id == 803 &&
			      (wc[i].wc_flags & IB_WC_WITH_INVALIDATE) &&
			      wc[i].ex.invalidate_rkey == key,
			      "receive of SEND_WITH_INV: flags %#x key %#x\n",
			      wc[i].wc_flags, wc[i].ex.invalidate_rkey);
	}

	/* Free again: a second registration under a new key byte. */
	ib_update_fast_reg_key(mr, ib_inc_rkey(mr->rkey));
	reg.key = mr->rkey;
	reg.wr.next = NULL;
	CHECK(!ib_post_send(t->qp1, &reg.wr, &bad), "post REG_MR 2\n");
	inv.ex.invalidate_rkey = mr->rkey;
	CHECK(!ib_post_send(t->qp1, &inv, &bad), "post LOCAL_INV\n");
	n = kt_poll(t, 2, wc);
	CHECK(n == 2 && wc[0].opcode == IB_WC_REG_MR &&
	      wc[0].status == IB_WC_SUCCESS && wc[1].wr_id == 804 &&
	      wc[1].opcode == IB_WC_LOCAL_INV && wc[1].status == IB_WC_SUCCESS,
	      "REG_MR 2 + LOCAL_INV: n %d status %d/%d\n", n, wc[0].status,
	      wc[1].status);
	ret = 0;
out:
	ib_dereg_mr(mr);
	return ret;
}

struct kt_smp {
	struct completion done;
	u8 resp[sizeof(struct ib_smp)];
};

static void kt_smp_sent(struct ib_mad_agent *agent,
			struct ib_mad_send_wc *wc)
{
	ib_free_send_mad(wc->send_buf);
}

static void kt_smp_recv(struct ib_mad_agent *agent,
			struct ib_mad_send_buf *send_buf,
			struct ib_mad_recv_wc *wc)
{
	struct kt_smp *k = agent->context;

	memcpy(k->resp, wc->recv_buf.mad, sizeof(k->resp));
	ib_free_recv_mad(wc);
	complete(&k->done);
}

/*
 * Subnet management (issue 26 item 2, AD-09), through ib_mad as smpquery
 * uses it: QP1 takes an agent (a port with the GSI QP). With RDMA_CORE_CAP_IB_SMI (vhca.ko
 * claims it only when the device's SMA answered MAD_IFC at load), QP0 takes
 * one too, and a directed-route SubnGet(NodeInfo) with hop count 0 (the
 * node itself: ib_mad's SMI hands it to process_mad, vhca.ko to the SMA by
 * MAD_IFC) comes back as a GetResp with the D bit, NodeType CA, one port
 * and the node GUID the device reports. Without SMI, no agent on QP0.
 * expect_sma says which of the two the device must be. Returns 0 or -EIO
 * after a FAIL line.
 */
static noinline_for_stack int kt_smi(struct ib_device *dev)
{
	struct ib_mad_agent *agent;
	struct ib_mad_send_buf *sb;
	struct rdma_ah_attr aa = {};
	struct ib_ah *ah = NULL;
	struct ib_smp *smp, *r;
	struct kt_smp *k;
	bool smi = rdma_cap_ib_smi(dev, 1);
	__be64 guid;
	int ret = -EIO;

	k = kzalloc(sizeof(*k), GFP_KERNEL);
	CHECK(k, "kzalloc\n");
	init_completion(&k->done);
	if (rdma_cap_ib_mad(dev, 1)) {
		agent = ib_register_mad_agent(dev, 1, IB_QPT_GSI, NULL, 0,
					      kt_smp_sent, kt_smp_recv, k, 0);
		CHECK(!IS_ERR(agent), "no MAD agent on QP1: %ld\n",
		      PTR_ERR(agent));
		ib_unregister_mad_agent(agent);
	}
	CHECK(expect_sma < 0 || smi == !!expect_sma,
	      "SMI capability %d, expect_sma=%d\n", smi, expect_sma);
	agent = ib_register_mad_agent(dev, 1, IB_QPT_SMI, NULL, 0,
				      kt_smp_sent, kt_smp_recv, k, 0);
	if (!smi) {
		if (!IS_ERR(agent)) {
			ib_unregister_mad_agent(agent);
			CHECK(0, "a MAD agent on QP0 without SMI\n");
		}
		pr_info("vhca_ktest: %s no SMA: QP1 only\n", dev_name(&dev->dev));
		ret = 0;
		goto out;
	}
	CHECK(!IS_ERR(agent), "no MAD agent on QP0: %ld\n", PTR_ERR(agent));
	/*
	 * ib_mad answers this SMP locally and never sends it, but an address
	 * (the permissive LID) makes a wrong turn a send, not a NULL AH.
	 */
	rdma_ah_set_dlid(&aa, be16_to_cpu(IB_LID_PERMISSIVE));
	rdma_ah_set_port_num(&aa, 1);
	aa.type = RDMA_AH_ATTR_TYPE_IB;
	ah = rdma_create_ah(agent->qp->pd, &aa, RDMA_CREATE_AH_SLEEPABLE);
	if (IS_ERR(ah)) {
		pr_err("vhca_ktest: FAIL create_ah %ld\n", PTR_ERR(ah));
		ah = NULL;
		goto unreg;
	}
	sb = ib_create_send_mad(agent, 0, 0, 0, IB_MGMT_MAD_HDR,
				IB_MGMT_MAD_DATA, GFP_KERNEL,
				IB_MGMT_BASE_VERSION);
	if (IS_ERR(sb)) {
		pr_err("vhca_ktest: FAIL create_send_mad %ld\n", PTR_ERR(sb));
		goto unreg;
	}
	sb->ah = ah;
	smp = sb->mad;
	smp->base_version = IB_MGMT_BASE_VERSION;
	smp->mgmt_class = IB_MGMT_CLASS_SUBN_DIRECTED_ROUTE;
	smp->class_version = 1;
	smp->method = IB_MGMT_METHOD_GET;
	smp->attr_id = IB_SMP_ATTR_NODE_INFO;
	smp->tid = cpu_to_be64(((u64)agent->hi_tid << 32) | 0x5a);
	smp->dr_slid = IB_LID_PERMISSIVE;
	smp->dr_dlid = IB_LID_PERMISSIVE;
	ret = ib_post_send_mad(sb, NULL);
	if (ret) {
		ib_free_send_mad(sb);
		pr_err("vhca_ktest: FAIL post_send_mad %d\n", ret);
		ret = -EIO;
		goto unreg;
	}
	ret = -EIO;
	if (!wait_for_completion_timeout(&k->done, msecs_to_jiffies(5000))) {
		pr_err("vhca_ktest: FAIL no answer to SubnGet(NodeInfo) on QP0\n");
		goto unreg;
	}
	r = (struct ib_smp *)k->resp;
	memcpy(&guid, r->data + 12, sizeof(guid));	/* NodeInfo:NodeGUID */
	if (r->method != IB_MGMT_METHOD_GET_RESP ||
	    r->attr_id != IB_SMP_ATTR_NODE_INFO ||
	    r->status != IB_SMP_DIRECTION || r->data[2] != 1 ||
	    r->data[3] != 1 || guid != dev->node_guid) {
		pr_err("vhca_ktest: FAIL NodeInfo: method %#x attr %#x status %#x type %u ports %u GUID %016llx (device %016llx)\n",
		       r->method, be16_to_cpu(r->attr_id),
		       be16_to_cpu(r->status), r->data[2], r->data[3],
		       be64_to_cpu(guid), be64_to_cpu(dev->node_guid));
		goto unreg;
	}
	pr_info("vhca_ktest: %s SMA: NodeInfo through QP0, GUID %016llx\n",
		dev_name(&dev->dev), be64_to_cpu(guid));
	ret = 0;
unreg:
	/* Waits for the send's completion (kt_smp_sent frees it). */
	ib_unregister_mad_agent(agent);
	if (ah)
		rdma_destroy_ah(ah, RDMA_DESTROY_AH_SLEEPABLE);
out:
	kfree(k);
	return ret;
}

static void kt_run(struct ib_device *dev)
{
	struct kt t = { .dev = dev };
	struct ib_cq_init_attr cqa = { .cqe = 64 };
	struct ib_srq_init_attr sa = { .attr = { .max_wr = 16, .max_sge = 1 },
				       .srq_type = IB_SRQT_BASIC };
	struct ib_port_attr pa;
	struct ib_wc wc[16];
	struct ib_qp_attr qa;
	struct ib_qp_init_attr qia;
	struct ib_srq_attr sra;
	int ret, n, i, round;
	char *p;

	ret = ib_query_port(dev, 1, &pa);
	CHECK(!ret, "query_port %d\n", ret);
	t.lid = pa.lid;
	if (kt_smi(dev))
		goto out;
	if (rdma_protocol_roce(dev, 1)) {
		struct net_device *ndev = ib_device_get_netdev(dev, 1);

		CHECK(ndev, "RoCE port without a netdev\n");
		ether_addr_copy(t.mac, ndev->dev_addr);
		dev_put(ndev);
		ret = rdma_query_gid(dev, 1, 0, &t.gid);
		CHECK(!ret, "query GID 0 %d\n", ret);
		t.roce = true;
		pr_info("vhca_ktest: %s RoCEv2, GID 0 %pI6, MAC %pM\n",
			dev_name(&dev->dev), t.gid.raw, t.mac);
	}
	t.buf = kzalloc(BUF_SIZE, GFP_KERNEL);
	CHECK(t.buf, "kzalloc\n");
	t.dma = ib_dma_map_single(dev, t.buf, BUF_SIZE, DMA_BIDIRECTIONAL);
	CHECK(!ib_dma_mapping_error(dev, t.dma), "dma map\n");
	t.pd = ib_alloc_pd(dev, IB_PD_UNSAFE_GLOBAL_RKEY);
	CHECK(!IS_ERR(t.pd), "alloc_pd %ld\n", PTR_ERR(t.pd));
	t.cq = ib_create_cq(dev, NULL, NULL, NULL, &cqa);
	CHECK(!IS_ERR(t.cq), "create_cq %ld\n", PTR_ERR(t.cq));
	t.srq = ib_create_srq(t.pd, &sa);
	CHECK(!IS_ERR(t.srq), "create_srq %ld\n", PTR_ERR(t.srq));
	t.qp1 = kt_qp(&t, NULL);
	CHECK(!IS_ERR(t.qp1), "create_qp 1 %ld\n", PTR_ERR(t.qp1));
	t.qp2 = kt_qp(&t, t.srq);
	CHECK(!IS_ERR(t.qp2), "create_qp 2 %ld\n", PTR_ERR(t.qp2));
	ret = kt_connect(&t, t.qp1, t.qp2->qp_num, 0);
	CHECK(!ret, "connect qp1 %d\n", ret);
	ret = kt_connect(&t, t.qp2, t.qp1->qp_num, 0);
	CHECK(!ret, "connect qp2 %d\n", ret);
	pr_info("vhca_ktest: %s LID %u, qpn %u -> %u (on the SRQ), lkey %#x global rkey %#x\n",
		dev_name(&dev->dev), t.lid, t.qp1->qp_num, t.qp2->qp_num,
		t.pd->local_dma_lkey, t.pd->unsafe_global_rkey);

	/*
	 * Three rounds of 10 SENDs (every 5th signaled; odd ones inline), 10
	 * SRQ receives each: 30 WQEs through a 16-entry SQ ring, retired only
	 * by the signaled CQEs.
	 */
	for (round = 0; round < 3; round++) {
		int recvs = 0, sends = 0;

		for (i = 0; i < 10; i++) {
			ret = kt_srq_recv(&t, 1000 + round * 10 + i,
					  4096 + (i % 4) * 256);
			CHECK(!ret, "post_srq_recv %d\n", ret);
		}
		for (i = 0; i < 10; i++) {
			snprintf(t.buf + 64 * (i % 8), 64, "round %d send %d",
				 round, i);
			ret = kt_send(&t, round * 10 + i, i % 5 == 4, i & 1,
				      64 * (i % 8), 32);
			CHECK(!ret, "post_send round %d wr %d: %d\n", round, i,
			      ret);
		}
		n = kt_poll(&t, 12, wc);
		CHECK(n == 12, "round %d: %d CQEs, expected 12\n", round, n);
		for (i = 0; i < n; i++) {
			CHECK(wc[i].status == IB_WC_SUCCESS,
			      "round %d wc %d: status %s\n", round, i,
			      ib_wc_status_msg(wc[i].status));
			if (wc[i].opcode == IB_WC_RECV) {
				CHECK(wc[i].qp == t.qp2 && wc[i].byte_len == 32 &&
				      wc[i].wr_id == 1000 + round * 10 + recvs,
				      "round %d recv %d: wr_id %llu len %u\n",
				      round, recvs, wc[i].wr_id,
				      wc[i].byte_len);
				recvs++;
			} else {
				CHECK(wc[i].qp == t.qp1 &&
				      wc[i].wr_id == round * 10 + 4 + 5 * sends,
				      "round %d send: wr_id %llu\n", round,
				      wc[i].wr_id);
				sends++;
			}
		}
	}
	p = t.buf + 4096 + 256;	/* receive 9 of round 2 landed in slot 1 */
	CHECK(!strcmp(p, "round 2 send 9"), "payload \"%.32s\"\n", p);

	/* RDMA WRITE through the DMA MR's rkey, 2 SGEs. */
	{
		struct ib_sge sge[2] = {
			{ .addr = t.dma, .length = 8,
			  .lkey = t.pd->local_dma_lkey },
			{ .addr = t.dma + 8, .length = 8,
			  .lkey = t.pd->local_dma_lkey },
		};
		struct ib_rdma_wr wr = {
			.wr = { .wr_id = 77, .sg_list = sge, .num_sge = 2,
				.opcode = IB_WR_RDMA_WRITE,
				.send_flags = IB_SEND_SIGNALED },
			.remote_addr = t.dma + 6144,
			.rkey = t.pd->unsafe_global_rkey,
		};
		const struct ib_send_wr *bad;

		memcpy(t.buf, "rdma-write-16byt", 16);
		ret = ib_post_send(t.qp1, &wr.wr, &bad);
		CHECK(!ret, "post RDMA WRITE %d\n", ret);
		n = kt_poll(&t, 1, wc);
		CHECK(n == 1 && wc[0].status == IB_WC_SUCCESS &&
		      wc[0].wr_id == 77 && wc[0].opcode == IB_WC_RDMA_WRITE,
		      "RDMA WRITE wc: n %d status %d\n", n, wc[0].status);
		CHECK(!memcmp(t.buf + 6144, "rdma-write-16byt", 16),
		      "RDMA WRITE data\n");

		/*
		 * resize_cq (CQ-04) with CQEs not polled, up and back down:
		 * they come out once each, in order, after the move.
		 */
		for (i = 0; i < 4; i++) {
			wr.wr.wr_id = 500 + i;
			ret = ib_post_send(t.qp1, &wr.wr, &bad);
			CHECK(!ret, "post RDMA WRITE %d: %d\n", i, ret);
		}
		msleep(100);
		ret = ib_resize_cq(t.cq, 1000);
		CHECK(!ret && t.cq->cqe >= 1000, "resize_cq up %d cqe %d\n",
		      ret, t.cq->cqe);
		ret = ib_resize_cq(t.cq, 64);
		CHECK(!ret && t.cq->cqe >= 64, "resize_cq down %d cqe %d\n",
		      ret, t.cq->cqe);
		n = kt_poll(&t, 4, wc);
		CHECK(n == 4, "after resize_cq: %d CQEs\n", n);
		for (i = 0; i < 4; i++)
			CHECK(wc[i].status == IB_WC_SUCCESS &&
			      wc[i].wr_id == 500 + i,
			      "after resize_cq: wc %d wr_id %llu status %d\n",
			      i, wc[i].wr_id, wc[i].status);
		CHECK(ib_poll_cq(t.cq, 1, wc) == 0, "a CQE twice\n");
	}

	if (dev->attrs.device_cap_flags & IB_DEVICE_MEM_MGT_EXTENSIONS) {
		ret = kt_fast_reg(&t);
		CHECK(!ret, "fast registration\n");
	}

	ret = ib_query_qp(t.qp1, &qa, IB_QP_STATE, &qia);
	CHECK(!ret && qa.qp_state == IB_QPS_RTS && qa.dest_qp_num ==
	      t.qp2->qp_num, "query_qp %d state %d\n", ret, qa.qp_state);
	sra.srq_limit = 4;
	ret = ib_modify_srq(t.srq, &sra, IB_SRQ_LIMIT);
	CHECK(!ret, "modify_srq %d\n", ret);
	ret = ib_query_srq(t.srq, &sra);
	CHECK(!ret && sra.srq_limit == 4, "query_srq %d limit %u\n", ret,
	      sra.srq_limit);

	/* Error state flushes what is posted (ib_drain_qp's premise). */
	qa.qp_state = IB_QPS_ERR;
	ret = ib_modify_qp(t.qp1, &qa, IB_QP_STATE);
	CHECK(!ret, "modify to ERR %d\n", ret);
	ret = kt_send(&t, 9999, true, false, 0, 8);
	CHECK(!ret, "post_send in ERR %d\n", ret);
	n = kt_poll(&t, 1, wc);
	CHECK(n == 1 && wc[0].wr_id == 9999 &&
	      wc[0].status == IB_WC_WR_FLUSH_ERR,
	      "flush: n %d wr_id %llu status %s\n", n, n ? wc[0].wr_id : 0,
	      n ? ib_wc_status_msg(wc[0].status) : "-");

	/*
	 * Back through RESET: the device takes the doorbell's producer index
	 * as the new start, the driver keeps counting; the QP works again.
	 */
	qa.qp_state = IB_QPS_RESET;
	ret = ib_modify_qp(t.qp1, &qa, IB_QP_STATE);
	CHECK(!ret, "modify to RESET %d\n", ret);
	ret = ib_query_qp(t.qp2, &qa, IB_QP_RQ_PSN, &qia);
	CHECK(!ret, "query_qp 2 %d\n", ret);
	ret = kt_connect(&t, t.qp1, t.qp2->qp_num, qa.rq_psn);
	CHECK(!ret, "reconnect qp1 %d\n", ret);
	ret = kt_srq_recv(&t, 7000, 4096);
	CHECK(!ret, "post_srq_recv %d\n", ret);
	ret = kt_send(&t, 7001, true, true, 0, 16);
	CHECK(!ret, "post_send after RESET %d\n", ret);
	n = kt_poll(&t, 2, wc);
	CHECK(n == 2 && wc[0].status == IB_WC_SUCCESS &&
	      wc[1].status == IB_WC_SUCCESS &&
	      wc[0].wr_id + wc[1].wr_id == 14001,
	      "after RESET: n %d status %d/%d\n", n, wc[0].status,
	      wc[1].status);
	pr_info("vhca_ktest: PASS\n");
out:
	if (!IS_ERR_OR_NULL(t.qp1))
		ib_destroy_qp(t.qp1);
	if (!IS_ERR_OR_NULL(t.qp2))
		ib_destroy_qp(t.qp2);
	if (!IS_ERR_OR_NULL(t.srq))
		ib_destroy_srq(t.srq);
	if (!IS_ERR_OR_NULL(t.cq))
		ib_destroy_cq(t.cq);
	if (!IS_ERR_OR_NULL(t.pd))
		ib_dealloc_pd(t.pd);
	if (t.dma && !ib_dma_mapping_error(dev, t.dma))
		ib_dma_unmap_single(dev, t.dma, BUF_SIZE, DMA_BIDIRECTIONAL);
	kfree(t.buf);
}

static int kt_add(struct ib_device *dev)
{
	if (!strncmp(dev_name(&dev->dev), "vhca", 4))
		kt_run(dev);
	return 0;
}

static void kt_remove(struct ib_device *dev, void *data)
{
}

static struct ib_client kt_client = {
	.name = "vhca_ktest",
	.add = kt_add,
	.remove = kt_remove,
};

static int __init kt_init(void)
{
	return ib_register_client(&kt_client);
}

static void __exit kt_exit(void)
{
	ib_unregister_client(&kt_client);
}

module_init(kt_init);
module_exit(kt_exit);
