//! Commands about the device and its port: QUERY_DEVICE, QUERY_PORT, SET_GID,
//! QUERY_COUNTERS, MAD_IFC, SET_PORT_CAPS and SET_NODE_DESC.

use transport::engine::LinkLayer;

use crate::abi::cmd::{
    mad_ifc_flag, pbl_const, DeviceAttr, GidType, MadIfcIn, MadIfcOut, PortAttr, QueryCountersIn,
    QueryCountersOut, QueryPortIn, SetGidIn, SetNodeDescIn, SetPortCapsIn, SetPortCapsOut, Status,
};
use crate::abi::counters::CounterSet;
use crate::abi::ident::ident;
use crate::abi::verbs::{num, AtomicCap, PortState};
use crate::mgmt::MadIfcResult;

use super::{check_port, fail, reserved, Exec, Fail, Syndrome};

/// The Local CA ACK Delay the device reports (IBA 14.2.5.6: 4.096 us *
/// 2^value); software processing is slower than silicon, as rxe reports.
const LOCAL_CA_ACK_DELAY: u8 = 15;

/// The most pages an MR's page list may have: the ABI's limit, or fewer if the
/// memory budget could not hold a longer list (ARCHITECTURE.md §9).
fn max_mr_pages(x: &Exec<'_>) -> u64 {
    let budget = x.hca.port.engine().budget().limit();
    let fits = budget.saturating_sub(transport::mr::mr_bytes(0)) / 8;
    u64::from(pbl_const::MAX_PAGES).min(fits)
}

pub(super) fn query_device(x: &mut Exec<'_>) -> Result<DeviceAttr, Fail> {
    let c = x.hca.caps;
    let max_mr_size = max_mr_pages(x) << pbl_const::MAX_PAGE_SHIFT;
    let port = x.hca.port.engine().port();
    let page_sizes =
        (pbl_const::MIN_PAGE_SHIFT..=pbl_const::MAX_PAGE_SHIFT).fold(0u64, |acc, s| acc | (1 << s));
    Ok(DeviceAttr {
        fw_ver: u64::from(ident::ABI_VERSION),
        node_guid: port.port_guid,
        sys_image_guid: port.port_guid,
        max_mr_size,
        page_size_cap: page_sizes,
        vendor_id: ident::PCI_VENDOR_ID,
        vendor_part_id: ident::PCI_DEVICE_ID,
        hw_ver: ident::PCI_REVISION,
        cap_flags: c.flags,
        max_qp: c.max_qp,
        max_qp_wr: c.max_qp_wr,
        max_sge: c.max_sge,
        max_cq: c.max_cq,
        max_cqe: c.max_cqe,
        max_mr: c.max_mr,
        max_pd: c.max_pd,
        max_srq: c.max_srq,
        max_srq_wr: c.max_srq_wr,
        max_srq_sge: c.max_sge,
        max_eq: c.max_eq,
        max_eqe: 1u32.checked_shl(c.max_eq_log2).unwrap_or(u32::MAX),
        max_inline_data: c.max_inline,
        max_qp_rd_atom: c.max_rd_atomic,
        max_qp_init_rd_atom: c.max_rd_atomic,
        max_res_rd_atom: c.max_rd_atomic.saturating_mul(c.max_qp),
        max_msg_sz: u32::try_from(transport::engine::MAX_MSG_SIZE).unwrap_or(u32::MAX),
        num_uars: c.num_uars,
        msix_vectors: u16::try_from(c.msix_vectors).unwrap_or(u16::MAX),
        max_pkeys: u16::try_from(port.pkeys.len()).unwrap_or(u16::MAX),
        local_ca_ack_delay: LOCAL_CA_ACK_DELAY,
        phys_port_cnt: num::PORT as u8,
        atomic_cap: AtomicCap::Hca.raw(),
        rsvd: 0,
        max_fast_reg_pages: c.max_fast_reg_pages,
        odp_caps: c.odp_caps(),
        max_mcast_grp: c.max_mcast_grp,
        max_mcast_qp_attach: c.max_mcast_qp_attach,
        max_total_mcast_qp_attach: c.max_total_mcast_qp_attach,
        rsvd3: 0,
    })
}

