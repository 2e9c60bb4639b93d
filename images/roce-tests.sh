#!/bin/bash
# images/roce-tests.sh — RoCEv2 tests (issue 11): rdma-core's, perftest's and
# librdmacm's tools between two TCG guests on a private bridge
# (images/roce-pair.sh), vhca against vhca, rxe against rxe and vhca against
# rxe in both directions; tshark on the captures; the same under 5 % loss.
#
# Usage: images/roce-tests.sh [OPTIONS] [-- ROCE_PAIR_OPTION...]
#
# Pairs (A = server, B = client), one roce-pair.sh boot each, every check of
# the pair in sequence in that boot:
#   vhca-vhca rxe-rxe vhca-rxe rxe-vhca   the full set below
#   loss-vhca-rxe loss-rxe-vhca           the loss set, --loss 5 on the bridge
#   wl-vhca-vhca wl-rxe-rxe               the workload set (issue 15), with the
#                                         workloads overlay (images/workloads.sh)
# Full set (each with -d $DEV; -g/-x $GIDX, the RoCE v2 IPv4 GID):
#   setup (both guests: $DEV present, link_layer Ethernet, GIDX found);
#   ibv_{rc,uc,ud,srq}_pingpong -c (received data checked); ib_{send,write,
#   read,atomic}_{bw,lat}; rping -v -V -C 20 (data validated); ib_write_bw -R
#   and ib_send_lat -R (rdma_cm); ucmatose; rdma_server/rdma_client; udaddy.
#   The READ/atomic perftests run with -o 16 (outstanding reads, the same on
#   both sides: perftest does not clamp the peer's to the local maximum).
# Loss set: ibv_rc_pingpong -c, ib_write_bw, ib_read_bw, and loss_applied
#   (the nft rule did drop frames). ibv_rc_pingpong's tail race: each side
#   exits (destroying its QP) once its own last send is acknowledged and its
#   last receive is in, so when the ACK of the *other* side's last SEND is
#   lost, that side retries into a QP that is gone and ends with "transport
#   retry counter exceeded", on any HCA. Linux rxe instead retries forever:
#   rc_pingpong sets retry_cnt 7, which rxe's completer takes as "infinite"
#   (the spec gives that meaning to the RNR retry count only: RL-10), so the
#   failing side is an rxe killed by the check's timeout. Either outcome passes
#   (and is printed as a "#" line) only when the other side completed all its
#   iterations with checked data (-c).
#   rxe's lost completion: rxe's completer takes an ACK of the last PSN of
#   the SEND it is resending, while that SEND is not all resent yet, as
#   acknowledging PSNs only (comp.psn moves past it, the WQE stays "not
#   pending", no completion); when the later ACK of that PSN never comes (the
#   resent last packet or its ACK is lost), rxe has req.psn == comp.psn and
#   retries no more ("no point in retrying", rxe_comp.c) nor re-arms its
#   timer: the SEND never completes, rc_pingpong waits until its timeout on
#   both sides. Shown by the stall diagnostics (ROCE_TESTS_STALL) in CI of
#   loss-rxe-vhca at iteration ~28. The ACK is the spec's: a duplicate SEND
#   is ACKed with the responder's latest PSN (RL-04), and a requester takes
#   an ACK past the PSN it resent, up to its high-water mark (RL-09, IBA
#   9.7.5.1); rxe's own responder ACKs that way too, so rxe-rxe can stall. It
#   passes (a "#" line) only when both sides' state at the stall proves it:
#   rxe's QP has a send WQE outstanding with req_psn == comp_psn and its
#   retry timer expired; vhca's QP is in RTS with every PSN of the peer
#   received both ways (its rq-psn = rxe's req_psn, rxe's rq-psn = its
#   sq-psn), no send WQE left in its SQ, and its CQ has exactly one CQE per
#   message sent and received, every one of them taken by the tool (pi = ci).
#   Any other state (a vhca CQE missing or not taken, a vhca send not
#   acknowledged, a PSN not received) fails.
# Stall diagnostics (ROCE_TESTS_STALL, the loss set): a check's tool still
#   running 20 s after its device's counters stopped moving prints, in the
#   guest, its device's QPs, CQs and counters, rxe's QP internals (an fprobe
#   on rxe_qp_to_attr, by BTF) or vhca's QP and CQ contexts (its debugfs);
#   a failed check prints them as "#" lines. Under loss the TAPs are captured
#   too (roce-taps.pcapng: what the loss rule let through, roce-pair.sh
#   --capture-taps).
# Workload set: ucx_devices (ucx_info lists rc_verbs and ud_verbs on $DEV:1);
#   UCX's UCT transports between the guests with ucx_perftest (-P 0: its own
#   TCP exchange, no MPI): rc_verbs put_bw 64 KiB (zero copy) and am_lat 8 B,
#   ud_verbs am_bw 512 B (bcopy) and am_lat 8 B; UCP tag matching over them (tag_bw 64 KiB,
#   UCX_TLS=rc_verbs,ud_verbs); mpi: Open MPI, one rank per guest, pml ucx
#   over the device, ping-pong (8 B, 64 KiB, data checked) and allreduce
#   (checked) of images/wl/mpi-pingpong.c, launched from B with A's daemon
#   started through a remote shell A serves (images/wl/mpi.sh, mpi-shell.sh,
#   rsh.sh: the guests run no sshd); nvmeof: the kernel's NVMe over Fabrics target
#   (nvmet-rdma, a memory-backed null_blk) in A and host (nvme-rdma) in B,
#   ROCE_TESTS_NVME_ROUNDS rounds (default 10) of discover, connect, fio with
#   crc32c verification (4 KiB random, 128 KiB sequential, writes then reads),
#   disconnect (images/wl/); nvme_no_leak: the vhca processes' open fds equal
#   and their private memory (RssAnon) within 4 MiB from the end of round 2 to
#   the end of the last (sampled on the host as each round ends).
# After each pair: tshark (tshark -d udp.port==4791,infiniband on the bridge
#   capture of udp port 4791): RoCE frames present, none _ws.malformed. The
#   InfiniBand dissector's payload heuristics (RPC-over-RDMA, Ethernet over
#   IB, iSER, SDP, SMB Direct, SMC-R, ...) are turned off: the tools' payloads
#   are none of those ULPs, and with them on, tshark 4.0 calls a 2-byte
#   ib_send_lat payload a malformed RPCoRDMA message (seen with rxe alone).
# A check passes when both of its sides exit 0 (guest A runs each server under
# `timeout`, guest B each client, retried while the server is not up yet).
#
# Options:
#   --only KIND   rxe: rxe-rxe + loss-rxe-rxe (runs before vhca's RoCE mode
#                 exists); vhca: vhca-vhca + loss-vhca-vhca; interop: vhca-rxe,
#                 rxe-vhca and their loss runs; ci (default, the test suite's):
#                 every pair with vhca, with and without loss (vhca-vhca,
#                 vhca-rxe, rxe-vhca, loss-vhca-vhca, loss-vhca-rxe,
#                 loss-rxe-vhca) and wl-vhca-vhca; all: ci's and rxe-rxe;
#                 workloads: wl-vhca-vhca.
#                 A loss pair that fails gets one more boot (a slow host can
#                 run a tool into its timeout); the first attempt's failures
#                 are printed as "RETRY FAIL ..." lines.
#   --pairs LIST  exactly these pairs (comma-separated names as above, e.g.
#                 rxe-rxe,loss-rxe-rxe)
#   --loss PCT    loss of the loss pairs (default 5)
#   --out DIR     logs (default: a new $VHCA_CACHE/run/roce-tests.XXXXXX)
#   -- ...        more roce-pair.sh options for every pair (--vhca BIN, ...)
#
# Prints "PASS pair/check" or "FAIL pair/check (...)" per check and, alone on
# the last line, "N passed, M failed"; exit 0 iff all pass. Logs per pair in
# DIR/PAIR/ (roce-pair.out, consoles, roce.pcap, vhca logs).
#
# Environment: ROCE_TESTS_N (pingpong iterations, default 50),
# ROCE_TESTS_NVME_ROUNDS (NVMe-oF connect/fio/disconnect rounds, default 10),
# ROCE_TESTS_CHECKS (a regex: run only the checks whose names match),
# ROCE_TESTS_STALL (seconds of still counters that make a stall; default 20
# for the loss set, 0 = off for the others), ROCE_TESTS_STALL_KILL (1: end a
# stalled tool after its diagnostics), ROCE_TESTS_LOSS_RETRY (0: no second
# boot for a failed loss pair),
# ROCE_TESTS_PERF_N (perftest iterations, default 100), ROCE_TESTS_LOSS_N
# (iterations under loss, default 200), ROCE_TESTS_PAIR_TIMEOUT (per guest,
# default 300 s; twice that for the loss pairs), ROCE_TESTS_OUTS (perftest -o, default 16).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. images/lib.sh
. scripts/lib.sh

