#!/bin/bash
#SBATCH --job-name=trl-multinode
#SBATCH --account=def-account
#SBATCH --time=48:00:00
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=32
#SBATCH --mem=256G
#SBATCH --gres=gpu:h100:4
#SBATCH --output=logs/%x-%j.out

SCRIPT=${SCRIPT:-train_sft.py}
MODEL=${MODEL:-meta-llama/Llama-2-13b-hf}
NUM_EPOCHS=${NUM_EPOCHS:-3}

module load python/3.11.5 cuda/12.2
source $SCRATCH/venvs/hf_env/bin/activate
export NCCL_SOCKET_IFNAME=ib0

MASTER_ADDR=$(scontrol show hostnames $SLURM_NODELIST | head -n 1)
MASTER_PORT=29500
export MASTER_ADDR MASTER_PORT
NUM_PROCESSES=$((SLURM_NNODES * 4))

cd $PROJECT_DIR
bash -c "accelerate launch \
    --num_machines $SLURM_NNODES \
    --machine_rank $SLURM_PROCID \
    --main_process_ip $MASTER_ADDR \
    --main_process_port $MASTER_PORT \
    --num_processes $NUM_PROCESSES \
    --mixed_precision bf16 \
    scripts/$SCRIPT \
    --model_name_or_path $MODEL \
    --output_dir ./outputs/$SLURM_JOB_ID \
    --num_train_epochs $NUM_EPOCHS"
