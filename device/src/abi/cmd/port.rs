//! Parameters of the commands about the device and its port: QUERY_DEVICE,
//! QUERY_PORT, SET_GID, QUERY_COUNTERS, MAD_IFC, SET_PORT_CAPS and
//! SET_NODE_DESC.

abi_struct! {
    /// QUERY_DEVICE output (`struct ibv_device_attr`, with what the driver needs).
    pub struct DeviceAttr (160) {
        pub fw_ver: u64,
        pub node_guid: u64,
        pub sys_image_guid: u64,
        pub max_mr_size: u64,
        /// Supported MR page sizes, one bit per power of two.
        pub page_size_cap: u64,
        pub vendor_id: u32,
        pub vendor_part_id: u32,
        pub hw_ver: u32,
        /// `VHCA_DEV_CAP_*`.
        pub cap_flags: u32,
        pub max_qp: u32,
        pub max_qp_wr: u32,
        pub max_sge: u32,
        pub max_cq: u32,
        pub max_cqe: u32,
        pub max_mr: u32,
        pub max_pd: u32,
        pub max_srq: u32,
        pub max_srq_wr: u32,
        pub max_srq_sge: u32,
        pub max_eq: u32,
        pub max_eqe: u32,
        pub max_inline_data: u32,
        pub max_qp_rd_atom: u32,
        pub max_qp_init_rd_atom: u32,
        pub max_res_rd_atom: u32,
        /// Largest message: 2^31 (C9-10, OP-09).
        pub max_msg_sz: u32,
        pub num_uars: u32,
        pub msix_vectors: u16,
        pub max_pkeys: u16,
        pub local_ca_ack_delay: u8,
        pub phys_port_cnt: u8,
        /// `enum vhca_atomic_cap`.
        pub atomic_cap: u8,
        pub rsvd: u8,
        /// Most pages of a fast-registration MR (MP-08; ABI 2.1): the largest
        /// `npages` of REG_MR with `VHCA_REG_MR_F_FAST` and of a REG_MR WQE.
        pub max_fast_reg_pages: u32,
        /// On-demand paging (issue 29; ABI 3.7): `VHCA_ODP_CAP_*`, bits 0..7
        /// general, then one byte of `VHCA_ODP_TRANSPORT_*` for RC (bits 8..15),
        /// UD (16..23) and XRC (24..31), as `struct ibv_odp_caps`. 0: no ODP.
        pub odp_caps: u32,
        /// Multicast groups the port's QPs may join (AD-08; ABI 3.1).
        pub max_mcast_grp: u32,
        /// QPs attached to one multicast group.
        pub max_mcast_qp_attach: u32,
        /// Multicast attachments over all groups.
        pub max_total_mcast_qp_attach: u32,
        pub rsvd3: u32,
    }
}

abi_consts! {
    /// DeviceAttr `odp_caps`, general byte (`enum ibv_odp_general_caps`).
    pub mod odp_cap: u32 = "VHCA_ODP_CAP" {
        /// ODP MRs (REG_MR with `VHCA_REG_MR_F_ODP`).
        SUPPORT = 1 << 0,
        /// Implicit ODP MRs (iova 0, length 2^64 - 1).
        IMPLICIT = 1 << 1,
        /// Where the RC transport's byte starts.
        RC_SHIFT = 8,
        /// Where the UD transport's byte starts.
        UD_SHIFT = 16,
        /// Where the XRC transport's byte starts.
        XRC_SHIFT = 24,
    }
}

abi_consts! {
    /// DeviceAttr `odp_caps`, one transport's byte (`enum
    /// ibv_odp_transport_cap_bits`).
    pub mod odp_transport: u32 = "VHCA_ODP_TRANSPORT" {
        SEND = 1 << 0,
        RECV = 1 << 1,
        WRITE = 1 << 2,
        READ = 1 << 3,
        ATOMIC = 1 << 4,
        SRQ_RECV = 1 << 5,
    }
}

abi_struct! {
    /// QUERY_PORT input.
    pub struct QueryPortIn (4) {
        /// Port number (1).
        pub port: u8,
        pub rsvd: [u8; 3],
    }
}