only=ci pairs='' loss=5 out='' pair_opts=()
need() { [ $# -ge 2 ] || vhca_die "$1 needs an argument"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --only) need "$@"; only=$2; shift 2;;
        --pairs) need "$@"; pairs=$2; shift 2;;
        --loss) need "$@"; loss=$2; shift 2;;
        --out) need "$@"; out=$2; shift 2;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0;;
        --) shift; pair_opts+=("$@"); break;;
        *) vhca_die "unknown argument $1 (try --help)";;
    esac
done
if [ -z "$pairs" ]; then
    case "$only" in
        rxe) pairs=rxe-rxe,loss-rxe-rxe;;
        vhca) pairs=vhca-vhca,loss-vhca-vhca;;
        interop) pairs=vhca-rxe,rxe-vhca,loss-vhca-rxe,loss-rxe-vhca;;
        all) pairs=vhca-vhca,rxe-rxe,vhca-rxe,rxe-vhca,loss-vhca-vhca,loss-vhca-rxe,loss-rxe-vhca,wl-vhca-vhca;;
        # The test suite's set: every pair with vhca in it, with and without
        # loss, and the workloads. Not in it: rxe<->rxe, the baseline (--only rxe).
        ci) pairs=vhca-vhca,vhca-rxe,rxe-vhca,loss-vhca-vhca,loss-vhca-rxe,loss-rxe-vhca,wl-vhca-vhca;;
        workloads) pairs=wl-vhca-vhca;;
        *) vhca_die "--only rxe|vhca|interop|all|ci|workloads";;
    esac
fi
vhca_need_root
ensure_tshark

