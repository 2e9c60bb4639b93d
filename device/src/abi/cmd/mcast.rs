//! Parameters of the multicast commands: ATTACH_MCAST and DETACH_MCAST
//! (AD-08, PV-07).

abi_struct! {
    /// ATTACH_MCAST and DETACH_MCAST input (`ibv_attach_mcast`): a UD QP and
    /// a multicast group. On an InfiniBand port `mlid` is the group's
    /// multicast LID (0xC000..=0xFFFE) and its packets must carry it; on a
    /// RoCE port it is zero and `gid` is an IPv6 multicast address or an
    /// IPv4-mapped IPv4 multicast address.
    pub struct McastIn (24) {
        pub qpn: u32,
        pub mlid: u16,
        /// Zero.
        pub rsvd: u16,
        /// The group's multicast GID (MGID), network order.
        pub gid: [u8; 16],
    }
}
