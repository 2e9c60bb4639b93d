//! The engine's side of subnet management (issue 26 items 1 and 2; AD-09): QP0, the
//! Subnet Management Interface's QP, and the port values a subnet manager sets
//! through the device's SMA (`crate::mad::Sma`), which the engine only applies.
//!
//! QP0's packets need nothing new in the data path: a UD QP numbered 0 sends on
//! VL15 whatever its SL (`vl::tx_vl`, IBA 7.6.4: SMPs use VL15 only and ignore the
//! SL; VL15 takes no part in VL arbitration but goes first, `vl::Arbiter::pick`),
//! its BTH:P_Key is not checked on receipt (C9-41, `io::check_headers`) nor its
//! DETH:Q_Key (C9-48), and a packet on VL15 for another QP, or for QP0 on a data
//! VL, is dropped and counted (`vl::check_rx`: `Vl15NotQp0`, `Qp0NotVl15`).

use super::{Engine, QpInit};
use crate::verbs::{QpType, VerbError};

/// The Subnet Management Interface's QP number (IBA 3.9.2).
pub const SMI_QPN: u32 = 0;

impl Engine {
    /// Creates QP 0, the Subnet Management Interface QP (IBA 3.9.2; AD-09): a UD
    /// QP with the fixed number 0, one per port, as [`Engine::create_gsi_qp`]
    /// creates QP 1. `Busy` if it exists; `InvalidAttr` unless `init` asks for
    /// UD; `NotSupported` on an Ethernet port (RoCE has no subnet manager and no
    /// QP0, IBA A17.2).
    pub fn create_smi_qp(&mut self, init: QpInit) -> Result<u32, VerbError> {
        if self.port.is_ethernet() {
            return Err(VerbError::NotSupported);
        }
        if init.qp_type != QpType::Ud {
            return Err(VerbError::InvalidAttr);
        }
        if self.qps.contains_key(&SMI_QPN) {
            return Err(VerbError::Busy);
        }
        self.create_qp_numbered(init, Some(SMI_QPN), None)
    }

    /// Whether QP0 exists (a guest SM or MAD layer opened it).
    pub fn has_smi_qp(&self) -> bool {
        self.qps.contains_key(&SMI_QPN)
    }

    /// Sets the port's base LID and LMC, as the SM's SubnSet(PortInfo) did
    /// (AD-01): packets for the new LIDs are accepted from now on, the old
    /// ones refused (`io::check_lids`), and QPs send from the new LID.
    pub fn set_port_lid(&mut self, lid: u16, lmc: u8) {
        self.port.lid = lid;
        self.port.lmc = lmc.min(7);
    }

    /// Sets the port's P_Key table, as the SM's SubnSet(P_KeyTable) did (AD-05).
    /// An empty table keeps entry 0 as the invalid P_Key 0 (nothing matches it).
    pub fn set_pkeys(&mut self, pkeys: &[u16]) {
        self.port.pkeys = if pkeys.is_empty() {
            vec![0]
        } else {
            pkeys.to_vec()
        };
    }

    /// Counts a packet the port received that the caller took before the
    /// engine: an SMP for the management plane (VL15), or a data packet the
    /// port's state refused (the caller counts why). The port's received
    /// packets and bytes count every packet it took, as a real port's
    /// PortRcvPkts does.
    pub fn count_rx_elsewhere(&mut self, len: usize) {
        self.counters.rx_packets += 1;
        self.counters.rx_bytes += len as u64;
    }

    /// Counts a packet the port sent that the engine did not build (an SMA's
    /// response or trap).
    pub fn count_tx_elsewhere(&mut self, len: usize) {
        self.counters.tx_packets += 1;
        self.counters.tx_bytes += len as u64;
    }

    /// Sets the port's GID prefix (PortInfo:GIDPrefix).
    pub fn set_gid_prefix(&mut self, prefix: u64) {
        self.port.gid_prefix = prefix;
    }

    /// Sets the port's IBA congestion control (annex A10.3, `cc::iba`), as
    /// the CC manager left it in the port's CC agent (CACongestionSetting,
    /// the CCT); `None` turns it off. QPs already slowed keep their index
    /// and follow the new table from their next BECN or timer.
    pub fn set_cc_iba(&mut self, params: Option<crate::cc::iba::Params>) {
        self.port.cc.iba = params;
    }
}
