//! The state of the port an SMA manages: its PortInfo and tables, the logical and
//! physical port state machines as the SM and the link drive them (IBA 7.2,
//! 14.2.5.6), and the checks of a SubnSet(PortInfo).

use crate::mad::attr::{SlToVlTable, VlArbBlock, VlArbEntry};
use crate::mad::header::status;
use crate::mad::portinfo::{cap, phys_state, port_state, PortInfoRepr};

/// The most P_Keys a port may hold (64 blocks of 32): bounds the table whatever the
/// configuration says.
pub const MAX_PKEYS: usize = 2048;

/// What one port holds (owned by the [`Sma`](super::Sma)). `info` is the PortInfo
/// as stored: `local_port_num` and `client_reregister` are filled per request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortState {
    pub info: PortInfoRepr,
    /// GUIDInfo: `guids[0]` is the port GUID (read-only, IBA 14.2.5.5); length GUIDCap.
    pub guids: Vec<u64>,
    /// P_KeyTable; length NodeInfo:PartitionCap.
    pub pkeys: Vec<u16>,
    pub sl2vl: SlToVlTable,
    /// VLArbitrationTable blocks 1..=4: low 0-31, low 32-63, high 0-31, high 32-63.
    pub vlarb: [VlArbBlock; 4],
}

impl PortState {
    /// A port as it is before any SM has seen it: Down, LID 0, no M_Key, the default
    /// P_Key alone in its table, every SL on VL0, a fair low-priority VL arbitration.
    pub fn new(port_num: u8, port_guid: u64, guid_cap: u8, partition_cap: u16) -> PortState {
        let info = PortInfoRepr {
            gid_prefix: 0xfe80_0000_0000_0000,
            capability_mask: cap::IS_NOTICE_SUPPORTED
                | cap::IS_TRAP_SUPPORTED
                | cap::IS_SL_MAPPING_SUPPORTED
                | cap::IS_SYSTEM_IMAGE_GUID_SUPPORTED
                | cap::IS_CM_SUPPORTED
                | cap::IS_CLIENT_REREGISTRATION_SUPPORTED,
            local_port_num: port_num,
            // 1X/4X, SDR..QDR: what the virtual link reports.
            link_width_enabled: 0x3,
            link_width_supported: 0x3,
            link_width_active: 0x2,
            link_speed_supported: 0x7,
            link_speed_active: 0x4,
            link_speed_enabled: 0x7,
            port_state: port_state::DOWN,
            port_physical_state: phys_state::POLLING,
            link_down_default_state: phys_state::POLLING,
            neighbor_mtu: 5,
            mtu_cap: 5,
            vl_cap: 4,
            operational_vls: 4,
            vl_high_limit: 0,
            vl_arbitration_high_cap: 8,
            vl_arbitration_low_cap: 8,
            vl_stall_count: 7,
            hoq_life: 0x1f,
            partition_enforcement_inbound: true,
            partition_enforcement_outbound: true,
            guid_cap: guid_cap.max(1),
            subnet_timeout: 18,
            resp_time_value: 18,
            ..PortInfoRepr::default()
        };
        let mut guids = vec![0u64; usize::from(guid_cap.max(1))];
        guids[0] = port_guid;
        let mut pkeys = vec![0u16; usize::from(partition_cap.max(1)).min(MAX_PKEYS)];
        pkeys[0] = 0xffff;
        let mut low = VlArbBlock::default();
        for (vl, e) in low.0.iter_mut().take(8).enumerate() {
            *e = VlArbEntry {
                vl: vl as u8,
                weight: 1,
            };
        }
        PortState {
            info,
            guids,
            pkeys,
            sl2vl: SlToVlTable::default(),
            vlarb: [
                low,
                VlArbBlock::default(),
                VlArbBlock::default(),
                VlArbBlock::default(),
            ],
        }
    }

    /// Number of 32-entry P_KeyTable blocks.
    pub fn pkey_blocks(&self) -> usize {
        self.pkeys.len().div_ceil(32)
    }

    /// Number of 8-entry GUIDInfo blocks.
    pub fn guid_blocks(&self) -> usize {
        self.guids.len().div_ceil(8)
    }
}

/// What a successful SubnSet(PortInfo) changed, for the SMA's events.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PortInfoChanges {
    pub lid: bool,
    pub sm: bool,
    pub state: bool,
    pub gid_prefix: bool,
    pub client_reregister: bool,
}

/// The logical state the SM may move a port to (IBA 14.2.5.6 PortState; the
/// transitions of IBA 7.2): Down from any state; Armed only from Init;
/// Active only from Armed. Init is not the SM's to set (the link sets it). Asking
/// for the state the port is already in (Init in Init, Armed in Armed, Active in
/// Active) is accepted as no change, as ibsim does, so that an SM echoing what it read
/// or repeating its Set on a re-sweep is not refused.
pub(crate) fn sm_port_transition(cur: u8, req: u8) -> Option<u8> {
    match req {
        port_state::NO_CHANGE => Some(cur),
        r if r == cur && r != port_state::DOWN => Some(cur),
        port_state::DOWN => Some(port_state::DOWN),
        port_state::ARMED if cur == port_state::INIT || cur == port_state::ARMED => {
            Some(port_state::ARMED)
        }
        port_state::ACTIVE if cur == port_state::ARMED || cur == port_state::ACTIVE => {
            Some(port_state::ACTIVE)
        }
        _ => None,
    }
}

