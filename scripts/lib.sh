# Shared by scripts/*.sh: install what the scripts need on a fresh Debian machine.
# Sourced, not run.

# vhca_step: a long step with a heartbeat.
# shellcheck source=heartbeat.sh
. "$(dirname "${BASH_SOURCE[0]}")/heartbeat.sh"

# Oldest Rust the workspace builds with (crc-fast needs 1.89).
VHCA_MIN_RUST_MINOR=89

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

apt_install() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "vhca: installing ${missing[*]} (apt-get)" >&2
    local log; log=$(mktemp /tmp/vhca-apt.XXXXXX.log)
    # Refresh the lists once per boot of this machine, not on every run.
    if [ ! -e /tmp/.vhca-apt-updated ]; then
        vhca_step "apt-get update" "~30 s" "$log" as_root apt-get update && touch /tmp/.vhca-apt-updated
    fi
    vhca_step "apt-get install ${missing[*]}" "~1-3 min" "$log" \
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}" ||
        { tail -20 "$log" >&2; rm -f "$log"; return 1; }
    rm -f "$log"
}

rust_ok() {
    command -v cargo >/dev/null 2>&1 || return 1
    local minor
    minor=$(cargo --version | sed -E 's/^cargo 1\.([0-9]+).*/\1/')
    [ "${minor:-0}" -ge "$VHCA_MIN_RUST_MINOR" ] 2>/dev/null || return 1
    cargo fmt --version >/dev/null 2>&1 && cargo clippy --version >/dev/null 2>&1
}

# A rustup toolchain if there is one; else Debian 12's rustc-web/cargo-web (1.96),
# which bookworm carries for browser builds and which is new enough for us.
ensure_rust() {
    [ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"
    rust_ok && return 0
    apt_install gcc libc6-dev rustc-web cargo-web rustfmt-web rust-web-clippy
    rust_ok || { echo "vhca: no Rust >= 1.$VHCA_MIN_RUST_MINOR with cargo fmt and clippy could be installed" >&2; exit 1; }
}

# tshark dissects our captures (WF-11). Answer "no" to the capture-group question.
ensure_tshark() {
    command -v tshark >/dev/null 2>&1 && return 0
    echo "wireshark-common wireshark-common/install-setuid boolean false" | as_root debconf-set-selections
    apt_install tshark
}

# Benchmark figures for the plots (issue 28 item 7). `bench_tsv_begin`
# sets VHCA_BENCH_TSV to a fresh file for the example to append its figures
# to (tests/src/bench_tsv.rs); `bench_tsv_end NAME` writes them to
# bench-results/NAME.tsv (replacing the last run's), each row with where it
# came from: source "run", the UTC date, the command (the script, its
# arguments and the VHCA_BENCH_* settings), the commit and, as a note, the
# host's load average when the run began (this is a shared machine). The
# files are committed; scripts/plot-benchmarks.py draws BENCHMARKS.md's
# plots from them.
bench_tsv_begin() {
    VHCA_BENCH_TSV=$(mktemp /tmp/vhca-bench.XXXXXX.tsv)
    export VHCA_BENCH_TSV
    BENCH_TSV_LOAD=$(cut -d' ' -f1 /proc/loadavg)
    BENCH_TSV_DATE=$(date -u +%Y-%m-%dT%H:%MZ)
}

bench_tsv_end() {
    local name=$1 out="bench-results/$1.tsv" cmd commit settings
    settings=$(env | grep '^VHCA_BENCH_' | grep -v '^VHCA_BENCH_TSV=' | sort | tr '\n' ' ' || true)
    cmd="${settings}scripts/$(basename "$0")"
    commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
    if ! git diff --quiet HEAD -- device transport pci tests 2>/dev/null; then
        commit="$commit+changes"
    fi
    mkdir -p bench-results
    {
        printf 'source\tdate\tcommand\tcommit\tfigure\tseries\tx\tstat\tvalue\tunit\tnote\n'
        awk -F'\t' -v OFS='\t' -v d="$BENCH_TSV_DATE" -v c="$cmd" -v k="$commit" \
            -v n="load average $BENCH_TSV_LOAD at the start" \
            'NF == 6 { print "run", d, c, k, $1, $2, $3, $4, $5, $6, n }' "$VHCA_BENCH_TSV"
    } >"$out.tmp"
    mv "$out.tmp" "$out"
    rm -f "$VHCA_BENCH_TSV"
    echo "$(basename "$0"): figures in $out"
}
