#!/bin/bash
# The stand-in's answer to compose's healthcheck: the broker's listener accepts a
# connection (the upstream image asks for its API versions).
set -u
server=localhost:9092
while [ $# -gt 0 ]; do
  case "$1" in --bootstrap-server) server=$2; shift ;; esac
  shift
done
exec 3<>"/dev/tcp/${server%:*}/${server##*:}"