/// `IB_WIDTH_4X` and `IB_SPEED_QDR`: nominal, the fabric is a socket.
const ACTIVE_WIDTH: u8 = 2;
const ACTIVE_SPEED: u8 = 4;
/// IBA PortPhysicalState LinkUp.
const PHYS_STATE_LINK_UP: u8 = 5;
/// IBA PortPhysicalState Polling: no link partner.
const PHYS_STATE_POLLING: u8 = 2;
/// `IBV_LINK_LAYER_INFINIBAND`.
const LINK_LAYER_IB: u8 = 1;
/// `IBV_LINK_LAYER_ETHERNET`.
const LINK_LAYER_ETHERNET: u8 = 2;

pub(super) fn query_port(x: &mut Exec<'_>, i: QueryPortIn) -> Result<PortAttr, Fail> {
    check_port(i.port)?;
    reserved(i.rsvd == [0; 3])?;
    let up = x.hca.port.is_up();
    // AE-01: the link's state, or on an InfiniBand port the SMA's (the SM's
    // values: issue 26; IBA 14.2.5.6 PortState and PortPhysicalState have the
    // verbs' numbers).
    let p = x.hca.port.engine().port();
    // Issue 27 item 3: the active MTU is PortInfo:NeighborMTU, the MTU the
    // SM enabled on the link (IBA 14.2.5.6; the fabric file's without an
    // SM), never above the port's own (MTUCap).
    let max_mtu = p.max_mtu as u8;
    let (state, phys_state, sm_lid, sm_sl, active_mtu) = match x.hca.port.mgmt() {
        Some(m) => {
            let pi = m.sma().port().info;
            (
                pi.port_state,
                pi.port_physical_state,
                pi.master_sm_lid,
                pi.master_sm_sl,
                pi.neighbor_mtu.clamp(1, max_mtu),
            )
        }
        None if up => (PortState::Active.raw(), PHYS_STATE_LINK_UP, 0, 0, max_mtu),
        None => (PortState::Down.raw(), PHYS_STATE_POLLING, 0, 0, max_mtu),
    };
    let mut out = PortAttr::default();
    let n = p.pkeys.len().min(out.pkeys.len());
    out.pkeys[..n].copy_from_slice(&p.pkeys[..n]);
    let (link_layer, mac, gid_tbl_len) = match p.link {
        LinkLayer::InfiniBand => (LINK_LAYER_IB, [0; 6], 1),
        LinkLayer::Ethernet { mac } => (LINK_LAYER_ETHERNET, mac, p.roce_gids.len() as u16),
    };
    Ok(PortAttr {
        port_guid: p.port_guid,
        gid_prefix: p.gid_prefix,
        gid0: p.gid(),
        max_msg_sz: u32::try_from(transport::engine::MAX_MSG_SIZE).unwrap_or(u32::MAX),
        // The fabric file's or, once an SM set them, the SM's (the engine
        // applies what the SMA holds, `mgmt`).
        lid: p.lid,
        sm_lid,
        pkey_tbl_len: n as u16,
        gid_tbl_len,
        state,
        phys_state,
        max_mtu,
        active_mtu,
        lmc: p.lmc,
        sm_sl,
        link_layer,
        active_width: ACTIVE_WIDTH,
        active_speed: ACTIVE_SPEED,
        // AD-06: the engine's data VLs; VLs are an InfiniBand link's, a RoCE
        // port reports VL0 only.
        max_vl_num: if p.is_ethernet() {
            1
        } else {
            transport::engine::vl_cap(p.data_vls)
        },
        mac,
        ..out
    })
}

/// MAD_IFC (issue 26 item 2; AD-09): the guest's MAD layer hands the device's SMA
/// one MAD, as mlx4/mlx5 `process_mad` hand theirs to firmware (`mgmt::Mgmt::mad_ifc`
/// says what comes back). `NotSupported` on a port with no SMA (RoCE).
pub(super) fn mad_ifc(x: &mut Exec<'_>, i: MadIfcIn) -> Result<MadIfcOut, Fail> {
    check_port(i.port)?;
    reserved(i.rsvd0 == 0 && i.rsvd1 == [0; 12])?;
    let r = x
        .hca
        .port
        .mad_ifc(&i.mad, i.slid, x.now)
        .ok_or(fail(Status::NotSupported, Syndrome::Unsupported))?;
    let mut out = MadIfcOut::default();
    match r {
        MadIfcResult::NotHandled => {}
        MadIfcResult::Consumed => out.flags = mad_ifc_flag::CONSUMED,
        MadIfcResult::Reply(mad) => {
            out.flags = mad_ifc_flag::REPLY;
            out.mad = *mad;
        }
    }
    Ok(out)
}

