#!/bin/bash
#SBATCH --job-name=test
#SBATCH --output=logs/%x-%j.txt
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:4

export NUM_NODES=2
export GPUS_PER_NODE=4
export MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n 1)
export MASTER_PORT=6000

SRUN_ARGS=" \
    --wait=60 \
    --kill-on-bad-exit=1 \
    "
srun $SRUN_ARGS --jobid $SLURM_JOBID bash -c 'python -m torch.distributed.run \
--nproc_per_node $GPUS_PER_NODE --nnodes $SLURM_NNODES --node_rank $SLURM_PROCID \
--master_addr $MASTER_ADDR --master_port $MASTER_PORT \
    resnet.py --deepspeed --deepspeed_config ds_config.json'
