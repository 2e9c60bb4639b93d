//! The MAD / SMP codecs (issue 26 item 1; AD-09): every field sits at the bit
//! libibmad's field table (`libibmad/fields.c`, rdma-core) reads it from, and every
//! attribute's parse/emit is a byte-exact round trip.

mod common;

use common::Rng;
use transport::mad::attr::{node_type, trap};
use transport::mad::header::{CLASS_SUBN_DIRECTED_ROUTE, CLASS_SUBN_LID_ROUTED};
use transport::mad::{
    BadMkeyDetails, DrFields, GuidInfoBlock, MadError, NodeDescription, NodeInfoRepr, NoticeRepr,
    PkeyBlock, PortInfoRepr, SlToVlTable, SmInfoRepr, Smp, SmpRepr, SmpRoute, VlArbBlock, MAD_LEN,
};

/// Reads `w` bits at true bit offset `o` (most significant bit of byte 0 is bit 0),
/// the way libibmad reads an attribute field given as `BITSOFFS(o, w)`: written
/// independently of the codec under test.
fn bits(d: &[u8], o: usize, w: usize) -> u64 {
    let mut v = 0u64;
    for i in o..o + w {
        let bit = (d[i / 8] >> (7 - (i % 8))) & 1;
        v = (v << 1) | u64::from(bit);
    }
    v
}

/// Fills `b` from the tests' deterministic RNG.
fn fill(rng: &mut Rng, b: &mut [u8]) {
    for x in b.iter_mut() {
        *x = rng.next() as u8;
    }
}

fn sample_portinfo() -> PortInfoRepr {
    PortInfoRepr {
        mkey: 0x1122_3344_5566_7788,
        gid_prefix: 0xfe80_0000_0000_abcd,
        lid: 0x0123,
        master_sm_lid: 0x0456,
        capability_mask: 0x0251_084e,
        diag_code: 0x0a0b,
        mkey_lease_period: 0x0c0d,
        local_port_num: 1,
        link_width_enabled: 3,
        link_width_supported: 3,
        link_width_active: 2,
        link_speed_supported: 7,
        port_state: 4,
        port_physical_state: 5,
        link_down_default_state: 2,
        mkey_protect_bits: 2,
        lmc: 5,
        link_speed_active: 4,
        link_speed_enabled: 6,
        neighbor_mtu: 5,
        master_sm_sl: 9,
        vl_cap: 4,
        init_type: 0xa,
        vl_high_limit: 0x11,
        vl_arbitration_high_cap: 8,
        vl_arbitration_low_cap: 9,
        init_type_reply: 0xc,
        mtu_cap: 5,
        vl_stall_count: 6,
        hoq_life: 0x13,
        operational_vls: 3,
        partition_enforcement_inbound: true,
        partition_enforcement_outbound: false,
        filter_raw_inbound: true,
        filter_raw_outbound: false,
        mkey_violations: 0x1234,
        pkey_violations: 0x2345,
        qkey_violations: 0x3456,
        guid_cap: 32,
        client_reregister: true,
        multicast_pkey_trap_suppression: 2,
        subnet_timeout: 18,
        resp_time_value: 0x15,
        local_phy_errors: 0xd,
        overrun_errors: 0xe,
        max_credit_hint: 0x7788,
        link_round_trip_latency: 0x0a_bcde,
        capability_mask2: 0x1357,
        link_speed_ext_active: 1,
        link_speed_ext_supported: 3,
        link_speed_ext_enabled: 0x1f,
    }
}