abi_struct! {
    /// QUERY_PORT output (`struct ibv_port_attr` plus the tables the driver
    /// serves: P_Key table, GID 0 = subnet prefix : port GUID, AD-01, AD-05).
    pub struct PortAttr (192) {
        pub port_guid: u64,
        pub gid_prefix: u64,
        /// GID 0, network order.
        pub gid0: [u8; 16],
        pub max_msg_sz: u32,
        pub lid: u16,
        pub sm_lid: u16,
        /// Valid entries of `pkeys`.
        pub pkey_tbl_len: u16,
        pub gid_tbl_len: u16,
        /// `enum vhca_port_state`.
        pub state: u8,
        /// IBA physical port state: 5 = LinkUp, 3 = Disabled.
        pub phys_state: u8,
        /// `enum vhca_mtu`.
        pub max_mtu: u8,
        /// `enum vhca_mtu`.
        pub active_mtu: u8,
        pub lmc: u8,
        pub sm_sl: u8,
        /// `IBV_LINK_LAYER_*`: 1 = InfiniBand, 2 = Ethernet (RoCEv2, WF-10).
        pub link_layer: u8,
        /// `IB_WIDTH_*`.
        pub active_width: u8,
        /// `IB_SPEED_*`.
        pub active_speed: u8,
        /// Data VLs (AD-06), as PortInfo:VLCap encodes them: 1 = VL0,
        /// 2 = VL0-1, 3 = VL0-3, 4 = VL0-7, 5 = VL0-14.
        pub max_vl_num: u8,
        pub rsvd: [u8; 2],
        /// P_Key table; index 0 is normally 0xFFFF (AD-05).
        pub pkeys: [u16; 64],
        /// Ethernet port: its MAC, which the driver matches to the guest's netdev
        /// (the NIC that shares the port); zero on InfiniBand.
        pub mac: [u8; 6],
        pub rsvd2: [u8; 2],
    }
}

abi_enum! {
    /// GID types of a RoCE port's table (`enum ib_gid_type`); the device
    /// speaks RoCEv2 only (WF-10).
    pub enum GidType: u8 = "VHCA_GID_TYPE" {
        /// RoCEv2: IPv4-mapped or IPv6 GID, UDP/IP encapsulation (A17).
        RoceV2 = 2,
    }
}

abi_struct! {
    /// SET_GID input.
    pub struct SetGidIn (24) {
        /// Table index, below the port's `gid_tbl_len`.
        pub index: u16,
        /// Port (1).
        pub port: u8,
        /// 1: set the entry to `gid`; 0: clear it (`gid` and `gid_type` zero).
        pub valid: u8,
        /// `enum vhca_gid_type`.
        pub gid_type: u8,
        pub rsvd: [u8; 3],
        /// The GID, network order: an IPv4-mapped (::ffff:a.b.c.d) or IPv6
        /// address of the netdev paired with the port.
        pub gid: [u8; 16],
    }
}

abi_struct! {
    /// QUERY_COUNTERS input.
    pub struct QueryCountersIn (4) {
        pub port: u8,
        /// `enum vhca_counter_set`.
        pub set: u8,
        pub rsvd: u16,
    }
}

abi_struct! {
    /// QUERY_COUNTERS output (mailbox): `count` u64 counters, in the order of the
    /// set's `VHCA_COUNTERS_*_NAMES`. A newer device may return more than the
    /// driver has names for; the driver shows the ones it knows.
    pub struct QueryCountersOut (4096) {
        pub count: u32,
        pub rsvd: u32,
        pub values: [u64; 511],
    }
}

abi_consts! {
    /// MAD_IFC output flags (`MadIfcOut::flags`).
    pub mod mad_ifc_flag: u8 = "VHCA_MAD_IFC_F" {
        /// `MadIfcOut::mad` holds a response to send back (ib_core's
        /// IB_MAD_RESULT_REPLY).
        REPLY = 1 << 0,
        /// The device took the MAD and made no response (a Set it applied
        /// silently, a TrapRepress, or one dropped by M_Key, IBA 14.2.4.2:
        /// IB_MAD_RESULT_CONSUMED).
        CONSUMED = 1 << 1,
    }
}

abi_struct! {
    /// MAD_IFC input (issue 26, AD-09): one 256-byte MAD as ib_core gives it
    /// to `process_mad`, with where it came from.
    pub struct MadIfcIn (272) {
        /// Port (1).
        pub port: u8,
        pub rsvd0: u8,
        /// The requester's LID (the source of a LID-routed SMP; 0xFFFF,
        /// permissive, when the guest's own SMI hands it over).
        pub slid: u16,
        pub rsvd1: [u8; 12],
        /// The MAD, network order, as on the wire.
        pub mad: [u8; 256],
    }
}

