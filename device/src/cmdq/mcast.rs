//! ATTACH_MCAST and DETACH_MCAST (AD-08, PV-07): a UD QP joins or leaves a
//! multicast group of the port. The engine keeps the groups and enforces
//! the bounds QUERY_DEVICE reports (max_mcast_*); here the command's fields
//! are checked and the QP is one of this device's.

use crate::abi::cmd::{McastIn, Status};

use super::{fail, reserved, Exec, Fail, Syndrome};

fn check(x: &Exec<'_>, i: &McastIn) -> Result<(), Fail> {
    reserved(i.rsvd == 0)?;
    if !x.hca.qps.contains_key(&i.qpn) {
        return Err(fail(Status::NotFound, Syndrome::NoQp));
    }
    Ok(())
}

pub(super) fn attach_mcast(x: &mut Exec<'_>, i: McastIn) -> Result<(), Fail> {
    check(x, &i)?;
    x.engine().attach_mcast(i.qpn, i.gid, i.mlid)?;
    log::debug!(
        "QP {} attached to multicast group {:02x?} (MLID {:#x})",
        i.qpn,
        i.gid,
        i.mlid
    );
    Ok(())
}

pub(super) fn detach_mcast(x: &mut Exec<'_>, i: McastIn) -> Result<(), Fail> {
    check(x, &i)?;
    x.engine().detach_mcast(i.qpn, i.gid, i.mlid)?;
    log::debug!("QP {} detached from multicast group {:02x?}", i.qpn, i.gid);
    Ok(())
}
