#!/bin/sh
# images/wl/rsh.sh — the remote shell Open MPI's launcher (PRRTE's ssh
# launcher, --prtemca plm_ssh_agent) uses between the test guests, which run
# no sshd: the other guest serves `nc -ll -p PORT -e /bin/sh`
# (images/wl/mpi-shell.sh) and this script hands it the command.
# Called as ssh would be: rsh.sh [-options] HOST COMMAND...; RSH_PORT names
# the port. The command's output comes back over the same connection; the
# connection (and this script) ends when the command does. A FIFO keeps nc's
# input open meanwhile: nc closing its input would end the remote side early.
set -eu
while [ $# -gt 0 ]; do
    case "$1" in -*) shift;; *) break;; esac
done
host=$1; shift
d=$(mktemp -d)
mkfifo "$d/in"
nc "$host" "${RSH_PORT:?RSH_PORT not set}" <"$d/in" &
pid=$!
exec 3>"$d/in"
# One line: the remote shell parses it whole (the launcher's environment
# settings, then its daemon), runs it, then exits, which ends the connection.
printf '%s; exit\n' "$*" >&3
rc=0
wait "$pid" || rc=$?
exec 3>&-
rm -rf "$d"
exit "$rc"
