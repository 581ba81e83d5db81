#!/bin/sh
# Prints the sum of its two arguments.
echo $(( $1 - $2 ))
