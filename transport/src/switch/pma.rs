//! The switch's Performance Management agent (issue 26 items 3 and 6; AD-09): the
//! PerfMgt class (0x04, IBA 16.1) on QP1 of the switch's LID, so `perfquery` reads
//! a switch port. It answers Get(ClassPortInfo), Get/Set(PortCounters) and
//! Get/Set(PortCountersExtended) over the switch's per-port [`PortCounters`], in the
//! layouts of Linux's `include/rdma/ib_pma.h` (the HCA's PMA in
//! guest-driver/kernel/counters.c `vhca_pma_*` fills the same ones).
//!
//! Interface: [`answer`] takes a request MAD and the port counters (index 0 the
//! management port) and gives the GetResp MAD, or `None` for what gets no answer
//! (a response, a MAD of another class). The switch core wraps it in a packet.

use super::PortCounters;
use crate::mad::header::{emit_class_port_info, method, status, BASE_VERSION};
use crate::mad::MAD_LEN;
use crate::wire::field::{be16, set_be16, set_be32, set_be64};

/// The Performance Management class (IBA 13.4.4).
pub const CLASS_PERF_MGT: u8 = 0x04;
/// PerfMgt's only class version (IBA 16.1.1).
pub const PERF_MGT_CLASS_VERSION: u8 = 1;
/// The GSI's QP and the Q_Key every GSI datagram carries (IBA 13.5.1).
pub const GSI_QP: u32 = 1;
pub const GSI_QKEY: u32 = 0x8001_0000;
/// PortSelect meaning every port, summed (IBA 16.1.3.5, AllPortSelect).
pub const ALL_PORTS: u8 = 0xff;

/// PerfMgt attribute IDs (IBA 16.1.2, `ib_pma.h`).
pub mod pma_attr {
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    pub const PORT_COUNTERS: u16 = 0x0012;
    pub const PORT_COUNTERS_EXT: u16 = 0x001d;
}

/// ClassPortInfo:CapabilityMask bits of PerfMgt (`ib_pma.h` IB_PMA_CLASS_CAP_*;
/// infiniband-diags perfquery.c IB_PM_*).
pub mod cap {
    /// PortSelect 0xFF sums every port (perfquery -a then asks once).
    pub const ALL_PORT_SELECT: u16 = 1 << 8;
    /// PortCountersExtended without the unicast/multicast ("IETF") counters, as
    /// Linux's `ib_pma` HCAs report it; perfquery -x accepts either width bit.
    pub const EXT_WIDTH_NOIETF: u16 = 1 << 10;
}

/// PortCounters:CounterSelect bits a Set clears by (IBA 16.1.3.5, `ib_pma.h`
/// IB_PMA_SEL_*), for the counters this switch keeps.
mod sel {
    pub const PORT_RCV_ERRORS: u16 = 0x0008;
    pub const PORT_XMIT_DISCARDS: u16 = 0x0040;
    pub const PORT_VL15_DROPPED: u16 = 0x0800;
    pub const PORT_XMIT_DATA: u16 = 0x1000;
    pub const PORT_RCV_DATA: u16 = 0x2000;
    pub const PORT_XMIT_PACKETS: u16 = 0x4000;
    pub const PORT_RCV_PACKETS: u16 = 0x8000;
    /// PortCountersExtended:CounterSelect (IB_PMA_SELX_*).
    pub const X_XMIT_DATA: u16 = 0x0001;
    pub const X_RCV_DATA: u16 = 0x0002;
    pub const X_XMIT_PACKETS: u16 = 0x0004;
    pub const X_RCV_PACKETS: u16 = 0x0008;
}

/// Where the class data starts in a PerfMgt MAD: 24 header octets, 40 reserved
/// (`struct ib_pma_mad`).
const DATA: usize = 64;
const METHOD: usize = 3;
const STATUS: core::ops::Range<usize> = 4..6;
const ATTR_ID: core::ops::Range<usize> = 16..18;

/// The GetResp to a PerfMgt request MAD, or `None` for what gets no answer (not a
/// 256-byte MAD of class 0x04, or a response). `ports` is indexed by port number.
pub fn answer(req: &[u8], ports: &mut [PortCounters]) -> Option<[u8; MAD_LEN]> {
    let mut mad: [u8; MAD_LEN] = req.try_into().ok()?;
    if mad[1] != CLASS_PERF_MGT || mad[METHOD] & method::RESPONSE != 0 {
        return None;
    }
    let m = mad[METHOD];
    let attr = be16(&mad[ATTR_ID]);
    let st = if mad[0] != BASE_VERSION || mad[2] != PERF_MGT_CLASS_VERSION {
        status::BAD_VERSION
    } else if m != method::GET && m != method::SET {
        status::UNSUPPORTED_METHOD
    } else {
        let data: &mut [u8; MAD_LEN - DATA] = (&mut mad[DATA..]).try_into().ok()?;
        match (attr, m) {
            (pma_attr::CLASS_PORT_INFO, method::GET) => {
                class_port_info(data);
                status::OK
            }
            (pma_attr::PORT_COUNTERS, _) | (pma_attr::PORT_COUNTERS_EXT, _) => {
                counters(attr, m == method::SET, data, ports)
            }
            _ => status::UNSUPPORTED_METHOD_ATTR,
        }
    };
    mad[METHOD] = method::GET_RESP;
    set_be16(&mut mad[STATUS], st);
    Some(mad)
}

