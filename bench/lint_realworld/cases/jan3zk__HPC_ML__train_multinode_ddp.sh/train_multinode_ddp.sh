#!/bin/bash
#SBATCH --job-name=multinode_example
#SBATCH --output=train_multinode_ddp.out
#SBATCH --time=04:00:00
#SBATCH --partition=gpu
#SBATCH --nodes=2
#SBATCH --ntasks=4
#SBATCH --ntasks-per-node=2
#SBATCH --gres=gpu:2
#SBATCH --cpus-per-task=12
#SBATCH --mem=32G

source ~/miniconda3/etc/profile.d/conda.sh
conda activate pytorch_env

export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_PORT=50202

srun python train_multinode_ddp.py --lr 1e-3 --epochs 2 --batch_size 16 --out_path /data/out/
