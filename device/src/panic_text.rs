//! The message of a caught panic, for the threads that contain their own
//! (the data path's supervisor in `run`, the vhost-user-net worker in
//! `net::backend`): a leaf of its own, so that neither imports the other.

/// The message of a caught panic (its `&str` or `String` payload).
pub(crate) fn panic_text(e: &(dyn std::any::Any + Send)) -> String {
    e.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| e.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}
