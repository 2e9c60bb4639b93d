#!/bin/bash
# images/wl-ib.sh — the workloads that do not need rdma_cm over vhca's
# InfiniBand link layer (issue 15: "where a workload also runs over IB link
# layer, test it there too"): UCX's verbs transports and UCP, and Open MPI
# (pml ucx), between two guests on the default UDP fabric (images/vm-pair.sh),
# with the workloads overlay (images/workloads.sh). UCX and mpirun exchange
# their addresses over the guests' virtio NICs; the data goes over vhca0 (LID
# addressing, no GID). NVMe over Fabrics is not here: nvme-rdma connects with
# rdma_cm, which needs IP over the RDMA port (IPoIB, untested over vhca).
# ucp_get_odp runs UCP GETs (RDMA READs over rc_verbs) of memory the
# server's UCP registers with on-demand paging (issue 29):
# UCX_REG_NONBLOCK_MEM_TYPES=host makes UCP register host memory without
# blocking, which UCX's IB memory domain does with IBV_ACCESS_ON_DEMAND when
# the device reports ODP; the server must have raised page faults (its
# port's odp_faults_raised counter). (UCP's put_bw, tried first, faulted the
# server's memory in, then its client's flush failed in UCX: the remote
# flush, UCT_FLUSH_FLAG_REMOTE, that rc_verbs refuses without a flush rkey,
# "flush(remote) is not supported".)
#
# Usage: images/wl-ib.sh [--out DIR]
# Prints one "PASS name" / "FAIL name" line per check; exit 0 iff all pass.
# Environment: VHCA_WL_IB_N (iterations, default 200).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. images/lib.sh

out=''
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out=$2; shift 2;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0;;
        *) vhca_die "unknown argument $1 (try --help)";;
    esac
