#!/bin/sh
# examples/ci/ci.sh — what a project's CI runs in every guest:
#   scripts/vhca-vm run --link roce --share examples/ci -- sh ci.sh
# (and --link ib). Guest A (VHCA_ROLE=server) serves, guest B connects to
# VHCA_SERVER_IP; both record their results in the shared folder, which the
# host reads after the run. Exit status 0 iff every step passed.
set -u
me=$VHCA_ROLE
log=${VHCA_SHARE:-/tmp}/result-$VHCA_LINK-$me.txt
: >"$log"
fails=0
step() { # NAME CMD...: run CMD, record "PASS|FAIL NAME" in the shared folder
    name=$1; shift
    echo "--- $me: $name: $*"
    "$@"; rc=$?
    if [ $rc = 0 ]; then echo "PASS $name" | tee -a "$log"; else echo "FAIL $name ($rc)" | tee -a "$log"; fails=$((fails + 1)); fi
}
client() { # CMD...: a client, retried while its server is not listening yet (30 s at most)
    i=0
    until "$@"; do
        i=$((i + 1))
        [ $i -lt 15 ] || return 1
        echo "(client: retrying in 2 s)"
        sleep 2
    done
}
step fi_info_verbs sh -c 'fi_info -p verbs -t FI_EP_MSG | grep -E "provider|domain|fabric"'
# libfabric's pingpong over the verbs provider: connected endpoints (FI_EP_MSG,
# rdma_cm underneath) and reliable datagrams (FI_EP_RDM, ofi_rxm over verbs),
# every size, with data checks (-c).
if [ "$me" = server ]; then
    step fi_pingpong_msg fi_pingpong -p verbs -e msg -I 20 -c -B 47592
    step fi_pingpong_rdm fi_pingpong -p 'verbs;ofi_rxm' -e rdm -I 20 -c -B 47593
    step hello ./hello server "$VHCA_MY_IP" 7471
else
    step fi_pingpong_msg client fi_pingpong -p verbs -e msg -I 20 -c -P 47592 "$VHCA_SERVER_IP"
    step fi_pingpong_rdm client fi_pingpong -p 'verbs;ofi_rxm' -e rdm -I 20 -c -P 47593 "$VHCA_SERVER_IP"
    step hello ./hello client "$VHCA_SERVER_IP" 7471
fi
echo "$me: $fails failed"
[ $fails = 0 ]
