//! WF-09 benchmark: building a whole native packet with a 4096-byte payload
//! (headers + payload copy + ICRC + VCRC, `PacketRepr::emit` into a reused buffer)
//! against the baseline `crc32fast::hash` over the same 4096 payload bytes.
//! Target: throughput(build) / throughput(crc32fast) >= 0.5.
//!
//! Run: `cargo bench -p transport --bench wire_build`. Plain `main`, no harness:
//! every kernel is timed in the same run, interleaved, over several repetitions, and
//! the median is reported.

use std::hint::black_box;
use std::time::{Duration, Instant};

use transport::wire::crc::{icrc_native, icrc_vcrc_native, vcrc, VCRC_LEN};
use transport::wire::opcode::Opcode;
use transport::wire::{BthRepr, ExtHeaders, GrhRepr, LrhRepr, PacketRepr, RethRepr, TransportRepr};

const PAYLOAD: usize = 4096;
/// Calls per timed sample.
const ITERS: u32 = 20_000;
/// Timed samples per kernel (the median is reported).
const REPS: usize = 15;
/// Untimed warm-up per kernel.
const WARMUP: Duration = Duration::from_millis(300);

fn lrh() -> LrhRepr {
    LrhRepr {
        vl: 0,
        sl: 0,
        dlid: 0x0011,
        slid: 0x0022,
    }
}

fn bth(opcode: Opcode) -> BthRepr {
    BthRepr {
        opcode,
        solicited: false,
        mig_req: true,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp: 0x00_0102,
        ack_req: true,
        psn: 0x00_0304,
    }
}

fn write_only(payload: &[u8]) -> PacketRepr<'_> {
    PacketRepr {
        lrh: lrh(),
        grh: None,
        transport: TransportRepr {
            bth: bth(Opcode::RC_RDMA_WRITE_ONLY),
            ext: ExtHeaders {
                reth: Some(RethRepr {
                    va: 0x7f00_0000_1000,
                    rkey: 0x1234_5678,
                    dma_len: PAYLOAD as u32,
                }),
                ..ExtHeaders::default()
            },
            payload,
        },
    }
}

fn send_only_grh(payload: &[u8]) -> PacketRepr<'_> {
    PacketRepr {
        lrh: lrh(),
        grh: Some(GrhRepr {
            traffic_class: 0,
            flow_label: 0x1_2345,
            hop_limit: 64,
            sgid: [0xfe; 16],
            dgid: [0x80; 16],
        }),
        transport: TransportRepr {
            bth: bth(Opcode::RC_SEND_ONLY),
            ext: ExtHeaders::default(),
            payload,
        },
    }
}

/// One kernel: a name and a closure run once per call.
struct Kernel<'a> {
    name: &'static str,
    f: Box<dyn FnMut() + 'a>,
    samples: Vec<f64>,
}

impl Kernel<'_> {
    fn sample(&mut self) -> f64 {
        let t = Instant::now();
        for _ in 0..ITERS {
            (self.f)();
        }
        t.elapsed().as_nanos() as f64 / f64::from(ITERS)
    }

    fn warm_up(&mut self) {
        let t = Instant::now();
        while t.elapsed() < WARMUP {
            (self.f)();
        }
    }

    fn median(&self) -> f64 {
        let mut s = self.samples.clone();
        s.sort_by(f64::total_cmp);
        s[s.len() / 2]
    }
}