/// Checks a SubnSet(PortInfo) against the port and, only if every field is valid,
/// applies its writable fields (read-only ones are ignored, IBA 14.2.5.6
/// "RO"). An invalid value changes nothing and answers INVALID_FIELD (IBA 13.4.7).
pub(crate) fn set_port_info(
    port: &mut PortState,
    req: &PortInfoRepr,
) -> Result<PortInfoChanges, u16> {
    let cur = port.info;
    let invalid = Err(status::INVALID_FIELD);
    let new_state = match sm_port_transition(cur.port_state, req.port_state) {
        Some(s) => s,
        None => return invalid,
    };
    // PortPhysicalState: 0 no change, 2 Polling, 3 Disabled are the settable values;
    // the current state echoed back is no change too.
    if !matches!(
        req.port_physical_state,
        phys_state::NO_CHANGE | phys_state::POLLING | phys_state::DISABLED
    ) && req.port_physical_state != cur.port_physical_state
    {
        return invalid;
    }
    // LinkDownDefaultState: 0 no change, 1 Sleep, 2 Polling.
    if req.link_down_default_state > phys_state::POLLING {
        return invalid;
    }
    // A port LID is unicast: 0xC000.. are multicast LIDs and 0xFFFF is permissive.
    if req.lid >= 0xc000 || req.master_sm_lid >= 0xc000 {
        return invalid;
    }
    if req.neighbor_mtu == 0 || req.neighbor_mtu > cur.mtu_cap {
        return invalid;
    }
    // OperationalVLs: 0 no change, otherwise no more than VLCap (ibsim checks the same).
    if req.operational_vls > cur.vl_cap {
        return invalid;
    }
    let width = match req.link_width_enabled {
        0 => cur.link_width_enabled,
        0xff => cur.link_width_supported,
        w if w & !cur.link_width_supported == 0 => w,
        _ => return invalid,
    };
    let speed = match req.link_speed_enabled {
        0 => cur.link_speed_enabled,
        0xf => cur.link_speed_supported,
        s if s & !cur.link_speed_supported == 0 => s,
        _ => return invalid,
    };

    let mut ch = PortInfoChanges {
        lid: req.lid != cur.lid || req.lmc != cur.lmc,
        sm: req.master_sm_lid != cur.master_sm_lid || req.master_sm_sl != cur.master_sm_sl,
        gid_prefix: req.gid_prefix != cur.gid_prefix,
        client_reregister: req.client_reregister,
        state: false,
    };
    let p = &mut port.info;
    p.mkey = req.mkey;
    p.gid_prefix = req.gid_prefix;
    p.lid = req.lid;
    p.master_sm_lid = req.master_sm_lid;
    p.mkey_lease_period = req.mkey_lease_period;
    p.link_width_enabled = width;
    p.link_speed_enabled = speed;
    if req.link_down_default_state != 0 {
        p.link_down_default_state = req.link_down_default_state;
    }
    p.mkey_protect_bits = req.mkey_protect_bits;
    p.lmc = req.lmc;
    p.neighbor_mtu = req.neighbor_mtu;
    p.master_sm_sl = req.master_sm_sl;
    p.init_type = req.init_type;
    p.vl_high_limit = req.vl_high_limit;
    p.vl_stall_count = req.vl_stall_count;
    p.hoq_life = req.hoq_life;
    if req.operational_vls != 0 {
        p.operational_vls = req.operational_vls;
    }
    p.partition_enforcement_inbound = req.partition_enforcement_inbound;
    p.partition_enforcement_outbound = req.partition_enforcement_outbound;
    p.filter_raw_inbound = req.filter_raw_inbound;
    p.filter_raw_outbound = req.filter_raw_outbound;
    p.mkey_violations = req.mkey_violations;
    p.pkey_violations = req.pkey_violations;
    p.qkey_violations = req.qkey_violations;
    p.multicast_pkey_trap_suppression = req.multicast_pkey_trap_suppression;
    p.subnet_timeout = req.subnet_timeout;
    p.local_phy_errors = req.local_phy_errors;
    p.overrun_errors = req.overrun_errors;
    p.link_speed_ext_enabled = req.link_speed_ext_enabled;

    // Physical state first: Disabled takes the link (and so the port) down.
    match req.port_physical_state {
        phys_state::DISABLED => {
            p.port_physical_state = phys_state::DISABLED;
            p.port_state = port_state::DOWN;
        }
        phys_state::POLLING if p.port_physical_state == phys_state::DISABLED => {
            p.port_physical_state = phys_state::POLLING;
        }
        _ => {}
    }
    if p.port_state != port_state::DOWN || new_state == port_state::DOWN {
        if new_state == port_state::DOWN && p.port_physical_state != phys_state::DISABLED {
            // SM-initiated Down: the link retrains through the default down state.
            p.port_physical_state = if p.link_down_default_state == phys_state::SLEEP {
                phys_state::SLEEP
            } else {
                phys_state::POLLING
            };
        }
        p.port_state = new_state;
    }
    ch.state = p.port_state != cur.port_state;
    Ok(ch)
}
