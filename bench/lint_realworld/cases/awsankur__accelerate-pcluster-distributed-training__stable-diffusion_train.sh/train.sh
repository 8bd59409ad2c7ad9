#!/bin/bash

#SBATCH --nodes=2
#SBATCH --ntasks=2
#SBATCH --job-name=stable-diffusion
#SBATCH --ntasks-per-node 1
#SBATCH --gpus-per-node=8
#SBATCH --gres=gpu:8
#SBATCH --gpus-per-task=8
#SBATCH --exclusive
#SBATCH --wait-all-nodes=1

: "${APPS_PATH:=/apps}"
: "${DATA_PATH:=/fsx}"
: "${IMAGE:=$APPS_PATH/stable-diffusion.sqsh}"
: "${FSX_MOUNT:=$DATA_PATH:$DATA_PATH}"
export FI_PROVIDER=efa

declare -a ARGS=(
    --container-image $IMAGE
    --container-mounts $FSX_MOUNT
)

NODES=( $( scontrol show hostnames $SLURM_JOB_NODELIST ) )
NNODES=${#NODES[@]}
NODES_ARRAY=($NODES)
HEAD_NODE=${NODES_ARRAY[0]}
MASTER_ADDR=$(srun --nodes=1 --ntasks=1 -w "$HEAD_NODE" hostname --ip-address)
MASTER_PORT=$RANDOM
NPROC=8
WORLD_SIZE=$((NNODES * NPROC))

function run_compose() {
    srun --nodelist=${NODE} --ntasks=1 -l "${ARGS[@]}" composer \
        --world_size ${WORLD_SIZE} \
        --nproc ${NPROC} \
        --node_rank ${NODE_RANK} \
        --master_addr ${MASTER_ADDR} \
        --master_port ${MASTER_PORT} \
        benchmark.py --use_ema --use_synth_data
}
for (( NODE_RANK=1; NODE_RANK<${NNODES}; NODE_RANK++ ))
do
    NODE=${NODES[$NODE_RANK]}
    run_compose &
done
NODE_RANK=0
NODE=${HEAD_NODE}
run_compose
wait
