#!/bin/sh
# Guest A of images/roce-tests.sh's workload pairs, for the MPI check: the
# remote shell Open MPI's launcher in guest B starts its daemon through
# (images/wl/rsh.sh; the guests run no sshd): `nc -ll -p PORT -e /bin/sh`,
# one shell per connection, served until B says "done" on PORT + 1.
# Usage: mpi-shell.sh PORT
P=$1
nc -ll -p "$P" -e /bin/sh &
shell=$!
echo "mpi-shell: serving a shell on $P"
nc -l -p $((P + 1)) </dev/null || true
kill "$shell" 2>/dev/null
wait "$shell" 2>/dev/null
echo "mpi-shell: done"
