#!/usr/bin/env bash
# Coverage-guided fuzzing (issue 13; fuzz/README.md): builds the fuzz targets with
# libFuzzer on the stable toolchain and runs each for N seconds over its seed
# corpus. Exits non-zero on a crash and prints the reproducer.
#
#   scripts/fuzz.sh                      # every target, 20 s each (CI)
#   scripts/fuzz.sh --seconds 3600       # the long run
#   scripts/fuzz.sh --seconds 600 cmdq   # one target
#   scripts/fuzz.sh --build              # build only
#   env VHCA_FUZZ_JOBS (default nproc)   targets run at once, one CPU each
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_rust
# libfuzzer-sys compiles libFuzzer (C++).
command -v c++ >/dev/null 2>&1 || apt_install g++

seconds=20
build_only=0
targets=()
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds="$2"; shift 2 ;;
        --build) build_only=1; shift ;;
        -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
        -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
        *) targets+=("$1"); shift ;;
    esac
done
all=(wire_parse engine_packets wqe_decode cmdq vfio_user fabric_frames fabric_auth udp_recv device_reset net_backend mad_plane)
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")

# The flags cargo-fuzz passes, all stable: SanitizerCoverage through LLVM's pass
# (inline 8-bit counters, PC table, compare tracing, stack depth) and `--cfg
# fuzzing`. No AddressSanitizer: it needs nightly's -Zsanitizer, and the code under
# test is safe Rust (the few `unsafe` wrappers are in pci/fabric, reached here
# through their safe APIs). --target keeps the flags off build scripts and proc
# macros, which must not link against libFuzzer's hooks.
host=$(rustc -vV | sed -n 's/^host: //p')
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cllvm-args=-sanitizer-coverage-stack-depth \
--cfg fuzzing"
export CARGO_TARGET_DIR="$PWD/fuzz/target"
echo "== fuzz: build (${targets[*]})"
cargo build --quiet --release --manifest-path fuzz/Cargo.toml --target "$host" \
    $(printf -- '--bin %s ' "${targets[@]}")
[ "$build_only" = 1 ] && exit 0

bin="$CARGO_TARGET_DIR/$host/release"
# What the targets leave in the temporary folder (vfio_user's socket folder,
# made once per process and never removed: libFuzzer exits without unwinding)
# goes with the run.
TMPDIR=$(mktemp -d /tmp/vhca-fuzz.XXXXXX)
export TMPDIR
trap 'rm -rf "$TMPDIR"' EXIT
# One target per CPU at a time (libFuzzer runs one thread): each target
# still gets its seconds of a whole CPU, and the stage takes 1/N the time.
jobs=${VHCA_FUZZ_JOBS:-$(nproc)}
[ "$jobs" -ge 1 ] 2>/dev/null || jobs=1

# Runs one target; its report lines go to fuzz/work/$t.report, printed in
# target order once all have run (parallel runs would interleave them).
run_one() {
    local t=$1 work="fuzz/work/$1" art="fuzz/artifacts/$1/" log="fuzz/work/$1.log"
    local rep="fuzz/work/$1.report" rc
    mkdir -p "$work" "$art" "fuzz/corpus/$t"
    {
        echo "== fuzz: $t for ${seconds}s"
        "$bin/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
            -max_len=8192 -print_final_stats=1 -artifact_prefix="$art" \
            "$work" "fuzz/corpus/$t" >"$log" 2>&1
        rc=$?
        # (|| true: under pipefail a grep without a match would end the script.)
        grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb)|cov: ' "$log" | tail -3 || true
        if [ $rc -ne 0 ]; then
            echo "fuzz: $t FAILED (exit $rc); log: $log"
            grep -E -A1 'panicked|ERROR|SUMMARY' "$log" | head -8 || true
            grep -oE 'Test unit written to [^ ]+' "$log" | sed 's/^/fuzz: reproducer: /' || true
            echo "fuzz: replay with $bin/$t <reproducer>"
        fi
        return $rc
    } >"$rep" 2>&1
}

# The committed seeds stay as they are; what the fuzzer finds goes to a work
# corpus (fuzz/work, not in git) that later runs start from.
mkdir -p fuzz/work
echo "== fuzz: ${#targets[@]} targets, ${seconds}s each, $jobs at a time"
set +e
pids=() names=() status=0
for t in "${targets[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
    run_one "$t" &
    pids+=($!) names+=("$t")
done
for i in "${!pids[@]}"; do
    wait "${pids[$i]}"
    rc=$?
    t=${names[$i]}
    if [ $rc -ne 0 ]; then
        cat "fuzz/work/$t.report" >&2
        status=1
    else
        cat "fuzz/work/$t.report"
    fi
done
set -e
exit $status
