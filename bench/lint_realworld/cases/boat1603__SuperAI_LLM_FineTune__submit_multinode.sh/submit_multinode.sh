#!/bin/bash
#SBATCH -p gpu
#SBATCH -N 2 -c 64
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node=4
#SBATCH -t 120:00:00
#SBATCH -A <project_name>
#SBATCH -J llm_finetuning

export NCCL_SOCKET_IFNAME=hsn
export HOSTNAMES=`scontrol show hostnames "$SLURM_JOB_NODELIST"`
export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=12802
export COUNT_NODE=`scontrol show hostnames "$SLURM_JOB_NODELIST" | wc -l`

srun sh smultinode.sh
