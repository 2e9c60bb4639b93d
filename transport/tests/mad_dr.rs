//! Directed-route SMP processing (issue 26 items 1/8; AD-09; IBA 14.2.2, C14-6,
//! C14-9, C14-13): the HCA endpoint and the switch hop as pure functions.

use transport::mad::dr::{
    hca_receive, hca_respond, hca_send, switch_hop, switch_respond, MAX_HOP_CNT,
};
use transport::mad::{DrDrop, DrFields, HcaDeliver, HcaSend, SwitchHop};

fn path(hops: &[u8]) -> DrFields {
    DrFields::outgoing(hops).expect("a path of at most 63 hops")
}

/// SM on HCA A (port 1) -> switch S1 (in 1, out 3) -> switch S2 (in 2, out 5) ->
/// HCA B (port 1), and the response back.
#[test]
fn ad_09_directed_route_three_hops_out_and_back() {
    let mut dr = path(&[1, 3, 5]);
    // C14-9:1 at the origin: pointer to 1, out by initial_path[1].
    assert_eq!(hca_send(&mut dr, 1), Ok(HcaSend::Port));
    assert_eq!(dr.hop_ptr, 1);
    // C14-9:2 at S1 and S2: the arrival port goes in the return path.
    assert_eq!(switch_hop(&mut dr, 1, 8), Ok(SwitchHop::Forward(3)));
    assert_eq!((dr.hop_ptr, dr.return_path[1]), (2, 1));
    assert_eq!(switch_hop(&mut dr, 2, 8), Ok(SwitchHop::Forward(5)));
    assert_eq!((dr.hop_ptr, dr.return_path[2]), (3, 2));
    // C14-9:3 at B: end of the directed part, to the SMA with pointer hop_cnt + 1.
    assert_eq!(hca_receive(&mut dr, 1), Ok(HcaDeliver::Sma));
    assert_eq!((dr.hop_ptr, dr.return_path[3]), (4, 1));
    // C14-13:1: the response leaves B by return_path[3].
    assert_eq!(hca_respond(&mut dr, 1), Ok(HcaSend::Port));
    assert!(dr.direction);
    assert_eq!(dr.hop_ptr, 3);
    // C14-13:2 at S2 (arrives on 5) and S1 (arrives on 3).
    assert_eq!(switch_hop(&mut dr, 5, 8), Ok(SwitchHop::Forward(2)));
    assert_eq!(dr.hop_ptr, 2);
    assert_eq!(switch_hop(&mut dr, 3, 8), Ok(SwitchHop::Forward(1)));
    assert_eq!(dr.hop_ptr, 1);
    // C14-13:3 at A: permissive DrSLID, the SM has it, pointer 0.
    assert_eq!(hca_receive(&mut dr, 1), Ok(HcaDeliver::Sm));
    assert_eq!(dr.hop_ptr, 0);
}

#[test]
fn ad_09_directed_route_hop_count_zero_stays_on_the_node() {
    let mut dr = path(&[]);
    assert_eq!(hca_send(&mut dr, 1), Ok(HcaSend::Local));
    assert_eq!(dr.hop_ptr, 1);
    // C14-9:4: pointer hop_cnt + 1 goes to the SMA.
    assert_eq!(hca_receive(&mut dr, 1), Ok(HcaDeliver::Sma));
    assert_eq!(hca_respond(&mut dr, 1), Ok(HcaSend::Local));
    assert_eq!(dr.hop_ptr, 0);
}

#[test]
fn ad_09_directed_route_lid_routed_parts_at_a_switch() {
    // Directed part ends at a switch whose DrDLID is a LID: LID-route on from there.
    let mut dr = path(&[1, 2]);
    dr.dr_dlid = 0x0042;
    dr.hop_ptr = 2;
    assert_eq!(switch_hop(&mut dr, 4, 8), Ok(SwitchHop::LidRoute(0x0042)));
    assert_eq!((dr.hop_ptr, dr.return_path[2]), (3, 4));
    // On the way back, hop 1 with a LID DrSLID: LID-route to the SM.
    let mut back = path(&[1, 2]);
    back.direction = true;
    back.hop_ptr = 1;
    back.dr_slid = 0x0007;
    assert_eq!(switch_hop(&mut back, 2, 8), Ok(SwitchHop::LidRoute(0x0007)));
    assert_eq!(back.hop_ptr, 0);
    // A switch's SMA answering at the end of the directed part.
    let mut at = path(&[1, 6]);
    at.hop_ptr = 2;
    assert_eq!(switch_hop(&mut at, 6, 8), Ok(SwitchHop::Local));
    assert_eq!(switch_respond(&mut at, 8), Ok(SwitchHop::Forward(6)));
    assert_eq!(at.hop_ptr, 2);
}