/// ClassPortInfo (IBA 13.4.8.1): versions, CapabilityMask, RespTimeValue; no
/// redirection, no traps.
fn class_port_info(d: &mut [u8; MAD_LEN - DATA]) {
    let caps = cap::ALL_PORT_SELECT | cap::EXT_WIDTH_NOIETF;
    emit_class_port_info(d, PERF_MGT_CLASS_VERSION, caps);
}

/// PortCounters / PortCountersExtended of PortSelect (0..=N, or 0xFF for every
/// physical port summed); a Set first clears the counters CounterSelect names.
/// One set of counters stands behind both attributes, so a Set of either clears
/// what the other reads too.
fn counters(attr: u16, set: bool, d: &mut [u8; MAD_LEN - DATA], ports: &mut [PortCounters]) -> u16 {
    let port_select = d[1];
    let counter_select = be16(&d[2..4]);
    let range = if port_select == ALL_PORTS {
        1..ports.len()
    } else if usize::from(port_select) < ports.len() {
        usize::from(port_select)..usize::from(port_select) + 1
    } else {
        // IBA 16.1.3.5: a PortSelect naming no port is an invalid field.
        return status::INVALID_FIELD;
    };
    if set {
        for pc in &mut ports[range.clone()] {
            clear(attr, counter_select, pc);
        }
    }
    let sum = ports[range]
        .iter()
        .fold(PortCounters::default(), |a, p| add(&a, p));
    d.fill(0);
    d[1] = port_select;
    set_be16(&mut d[2..4], counter_select);
    if attr == pma_attr::PORT_COUNTERS {
        port_counters(&sum, d);
    } else {
        port_counters_ext(&sum, d);
    }
    status::OK
}

fn clear(attr: u16, select: u16, pc: &mut PortCounters) {
    let has = |bit: u16| select & bit != 0;
    let (xd, rd, xp, rp) = if attr == pma_attr::PORT_COUNTERS {
        if has(sel::PORT_RCV_ERRORS) {
            pc.rcv_errors = 0;
        }
        if has(sel::PORT_XMIT_DISCARDS) {
            pc.xmit_discards = 0;
        }
        if has(sel::PORT_VL15_DROPPED) {
            pc.vl15_dropped = 0;
        }
        (
            sel::PORT_XMIT_DATA,
            sel::PORT_RCV_DATA,
            sel::PORT_XMIT_PACKETS,
            sel::PORT_RCV_PACKETS,
        )
    } else {
        (
            sel::X_XMIT_DATA,
            sel::X_RCV_DATA,
            sel::X_XMIT_PACKETS,
            sel::X_RCV_PACKETS,
        )
    };
    if has(xd) {
        pc.xmit_data_words = 0;
    }
    if has(rd) {
        pc.rcv_data_words = 0;
    }
    if has(xp) {
        pc.xmit_packets = 0;
    }
    if has(rp) {
        pc.rcv_packets = 0;
    }
}

fn add(a: &PortCounters, b: &PortCounters) -> PortCounters {
    PortCounters {
        xmit_packets: a.xmit_packets.saturating_add(b.xmit_packets),
        rcv_packets: a.rcv_packets.saturating_add(b.rcv_packets),
        xmit_data_words: a.xmit_data_words.saturating_add(b.xmit_data_words),
        rcv_data_words: a.rcv_data_words.saturating_add(b.rcv_data_words),
        rcv_errors: a.rcv_errors.saturating_add(b.rcv_errors),
        xmit_discards: a.xmit_discards.saturating_add(b.xmit_discards),
        vl15_dropped: a.vl15_dropped.saturating_add(b.vl15_dropped),
    }
}

/// IBA 16.1.3.5: a counter stops at all ones rather than wrap.
fn sat16(v: u64) -> u16 {
    u16::try_from(v).unwrap_or(u16::MAX)
}
fn sat32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// PortCounters' layout (`struct ib_pma_portcounters`): the error counters this
/// switch does not keep (symbol errors, link recovery, ...) read 0.
fn port_counters(pc: &PortCounters, d: &mut [u8]) {
    set_be16(&mut d[8..10], sat16(pc.rcv_errors));
    set_be16(&mut d[14..16], sat16(pc.xmit_discards));
    set_be16(&mut d[22..24], sat16(pc.vl15_dropped));
    set_be32(&mut d[24..28], sat32(pc.xmit_data_words));
    set_be32(&mut d[28..32], sat32(pc.rcv_data_words));
    set_be32(&mut d[32..36], sat32(pc.xmit_packets));
    set_be32(&mut d[36..40], sat32(pc.rcv_packets));
}

/// PortCountersExtended' layout (`struct ib_pma_portcounters_ext`): 64-bit data
/// and packet counters; the unicast/multicast ones are not kept (NOIETF) and read 0.
fn port_counters_ext(pc: &PortCounters, d: &mut [u8]) {
    set_be64(&mut d[8..16], pc.xmit_data_words);
    set_be64(&mut d[16..24], pc.rcv_data_words);
    set_be64(&mut d[24..32], pc.xmit_packets);
    set_be64(&mut d[32..40], pc.rcv_packets);
}