#[test]
fn ad_09_portinfo_fields_sit_where_libibmad_reads_them() {
    let p = sample_portinfo();
    let mut d = [0u8; 64];
    p.emit(&mut d).unwrap();
    // (bit offset, width, value): IB_PORT_*_F in libibmad/fields.c.
    let table: &[(usize, usize, u64, &str)] = &[
        (0, 64, p.mkey, "Mkey"),
        (64, 64, p.gid_prefix, "GidPrefix"),
        (128, 16, p.lid.into(), "Lid"),
        (144, 16, p.master_sm_lid.into(), "SMLid"),
        (160, 32, p.capability_mask.into(), "CapMask"),
        (192, 16, p.diag_code.into(), "DiagCode"),
        (208, 16, p.mkey_lease_period.into(), "MkeyLeasePeriod"),
        (224, 8, p.local_port_num.into(), "LocalPort"),
        (232, 8, p.link_width_enabled.into(), "LinkWidthEnabled"),
        (240, 8, p.link_width_supported.into(), "LinkWidthSupported"),
        (248, 8, p.link_width_active.into(), "LinkWidthActive"),
        (256, 4, p.link_speed_supported.into(), "LinkSpeedSupported"),
        (260, 4, p.port_state.into(), "LinkState"),
        (264, 4, p.port_physical_state.into(), "PhysLinkState"),
        (268, 4, p.link_down_default_state.into(), "LinkDownDefState"),
        (272, 2, p.mkey_protect_bits.into(), "ProtectBits"),
        (277, 3, p.lmc.into(), "LMC"),
        (280, 4, p.link_speed_active.into(), "LinkSpeedActive"),
        (284, 4, p.link_speed_enabled.into(), "LinkSpeedEnabled"),
        (288, 4, p.neighbor_mtu.into(), "NeighborMTU"),
        (292, 4, p.master_sm_sl.into(), "SMSL"),
        (296, 4, p.vl_cap.into(), "VLCap"),
        (300, 4, p.init_type.into(), "InitType"),
        (304, 8, p.vl_high_limit.into(), "VLHighLimit"),
        (312, 8, p.vl_arbitration_high_cap.into(), "VLArbHighCap"),
        (320, 8, p.vl_arbitration_low_cap.into(), "VLArbLowCap"),
        (328, 4, p.init_type_reply.into(), "InitReply"),
        (332, 4, p.mtu_cap.into(), "MtuCap"),
        (336, 3, p.vl_stall_count.into(), "VLStallCount"),
        (339, 5, p.hoq_life.into(), "HoqLife"),
        (344, 4, p.operational_vls.into(), "OperVLs"),
        (348, 1, 1, "PartEnforceInb"),
        (349, 1, 0, "PartEnforceOutb"),
        (350, 1, 1, "FilterRawInb"),
        (351, 1, 0, "FilterRawOutb"),
        (352, 16, p.mkey_violations.into(), "MkeyViolations"),
        (368, 16, p.pkey_violations.into(), "PkeyViolations"),
        (384, 16, p.qkey_violations.into(), "QkeyViolations"),
        (400, 8, p.guid_cap.into(), "GuidCap"),
        (408, 1, 1, "ClientReregister"),
        (
            409,
            2,
            p.multicast_pkey_trap_suppression.into(),
            "McastPkeyTrapSuppressionEnabled",
        ),
        (411, 5, p.subnet_timeout.into(), "SubnetTimeout"),
        (419, 5, p.resp_time_value.into(), "RespTimeVal"),
        (424, 4, p.local_phy_errors.into(), "LocalPhysErr"),
        (428, 4, p.overrun_errors.into(), "OverrunErr"),
        (432, 16, p.max_credit_hint.into(), "MaxCreditHint"),
        (456, 24, p.link_round_trip_latency.into(), "RoundTrip"),
    ];
    for (o, w, v, name) in table {
        assert_eq!(bits(&d, *o, *w), *v, "PortInfo:{name} at bit {o}");
    }
    assert_eq!(PortInfoRepr::parse(&d).unwrap(), p);
}

