#!/bin/sh
# Passes when total.txt holds the sum of numbers.txt (busybox's awk adds them up).
want=$(awk '{ s += $1 } END { print s }' numbers.txt)
got=$(cat total.txt)
[ "$got" = "$want" ] || { echo "total.txt says $got, not $want"; exit 1; }
echo "ok: $want"