/// SET_PORT_CAPS (AD-09): the guest's `modify_port` capability bits to the
/// SMA's PortInfo:CapabilityMask, as mlx4's SET_PORT. Bits the host may not
/// change, or both set and cleared, are BAD_PARAM and change nothing
/// (`Sma::modify_host_capabilities`).
pub(super) fn set_port_caps(x: &mut Exec<'_>, i: SetPortCapsIn) -> Result<SetPortCapsOut, Fail> {
    check_port(i.port)?;
    reserved(i.rsvd0 == [0; 3] && i.rsvd1 == 0)?;
    let mask = x
        .hca
        .port
        .set_port_caps(i.set, i.clear, x.now)
        .ok_or(fail(Status::NotSupported, Syndrome::Unsupported))?
        .map_err(|e| {
            log::debug!("SET_PORT_CAPS refused: {e}");
            fail(Status::BadParam, Syndrome::PortCaps)
        })?;
    Ok(SetPortCapsOut {
        capability_mask: mask,
        rsvd: 0,
    })
}

/// SET_NODE_DESC (AD-09): the guest's node description to the SMA's
/// NodeDescription, as mlx4's SET_NODE. The description is `len` bytes with no
/// NUL, the rest of the 64 NUL (IBA 14.2.5.2: NUL padded); anything else is
/// BAD_PARAM and changes nothing.
pub(super) fn set_node_desc(x: &mut Exec<'_>, i: SetNodeDescIn) -> Result<(), Fail> {
    reserved(i.rsvd == [0; 7])?;
    let len = usize::from(i.len);
    let bad = fail(Status::BadParam, Syndrome::NodeDesc);
    let (text, pad) = i.desc.split_at_checked(len).ok_or(bad)?;
    if text.contains(&0) || pad.iter().any(|&b| b != 0) {
        return Err(bad);
    }
    x.hca
        .port
        .set_node_description(transport::mad::NodeDescription(i.desc), x.now)
        .ok_or(fail(Status::NotSupported, Syndrome::Unsupported))?;
    Ok(())
}

/// SET_GID: one entry of a RoCE port's GID table (WF-10). All or nothing: the
/// checks come before the table changes.
pub(super) fn set_gid(x: &mut Exec<'_>, i: SetGidIn) -> Result<(), Fail> {
    check_port(i.port)?;
    reserved(i.rsvd == [0; 3])?;
    let bad = fail(Status::BadParam, Syndrome::Gid);
    let gid = match i.valid {
        0 => {
            reserved(i.gid_type == 0 && i.gid == [0; 16])?;
            None
        }
        1 => {
            if GidType::from_raw(i.gid_type) != Some(GidType::RoceV2) || i.gid == [0; 16] {
                return Err(bad);
            }
            Some(i.gid)
        }
        _ => return Err(bad),
    };
    let engine = x.hca.port.engine_mut();
    if !engine.port().is_ethernet() {
        return Err(fail(Status::NotSupported, Syndrome::Unsupported));
    }
    if usize::from(i.index) >= engine.port().roce_gids.len() {
        return Err(bad);
    }
    engine.set_roce_gid(usize::from(i.index), gid)?;
    Ok(())
}

pub(super) fn query_counters(
    x: &mut Exec<'_>,
    i: QueryCountersIn,
) -> Result<QueryCountersOut, Fail> {
    check_port(i.port)?;
    reserved(i.rsvd == 0)?;
    let set = CounterSet::from_raw(i.set).ok_or(fail(Status::BadParam, Syndrome::CounterSet))?;
    let h = device_counters(x.hca);
    let values = set.values(x.hca.port.engine().counters(), &h);
    let mut out = QueryCountersOut::default();
    let n = values.len().min(out.values.len());
    out.count = n as u32;
    out.values[..n].copy_from_slice(&values[..n]);
    Ok(out)
}

/// The device set's values as QUERY_COUNTERS and the counter report give
/// them: the data path's counters, the memory budget's, and the fabric key
/// stage's drops when the link has one (issue 13).
pub fn device_counters(hca: &crate::hca::Hca) -> crate::abi::counters::HcaCounters {
    let h = hca.counters.with_budget(hca.port.engine().budget());
    match hca.port.link().auth_counters() {
        Some(a) => a.into_device(h),
        None => h,
    }
}
