#!/bin/bash

#SBATCH --account=acct
#SBATCH --nodes=12
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:4
#SBATCH --cpus-per-task=2
#SBATCH --mem=320GB
#SBATCH --time=48:00:00
#SBATCH --array=0
#SBATCH --job-name=train_igpt
#SBATCH --output=train_igpt_%A_%a.out

export MASTER_ADDR=$(hostname -s)
export MASTER_PORT=$(shuf -i 10000-65500 -n 1)
export WORLD_SIZE=48

module purge
module load cuda/11.3.1

srun python -u train.py /data/imagenet/train --epochs 100 --batch_size 1 --lr 0.0005 --seed $SLURM_ARRAY_TASK_ID --resume model_3.pt

echo "Done"
