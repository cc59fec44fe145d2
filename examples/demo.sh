#!/bin/sh
# `make demo`: a real 2-worker gloo DDP training through trun, on this machine.
set -eu
trun=${1:-build/trun}
here=$(dirname "$0")
echo "\$ trun --standalone --nproc-per-node 2 --tee 3 examples/ddp_train.py --steps 20"
"$trun" --standalone --nproc-per-node 2 --tee 3 "$here/ddp_train.py" --steps 20