abi_struct! {
    /// MAD_IFC output.
    pub struct MadIfcOut (272) {
        /// `VHCA_MAD_IFC_F_*`; 0: the device does not handle this MAD (not a
        /// subnet-management request), ib_core goes on as without it.
        pub flags: u8,
        pub rsvd0: [u8; 15],
        /// The response (valid with `VHCA_MAD_IFC_F_REPLY`).
        pub mad: [u8; 256],
    }
}

abi_consts! {
    /// PortInfo:CapabilityMask bits SET_PORT_CAPS takes (IBA 14.2.5.6; the
    /// kernel's `IB_PORT_*` capability bits have the same values): the agents
    /// the host runs, not what the port's hardware does.
    pub mod port_cap: u32 = "VHCA_PORT_CAP" {
        /// IsSM: an SM runs on the port (ib_umad while `issm` is held open).
        IS_SM = 1 << 1,
        /// IsSMdisabled: an SM is present but disabled.
        IS_SM_DISABLED = 1 << 10,
        /// IsCommunicationManagementSupported (ib_cm).
        IS_CM = 1 << 16,
        /// IsSNMPTunnelingSupported.
        IS_SNMP_TUNNEL = 1 << 17,
        /// IsDeviceManagementSupported.
        IS_DEVICE_MGMT = 1 << 19,
        /// IsVendorClassSupported.
        IS_VENDOR_CLASS = 1 << 20,
        /// IsBootManagementSupported.
        IS_BOOT_MGMT = 1 << 23,
        /// Every bit above: what SET_PORT_CAPS may set or clear.
        HOST_SETTABLE = transport::mad::portinfo::cap::HOST_SETTABLE,
    }
}

abi_struct! {
    /// SET_PORT_CAPS input: `set` then `clear`, both within
    /// `VHCA_PORT_CAP_HOST_SETTABLE` and disjoint (ib_core's
    /// `struct ib_port_modify` set/clr_port_cap_mask).
    pub struct SetPortCapsIn (16) {
        /// Port (1).
        pub port: u8,
        pub rsvd0: [u8; 3],
        /// `VHCA_PORT_CAP_*` bits to set.
        pub set: u32,
        /// `VHCA_PORT_CAP_*` bits to clear.
        pub clear: u32,
        pub rsvd1: u32,
    }
}

abi_struct! {
    /// SET_PORT_CAPS output.
    pub struct SetPortCapsOut (8) {
        /// PortInfo:CapabilityMask after the command, every bit (the SMA's own
        /// too), as SubnGet(PortInfo) reports it.
        pub capability_mask: u32,
        pub rsvd: u32,
    }
}

abi_struct! {
    /// SET_NODE_DESC input (mailbox): the description as ib_core's
    /// `ib_device_modify` node_desc holds it, UTF-8 padded with NULs (IBA
    /// 14.2.5.2; 64 bytes hold no NUL at all).
    pub struct SetNodeDescIn (72) {
        /// Bytes of the description, at most 64: none of them NUL, every byte
        /// of `desc` after them NUL.
        pub len: u8,
        pub rsvd: [u8; 7],
        pub desc: [u8; 64],
    }
}

// The ABI's bits are PortInfo's (the SMA checks against `cap::HOST_SETTABLE`):
// every one named, none else.
const _: () = {
    use transport::mad::portinfo::cap;
    assert!(port_cap::IS_SM == cap::IS_SM);
    assert!(port_cap::IS_SM_DISABLED == cap::IS_SM_DISABLED);
    assert!(port_cap::IS_CM == cap::IS_CM_SUPPORTED);
    assert!(port_cap::IS_SNMP_TUNNEL == cap::IS_SNMP_TUNNELING_SUPPORTED);
    assert!(port_cap::IS_DEVICE_MGMT == cap::IS_DEVICE_MANAGEMENT_SUPPORTED);
    assert!(port_cap::IS_VENDOR_CLASS == cap::IS_VENDOR_CLASS_SUPPORTED);
    assert!(port_cap::IS_BOOT_MGMT == cap::IS_BOOT_MANAGEMENT_SUPPORTED);
    assert!(
        port_cap::HOST_SETTABLE
            == port_cap::IS_SM
                | port_cap::IS_SM_DISABLED
                | port_cap::IS_CM
                | port_cap::IS_SNMP_TUNNEL
                | port_cap::IS_DEVICE_MGMT
                | port_cap::IS_VENDOR_CLASS
                | port_cap::IS_BOOT_MGMT
    );
};
