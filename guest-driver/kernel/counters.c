// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * The device's counters for the guest (issue 17 item 3, ARCHITECTURE.md §2
 * "counted by reason"): rdma hw counters and the PerfMgt agent (PMA) that
 * ib_core's sysfs port counters ask.
 *
 *   Port 1's hw counters, `rdma statistic show link vhcaN/1` and
 *   /sys/class/infiniband/vhcaN/ports/1/hw_counters/: the port set as
 *   vhca_abi.h's VHCA_COUNTERS_PORT_NAMES names it, then one counter per
 *   reason of the per-reason sets with the set's prefix (wire_drop_,
 *   rx_drop_, nak_sent_; CounterSet::hw_counter_prefix in
 *   device/src/abi/counters.rs), so every name is unique and comes from the
 *   device's own list.
 *
 *   The device's hw counters, /sys/class/infiniband/vhcaN/hw_counters/: the
 *   device set (WQEs, CQEs, EQEs, interrupts, the memory budget, the fabric
 *   key), device-wide. Not per port also because ib_core answers
 *   `rdma statistic` with one netlink message of NLMSG_DEFAULT_SIZE (a page):
 *   every set in it overflows that (EMSGSIZE, nothing shown), and
 *   device/src/abi/counters.rs's test keeps the port's names within it.
 *
 *   /sys/class/infiniband/vhcaN/ports/1/counters/: ib_core builds them from
 *   PerfMgt Get(PortCounters) / Get(PortCountersExtended) MADs it hands to
 *   process_mad (only a driver with process_mad gets that directory). The
 *   PMA here answers them from the same values: PortXmitData/PortRcvData in
 *   4-octet words (the IBA PerfMgt unit), packets, PortRcvErrors = the wire
 *   drops (malformed or bad CRC); the physical-layer counters a virtual link
 *   does not have are 0. ClassPortInfo says "extended width, no IETF
 *   counters" (IB_PMA_CLASS_CAP_EXT_WIDTH_NOIETF): the device does not count
 *   unicast and multicast apart. The same PMA answers a PerfMgt Get that
 *   arrives on QP1; anything else goes on to the MAD layer untouched.
 *
 * One cache serves all: QUERY_COUNTERS runs for a set at most once per
 * VHCA_COUNTERS_LIFESPAN_MS, as ib_core's own lifespan does for the sysfs
 * hw_counters files (but not for netlink), and only for the sets a reader
 * needs, so neither `rdma statistic` in a loop nor a peer's PMA queries can
 * keep the command queue busy.
 */

#include <rdma/ib_mad.h>
#include <rdma/ib_pma.h>

#include "vhca.h"

/* ib_core's default lifespan of hw counters (ms); also the cache's. */
#define VHCA_COUNTERS_LIFESPAN_MS RDMA_HW_STATS_DEFAULT_LIFESPAN

static const char *const vhca_port_names[] = { VHCA_COUNTERS_PORT_NAMES };
static const char *const vhca_wire_names[] = { VHCA_COUNTERS_WIRE_DROP_NAMES };
static const char *const vhca_rx_names[] = { VHCA_COUNTERS_RX_DROP_NAMES };
static const char *const vhca_nak_names[] = { VHCA_COUNTERS_NAK_SENT_NAMES };
static const char *const vhca_dev_names[] = { VHCA_COUNTERS_DEVICE_NAMES };

static_assert(ARRAY_SIZE(vhca_port_names) == VHCA_COUNTERS_PORT_COUNT);
static_assert(ARRAY_SIZE(vhca_wire_names) == VHCA_COUNTERS_WIRE_DROP_COUNT);
static_assert(ARRAY_SIZE(vhca_rx_names) == VHCA_COUNTERS_RX_DROP_COUNT);
static_assert(ARRAY_SIZE(vhca_nak_names) == VHCA_COUNTERS_NAK_SENT_COUNT);
static_assert(ARRAY_SIZE(vhca_dev_names) == VHCA_COUNTERS_DEVICE_COUNT);

/*
 * The sets in hw-counter order (the order of vhca_counters.values): the
 * port's (VHCA_NPORT_STATS), then the device's (NAKs sent, data path).
 */
