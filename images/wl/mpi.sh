#!/bin/sh
# Guest B of images/roce-tests.sh's workload pairs: Open MPI between the two
# guests, one rank each, over UCX on the RDMA device (pml ucx, rc_verbs with
# ud_verbs for wireup), running images/wl/mpi-pingpong.c. The guests run no
# sshd: PRRTE's ssh launcher starts its daemon in guest A through
# images/wl/rsh.sh and the remote shell A serves on RSH_PORT (mpi-shell.sh),
# which this script ends by saying "done" on RSH_PORT + 1.
# Usage: mpi.sh PEER_IP RSH_PORT ITERATIONS
set -u
peer=$1
export RSH_PORT=$2 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# One rank per guest (ppr:1:node): PRRTE counts the launching node's slot
# apart from the --host entry naming its own address, so it finds one slot
# too few without OVERSUBSCRIBE.
mpirun --allow-run-as-root -np 2 --host "$MY_IP:1,$peer:1" --map-by ppr:1:node:OVERSUBSCRIBE \
    --prtemca plm_ssh_agent /usr/share/wl/rsh.sh \
    --mca pml ucx --mca btl self \
    -x UCX_NET_DEVICES="$DEV:1" -x UCX_TLS=rc_verbs,ud_verbs,self -x UCX_UD_ETH_DGID_CHECK=n \
    /usr/lib/vhca-wl/mpi-pingpong "$3"
rc=$?
i=0
until echo done | nc "$peer" $((RSH_PORT + 1)) 2>/dev/null; do
    i=$((i + 1)); [ $i -ge 30 ] && break; sleep 1
done
exit $rc
