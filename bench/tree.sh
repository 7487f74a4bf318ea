#!/bin/sh
# bench/tree.sh MODE PIDFILE — the process tree the cancel workload stops.
#
# Three levels: this shell, a sleep and a subshell, and the subshell's sleep;
# every pid is appended to PIDFILE (4 lines once the tree is up). MODE "term"
# keeps SIGTERM's default action everywhere; "ignore" ignores SIGTERM, and the
# children inherit that, so only SIGKILL stops the tree; "leader": the
# children ignore SIGTERM but this shell (the leader) exits on it at once, so
# the rest of its group outlives it until the grace ends.
[ "$1" = ignore ] || [ "$1" = leader ] && trap '' TERM
sleep 600 &
echo $! >>"$2"
sh -c 'sleep 600 & echo $! >>"$1"; wait' _ "$2" &
echo $! >>"$2"
echo $$ >>"$2"
[ "$1" = leader ] && trap 'exit 0' TERM
wait