N=${ROCE_TESTS_N:-50}
PN=${ROCE_TESTS_PERF_N:-100}
LN=${ROCE_TESTS_LOSS_N:-200}
NR=${ROCE_TESTS_NVME_ROUNDS:-10}
PT=${ROCE_TESTS_PAIR_TIMEOUT:-300}   # the loss pairs get twice that
G='-d $DEV -g $GIDX'
X='-d $DEV -x $GIDX -F'
# RDMA READ/atomic: perftest sets a QP's max_rd_atomic to the *peer's* "out
# reads" (its device maximum unless -o) and does not clamp it to the local
# device's: vhca (16, as mlx5) next to rxe (128) fails "Failed to modify QP to
# RTS". Both sides ask for the same number: -o 16.
O="-o ${ROCE_TESTS_OUTS:-16}"
# name|server command|client command — evaluated in the guest ($DEV, $GIDX,
# $SERVER_IP from roce-pair.sh's hook; $PORT: a port of the check's own).
full="rc_pingpong|ibv_rc_pingpong $G -c -n $N -p \$PORT|ibv_rc_pingpong $G -c -n $N -p \$PORT \$SERVER_IP
uc_pingpong|ibv_uc_pingpong $G -c -n $N -p \$PORT|ibv_uc_pingpong $G -c -n $N -p \$PORT \$SERVER_IP
ud_pingpong|ibv_ud_pingpong $G -c -s 512 -n $N -p \$PORT|ibv_ud_pingpong $G -c -s 512 -n $N -p \$PORT \$SERVER_IP
srq_pingpong|ibv_srq_pingpong $G -c -n $N -p \$PORT|ibv_srq_pingpong $G -c -n $N -p \$PORT \$SERVER_IP
ib_send_bw|ib_send_bw $X -n $PN -p \$PORT|ib_send_bw $X -n $PN -p \$PORT \$SERVER_IP
ib_write_bw|ib_write_bw $X -n $PN -p \$PORT|ib_write_bw $X -n $PN -p \$PORT \$SERVER_IP
ib_read_bw|ib_read_bw $X $O -n $PN -p \$PORT|ib_read_bw $X $O -n $PN -p \$PORT \$SERVER_IP
ib_atomic_bw|ib_atomic_bw $X $O -n $PN -p \$PORT|ib_atomic_bw $X $O -n $PN -p \$PORT \$SERVER_IP
ib_send_lat|ib_send_lat $X -n $PN -p \$PORT|ib_send_lat $X -n $PN -p \$PORT \$SERVER_IP
ib_write_lat|ib_write_lat $X -n $PN -p \$PORT|ib_write_lat $X -n $PN -p \$PORT \$SERVER_IP
ib_read_lat|ib_read_lat $X $O -n $PN -p \$PORT|ib_read_lat $X $O -n $PN -p \$PORT \$SERVER_IP
ib_atomic_lat|ib_atomic_lat $X $O -n $PN -p \$PORT|ib_atomic_lat $X $O -n $PN -p \$PORT \$SERVER_IP
rping|rping -s -v -V -C 20 -a \$SERVER_IP -p \$PORT|rping -c -v -V -C 20 -a \$SERVER_IP -p \$PORT
ib_write_bw_R|ib_write_bw -d \$DEV -R -F -n $PN -p \$PORT|ib_write_bw -d \$DEV -R -F -n $PN -p \$PORT \$SERVER_IP
ib_send_lat_R|ib_send_lat -d \$DEV -R -F -n $PN -p \$PORT|ib_send_lat -d \$DEV -R -F -n $PN -p \$PORT \$SERVER_IP
ucmatose|ucmatose -p \$PORT -C 20|ucmatose -s \$SERVER_IP -p \$PORT -C 20
rdma_server|rdma_server -p \$PORT|rdma_client -s \$SERVER_IP -p \$PORT
udaddy|udaddy -C 20|udaddy -s \$SERVER_IP -C 20"
# Under loss only tools whose end survives a lost frame: perftest ends with a
# TCP handshake before either side destroys its QP. ibv_rc_pingpong does not
# (see tail_race below); rping is left out: its client destroys its cm_id right
# after rdma_disconnect, which cancels ib_cm's DREQ retransmission, so a lost
# DREQ leaves the server waiting for a disconnect forever, on any HCA.
lossy="rc_pingpong|ibv_rc_pingpong $G -c -n $LN -p \$PORT|ibv_rc_pingpong $G -c -n $LN -p \$PORT \$SERVER_IP
ib_write_bw|ib_write_bw $X -n $LN -p \$PORT|ib_write_bw $X -n $LN -p \$PORT \$SERVER_IP
ib_read_bw|ib_read_bw $X $O -n $LN -p \$PORT|ib_read_bw $X $O -n $LN -p \$PORT \$SERVER_IP"

# The workloads (issue 15): UCX's transports, UCP, NVMe over Fabrics.
# (each UCX tool under `timeout 120`: the set's timeout is NVMe-oF's, 900 s)
U="timeout 120 ucx_perftest -P 0 -d \$DEV:1"
# UD over RoCE: UCX's ud_verbs drops every received datagram by its Ethernet
# DGID check (UCX_UD_ETH_DGID_CHECK, on by default) on this UCX with plain
# verbs, soft-RoCE exactly as vhca (the peer resends its first packet until
# "UD endpoint timeout"; vhca's counters show each one delivered, with the
# IPv4 header in the last 20 of the 40 GRH bytes as rdma-core lays it out),
# and works with the check off.
UD="env UCX_UD_ETH_DGID_CHECK=n timeout 120 ucx_perftest -P 0 -d \$DEV:1"
wl="ucx_devices|ucx_info -d | grep -A1 -E 'Transport: (rc|ud)_verbs' | grep -c \"Device: \$DEV:1\" | grep -qx 2|ucx_info -d | grep -A1 -E 'Transport: (rc|ud)_verbs' | grep -c \"Device: \$DEV:1\" | grep -qx 2
ucx_rc_put_bw|$U -x rc_verbs -t put_bw -D zcopy -s 65536 -n $PN -p \$PORT|$U -x rc_verbs -t put_bw -D zcopy -s 65536 -n $PN -p \$PORT \$SERVER_IP
ucx_rc_am_lat|$U -x rc_verbs -t am_lat -s 8 -n $PN -p \$PORT|$U -x rc_verbs -t am_lat -s 8 -n $PN -p \$PORT \$SERVER_IP
ucx_ud_am_bw|$UD -x ud_verbs -t am_bw -D bcopy -s 512 -n $PN -p \$PORT|$UD -x ud_verbs -t am_bw -D bcopy -s 512 -n $PN -p \$PORT \$SERVER_IP
ucx_ud_am_lat|$UD -x ud_verbs -t am_lat -s 8 -n $PN -p \$PORT|$UD -x ud_verbs -t am_lat -s 8 -n $PN -p \$PORT \$SERVER_IP
ucp_tag_bw|timeout 120 env UCX_UD_ETH_DGID_CHECK=n UCX_NET_DEVICES=\$DEV:1 UCX_TLS=rc_verbs,ud_verbs ucx_perftest -P 0 -t tag_bw -s 65536 -n $PN -p \$PORT|timeout 120 env UCX_UD_ETH_DGID_CHECK=n UCX_NET_DEVICES=\$DEV:1 UCX_TLS=rc_verbs,ud_verbs ucx_perftest -P 0 -t tag_bw -s 65536 -n $PN -p \$PORT \$SERVER_IP
mpi|sh /usr/share/wl/mpi-shell.sh \$((PORT + 300))|sh /usr/share/wl/mpi.sh \$SERVER_IP \$((PORT + 300)) 200
nvmeof|sh /usr/share/wl/nvmet.sh \$((PORT + 300))|sh /usr/share/wl/nvme-host.sh \$SERVER_IP \$((PORT + 300)) $NR"

# ROCE_TESTS_CHECKS=REGEX: only the checks whose name matches (grep -E).
if [ -n "${ROCE_TESTS_CHECKS:-}" ]; then
    only_checks() { grep -E "^(${ROCE_TESTS_CHECKS})\|" <<<"$1" || true; }
    full=$(only_checks "$full") lossy=$(only_checks "$lossy") wl=$(only_checks "$wl")
fi

if [ -n "$out" ]; then mkdir -p "$out" && out=$(realpath "$out") || exit 1
else mkdir -p "$VHCA_RUN"; out=$(mktemp -d "$VHCA_RUN/roce-tests.XXXXXX"); fi

