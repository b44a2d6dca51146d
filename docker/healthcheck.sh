#!/bin/bash
# The image's HEALTHCHECK: GET /__tapeproxy/health at the URL tapeproxy wrote into
# $TAPEPROXY_READY_FILE once it listened (http://HOST:PORT), so a --port given on the command
# line is followed too. Plain bash over /dev/tcp: no interpreter, no curl in the image.
# Exit 0 when the answer is 200, 1 otherwise (no file yet, nothing listening, another status).
set -u
read -r url <"${TAPEPROXY_READY_FILE:-/tmp/tapeproxy.url}" || exit 1
address=${url#http://}
host=${address%:*}
port=${address##*:}
host=${host#[}
host=${host%]}
case $host in
0.0.0.0) host=127.0.0.1 ;; # bound on every interface: ask over loopback
::) host=::1 ;;
esac
exec 3<>"/dev/tcp/$host/$port" || exit 1
printf 'GET /__tapeproxy/health HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$address" >&3
IFS= read -r -t 2 status <&3 || exit 1
[[ $status == "HTTP/1."[01]" 200 "* ]]
