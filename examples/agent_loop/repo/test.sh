#!/bin/sh
# The repository's tests: exit status 0 when add.sh adds.
fail=0
check() {
    got=$(sh add.sh "$1" "$2")
    if [ "$got" = "$3" ]; then echo "ok: add $1 $2 = $got"; else echo "FAIL: add $1 $2 gave $got, want $3"; fail=1; fi
}
check 2 3 5
check 10 -4 6
exit $fail