static const struct vhca_counter_set_desc {
	u8 set;			/* enum vhca_counter_set */
	const char *prefix;	/* of its hw counter names */
	const char *const *names;
	u32 count;
} vhca_counter_sets[] = {
	{ VHCA_COUNTERS_PORT, "", vhca_port_names,
	  ARRAY_SIZE(vhca_port_names) },
	{ VHCA_COUNTERS_WIRE_DROP, "wire_drop_", vhca_wire_names,
	  ARRAY_SIZE(vhca_wire_names) },
	{ VHCA_COUNTERS_RX_DROP, "rx_drop_", vhca_rx_names,
	  ARRAY_SIZE(vhca_rx_names) },
	{ VHCA_COUNTERS_NAK_SENT, "nak_sent_", vhca_nak_names,
	  ARRAY_SIZE(vhca_nak_names) },
	{ VHCA_COUNTERS_DEVICE, "", vhca_dev_names,
	  ARRAY_SIZE(vhca_dev_names) },
};

static_assert(VHCA_NPORT_STATS == VHCA_COUNTERS_PORT_COUNT +
	      VHCA_COUNTERS_WIRE_DROP_COUNT + VHCA_COUNTERS_RX_DROP_COUNT);
static_assert(VHCA_NSTATS == VHCA_NPORT_STATS + VHCA_COUNTERS_NAK_SENT_COUNT +
	      VHCA_COUNTERS_DEVICE_COUNT);

/* The hw counter descriptors, the same for every device: module lifetime. */
static struct rdma_stat_desc vhca_stat_descs[VHCA_NSTATS];

/* Index in the values of a port-set counter the PMA reads (-1: absent). */
static int vhca_port_index(const char *name)
{
	u32 i;

	for (i = 0; i < ARRAY_SIZE(vhca_port_names); i++)
		if (!strcmp(vhca_port_names[i], name))
			return i;	/* the port set comes first */
	return -1;
}

static int vhca_ix_rx_packets, vhca_ix_tx_packets;
static int vhca_ix_rx_bytes, vhca_ix_tx_bytes;

int vhca_counters_init(void)
{
	u32 s, i, n = 0;

	for (s = 0; s < ARRAY_SIZE(vhca_counter_sets); s++) {
		const struct vhca_counter_set_desc *d = &vhca_counter_sets[s];

		for (i = 0; i < d->count; i++, n++) {
			vhca_stat_descs[n].name = kasprintf(GFP_KERNEL, "%s%s",
							    d->prefix,
							    d->names[i]);
			if (!vhca_stat_descs[n].name) {
				vhca_counters_exit();
				return -ENOMEM;
			}
		}
	}
	vhca_ix_rx_packets = vhca_port_index("rx_packets");
	vhca_ix_tx_packets = vhca_port_index("tx_packets");
	vhca_ix_rx_bytes = vhca_port_index("rx_bytes");
	vhca_ix_tx_bytes = vhca_port_index("tx_bytes");
	return 0;
}

void vhca_counters_exit(void)
{
	u32 i;

	for (i = 0; i < VHCA_NSTATS; i++) {
		kfree(vhca_stat_descs[i].name);
		vhca_stat_descs[i].name = NULL;
	}
}

void vhca_counters_dev_init(struct vhca_dev *dev)
{
	mutex_init(&dev->counters.lock);
}

/* Bits of vhca_counter_sets[]: which sets a reader needs. */
#define VHCA_SETS_PORT_STATS	GENMASK(2, 0)	/* port, wire, rx drops */
#define VHCA_SETS_DEVICE_STATS	GENMASK(4, 3)	/* NAKs sent, data path */
#define VHCA_SETS_PMA		GENMASK(1, 0)	/* port, wire drops */
static_assert(ARRAY_SIZE(vhca_counter_sets) == VHCA_NCOUNTER_SETS);

/*
 * Brings the sets in `sets` of dev->counters.values up to date: one
 * QUERY_COUNTERS for each set older than the lifespan.
 */
