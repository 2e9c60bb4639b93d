//! Writes the packet corpus ([`transport::wire::corpus`]) as a pcap file of ERF
//! type-21 records, for dissecting with Wireshark/tshark (WF-11):
//!
//! ```text
//! cargo run -p transport --example corpus -- OUT.pcap
//! ```

use std::process::ExitCode;
use std::time::Duration;

use transport::wire::corpus::corpus;
use transport::wire::pcap::PcapWriter;

const USAGE: &str = "usage: corpus OUT.pcap";

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (Some(out), None) = (args.next(), args.next()) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    if out.is_empty() || out.to_string_lossy().starts_with('-') {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    }
    let file = match std::fs::File::create(&out) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("corpus: cannot create {}: {e}", out.to_string_lossy());
            return ExitCode::FAILURE;
        }
    };
    match write(std::io::BufWriter::new(file)) {
        Ok(n) => {
            println!("corpus: wrote {n} packets to {}", out.to_string_lossy());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("corpus: {e}");
            ExitCode::FAILURE
        }
    }
}

fn write(sink: impl std::io::Write) -> Result<usize, transport::wire::pcap::PcapError> {
    let packets = corpus();
    let mut w = PcapWriter::infiniband(sink)?;
    // A fixed, made-up clock (2023-11-14T22:13:20Z plus 1 ms a packet): the file
    // is the same on every run.
    for (i, p) in packets.iter().enumerate() {
        let ts = Duration::from_secs(1_700_000_000) + Duration::from_millis(i as u64);
        w.write_packet(ts, &p.bytes)?;
    }
    w.flush()?;
    Ok(packets.len())
}
