#!/bin/sh
# Passes when total.txt holds the sum of numbers.txt (busybox's awk adds them up).
want=$(awk '{ s += $1 } END { print s }' numbers.txt)
[ "$(cat total.txt)" = "$want" ] || { echo "total.txt: $(cat total.txt), want $want"; exit 1; }
echo "ok: $want"
