// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * The Ethernet (RoCEv2) port (WF-10): pairing with the guest's NIC, port
 * state from that netdev, and the GID table.
 *
 * The device and a stock virtio-net NIC share one link, and QUERY_PORT gives
 * the port's MAC: the NIC is the netdev whose address is that MAC (as erdma
 * pairs its RDMA function with its NIC). ib_core then owns the RoCE GID table
 * (roce_gid_mgmt fills it from the netdev's IPv4/IPv6 addresses, A17.8) and
 * the driver mirrors each entry into the device with SET_GID, which is where
 * the device finds the source address of a frame (an AV's sgid_index).
 *
 * A netdevice notifier does the pairing, for a NIC probed before or after us
 * (registering the notifier replays NETDEV_REGISTER for the netdevs already
 * there); it runs under RTNL, which also orders every change of dev->ndev.
 * The paired netdev is held by ib_core (ib_device_set_netdev) and readers
 * take their own reference with ib_device_get_netdev. NETDEV_UNREGISTER
 * drops the pairing at once, so neither module's removal waits on the other.
 */

#include <linux/etherdevice.h>
#include <linux/netdevice.h>
#include <linux/rtnetlink.h>
#include <rdma/ib_addr.h>
#include <rdma/ib_cache.h>

#include "vhca.h"

/* AE-01: PORT_ACTIVE / PORT_ERR when the link the port rides on changes. */
static void vhca_roce_link_event(struct vhca_dev *dev, struct net_device *ndev)
{
	bool active = ndev && netif_running(ndev) && netif_carrier_ok(ndev);
	struct ib_event ev = {
		.device = &dev->ibdev,
		.element.port_num = VHCA_PORT,
	};

	if (active == dev->link_active)
		return;
	dev->link_active = active;
	if (!READ_ONCE(dev->registered))
		return;
	ev.event = active ? IB_EVENT_PORT_ACTIVE : IB_EVENT_PORT_ERR;
	ib_dispatch_event(&ev);
}

/* RTNL held. */
static void vhca_roce_pair(struct vhca_dev *dev, struct net_device *ndev)
{
	int ret;

	ret = ib_device_set_netdev(&dev->ibdev, ndev, VHCA_PORT);
	if (ret) {
		dev_err(&dev->pdev->dev, "pairing with %s: %d\n",
			netdev_name(ndev), ret);
		return;
	}
	WRITE_ONCE(dev->ndev, ndev);	/* compat.h: read without RTNL before 6.12 */
	dev_info(&dev->pdev->dev, "RoCE port paired with %s (%pM)\n",
		 netdev_name(ndev), dev->mac);
	vhca_roce_link_event(dev, ndev);
	/*
	 * Paired after ib_register_device (the NIC came later): its
	 * addresses may already be there, so have ib_core rescan them.
	 */
	if (READ_ONCE(dev->registered))
		schedule_work(&dev->rescan_work);
}

/* RTNL held. */
static void vhca_roce_unpair(struct vhca_dev *dev)
{
	if (!dev->ndev)
		return;
	if (!dev->unpairing)
		dev_info(&dev->pdev->dev, "RoCE port: %s went away\n",
			 netdev_name(dev->ndev));
	ib_device_set_netdev(&dev->ibdev, NULL, VHCA_PORT);
	WRITE_ONCE(dev->ndev, NULL);
	vhca_roce_link_event(dev, NULL);
}

static int vhca_netdev_event(struct notifier_block *nb, unsigned long event,
			     void *ptr)
{
	struct net_device *ndev = netdev_notifier_info_to_dev(ptr);
	struct vhca_dev *dev = container_of(nb, struct vhca_dev, netdev_nb);

	switch (event) {
	case NETDEV_REGISTER:
	case NETDEV_CHANGEADDR:
		if (!dev->ndev && !dev->unpairing &&
		    ndev->type == ARPHRD_ETHER &&
		    net_eq(dev_net(ndev), &init_net) &&
		    ether_addr_equal(ndev->dev_addr, dev->mac))
			vhca_roce_pair(dev, ndev);
		break;
	case NETDEV_UP:
	case NETDEV_DOWN:
	case NETDEV_CHANGE:
		if (ndev == dev->ndev)
			vhca_roce_link_event(dev, ndev);
		break;
	case NETDEV_CHANGEMTU:
		/* query_port derives active_mtu from the netdev's MTU. */
		if (ndev == dev->ndev)
			dev_dbg(&dev->pdev->dev, "%s: MTU %u\n",
				netdev_name(ndev), ndev->mtu);
		break;
	case NETDEV_UNREGISTER:
		if (ndev == dev->ndev)
			vhca_roce_unpair(dev);
		break;
	default:
		break;
	}
	return NOTIFY_DONE;
}

static void vhca_roce_rescan(struct work_struct *work)
{
	struct vhca_dev *dev = container_of(work, struct vhca_dev,
					    rescan_work);

	if (READ_ONCE(dev->registered))
		rdma_roce_rescan_device(&dev->ibdev);
}

/*
 * Before ib_register_device: pairs with a NIC already there, so that
 * registration itself fills the GID table.
 */
int vhca_roce_init(struct vhca_dev *dev)
{
	int ret;

	INIT_WORK(&dev->rescan_work, vhca_roce_rescan);
	dev->netdev_nb.notifier_call = vhca_netdev_event;
	ret = register_netdevice_notifier(&dev->netdev_nb);
	if (ret) {
		dev_err(&dev->pdev->dev, "netdevice notifier: %d\n", ret);
		return ret;
	}
	if (!dev->ndev)
		dev_info(&dev->pdev->dev,
			 "RoCE port: no netdev with MAC %pM yet; the port stays DOWN until one registers\n",
			 dev->mac);
	return 0;
}

/*
 * Before ib_unregister_device (and on a failed registration): no pairing
 * after this, and ib_core's reference on the netdev is dropped, so an rmmod
 * of virtio_net never waits for us.
 */
void vhca_roce_fini(struct vhca_dev *dev)
{
	rtnl_lock();
	dev->unpairing = true;
	rtnl_unlock();
	unregister_netdevice_notifier(&dev->netdev_nb);
	cancel_work_sync(&dev->rescan_work);
	/* The notifier's replay of NETDEV_UNREGISTER did it; be sure. */
	rtnl_lock();
	vhca_roce_unpair(dev);
	rtnl_unlock();
}

/*
 * Port state from the paired netdev: running with carrier is ACTIVE/LinkUp,
 * anything else (no NIC yet included) DOWN/Disabled. The active MTU is what
 * both the device and the link carry (A17.4: IP, UDP, BTH, extension headers
 * and ICRC inside the Ethernet MTU).
 */
void vhca_roce_query_port(struct vhca_dev *dev, struct ib_port_attr *a)
{
	struct net_device *ndev = ib_device_get_netdev(&dev->ibdev, VHCA_PORT);
	enum ib_mtu link_mtu;

	a->state = IB_PORT_DOWN;
	a->phys_state = IB_PORT_PHYS_STATE_DISABLED;
	a->lid = 0;
	a->sm_lid = 0;
	a->lmc = 0;
	a->pkey_tbl_len = 1;
	/* GIDs are the netdev's IP addresses (uverbs: IP_BASED_GIDS). */
	a->ip_gids = 1;
	if (!ndev)
		return;
	if (netif_running(ndev) && netif_carrier_ok(ndev)) {
		a->state = IB_PORT_ACTIVE;
		a->phys_state = IB_PORT_PHYS_STATE_LINK_UP;
	}
	link_mtu = iboe_get_mtu(ndev->mtu);
	if (!link_mtu)
		link_mtu = IB_MTU_256;
	a->active_mtu = min(a->active_mtu, link_mtu);
	dev_put(ndev);
}

/*
 * ib_core's RoCE GID table, mirrored into the device. The port claims
 * RoCEv2 only, so roce_gid_mgmt adds nothing else; anything else is refused
 * rather than given a type the device would not use.
 */
static int vhca_set_gid(struct vhca_dev *dev, u32 port, unsigned int index,
			const union ib_gid *gid)
{
	struct vhca_set_gid_in in = {
		.index = index,
		.port = port,
		.valid = gid ? 1 : 0,
		.gid_type = gid ? VHCA_GID_TYPE_ROCE_V2 : 0,
	};
	int ret;

	if (gid)
		memcpy(in.gid, gid->raw, sizeof(in.gid));
	ret = vhca_cmd(dev, VHCA_CMD_SET_GID, &in, sizeof(in), NULL, 0, NULL);
	if (ret)
		dev_err(&dev->pdev->dev, "SET_GID %u (%s): %d\n", index,
			gid ? "set" : "clear", ret);
	return ret;
}

int vhca_add_gid(const struct ib_gid_attr *attr, void **context)
{
	struct vhca_dev *dev = to_vdev(attr->device);

	if (attr->gid_type != IB_GID_TYPE_ROCE_UDP_ENCAP)
		return -EOPNOTSUPP;
	return vhca_set_gid(dev, attr->port_num, attr->index, &attr->gid);
}

int vhca_del_gid(const struct ib_gid_attr *attr, void **context)
{
	return vhca_set_gid(to_vdev(attr->device), attr->port_num,
			    attr->index, NULL);
}