#[test]
fn ad_09_nodeinfo_fields_sit_where_libibmad_reads_them() {
    let n = NodeInfoRepr {
        base_version: 1,
        class_version: 1,
        node_type: node_type::CA,
        num_ports: 1,
        system_image_guid: 0x0002_c903_0000_1000,
        node_guid: 0x0002_c903_0000_1001,
        port_guid: 0x0002_c903_0000_1002,
        partition_cap: 128,
        device_id: 0x1003,
        revision: 0x0000_00a0,
        local_port_num: 1,
        vendor_id: 0x0002c9,
    };
    let mut d = [0u8; 64];
    n.emit(&mut d).unwrap();
    // IB_NODE_*_F.
    assert_eq!(bits(&d, 0, 8), 1, "BaseVers");
    assert_eq!(bits(&d, 8, 8), 1, "ClassVers");
    assert_eq!(bits(&d, 16, 8), 1, "NodeType");
    assert_eq!(bits(&d, 24, 8), 1, "NumPorts");
    assert_eq!(bits(&d, 32, 64), n.system_image_guid, "SystemGuid");
    assert_eq!(bits(&d, 96, 64), n.node_guid, "Guid");
    assert_eq!(bits(&d, 160, 64), n.port_guid, "PortGuid");
    assert_eq!(bits(&d, 224, 16), 128, "PartCap");
    assert_eq!(bits(&d, 240, 16), 0x1003, "DevId");
    assert_eq!(bits(&d, 256, 32), 0xa0, "Revision");
    assert_eq!(bits(&d, 288, 8), 1, "LocalPort");
    assert_eq!(bits(&d, 296, 24), 0x0002c9, "VendorId");
    assert!(d[40..].iter().all(|b| *b == 0), "reserved tail");
    assert_eq!(NodeInfoRepr::parse(&d).unwrap(), n);
}

#[test]
fn ad_09_sminfo_and_notice_fields_sit_where_libibmad_reads_them() {
    let s = SmInfoRepr {
        guid: 0x1111_2222_3333_4444,
        sm_key: 0x5555_6666_7777_8888,
        act_count: 0x99aa_bbcc,
        priority: 14,
        sm_state: 3,
    };
    let mut d = [0u8; 64];
    s.emit(&mut d).unwrap();
    assert_eq!(bits(&d, 0, 64), s.guid, "SmInfoGuid");
    assert_eq!(bits(&d, 64, 64), s.sm_key, "SmInfoKey");
    assert_eq!(bits(&d, 128, 32), 0x99aa_bbcc, "SmActivity");
    assert_eq!(bits(&d, 160, 4), 14, "SmPriority");
    assert_eq!(bits(&d, 164, 4), 3, "SmState");

    let mut details = [0u8; 54];
    details[0] = 0x00;
    details[1] = 0x42;
    let n = NoticeRepr {
        is_generic: true,
        notice_type: 1,
        producer_type: 2,
        trap_number: trap::LINK_STATE_CHANGE,
        issuer_lid: 0x0042,
        toggle: true,
        count: 0x1234,
        data_details: details,
    };
    let mut d = [0u8; 64];
    n.emit(&mut d).unwrap();
    assert_eq!(bits(&d, 0, 1), 1, "NoticeIsGeneric");
    assert_eq!(bits(&d, 1, 7), 1, "NoticeType");
    assert_eq!(bits(&d, 8, 24), 2, "NoticeProducerType");
    assert_eq!(bits(&d, 32, 16), 128, "NoticeTrapNumber");
    assert_eq!(bits(&d, 48, 16), 0x42, "NoticeIssuerLID");
    assert_eq!(bits(&d, 64, 1), 1, "NoticeToggle");
    assert_eq!(bits(&d, 65, 15), 0x1234, "NoticeCount");
    assert_eq!(
        bits(&d, 80, 16),
        0x42,
        "NoticeDataLID (trap 128's switch LID)"
    );
    assert_eq!(NoticeRepr::parse(&d).unwrap(), n);
}

