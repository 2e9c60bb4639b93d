//! Virtual lanes (AD-06; IBA 3.5.x and 7.6, seed 002 "虚拟通道"): a port has
//! data VLs VL0..VLn-1 and the management VL15. A packet's service level (the
//! path's SL) picks its data VL through the port's SL-to-VL table (default:
//! every SL on VL0, as a port is before a subnet manager programs it);
//! packets of QP0 (SMPs) go on VL15 whatever their SL, and VL15 carries
//! nothing else.
//!
//! Arbitration between data VLs is round robin, one packet per VL in turn
//! among the VLs that have a QP with something to send (the spec's
//! high/low-priority VLArbitration tables are not implemented). It costs
//! nothing while every SL maps to VL0 (`Engine::vl_arb` off).

use super::{PortConfig, Qp, RxDrop};
use crate::verbs::{QpType, VerbError};
use crate::wire::PacketRepr;

/// The management VL (IBA 7.6.3): QP0 only.
pub const VL15: u8 = 15;

/// Data VLs a port has unless configured otherwise (VL0..VL7; QUERY_PORT's
/// `max_vl_num` 4).
pub const DEFAULT_DATA_VLS: u8 = 8;

/// The VL of a packet of QP `qpn` at service level `sl`.
pub(crate) fn tx_vl(port: &PortConfig, qpn: u32, sl: u8) -> u8 {
    if qpn == 0 {
        return VL15;
    }
    port.sl2vl[usize::from(sl & 0xf)]
}

/// The SL of the packet a QP sends next: its path's, or for UD the address
/// vector of the WQE being sent (AD-02).
pub(crate) fn next_sl(qp: &Qp) -> u8 {
    if qp.init.qp_type == QpType::Ud {
        if let Some(ud) = qp.req.wqes.get(qp.req.cur).and_then(|w| w.wr.ud.as_ref()) {
            return ud.av.sl;
        }
    }
    qp.attr.av.sl
}

/// The VL rules of a received native packet, before its QP is looked up:
/// VL15 is for QP0 only and QP0 only on VL15 (seed 002: SMPs use VL15 only and
/// VL15 is not a data VL); a data VL the port does not have is refused like
/// one the link never negotiated.
pub(crate) fn check_rx(port: &PortConfig, pkt: &PacketRepr<'_>) -> Result<(), RxDrop> {
    let vl = pkt.lrh.vl;
    let qp0 = pkt.transport.bth.dest_qp == 0;
    match (vl == VL15, qp0) {
        (true, false) => Err(RxDrop::Vl15NotQp0),
        (false, true) => Err(RxDrop::Qp0NotVl15),
        (false, false) if vl >= port.data_vls => Err(RxDrop::UnsupportedVl),
        _ => Ok(()),
    }
}

/// Checks an SL-to-VL table for a port of `data_vls` data VLs: every entry
/// names one of them.
pub(crate) fn check_table(table: &[u8; 16], data_vls: u8) -> Result<(), VerbError> {
    if data_vls == 0 || data_vls > 15 || table.iter().any(|&v| v >= data_vls) {
        return Err(VerbError::InvalidAttr);
    }
    Ok(())
}

/// Round robin over VLs: how far after `last` VL `vl` comes (0 = next).
pub(crate) fn rr_distance(last: u8, vl: u8) -> u8 {
    vl.wrapping_sub(last).wrapping_sub(1) & 0xf
}

/// The encoding of a number of data VLs in PortInfo:VLCap and verbs'
/// `max_vl_num` (1: VL0, 2: VL0-1, 3: VL0-3, 4: VL0-7, 5: VL0-14).
pub fn vl_cap(data_vls: u8) -> u8 {
    match data_vls {
        0 | 1 => 1,
        2..=3 => 2,
        4..=7 => 3,
        8..=14 => 4,
        _ => 5,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Engine, Limits};

    /// AD-06: a port configured with a table past its data VLs is not
    /// trusted: every SL goes on VL0 (and the engine does not panic).
    #[test]
    fn a_bad_configured_table_falls_back_to_vl0() {
        let mut port = PortConfig::new(1, 1);
        port.sl2vl[4] = 9;
        let e = Engine::new(port, Limits::default());
        assert_eq!(e.port().sl2vl, [0; 16]);
        assert_eq!(tx_vl(e.port(), 5, 4), 0);
        assert_eq!(tx_vl(e.port(), 0, 4), VL15);
        let mut port = PortConfig::new(1, 1);
        port.sl2vl[4] = 3;
        let e = Engine::new(port, Limits::default());
        assert_eq!(tx_vl(e.port(), 5, 4), 3);
        assert_eq!(vl_cap(8), 4);
        assert_eq!(vl_cap(1), 1);
        assert_eq!(vl_cap(15), 5);
    }
}