fn main() {
    let payload: Vec<u8> = (0..PAYLOAD).map(|i| (i * 31 + 7) as u8).collect();
    let wo = write_only(&payload);
    let sg = send_only_grh(&payload);
    let mut wo_buf = vec![0u8; wo.buffer_len()];
    let mut sg_buf = vec![0u8; sg.buffer_len()];
    wo.emit(&mut wo_buf).expect("emit");
    sg.emit(&mut sg_buf).expect("emit");
    // Built copies for the CRC-alone and parse kernels.
    let wo_pkt = wo_buf.clone();
    let sg_pkt = sg_buf.clone();
    assert_eq!(PacketRepr::parse(&wo_pkt), Ok(wo));
    assert_eq!(PacketRepr::parse(&sg_pkt), Ok(sg));
    let wo_len = wo_pkt.len();
    let wo_empty = write_only(&[]);
    let mut empty_buf = vec![0u8; wo_empty.buffer_len()];
    let sg_len = sg_pkt.len();

    let mut kernels = vec![
        Kernel {
            name: "build RC RDMA WRITE ONLY, no GRH",
            f: Box::new(|| {
                let n = black_box(&wo).emit(black_box(&mut wo_buf[..]));
                black_box(n.ok());
            }),
            samples: Vec::new(),
        },
        Kernel {
            name: "build RC SEND ONLY, GRH",
            f: Box::new(|| {
                let n = black_box(&sg).emit(black_box(&mut sg_buf[..]));
                black_box(n.ok());
            }),
            samples: Vec::new(),
        },
        Kernel {
            name: "crc32fast::hash, 4096 B (baseline)",
            f: Box::new(|| {
                black_box(crc32fast::hash(black_box(&payload[..])));
            }),
            samples: Vec::new(),
        },
        Kernel {
            name: "crc::vcrc alone, WRITE ONLY LRH..ICRC",
            f: Box::new(|| {
                black_box(vcrc(black_box(&wo_pkt[..wo_len - VCRC_LEN])));
            }),
            samples: Vec::new(),
        },
        Kernel {
            name: "crc::vcrc alone, SEND ONLY+GRH LRH..ICRC",
            f: Box::new(|| {
                black_box(vcrc(black_box(&sg_pkt[..sg_len - VCRC_LEN])));
            }),
            samples: Vec::new(),
        },
        Kernel {
            name: "crc::icrc_native alone, WRITE ONLY",
            f: Box::new(|| {
                black_box(icrc_native(black_box(&wo_pkt[..wo_len - 6]), false));
            }),
            samples: Vec::new(),
        },
        Kernel {
            name: "crc_fast CRC-32 (ICRC poly) alone, 4096 B",
            f: Box::new(|| {
                black_box(crc_fast::checksum(
                    crc_fast::CrcAlgorithm::Crc32IsoHdlc,
                    black_box(&payload[..]),
                ));
            }),
            samples: Vec::new(),
        },
        Kernel {
            name: "crc_fast CRC-16/ARC built-in, WRITE ONLY",
            f: Box::new(|| {
                black_box(crc_fast::checksum(
                    crc_fast::CrcAlgorithm::Crc16Arc,
                    black_box(&wo_pkt[..wo_len - VCRC_LEN]),
                ));
            }),
            samples: Vec::new(),
        },
        Kernel {
            name: "build WRITE ONLY, 0-byte payload",
            f: Box::new(|| {
                let n = black_box(&wo_empty).emit(black_box(&mut empty_buf[..]));
                black_box(n.ok());
            }),
            samples: Vec::new(),
        },
        Kernel {
            name: "payload copy alone, 4096 B",
            f: Box::new({
                let mut dst = vec![0u8; PAYLOAD];
                let src = &payload;
                move || {
                    black_box(&mut dst[..]).copy_from_slice(black_box(&src[..]));
                }
            }),
            samples: Vec::new(),
        },
        Kernel {
            name: "crc::icrc_vcrc_native alone, WRITE ONLY",
            f: Box::new(|| {
                black_box(icrc_vcrc_native(black_box(&wo_pkt[..wo_len - 6]), false));
            }),
            samples: Vec::new(),
        },
        Kernel {
            name: "parse RC RDMA WRITE ONLY, no GRH",
            f: Box::new(|| {
                black_box(PacketRepr::parse(black_box(&wo_pkt[..])).is_ok());
            }),
            samples: Vec::new(),
        },
        Kernel {
            name: "parse RC SEND ONLY, GRH",
            f: Box::new(|| {
                black_box(PacketRepr::parse(black_box(&sg_pkt[..])).is_ok());
            }),
            samples: Vec::new(),
        },
    ];

    for k in &mut kernels {
        k.warm_up();
    }
    // Interleaved: each repetition times every kernel once, so drift hits all alike.
    for _ in 0..REPS {
        for k in &mut kernels {
            let s = k.sample();
            k.samples.push(s);
        }
    }

    let baseline = kernels[2].median();
    println!(
        "WF-09 packet build, {PAYLOAD}-byte payload; median of {REPS} x {ITERS} calls \
         (GB/s = payload bytes / time)"
    );
    println!(
        "{:<42} {:>10} {:>9} {:>10}  ratio to crc32fast",
        "kernel", "ns/call", "GB/s", "min ns"
    );
    for (i, k) in kernels.iter().enumerate() {
        let ns = k.median();
        let min = k.samples.iter().copied().fold(f64::INFINITY, f64::min);
        let gbps = PAYLOAD as f64 / ns;
        let ratio = if i < 2 {
            let r = baseline / ns;
            let verdict = if r >= 0.5 { "ok" } else { "BELOW TARGET" };
            format!("{r:.3} (target >= 0.5: {verdict})")
        } else {
            String::new()
        };
        println!(
            "{:<42} {:>10.1} {:>9.2} {:>10.1}  {}",
            k.name, ns, gbps, min, ratio
        );
    }
    println!("packet sizes: WRITE ONLY {wo_len} B, SEND ONLY+GRH {sg_len} B (LRH..VCRC)");
    println!(
        "crc-fast dispatch: {}",
        crc_fast::get_calculator_target(crc_fast::CrcAlgorithm::Crc16Arc)
    );
}