static int vhca_counters_refresh(struct vhca_dev *dev, unsigned long sets)
{
	struct vhca_counters *c = &dev->counters;
	struct vhca_query_counters_out *out = NULL;
	u64 *v = c->values;
	u32 s, n;
	int ret = 0;

	lockdep_assert_held(&c->lock);
	for (s = 0; s < ARRAY_SIZE(vhca_counter_sets);
	     v += vhca_counter_sets[s].count, s++) {
		const struct vhca_counter_set_desc *d = &vhca_counter_sets[s];
		struct vhca_query_counters_in in = {
			.port = VHCA_PORT,
			.set = d->set,
		};

		if (!(sets & BIT(s)) ||
		    ((c->valid & BIT(s)) && time_before(jiffies, c->expires[s])))
			continue;
		if (!out) {
			out = kmalloc(sizeof(*out), GFP_KERNEL);
			if (!out)
				return -ENOMEM;
		}
		ret = vhca_cmd(dev, VHCA_CMD_QUERY_COUNTERS, &in, sizeof(in),
			       out, sizeof(*out), NULL);
		if (ret) {
			dev_dbg(&dev->pdev->dev, "QUERY_COUNTERS %u: %d\n",
				d->set, ret);
			break;
		}
		/*
		 * A newer device may count more than this driver has names
		 * for (shown: the ones it knows); an older one fewer (0).
		 */
		n = min_t(u32, min_t(u32, out->count, d->count),
			  ARRAY_SIZE(out->values));
		memcpy(v, out->values, n * sizeof(*v));
		memset(v + n, 0, (d->count - n) * sizeof(*v));
		c->valid |= BIT(s);
		c->expires[s] = jiffies +
				msecs_to_jiffies(VHCA_COUNTERS_LIFESPAN_MS);
	}
	kfree(out);
	return ret;
}

struct rdma_hw_stats *vhca_alloc_hw_port_stats(struct ib_device *ibdev,
					       u32 port)
{
	return rdma_alloc_hw_stats_struct(vhca_stat_descs, VHCA_NPORT_STATS,
					  VHCA_COUNTERS_LIFESPAN_MS);
}

struct rdma_hw_stats *vhca_alloc_hw_device_stats(struct ib_device *ibdev)
{
	return rdma_alloc_hw_stats_struct(vhca_stat_descs + VHCA_NPORT_STATS,
					  VHCA_NSTATS - VHCA_NPORT_STATS,
					  VHCA_COUNTERS_LIFESPAN_MS);
}

/* port 0: the device's hw counters; VHCA_PORT: the port's. */
int vhca_get_hw_stats(struct ib_device *ibdev, struct rdma_hw_stats *stats,
		      u32 port, int index)
{
	struct vhca_dev *dev = to_vdev(ibdev);
	u32 first = port ? 0 : VHCA_NPORT_STATS;
	u32 n = port ? VHCA_NPORT_STATS : VHCA_NSTATS - VHCA_NPORT_STATS;
	int ret;

	if (port && port != VHCA_PORT)
		return -EINVAL;
	n = min_t(u32, n, stats->num_counters);
	mutex_lock(&dev->counters.lock);
	ret = vhca_counters_refresh(dev, port ? VHCA_SETS_PORT_STATS :
						VHCA_SETS_DEVICE_STATS);
	if (!ret)
		memcpy(stats->value, dev->counters.values + first,
		       n * sizeof(stats->value[0]));
	mutex_unlock(&dev->counters.lock);
	/* Every counter at once: the core then keeps them for a lifespan. */
	return ret ? ret : stats->num_counters;
}

/* Value of port-set counter at index ix (a name the device may lack). */
static u64 vhca_val(const struct vhca_counters *c, int ix)
{
	return ix < 0 ? 0 : c->values[ix];
}

/* PMA counters saturate at all ones rather than wrap (IBA PerfMgt). */
static __be32 vhca_sat32(u64 v)
{
	return cpu_to_be32(min_t(u64, v, U32_MAX));
}

static __be16 vhca_sat16(u64 v)
{
	return cpu_to_be16(min_t(u64, v, U16_MAX));
}

static void vhca_pma_class_port_info(struct ib_class_port_info *cpi)
{
	cpi->base_version = IB_MGMT_BASE_VERSION;
	cpi->class_version = 1;
	cpi->capability_mask = IB_PMA_CLASS_CAP_EXT_WIDTH_NOIETF;
	/* 4.096 us * 2^18 ~ 1 s: a command round trip fits. */
	ib_set_cpi_resp_time(cpi, 18);
}

static void vhca_pma_port_counters(const struct vhca_counters *c, u8 port,
				   struct ib_pma_portcounters *pc)
{
	u64 rcv_errors = 0;
	u32 i;