# One overlay per check set: the list, the server and the client script.
# Bounds: each server runs under `timeout S` (S = 60 s, 120 s under loss), each
# client waits up to S + 30 s for its server to start (the check barrier), each
# client try runs under S - 10 s, a client retries for up to 30 s; a whole
# guest under ROCE_TESTS_PAIR_TIMEOUT.
mk_overlay() { # DIR LIST S STALL
    mkdir -p "$1/usr/share/roce-tests"
    printf '%s\n' "$2" >"$1/usr/share/roce-tests/list"
    echo "$3" >"$1/usr/share/roce-tests/timeout"
    echo "$4" >"$1/usr/share/roce-tests/stall"
    [ -z "${ROCE_TESTS_STALL_KILL:-}" ] || touch "$1/usr/share/roce-tests/stall-kill"
    cat >"$1/usr/share/roce-tests/setup.sh" <<'EOF'
# Both guests (sourced; ROLE=S in A, C in B): the device, its port, the GID.
setup() {
    echo "--- setup: DEV=$DEV GIDX=$GIDX NETDEV=$NETDEV"
    rdma link 2>&1
    dv=$(ibv_devinfo -v -d "$DEV" 2>&1); echo "$dv" | grep -E 'hca_id|state|link_layer|active_mtu|GID\[ *'"${GIDX:-x}"'\]'
    [ -n "$GIDX" ] && echo "$dv" | grep -Eq 'link_layer:[[:space:]]*Ethernet' &&
        echo "$dv" | grep -Eq 'state:[[:space:]]*PORT_ACTIVE'
}
setup; echo "RT-$ROLE setup $?"

# Stall diagnostics (ROCE_TESTS_STALL): a check's tool that still runs after
# its device's counters (rdma statistic) moved and then stayed still for
# $STALL s is stalled; diag prints this side's state for that check inside
# the check's output (between "--- diag" and "--- diag end"), so a CI log
# keeps both sides' state of a hung check: the QPs (rdma res: state, PSNs),
# CQs and counters; rxe's QP internals (rxe_state) or vhca's QP and CQ
# contexts (vhca_state, its debugfs).
STALL=$(cat /usr/share/roce-tests/stall 2>/dev/null || echo 0)
TR=/sys/kernel/tracing
# rxe's requester/completer PSNs and retry state are in no verbs attribute:
# an fprobe (else kprobe) event on rxe_qp_to_attr (what `rdma res show qp`
# calls per QP) reads them by BTF. Defined at setup, so a kernel without
# it says so at once.
rxe_probe() {
    [ "$DEV" = rxe0 ] && [ "$STALL" -gt 0 ] 2>/dev/null || return 0
    [ -e $TR/dynamic_events ] || mount -t tracefs nodev $TR 2>/dev/null
    [ -e $TR/dynamic_events ] || { echo "rxe probe: no tracefs"; return 0; }
    local f g h a k
    f='qpn=qp->ibqp.qp_num req_psn=qp->req.psn comp_psn=qp->comp.psn resp_psn=qp->resp.psn'
    g='comp_opcode=qp->comp.opcode retry_cnt=qp->comp.retry_cnt started_retry=qp->comp.started_retry timeout=qp->comp.timeout timeout_retry=qp->comp.timeout_retry need_retry=qp->req.need_retry wait_psn=qp->req.wait_psn'
    h='sq_prod=qp->sq.queue->buf->producer_index sq_cons=qp->sq.queue->buf->consumer_index timer_expires=qp->retrans_timer.expires'
    for a in "$f $g $h" "$f $g" "$f"; do
        for k in f p; do
            if echo "$k:rxediag/qp rxe_qp_to_attr $a" >>$TR/dynamic_events 2>/dev/null; then
                echo "rxe probe: $k rxe_qp_to_attr $a"
                return 0
            fi
        done
    done
    echo "rxe probe: not defined: $(tail -4 $TR/error_log 2>/dev/null | tr '\n' ' ')"
}
rxe_probe
rxe_state() {
    [ -e $TR/events/rxediag/qp/enable ] || return 0
    echo >$TR/trace
    echo 1 >$TR/events/rxediag/qp/enable
    rdma res show qp link "$DEV/1" >/dev/null 2>&1
    echo 0 >$TR/events/rxediag/qp/enable
    echo "rxe jiffies now: $(awk '/^jiffies:/ {print $2; exit}' /proc/timer_list 2>/dev/null)"
    grep -o 'qpn=.*' $TR/trace | sed 's/^/rxe qp: /'
}
vhca_state() {
    local v n
    for v in /sys/kernel/debug/vhca/*; do
        [ -e "$v/objects" ] || continue
        echo "vhca $v:"; cat "$v/objects"
        for n in $(sed -n 's/^qpn://p' "$v/objects"); do
            echo "$n" >"$v/qp" && sed '/^raw:/,$d' "$v/qp" | tr -s ' ' | tr '\n' ' '; echo
        done
        for n in $(sed -n 's/^cqn://p' "$v/objects"); do
            echo "$n" >"$v/cq" && sed '/^raw:/,$d' "$v/cq" | tr -s ' ' | tr '\n' ' '; echo
        done
        grep -E '^(DEV_STATUS|FATAL_SYNDROME|cmdq|eq )' "$v/regs"
    done
}
diag() { # NAME SECONDS
    echo "--- diag $ROLE $1: $DEV counters still for $2 s (uptime $(cut -d' ' -f1 /proc/uptime))"
    rdma res show qp link "$DEV/1" 2>&1
    rdma res show cq dev "$DEV" 2>&1
    rdma statistic show link "$DEV/1" 2>&1 | tr -s ' '
    rxe_state
    vhca_state
    echo "--- diag end"
}
# run NAME TIMEOUT COMMAND: COMMAND (eval'd here, as the lists' commands use
# $PORT etc.) under `timeout TIMEOUT`; with $STALL, watched for a stall (diag
# once; /usr/share/roce-tests/stall-kill: then ended). Its exit status.
run() {
    [ "$STALL" -gt 0 ] 2>/dev/null || { eval "timeout $2 $3" </dev/null 2>&1; return; }
    local rp rn=0 rlast='' rnow rmoved=0 rstill=0 rtold=0
    eval "exec timeout $2 $3" </dev/null 2>&1 &
    rp=$!
    rlast=$(rdma statistic show link "$DEV/1" 2>/dev/null)
    while kill -0 "$rp" 2>/dev/null; do
        sleep 1
        rn=$((rn + 1))
        [ $((rn % 5)) = 0 ] || continue
        rnow=$(rdma statistic show link "$DEV/1" 2>/dev/null)
        if [ "$rnow" != "$rlast" ]; then rmoved=1 rstill=0 rlast=$rnow
        elif [ $rmoved = 1 ]; then rstill=$((rstill + 5)); fi
        if [ $rtold = 0 ] && [ $rstill -ge "$STALL" ]; then
            rtold=1
            diag "$1" "$rstill"
            [ -e /usr/share/roce-tests/stall-kill ] && kill "$rp" 2>/dev/null
        fi
    done
    wait "$rp"
}
EOF
    cat >"$1/usr/share/roce-tests/server.sh" <<'EOF'
#!/bin/sh
# guest A: the setup check, then every server in turn.
ROLE=S
. /usr/share/roce-tests/setup.sh
T=$(cat /usr/share/roce-tests/timeout)
i=0
while IFS='|' read -r name scmd _; do
    PORT=$((18600 + i)); i=$((i + 1))
    # The check barrier: B starts this check's client only once A starts its
    # server, however long the previous one took (up to its timeout), so one
    # hung server does not fail the checks after it.
    (echo "$name" | timeout $((T + 60)) nc -l -p $((PORT + 200)) >/dev/null 2>&1 &)
    echo "--- server $name: $(eval echo "$scmd")"
    run "$name" "$T" "$scmd"
    echo "RT-S $name $?"
done </usr/share/roce-tests/list
# The end barrier: B stays up until every server here is done (its CM must
# answer the last disconnect; under loss a lost DREQ/DREP is retransmitted).
# A says "done" over TCP and lingers a little, so a lost segment is resent.
echo done | timeout 150 nc -l -p 18999 >/dev/null 2>&1
sleep 3
EOF
    cat >"$1/usr/share/roce-tests/client.sh" <<'EOF'
#!/bin/sh
# guest B: the setup check, then every client in turn: after the check
# barrier (server.sh), retried (for up to 30 s) while its server is not up yet.
ROLE=C
. /usr/share/roce-tests/setup.sh
T=$(cat /usr/share/roce-tests/timeout)
i=0
while IFS='|' read -r name _ ccmd; do
    PORT=$((18600 + i)); i=$((i + 1))
    t0=$(date +%s)
    until timeout 5 nc "$SERVER_IP" $((PORT + 200)) </dev/null 2>/dev/null | grep -q .; do
        [ $(($(date +%s) - t0)) -ge $((T + 30)) ] && { echo "check barrier: A did not start $name"; break; }
        sleep 1
    done
    t0=$(date +%s) try=0
    while :; do
        try=$((try + 1))
        echo "--- client $name (try $try): $(eval echo "$ccmd")"
        run "$name" "$((T - 10))" "$ccmd"; rc=$?
        [ $rc = 0 ] && break
        [ $(($(date +%s) - t0)) -ge 30 ] && break
        sleep 1
    done
    echo "RT-C $name $rc"
done </usr/share/roce-tests/list
# The end barrier (server.sh): wait (bounded) until A has finished its servers.
t0=$(date +%s)
until timeout 10 nc "$SERVER_IP" 18999 </dev/null 2>/dev/null | grep -q done; do
    [ $(($(date +%s) - t0)) -ge 150 ] && { echo "end barrier: A did not finish in 150 s"; break; }
    sleep 1
done
EOF
}
mk_overlay "$out/ov-full" "$full" 60 "${ROCE_TESTS_STALL:-0}"
mk_overlay "$out/ov-loss" "$lossy" 120 "${ROCE_TESTS_STALL:-20}"
mk_overlay "$out/ov-wl" "$wl" 900 "${ROCE_TESTS_STALL:-0}"
mkdir -p "$out/ov-wl/usr/share/wl" && cp images/wl/*.sh "$out/ov-wl/usr/share/wl/"
wl_tree=''
case ",$pairs," in *,wl-*) wl_tree=$(images/workloads.sh) || vhca_die "images/workloads.sh failed";; esac

# The vhca processes of a workload pair's run (those in its namespace),
# sampled each time B's console shows the end of an NVMe-oF round: one line
# "ROUND PID FDS RSSANON_KB VMRSS_KB" per process into DIR/vhca-samples.
# Runs until DIR/.sampling goes away.
sample_vhca() { # DIR
    local d=$1 seen=0 n ns pid
    : >"$d/vhca-samples"
    while [ -e "$d/.sampling" ]; do
        n=$(grep -c 'nvme-host: round [0-9]* done' "$d/console-b.log" 2>/dev/null)
        if [ "${n:-0}" -gt "$seen" ]; then
            seen=$n ns=$(cat "$d/netns" 2>/dev/null)
            for pid in $(ip netns pids "$ns" 2>/dev/null); do
                [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = vhca ] || continue
                echo "$n $pid $(ls "/proc/$pid/fd" 2>/dev/null | wc -l)" \
                    "$(awk '/^RssAnon/ {a = $2} /^VmRSS/ {r = $2} END {print a, r}' "/proc/$pid/status")"
            done >>"$d/vhca-samples"
        fi
        sleep 0.5
    done
}
# The leak check over those samples: per process, fds equal and private
# memory (RssAnon) within 4 MiB from round 2 to the last round. VmRSS is
# printed but not judged: it also counts the guest's RAM pages vhca touched
# through its shared mapping (every new page an I/O buffer lands in), which
# grow while the guests' page caches do (measured: +10 MiB over rounds 3-6,
# then flat, with RssAnon flat).
no_leak() { # DIR
    awk -v last="$NR" '$1 == 2 { f2[$2] = $3; r2[$2] = $4; v2[$2] = $5 } $1 == last { fl[$2] = $3; rl[$2] = $4; vl[$2] = $5 }
        END { n = 0; bad = 0
              for (p in f2) if (p in fl) { n++
                  printf "# nvme_no_leak: vhca %s: fds %d -> %d, RssAnon %d -> %d KiB, VmRSS %d -> %d KiB (round 2 -> %d)\n", p, f2[p], fl[p], r2[p], rl[p], v2[p], vl[p], last
                  if (fl[p] != f2[p] || rl[p] - r2[p] > 4096) bad = 1 }
              exit (n == 2 && !bad) ? 0 : 1 }' "$1/vhca-samples"
}

npass=0 nfail=0
# One attempt's results are kept until the pair is judged (a loss pair gets a
# second attempt, see below).
lines=() apass=0 afail=0
result() { # PASS|FAIL NAME [WHY]
    if [ "$1" = PASS ]; then lines+=("PASS $2"); apass=$((apass + 1))
    else lines+=("FAIL $2${3:+ ($3)}"); afail=$((afail + 1)); fi
}

# tshark options: the heuristics this tshark knows of those above, disabled.
ib_heur_off() { # CAPTURE
    local h
    IBH=()
    for h in rpcrdma_infiniband eth_over_ib iser_infiniband lnet_ib mellanox_eoib sdp_infiniband \
             smb_direct_infiniband smcr_infiniband fc_infiniband nvme_rdma_infiniband; do
        tshark -r "$1" -c 1 --disable-heuristic "$h" >/dev/null 2>&1 && IBH+=(--disable-heuristic "$h")
    done
}
status() { sed -n "s/^RT-$1 $2 \([0-9]*\)\$/\1/p" "$log" | tail -1; }  # S|C NAME
# One check's output of one side: from its "--- server NAME" (or first
# "--- client NAME") line to its "RT-S/RT-C NAME" line.
output() { # server|client NAME
    local r=S; [ "$1" = client ] && r=C
    awk -v b="--- $1 $2" -v e="RT-$r $2 " 'index($0, b) == 1 { on = 1 } on { print } index($0, e) == 1 { on = 0 }' "$log"
}
# ibv_rc_pingpong's tail race under loss (see the header): one side 0 with all
# $LN iterations, the other failed on its retry count after them (or, rxe,
# killed by the timeout while retrying).
tail_race() { # SERVER_RC CLIENT_RC (uses $a, $b: the pair's server and client stacks)
    local ok bad badrc stack
    if [ "$1" = 0 ] && [ "$2" != 0 ]; then ok=server bad=client badrc=$2 stack=$b
    elif [ "$2" = 0 ] && [ "$1" != 0 ]; then ok=client bad=server badrc=$1 stack=$a
    else return 1; fi
    # Whole outputs, then grep: `output | grep -q` fails under pipefail when
    # grep stops reading before awk is done (SIGPIPE).
    local okout badout
    okout=$(output $ok rc_pingpong) badout=$(output $bad rc_pingpong)
    grep -q "^$LN iters in " <<<"$okout" || return 1
    if grep -q 'transport retry counter exceeded' <<<"$badout"; then
        tail_why="the $ok completed $LN iterations with checked data, the $bad's last SEND was not acknowledged"
    elif [ "$stack" = rxe ] && { [ "$badrc" = 124 ] || [ "$badrc" = 143 ]; }; then
        tail_why="the $ok completed $LN iterations with checked data, the $bad (rxe, retry_cnt 7 = forever) was still retrying its last SEND"
    else
        return 1
    fi
}
# A failed check's stall diagnostics (the guests' "--- diag" sections, see
# setup.sh's run), into the CI log as "#" lines, and its QPs' last frames
# (only those for a classified stall: its "#" line has the state it proves).
stall_report() { # NAME [frames] (uses $log, $d): with "frames", only the frames
    local side q qs=()
    for side in server client; do
        [ "${2:-}" = frames ] ||
            output $side "$1" | sed -n '/^--- diag /,/^--- diag end/p' | sed "s/^/# $pair\/$1 $side: /"
        q=$(output $side "$1" | sed -n 's/.*local address:.*QPN \(0x[0-9a-fA-F]*\).*/\1/p' | head -1)
        [ -n "$q" ] && qs+=("$q")
    done
    [ ${#qs[@]} = 2 ] && stall_frames "$d" "${qs[0]}" "${qs[1]}" | sed "s/^/# $pair\/$1 frames: /"
}
# The last 16 frames of two QPs on br0 (roce.pcap: before the loss rule), each
# marked with whether the receiver's TAP got it (roce-taps.pcapng: after the
# rule). A is 10.99.0.1 (roce-pair.sh).
stall_frames() { # DIR QPN QPN
    [ -s "$1/roce.pcap" ] && [ -s "$1/roce-taps.pcapng" ] || return 0
    local y="infiniband.bth.destqp == $2 || infiniband.bth.destqp == $3"
    local f=(-d udp.port==4791,infiniband -Y "$y" -T fields -e frame.time_epoch -e ip.src
             -e infiniband.bth.opcode -e infiniband.bth.destqp -e infiniband.bth.psn
             -e infiniband.bth.a -e infiniband.aeth.syndrome -e infiniband.aeth.msn)
    { tshark -r "$1/roce-taps.pcapng" "${f[@]}" -e frame.interface_name 2>/dev/null | sed 's/^/T\t/'
      tshark -r "$1/roce.pcap" "${f[@]}" 2>/dev/null | tail -16 | sed 's/^/B\t/'; } |
    awk -F'\t' '
        function key() { return $3 "/" $4 "/" $5 "/" $6 "/" $8 "/" $9 }
        $1 == "T" && (($10 == "ta" && $3 == "10.99.0.2") || ($10 == "tb" && $3 == "10.99.0.1")) {
            k = key(); n[k]++; t[k, n[k]] = $2; next }
        $1 == "B" {
            if (t0 == "") t0 = $2
            # The copy on the TAP: the nearest unused one within 200 us (the bridge
            # forwards and captures a frame in one pass: a few us apart; a
            # resent copy comes a round trip later).
            k = key(); got = 0; best = 0.0002
            for (i = 1; i <= n[k]; i++) {
                dt = t[k, i] - $2; if (dt < 0) dt = -dt
                if (!used[k, i] && dt <= best) { best = dt; got = i }
            }
            if (got) used[k, got] = 1
            op = ($4 == 0) ? "SEND_FIRST" : ($4 == 1) ? "SEND_MIDDLE" : ($4 == 2) ? "SEND_LAST" : ($4 == 4) ? "SEND_ONLY" : ($4 == 17) ? "ACK" : "opcode " $4
            ack = ($4 == 17) ? sprintf(" syndrome 0x%02x msn %s", $8, $9) : ($7 == 1 ? " AckReq" : "")
            printf "%9.3f ms %s qp %s %s psn %s%s: %s\n", ($2 - t0) * 1000, ($3 == "10.99.0.1") ? "A->B" : "B->A",
                $5, op, $6, ack, got ? "delivered" : "DROPPED by the loss rule"
        }'
}
# rxe's lost completion under loss (see the header): both sides stalled, and
# their stall diagnostics prove it. Sets rxe_why.
psn_diff() { echo $(((($1) - ($2)) & 0xffffff)); }
kv() { sed -n "s/.*[ (]$1[= ]\(-\{0,1\}[0-9][0-9]*\).*/\1/p" | head -1; }  # KEY < TEXT
rxe_stall() { # SERVER_RC CLIENT_RC (uses $a, $b)
    local rs vs
    if [ "$a" = rxe ] && [ "$b" = vhca ]; then rs=server vs=client
    elif [ "$a" = vhca ] && [ "$b" = rxe ]; then rs=client vs=server
    else return 1; fi
    [ "$1" != 0 ] && [ "$2" != 0 ] || return 1
    local rout vout
    rout=$(output $rs rc_pingpong) vout=$(output $vs rc_pingpong)
    grep -q '^--- diag ' <<<"$rout" && grep -q '^--- diag ' <<<"$vout" || return 1
    # The QPNs and first PSNs (the tool's "local address" line, first try).
    local rq r0 vq v0
    read -r rq r0 < <(sed -n 's/.*local address:.*QPN \(0x[0-9a-f]*\), PSN \(0x[0-9a-f]*\).*/\1 \2/p' <<<"$rout" | head -1)
    read -r vq v0 < <(sed -n 's/.*local address:.*QPN \(0x[0-9a-f]*\), PSN \(0x[0-9a-f]*\).*/\1 \2/p' <<<"$vout" | head -1)
    [ -n "$rq" ] && [ -n "$vq" ] || return 1
    rq=$((rq)) r0=$((r0)) vq=$((vq)) v0=$((v0))
    # rxe: its QP's internals (rxe_state) and rdma res line.
    local rl rres req comp rrq prod cons nr jnow texp
    rl=$(grep "^rxe qp: qpn=$rq " <<<"$rout" | head -1)
    rres=$(grep " lqpn $rq rqpn $vq type RC state RTS " <<<"$rout" | head -1)
    [ -n "$rl" ] && [ -n "$rres" ] || return 1
    req=$(kv req_psn <<<"$rl") comp=$(kv comp_psn <<<"$rl") nr=$(kv need_retry <<<"$rl")
    prod=$(kv sq_prod <<<"$rl") cons=$(kv sq_cons <<<"$rl") texp=$(kv timer_expires <<<"$rl")
    jnow=$(sed -n 's/^rxe jiffies now: \([0-9]*\)$/\1/p' <<<"$rout" | head -1)
    rrq=$(kv rq-psn <<<"$rres")
    [ -n "$req" ] && [ "$req" = "$comp" ] && [ "$nr" = 0 ] && [ -n "$prod" ] && [ "$prod" != "$cons" ] &&
        [ -n "$jnow" ] && [ -n "$texp" ] && [ $((jnow - texp)) -gt 0 ] || return 1
    # vhca: its QP (rdma res, debugfs context) and the QP's CQ (one for both
    # queues, as rc_pingpong makes it).
    local vres vctx vrq vsq scq rcq spi sci mtu cq cpi cci
    vres=$(grep " lqpn $vq rqpn $rq type RC state RTS " <<<"$vout" | head -1)
    vctx=$(grep "^qp $vq: ok " <<<"$vout" | head -1)
    [ -n "$vres" ] && [ -n "$vctx" ] || return 1
    vrq=$(kv rq-psn <<<"$vres") vsq=$(kv sq-psn <<<"$vres")
    scq=$(kv send_cqn <<<"$vctx") rcq=$(kv recv_cqn <<<"$vctx")
    spi=$(kv sq_pi <<<"$vctx") sci=$(kv sq_ci <<<"$vctx") mtu=$(kv path_mtu <<<"$vctx")
    [ "$vrq" = "$req" ] && [ "$vsq" = "$rrq" ] && [ -n "$spi" ] && [ "$spi" = "$sci" ] &&
        [ -n "$scq" ] && [ "$scq" = "$rcq" ] && [ -n "$mtu" ] && [ "$mtu" -ge 1 ] || return 1
    cq=$(grep "^cq $scq: ok " <<<"$vout" | head -1)
    cpi=$(kv pi <<<"$cq") cci=$(kv ci <<<"$cq")
    # One CQE per message each way: rc_pingpong's messages are 4096 bytes
    # (no -s in the list), ceil(4096 / path MTU) packets each (enum ibv_mtu:
    # 1 = 256 ... 5 = 4096).
    local ppm dv dr
    ppm=$(((4096 + (128 << mtu) - 1) / (128 << mtu)))
    dv=$(psn_diff "$vsq" "$v0") dr=$(psn_diff "$req" "$r0")
    [ -n "$cpi" ] && [ "$cpi" = "$cci" ] && [ $((dv % ppm)) = 0 ] && [ $((dr % ppm)) = 0 ] &&
        [ "$cpi" = $((dv / ppm + dr / ppm)) ] || return 1
    rxe_why="rxe QP $rq: req_psn = comp_psn = $req with a send WQE outstanding (sq_prod $prod, sq_cons $cons), retry timer expired $((jnow - texp)) jiffies ago and not re-armed; vhca QP $vq: RTS, rq-psn $vrq, sq-psn $vsq = rxe's rq-psn, SQ empty ($spi fetched of $spi), CQ $scq: $cpi CQEs = $((dv / ppm)) sends + $((dr / ppm)) receives, all taken (ci $cci)"
}
t_all=$(date +%s)
IFS=',' read -r -a plist <<<"$pairs"
run_pair() { # PAIR DIR: one boot of the pair, its checks into $lines
    local pair=$1 d=$2
    lines=() apass=0 afail=0
    p=${pair#loss-} a=${p%-*} b=${p#*-} ov="$out/ov-full" list=$full lopt=()
    pt=$PT
    if [ "$p" != "$pair" ]; then ov="$out/ov-loss" list=$lossy lopt=(--loss "$loss") pt=$((PT * 2)); fi
    local wlopt=()
    if [ "${pair#wl-}" != "$pair" ]; then
        p=${pair#wl-} a=${p%-*} b=${p#*-} ov="$out/ov-wl" list=$wl pt=$((PT * 5))
        wlopt=(--overlay "$wl_tree")
    fi
    case "$a-$b" in vhca-vhca|vhca-rxe|rxe-vhca|rxe-rxe) ;; *) vhca_die "unknown pair $pair";; esac
    mkdir -p "$d"
    t0=$(date +%s)
    local sampler=''
    if [ ${#wlopt[@]} -gt 0 ]; then
        touch "$d/.sampling"; sample_vhca "$d" & sampler=$!
    fi
    # Under loss also the TAPs: which frames the loss rule dropped (stall_report).
    [ ${#lopt[@]} -gt 0 ] && lopt+=(--capture-taps "$d/roce-taps.pcapng")
    images/roce-pair.sh --a "$a" --b "$b" "${lopt[@]}" --out "$d" --capture "$d/roce.pcap" \
        --timeout "$pt" --ready '' --overlay "$ov" "${wlopt[@]}" "${pair_opts[@]}" \
        'sh /usr/share/roce-tests/server.sh' 'sh /usr/share/roce-tests/client.sh' \
        >"$d/roce-pair.out" 2>&1
    prc=$?
    if [ -n "$sampler" ]; then rm -f "$d/.sampling"; wait "$sampler"; fi
    echo "# $pair: roce-pair.sh exit $prc after $(($(date +%s) - t0)) s (logs: $d)"
    log="$d/roce-pair.out"
    s=$(status S setup) c=$(status C setup)
    if [ "$s" = 0 ] && [ "$c" = 0 ]; then
        result PASS "$pair/setup"
    else
        why=$(grep -E 'error:|roce-hook:' "$log" | head -3 | tr '\n' ' ')
        result FAIL "$pair/setup" "A ${s:-no result}, B ${c:-no result}${why:+: $why}"
    fi
    while IFS='|' read -r name _; do
        s=$(status S "$name") c=$(status C "$name")
        if [ "$s" = 0 ] && [ "$c" = 0 ]; then result PASS "$pair/$name"
        elif [ ${#lopt[@]} -gt 0 ] && [ "$name" = rc_pingpong ] && tail_race "$s" "$c"; then
            echo "# $pair/rc_pingpong: server $s, client $c: the tail race (see --help); $tail_why"
            result PASS "$pair/$name"
        elif [ ${#lopt[@]} -gt 0 ] && [ "$name" = rc_pingpong ] && rxe_stall "$s" "$c"; then
            echo "# $pair/rc_pingpong: server $s, client $c: rxe's lost completion (see --help); $rxe_why"
            stall_report "$name" frames
            result PASS "$pair/$name"
        else
            result FAIL "$pair/$name" "server ${s:-no result}, client ${c:-no result}"
            stall_report "$name"
        fi
    done <<<"$list"
    if [ ${#wlopt[@]} -gt 0 ]; then
        if [ "$a" = vhca ] && [ "$b" = vhca ]; then
            if no_leak "$d"; then result PASS "$pair/nvme_no_leak"
            else result FAIL "$pair/nvme_no_leak" "see $d/vhca-samples"; fi
        fi
        grep -h '^nvme-host: round 1 fio\|^nvme-host: [0-9]* rounds passed' "$log" | sed 's/^/# /'
    fi
    if [ ${#lopt[@]} -gt 0 ]; then
        dropped=$(sed -n 's/.*loss rule dropped \([0-9]*\) frames.*/\1/p' "$log" | tail -1)
        if [ "${dropped:-0}" -gt 0 ]; then result PASS "$pair/loss_applied"
        else result FAIL "$pair/loss_applied" "the rule dropped ${dropped:-no} frames"; fi
    fi
    # tshark: RoCE frames (UDP 4791 as InfiniBand), nothing malformed.
    cap="$d/roce.pcap"
    if [ -s "$cap" ]; then
        ib_heur_off "$cap"
        # NVMe-oF (the workload pairs): tshark's NVMe Fabrics RDMA dissector
        # follows the rdma_cm conversation and takes every RDMA WRITE Middle
        # of a READ's data for a capsule (malformed with rxe as with vhca);
        # the InfiniBand layer underneath is what is checked here.
        [ ${#wlopt[@]} -gt 0 ] && IBH+=(--disable-protocol nvme-rdma)
        nib=$(tshark -r "$cap" "${IBH[@]}" -d udp.port==4791,infiniband -Y infiniband 2>/dev/null | wc -l)
        nbad=$(tshark -r "$cap" "${IBH[@]}" -d udp.port==4791,infiniband -Y _ws.malformed 2>/dev/null | wc -l)
        nall=$(tshark -r "$cap" 2>/dev/null | wc -l)
        if [ "$nib" -gt 0 ] && [ "$nbad" = 0 ]; then
            result PASS "$pair/tshark"
            echo "# $pair: $nib of $nall captured frames dissect as InfiniBand (RoCEv2), 0 malformed"
        else
            result FAIL "$pair/tshark" "$nib InfiniBand frames of $nall, $nbad malformed"
        fi
    else
        result FAIL "$pair/tshark" "no capture"
    fi
    if grep -E 'Oops|BUG:|WARNING: CPU|cut here|Call Trace' "$log"; then
        result FAIL "$pair/kernel" "oops or warning in a guest"
    fi
}
for pair in "${plist[@]}"; do
    run_pair "$pair" "$out/$pair"
    if [ "$afail" -gt 0 ] && [ "$pair" != "${pair#loss-}" ] && [ "${ROCE_TESTS_LOSS_RETRY:-1}" = 1 ]; then
        # A loss pair's tools run at 5 % loss on a TCG guest: on a slow or
        # busy host one can run into its timeout. Such a pair gets one more
        # boot, and the first attempt stays on record (RETRY lines).
        printf 'RETRY %s\n' "${lines[@]}" | grep '^RETRY FAIL'
        echo "# $pair: failed once (logs: $out/$pair); one more boot"
        run_pair "$pair" "$out/$pair.2"
    fi
    printf '%s\n' "${lines[@]}"
    npass=$((npass + apass)) nfail=$((nfail + afail))
done
echo "# roce-tests: $(($(date +%s) - t_all)) s; logs in $out"
echo "$npass passed, $nfail failed"
[ "$nfail" = 0 ]
