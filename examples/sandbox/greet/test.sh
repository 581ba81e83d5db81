#!/bin/sh
# Passes when greet.sh greets properly.
said=$(sh greet.sh world)
[ "$said" = "Hello, world!" ] || { echo "greet.sh said: $said"; exit 1; }
echo "ok: $said"