#[test]
fn ad_09_directed_route_bad_pointers_counts_and_ports_are_drops() {
    // C14-6: hop count 64 and above.
    let mut dr = path(&[1]);
    dr.hop_cnt = MAX_HOP_CNT + 1;
    dr.hop_ptr = dr.hop_cnt;
    assert_eq!(hca_receive(&mut dr, 1), Err(DrDrop::HopCountTooLarge));
    assert_eq!(switch_hop(&mut dr, 1, 8), Err(DrDrop::HopCountTooLarge));
    // An HCA is never an intermediate hop (C14-9:2 is a switch's).
    let mut dr = path(&[1, 2, 3]);
    dr.hop_ptr = 1;
    assert_eq!(hca_receive(&mut dr, 1), Err(DrDrop::BadHopPointer));
    // C14-9:1: a switch receiving pointer 0 on a non-empty path.
    let mut dr = path(&[1, 2]);
    assert_eq!(switch_hop(&mut dr, 1, 8), Err(DrDrop::BadHopPointer));
    // C14-9:5: a pointer past hop_cnt + 1.
    let mut dr = path(&[1]);
    dr.hop_ptr = 3;
    assert_eq!(hca_receive(&mut dr, 1), Err(DrDrop::BadHopPointer));
    // C14-9:3 at an endpoint: a LID-routed tail cannot start at an HCA.
    let mut dr = path(&[1]);
    dr.hop_ptr = 1;
    dr.dr_dlid = 0x10;
    assert_eq!(hca_receive(&mut dr, 1), Err(DrDrop::NotPermissive));
    // Forwarding to port 0 or past the switch's ports.
    let mut dr = path(&[1, 0, 2]);
    dr.hop_ptr = 1;
    assert_eq!(switch_hop(&mut dr, 1, 8), Err(DrDrop::NoSuchPort));
    let mut dr = path(&[1, 9, 2]);
    dr.hop_ptr = 1;
    assert_eq!(switch_hop(&mut dr, 1, 8), Err(DrDrop::NoSuchPort));
    // The origin must leave by initial_path[1]; a response by return_path[hop_cnt].
    let mut dr = path(&[2]);
    assert_eq!(hca_send(&mut dr, 1), Err(DrDrop::WrongPort));
    let mut dr = path(&[1]);
    dr.hop_ptr = 2;
    dr.return_path[1] = 2;
    assert_eq!(hca_respond(&mut dr, 1), Err(DrDrop::WrongPort));
}

#[test]
fn ad_09_directed_route_never_panics_on_any_pointer_and_count() {
    for cnt in 0..=255u8 {
        for ptr in 0..=255u8 {
            for direction in [false, true] {
                for port in [0u8, 1, 2, 255] {
                    let mut dr = path(&[]);
                    dr.hop_cnt = cnt;
                    dr.hop_ptr = ptr;
                    dr.direction = direction;
                    dr.initial_path = [port; 64];
                    dr.return_path = [port; 64];
                    let _ = hca_receive(&mut dr.clone(), port);
                    let _ = hca_send(&mut dr.clone(), port);
                    let _ = hca_respond(&mut dr.clone(), port);
                    let _ = switch_hop(&mut dr.clone(), port, 36);
                    let r = switch_respond(&mut dr, 36);
                    if cnt > MAX_HOP_CNT {
                        assert_eq!(r, Err(DrDrop::HopCountTooLarge));
                    }
                }
            }
        }
    }
}

/// SM on HCA A (LID 1) LID-routes to switch S1, which starts the directed part (one
/// hop, out 3) to switch S2, which ends it and LID-routes on to HCA B (LID 9); the
/// response retraces the same three parts.
#[test]
fn ad_09_directed_route_with_lid_routed_head_and_tail() {
    let mut dr = path(&[3]);
    dr.dr_slid = 1;
    dr.dr_dlid = 9;
    // C14-9:1 is S1's, not A's: A sends LID-routed with the pointer at 0.
    assert_eq!(hca_send(&mut dr, 1), Ok(HcaSend::LidRouted));
    assert_eq!(dr.hop_ptr, 0);
    assert_eq!(switch_hop(&mut dr, 2, 8), Ok(SwitchHop::Forward(3)));
    assert_eq!(dr.hop_ptr, 1);
    // C14-9:3 at S2 with a LID DrDLID: on by LID.
    assert_eq!(switch_hop(&mut dr, 4, 8), Ok(SwitchHop::LidRoute(9)));
    assert_eq!((dr.hop_ptr, dr.return_path[1]), (2, 4));
    // C14-9:4 at B, which answers LID-routed (to S2, the request's LRH:SLID).
    assert_eq!(hca_receive(&mut dr, 1), Ok(HcaDeliver::Sma));
    assert_eq!(hca_respond(&mut dr, 1), Ok(HcaSend::LidRouted));
    assert_eq!(dr.hop_ptr, 2);
    // C14-13:1 at S2: back out the port the request came in on.
    assert_eq!(switch_hop(&mut dr, 6, 8), Ok(SwitchHop::Forward(4)));
    assert_eq!(dr.hop_ptr, 1);
    // C14-13:3 at S1 with a LID DrSLID: LID-routed to the SM.
    assert_eq!(switch_hop(&mut dr, 3, 8), Ok(SwitchHop::LidRoute(1)));
    assert_eq!(dr.hop_ptr, 0);
    // C14-13:4 at A.
    assert_eq!(hca_receive(&mut dr, 1), Ok(HcaDeliver::Sm));
    // Without a LID-routed head a pointer of 0 at a switch is still a drop (C14-9:1).
    let mut bad = path(&[3]);
    assert_eq!(switch_hop(&mut bad, 2, 8), Err(DrDrop::BadHopPointer));
}