done
vhca_need_root
N=${VHCA_WL_IB_N:-200}
wl_tree=$(images/workloads.sh) || vhca_die "images/workloads.sh failed"
[ -n "$out" ] || out=$(mktemp -d "$VHCA_CACHE/run/wl-ib.XXXXXX")
mkdir -p "$out"
ov=$(mktemp -d /tmp/wl-ib-ov.XXXXXX)
trap 'rm -rf "$ov"' EXIT
mkdir -p "$ov/usr/share/wl"
cp images/wl/*.sh "$ov/usr/share/wl/"

# name|server|client (the client adds $SERVER_IP); $PORT is the check's own.
U="timeout 120 ucx_perftest -P 0 -d vhca0:1"
checks="ucx_devices|ucx_info -d | grep -A1 -E 'Transport: (rc|ud)_verbs' | grep -c 'Device: vhca0:1' | grep -qx 2|ucx_info -d | grep -A1 -E 'Transport: (rc|ud)_verbs' | grep -c 'Device: vhca0:1' | grep -qx 2
ucx_rc_put_bw|$U -x rc_verbs -t put_bw -D zcopy -s 65536 -n $N -p \$PORT|$U -x rc_verbs -t put_bw -D zcopy -s 65536 -n $N -p \$PORT \$SERVER_IP
ucp_get_odp|sh /usr/share/wl/odp-faults.sh timeout 120 env UCX_REG_NONBLOCK_MEM_TYPES=host UCX_NET_DEVICES=vhca0:1 UCX_TLS=rc_verbs,ud_verbs ucx_perftest -P 0 -t ucp_get -s 65536 -n $N -p \$PORT|timeout 120 env UCX_REG_NONBLOCK_MEM_TYPES=host UCX_NET_DEVICES=vhca0:1 UCX_TLS=rc_verbs,ud_verbs ucx_perftest -P 0 -t ucp_get -s 65536 -n $N -p \$PORT \$SERVER_IP
ucx_rc_am_lat|$U -x rc_verbs -t am_lat -s 8 -n $N -p \$PORT|$U -x rc_verbs -t am_lat -s 8 -n $N -p \$PORT \$SERVER_IP
ucx_ud_am_bw|$U -x ud_verbs -t am_bw -D bcopy -s 512 -n $N -p \$PORT|$U -x ud_verbs -t am_bw -D bcopy -s 512 -n $N -p \$PORT \$SERVER_IP
ucx_ud_am_lat|$U -x ud_verbs -t am_lat -s 8 -n $N -p \$PORT|$U -x ud_verbs -t am_lat -s 8 -n $N -p \$PORT \$SERVER_IP
ucp_tag_bw|timeout 120 env UCX_NET_DEVICES=vhca0:1 UCX_TLS=rc_verbs,ud_verbs ucx_perftest -P 0 -t tag_bw -s 65536 -n $N -p \$PORT|timeout 120 env UCX_NET_DEVICES=vhca0:1 UCX_TLS=rc_verbs,ud_verbs ucx_perftest -P 0 -t tag_bw -s 65536 -n $N -p \$PORT \$SERVER_IP
mpi|sh /usr/share/wl/mpi-shell.sh \$((PORT + 300))|sh /usr/share/wl/mpi.sh \$SERVER_IP \$((PORT + 300)) $N"
printf '%s\n' "$checks" >"$ov/usr/share/wl/ib-checks"
# ucp_get_odp (issue 29): the run must have cost this side page faults, or
# UCX did not register with ODP.
cat >"$ov/usr/share/wl/odp-faults.sh" <<'S'
f=/sys/class/infiniband/vhca0/ports/1/hw_counters/odp_faults_raised
b=$(cat $f) || exit 1
"$@" || exit $?
a=$(cat $f)
echo "odp page faults on this side: $((a - b))"
[ "$a" -gt "$b" ]
S
# A: each server after a barrier B waits on (so one hung server does not
# fail the rest); B: each client, retried for 30 s while its server is not up.
cat >"$ov/usr/share/wl/ib-server.sh" <<'S'
export DEV=vhca0 MY_IP=$SERVER_IP
i=0
while IFS='|' read -r name scmd _; do
    PORT=$((18600 + i)); i=$((i + 1))
    (echo "$name" | timeout 200 nc -l -p $((PORT + 200)) >/dev/null 2>&1 &)
    echo "--- server $name"
    eval "timeout 180 $scmd" </dev/null 2>&1
    echo "WL-S $name $?"
done </usr/share/wl/ib-checks
echo done | timeout 150 nc -l -p 18999 >/dev/null 2>&1
sleep 2
S
cat >"$ov/usr/share/wl/ib-client.sh" <<'C'
export DEV=vhca0 MY_IP=$CLIENT_IP
i=0
while IFS='|' read -r name _ ccmd; do
    PORT=$((18600 + i)); i=$((i + 1))
    t0=$(date +%s)
    until timeout 5 nc "$SERVER_IP" $((PORT + 200)) </dev/null 2>/dev/null | grep -q .; do
        [ $(($(date +%s) - t0)) -ge 210 ] && break
        sleep 1
    done
    t0=$(date +%s)
    while :; do
        echo "--- client $name"
        eval "timeout 170 $ccmd" </dev/null 2>&1; rc=$?
        [ $rc = 0 ] && break
        [ $(($(date +%s) - t0)) -ge 30 ] && break
        sleep 1
    done
    echo "WL-C $name $rc"
done </usr/share/wl/ib-checks
t0=$(date +%s)
until timeout 10 nc "$SERVER_IP" 18999 </dev/null 2>/dev/null | grep -q done; do
    [ $(($(date +%s) - t0)) -ge 150 ] && break
    sleep 1
done
C
images/vm-pair.sh --out "$out" --timeout 1800 --ready '' --overlay "$ov" --overlay "$wl_tree" \
    'sh /usr/share/wl/ib-server.sh' 'sh /usr/share/wl/ib-client.sh' >"$out/vm-pair.out" 2>&1
echo "# vm-pair.sh exit $? (logs: $out)"
fail=0
while IFS='|' read -r name _; do
    s=$(sed -n "s/^WL-S $name \([0-9]*\).*/\1/p" "$out/vm-pair.out" | tail -1)
    c=$(sed -n "s/^WL-C $name \([0-9]*\).*/\1/p" "$out/vm-pair.out" | tail -1)
    if [ "$s" = 0 ] && [ "$c" = 0 ]; then echo "PASS ib/$name"
    else echo "FAIL ib/$name (server ${s:-no result}, client ${c:-no result})"; fail=1; fi
done <<<"$checks"
exit $fail
