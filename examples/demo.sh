#!/bin/sh
# `make demo`: a real 2-worker gloo DDP training through trun, on this machine.
set -eu
trun=${1:-build/trun}
here=$(dirname "$0")
echo "\$ trun --standalone --nproc-per-node 2 --tee 3 examples/ddp_train.py --steps 20"
"$trun" --standalone --nproc-per-node 2 --tee 3 "$here/ddp_train.py" --steps 20
# The Python API: one function on 2 hosts x 2 workers (SSH to sshd on loopback).
echo
echo "\$ python3 examples/python_demo.py   # trun.Launcher(hostnames=[2 SSH hosts]).run(train)"
d=$(mktemp -d)
port=$("${PYTHON:-python3}" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cfg=$("$here/../tools/sshd-loopback" up "$d" "$port")
PYTHONPATH="$here/../python" TRUN_BINARY=$(realpath "$trun") TRUN_LOG_DIR="$d/logs" \
  "${PYTHON:-python3}" "$here/python_demo.py" "$cfg" || rc=$?
"$here/../tools/sshd-loopback" down "$d"
rm -rf "$d"
exit "${rc:-0}"
