//! Conversions between the ABI's records and the engine's verbs types
//! (ARCHITECTURE.md §1): total functions, one place. What a guest wrote is
//! *checked* where it arrives (the command handlers in `cmdq/`, the WQE decoders
//! in `datapath`) and converted here; what the engine reports (attributes,
//! address vectors, completions) is converted here for QUERY_QP, the context
//! window and the CQ ring.

use transport::verbs::{self as tv, AddressVector, Completion, GlobalRoute, NetworkHdr};

use crate::abi;
use crate::abi::cmd::{AltPath, Av, QpAttr, QpCap};
use crate::abi::layout::Field;
use crate::abi::verbs::num;

/// An address vector of the ABI as the engine's.
pub fn av_from_abi(av: &Av) -> AddressVector {
    AddressVector {
        dlid: av.dlid,
        sl: av.sl & 0xf,
        src_path_bits: av.src_path_bits & 0x7f,
        static_rate: av.static_rate,
        grh: (av.is_global != 0).then_some(GlobalRoute {
            dgid: av.dgid,
            flow_label: av.flow_label & 0xf_ffff,
            sgid_index: av.sgid_index,
            hop_limit: av.hop_limit,
            traffic_class: av.traffic_class,
        }),
        dmac: av.dmac,
    }
}

/// A CQE of an engine completion (CQ-01).
pub fn cqe_of(c: &Completion, owner: u8) -> abi::cqe::Cqe {
    let mut e = abi::cqe::Cqe::ZERO;
    e.wr_id = c.wr_id;
    e.byte_len = c.byte_len;
    e.imm_or_inv = c.imm_data;
    e.qp_num = c.qp_num;
    e.src_qp = c.src_qp;
    e.wc_flags = c.flags.0;
    e.slid = c.slid;
    e.pkey_index = c.pkey_index;
    e.status = c.status as u8;
    e.opcode = c.opcode as u8;
    e.sl = c.sl;
    e.dlid_path_bits = c.dlid_path_bits;
    // RoCE receives (WF-10): what the kernel's ib_wc carries for a reply.
    if let Some(mac) = c.smac {
        e.smac = mac;
        e.wc_flags |= abi::verbs::wc_flags::WITH_SMAC;
    }
    let net = match c.network_hdr {
        NetworkHdr::Ib => None,
        NetworkHdr::Ipv4 => Some(abi::cqe::NetworkHdr::Ipv4),
        NetworkHdr::Ipv6 => Some(abi::cqe::NetworkHdr::Ipv6),
    };
    if let Some(n) = net {
        e.network_hdr_type = n.raw();
        e.wc_flags |= abi::verbs::wc_flags::WITH_NETWORK_HDR_TYPE;
    }
    e.srqn = c.xrc_srq.unwrap_or(0);
    e.owner = owner;
    e
}

pub fn cap_to_abi(c: &tv::QpCap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// The ABI form of an engine address vector.
pub fn av_to_abi(av: &tv::AddressVector) -> Av {
    let g = av.grh.unwrap_or_default();
    Av {
        dgid: g.dgid,
        flow_label: g.flow_label,
        dlid: av.dlid,
        sl: av.sl,
        src_path_bits: av.src_path_bits,
        static_rate: av.static_rate,
        is_global: u8::from(av.grh.is_some()),
        sgid_index: g.sgid_index,
        hop_limit: g.hop_limit,
        traffic_class: g.traffic_class,
        port_num: num::PORT as u8,
        pkey_index: 0,
        dmac: av.dmac,
        rsvd2: [0; 2],
    }
}

/// The ABI form of a QP's attributes (QUERY_QP).
/// A QP's alternate path as QUERY_QP reports it (AD-10).
pub fn alt_path_to_abi(a: &tv::QpAttr) -> AltPath {
    AltPath {
        ah_attr: av_to_abi(&a.alt_av),
        pkey_index: a.alt_pkey_index,
        port_num: a.alt_port_num,
        timeout: a.alt_timeout,
        rsvd: 0,
    }
}

pub fn qp_attr_to_abi(state: tv::QpState, a: &tv::QpAttr, cap: &tv::QpCap) -> QpAttr {
    QpAttr {
        qp_state: state as u8,
        cur_qp_state: state as u8,
        path_mtu: a.path_mtu as u8,
        path_mig_state: a.path_mig_state as u8,
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.access.0,
        pkey_index: a.pkey_index,
        port_num: a.port_num,
        en_sqd_async_notify: u8::from(a.en_sqd_async_notify),
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        // Set by QUERY_QP from `Engine::sq_draining` (QS-05).
        sq_draining: 0,
        rsvd: 0,
        ah_attr: av_to_abi(&a.av),
        cap: cap_to_abi(cap),
    }
}
