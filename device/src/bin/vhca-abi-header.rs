//! Prints the device ABI as a C header (ARCHITECTURE.md §4):
//! `cargo run -p device --bin vhca-abi-header > guest-driver/include/vhca_abi.h`.

fn main() {
    print!("{}", device::abi::c_header());
}
