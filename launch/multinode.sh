#!/usr/bin/env bash
# Multi-node launch with torchrun's c10d rendezvous: run the same command on every node.
#
#   launch/multinode.sh HOST:PORT [launch/run.py arguments...]
#
#   HOST:PORT        rendezvous endpoint: a host every node can reach (e.g. node 0) and a free
#                    port there; the first node to arrive hosts the c10d store.
# Environment (defaults):
#   NNODES=2             number of nodes
#   NPROC_PER_NODE=1     processes (cards) per node
#   RDZV_ID=torchair_dist  job id, identical on every node
#   SCRIPT=launch/run.py   the script torchrun runs
#   TORCHRUN=torchrun      (e.g. .venv/bin/torchrun)
#   LOCAL_ADDR=            this node's address as the others reach it (torchrun
#                          --local-addr; needed when the hostname does not resolve)
#   RDZV_CONF=             torchrun's rendezvous settings, e.g. join_timeout=120,read_timeout=60
#                          (torchrun's default join timeout is 600 s)
#
# Example, two "nodes" on one machine (what tests/multicard/test_launch.py does):
#   launch/multinode.sh 127.0.0.1:29400 --model tp-transformer &
#   launch/multinode.sh 127.0.0.1:29400 --model tp-transformer
set -euo pipefail

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }

if [[ $# -lt 1 || "$1" == "-h" || "$1" == "--help" ]]; then
    usage
    [[ $# -ge 1 ]] && exit 0 || exit 2
fi
ENDPOINT=$1
shift
if [[ "$ENDPOINT" != *:* ]]; then
    echo "multinode.sh: the first argument must be the rendezvous endpoint HOST:PORT, got '$ENDPOINT'" >&2
    exit 2
fi
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export TORCH_DEVICE_BACKEND_AUTOLOAD=${TORCH_DEVICE_BACKEND_AUTOLOAD:-0}
exec "${TORCHRUN:-torchrun}" \
    --nnodes "${NNODES:-2}" \
    --nproc-per-node "${NPROC_PER_NODE:-1}" \
    --rdzv-backend c10d \
    --rdzv-endpoint "$ENDPOINT" \
    --rdzv-id "${RDZV_ID:-torchair_dist}" \
    --max-restarts 0 \
    ${LOCAL_ADDR:+--local-addr "$LOCAL_ADDR"} \
    ${RDZV_CONF:+--rdzv-conf "$RDZV_CONF"} \
    "${SCRIPT:-$HERE/run.py}" "$@"
