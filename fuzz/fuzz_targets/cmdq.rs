//! The command queue (device/src/cmdq; abi::cmd COMMAND_PROTOCOL) and the data path
//! behind it (ARCHITECTURE.md §2, §9 hostile guest): a Hca with fake guest memory
//! (a `VecMemory` based at guest address 0, so that small numbers in the fuzzer's
//! bytes are valid addresses), a command ring, mailboxes, doorbell pages and a
//! loopback link. The input is a list of operations: commands (any opcode, any
//! input inline or in a mailbox), whole raw slots, guest memory writes (page lists,
//! WQEs), doorbell stores, data-path rounds and context-window reads. Every command
//! must complete (owner cleared, CI = PI) or the queue must go fatal; nothing may
//! panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vhca_fuzz::cmdq::{Dev, Ops};

fuzz_target!(|data: &[u8]| {
    let mut d = Dev::new();
    for op in Ops(data).take(256) {
        if !d.apply(op) {
            return;
        }
    }
    d.finish();
});