	for (i = 0; i < VHCA_COUNTERS_WIRE_DROP_COUNT; i++)
		rcv_errors += c->values[VHCA_COUNTERS_PORT_COUNT + i];
	pc->port_select = port;
	pc->port_rcv_errors = vhca_sat16(rcv_errors);
	pc->port_xmit_data = vhca_sat32(vhca_val(c, vhca_ix_tx_bytes) / 4);
	pc->port_rcv_data = vhca_sat32(vhca_val(c, vhca_ix_rx_bytes) / 4);
	pc->port_xmit_packets = vhca_sat32(vhca_val(c, vhca_ix_tx_packets));
	pc->port_rcv_packets = vhca_sat32(vhca_val(c, vhca_ix_rx_packets));
}

static void vhca_pma_port_counters_ext(const struct vhca_counters *c, u8 port,
				       struct ib_pma_portcounters_ext *pc)
{
	pc->port_select = port;
	pc->port_xmit_data = cpu_to_be64(vhca_val(c, vhca_ix_tx_bytes) / 4);
	pc->port_rcv_data = cpu_to_be64(vhca_val(c, vhca_ix_rx_bytes) / 4);
	pc->port_xmit_packets = cpu_to_be64(vhca_val(c, vhca_ix_tx_packets));
	pc->port_rcv_packets = cpu_to_be64(vhca_val(c, vhca_ix_rx_packets));
}

/*
 * The PMA (process_mad, mad.c, hands it every MAD but the subnet-management
 * classes): PerfMgt Get of ClassPortInfo, PortCounters and
 * PortCountersExtended on this port. Everything else (other classes,
 * methods, attributes) is left to the MAD layer: IB_MAD_RESULT_SUCCESS
 * without REPLY, which hands it to the agents or answers "unsupported".
 */
int vhca_pma_process_mad(struct vhca_dev *dev, u32 port,
			 const struct ib_mad *in, struct ib_mad *out,
			 size_t *out_mad_size)
{
	const struct ib_pma_mad *pin = (const struct ib_pma_mad *)in;
	struct ib_pma_mad *pout = (struct ib_pma_mad *)out;
	__be16 attr = in->mad_hdr.attr_id;
	u8 port_select;
	int ret;

	if (in->mad_hdr.mgmt_class != IB_MGMT_CLASS_PERF_MGMT ||
	    in->mad_hdr.method != IB_MGMT_METHOD_GET ||
	    (attr != IB_PMA_CLASS_PORT_INFO && attr != IB_PMA_PORT_COUNTERS &&
	     attr != IB_PMA_PORT_COUNTERS_EXT) ||
	    port != VHCA_PORT || *out_mad_size < sizeof(*pout))
		return IB_MAD_RESULT_SUCCESS;

	memset(out, 0, sizeof(*pout));
	out->mad_hdr = in->mad_hdr;
	out->mad_hdr.method = IB_MGMT_METHOD_GET_RESP;
	out->mad_hdr.status = 0;
	if (attr == IB_PMA_CLASS_PORT_INFO) {
		vhca_pma_class_port_info((struct ib_class_port_info *)pout->data);
		return IB_MAD_RESULT_SUCCESS | IB_MAD_RESULT_REPLY;
	}
	/* PortSelect, the attribute's second octet: this port only. */
	port_select = pin->data[1];
	if (port_select != port) {
		out->mad_hdr.status =
			cpu_to_be16(IB_MGMT_MAD_STATUS_INVALID_ATTRIB_VALUE);
		return IB_MAD_RESULT_SUCCESS | IB_MAD_RESULT_REPLY;
	}
	mutex_lock(&dev->counters.lock);
	ret = vhca_counters_refresh(dev, VHCA_SETS_PMA);
	if (!ret) {
		if (attr == IB_PMA_PORT_COUNTERS)
			vhca_pma_port_counters(&dev->counters, port_select,
					       (void *)pout->data);
		else
			vhca_pma_port_counters_ext(&dev->counters, port_select,
						   (void *)pout->data);
	}
	mutex_unlock(&dev->counters.lock);
	if (ret)
		/* No answer, as a PMA that cannot read its counters. */
		return IB_MAD_RESULT_FAILURE;
	return IB_MAD_RESULT_SUCCESS | IB_MAD_RESULT_REPLY;
}
