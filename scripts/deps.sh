#!/bin/sh
# Installs the Debian packages SubTernary needs to build, test and plot, when
# they are missing.  As root it installs them; otherwise it prints the command.
PKGS="gcc make pkg-config clang liburing-dev libnuma-dev libprotobuf-c-dev protobuf-c-compiler
libzmq3-dev libcmocka-dev libpcre2-dev python3 python3-zmq python3-protobuf protobuf-compiler
gnuplot-nox"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "missing packages:$missing" >&2
    echo "run: sudo apt-get update && sudo apt-get install -y$missing" >&2
    exit 1
fi
echo "installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2 && apt-get install -y -qq $missing >&2