#[test]
fn ad_09_directed_route_smp_header_layout() {
    let mut initial_path = [0u8; 64];
    initial_path[1..4].copy_from_slice(&[1, 3, 5]);
    let mut return_path = [0u8; 64];
    return_path[1..3].copy_from_slice(&[7, 8]);
    let mut data = [0u8; 64];
    data[0] = 0xaa;
    data[63] = 0xbb;
    let smp = SmpRepr {
        base_version: 1,
        class_version: 1,
        method: 0x81,
        status: 0x001c,
        tid: 0x0102_0304_0506_0708,
        attr_id: 0x0015,
        attr_mod: 0x0a0b_0c0d,
        mkey: 0x1112_1314_1516_1718,
        route: SmpRoute::Directed(DrFields {
            direction: true,
            hop_ptr: 2,
            hop_cnt: 3,
            dr_slid: 0xffff,
            dr_dlid: 0x0042,
            initial_path,
            return_path,
        }),
        data,
    };
    let b = smp.to_bytes();
    // The header words of IBA 13.4.2 / 14.2.1.2 (libibmad: MadBaseVersion, MadMgmtClass,
    // DrSmpStatus/DrSmpDirection, DrSmpHopPtr, DrSmpHopCnt, MadTRID, MadAttr,
    // MadModifier, MadMkey, DrSmpSLID, DrSmpDLID, DrSmpPath, DrSmpRetPath).
    assert_eq!(&b[0..4], &[1, CLASS_SUBN_DIRECTED_ROUTE, 1, 0x81]);
    assert_eq!(&b[4..6], &[0x80, 0x1c], "D bit over a 15-bit status");
    assert_eq!(&b[6..8], &[2, 3], "hop pointer, hop count");
    assert_eq!(&b[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(&b[16..20], &[0x00, 0x15, 0, 0]);
    assert_eq!(&b[20..24], &[0x0a, 0x0b, 0x0c, 0x0d]);
    assert_eq!(
        &b[24..32],
        &[0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18]
    );
    assert_eq!(&b[32..36], &[0xff, 0xff, 0x00, 0x42], "DrSLID then DrDLID");
    assert!(b[36..64].iter().all(|x| *x == 0));
    assert_eq!((b[64], b[127]), (0xaa, 0xbb));
    assert_eq!(&b[128..132], &[0, 1, 3, 5]);
    assert_eq!(&b[192..195], &[0, 7, 8]);
    let back = SmpRepr::parse(&Smp::new_checked(&b[..]).unwrap()).unwrap();
    assert_eq!(back, smp);
}

#[test]
fn ad_09_smp_round_trips_byte_exact_both_routings() {
    let mut rng = Rng::new(26);
    for i in 0..200 {
        let mut b = [0u8; MAD_LEN];
        fill(&mut rng, &mut b);
        b[18] = 0;
        b[19] = 0;
        if i % 2 == 0 {
            b[1] = CLASS_SUBN_LID_ROUTED;
            b[6] = 0;
            b[7] = 0; // ClassSpecific is reserved in a LID-routed SMP
            b[32..64].fill(0);
            b[128..].fill(0);
        } else {
            b[1] = CLASS_SUBN_DIRECTED_ROUTE;
            b[36..64].fill(0);
        }
        let smp = SmpRepr::parse(&Smp::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(smp.to_bytes(), b, "round {i}");
    }
}

#[test]
fn ad_09_every_attribute_round_trips_byte_exact() {
    let mut rng = Rng::new(261);
    for _ in 0..100 {
        let mut d = [0u8; 64];
        fill(&mut rng, &mut d);
        let mut out = [0u8; 64];

        NodeDescription::parse(&d).unwrap().emit(&mut out).unwrap();
        assert_eq!(out, d, "NodeDescription");
        GuidInfoBlock::parse(&d).unwrap().emit(&mut out).unwrap();
        assert_eq!(out, d, "GUIDInfo");
        PkeyBlock::parse(&d).unwrap().emit(&mut out).unwrap();
        assert_eq!(out, d, "P_KeyTable");
        NoticeRepr::parse(&d).unwrap().emit(&mut out).unwrap();
        assert_eq!(out, d, "Notice");

        let mut pi = d;
        pi[34] &= !0x38; // reserved bits between ProtectBits and LMC
        pi[52] &= 0x1f;
        pi[56] = 0;
        pi[63] &= 0x1f;
        let mut o = [0u8; 64];
        PortInfoRepr::parse(&pi).unwrap().emit(&mut o).unwrap();
        assert_eq!(o, pi, "PortInfo");

        let mut ni = d;
        ni[40..].fill(0);
        let mut o = [0u8; 64];
        NodeInfoRepr::parse(&ni).unwrap().emit(&mut o).unwrap();
        assert_eq!(o, ni, "NodeInfo");

        let mut sl = d;
        sl[8..].fill(0);
        let mut o = [0u8; 64];
        SlToVlTable::parse(&sl).unwrap().emit(&mut o).unwrap();
        assert_eq!(o, sl, "SLtoVLMappingTable");

        let mut va = d;
        for i in 0..32 {
            va[2 * i] &= 0x0f;
        }
        let mut o = [0u8; 64];
        VlArbBlock::parse(&va).unwrap().emit(&mut o).unwrap();
        assert_eq!(o, va, "VLArbitrationTable");

        let mut si = d;
        si[21..].fill(0);
        let mut o = [0u8; 64];
        SmInfoRepr::parse(&si).unwrap().emit(&mut o).unwrap();
        assert_eq!(o, si, "SMInfo");
    }
}

#[test]
fn ad_12_bad_mkey_trap_details_layout_and_truncation() {
    let mut path = [0u8; 30];
    path[1] = 4;
    let det = BadMkeyDetails {
        lid: 0x11,
        dr_slid: 0xffff,
        method: 0x02,
        attr_id: 0x0015,
        attr_mod: 1,
        mkey: 0xdead_beef_0000_0001,
        dr_notice: true,
        dr_hop_cnt: 40,
        dr_return_path: path,
    };
    let d = det.emit();
    assert_eq!(&d[2..4], &[0, 0x11], "LIDADDR");
    assert_eq!(&d[4..6], &[0xff, 0xff], "DRSLID");
    assert_eq!(d[6], 0x02, "Method");
    assert_eq!(&d[8..10], &[0, 0x15], "AttributeID");
    assert_eq!(&d[10..14], &[0, 0, 0, 1], "AttributeModifier");
    assert_eq!(&d[14..22], &0xdead_beef_0000_0001u64.to_be_bytes(), "M_Key");
    // DRNotice | DRPathTruncated | DRHopCount (cut at 30 hops).
    assert_eq!(d[23], 0x80 | 0x40 | 30);
    assert_eq!(d[25], 4);
    let back = BadMkeyDetails::parse(&d);
    assert_eq!((back.dr_hop_cnt, back.mkey, back.lid), (30, det.mkey, 0x11));
}

#[test]
fn ad_09_short_or_foreign_bytes_are_errors_not_panics() {
    assert_eq!(
        Smp::new_checked(&[0u8; 255][..]).unwrap_err(),
        MadError::Truncated
    );
    let mut b = [0u8; MAD_LEN];
    b[1] = 0x04; // the PerfMgt class: not an SMP
    assert_eq!(
        SmpRepr::parse(&Smp::new_checked(&b[..]).unwrap()).unwrap_err(),
        MadError::NotSmp
    );
    assert_eq!(
        NodeInfoRepr::parse(&[0u8; 39]).unwrap_err(),
        MadError::Truncated
    );
    assert_eq!(
        PortInfoRepr::parse(&[0u8; 63]).unwrap_err(),
        MadError::Truncated
    );
    assert_eq!(
        SmInfoRepr::parse(&[0u8; 20]).unwrap_err(),
        MadError::Truncated
    );
    let mut d = [0u8; 64];
    let bad = PortInfoRepr {
        lmc: 8,
        ..PortInfoRepr::default()
    };
    assert!(matches!(bad.emit(&mut d), Err(MadError::FieldRange(_))));
    let bad = SlToVlTable([16; 16]);
    assert!(matches!(bad.emit(&mut d), Err(MadError::FieldRange(_))));
}
