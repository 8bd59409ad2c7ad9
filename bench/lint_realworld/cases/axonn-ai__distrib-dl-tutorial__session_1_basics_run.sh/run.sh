#!/bin/bash
#SBATCH -N 1
#SBATCH -p gpu
#SBATCH --gres=gpu:a100:1
#SBATCH --time=00:05:00
#SBATCH -A dlcourse

module load python gcc/9.4.0 cuda openmpi/gcc
VENV_HOME="/scratch/project/dl-course/"

# the course's Python environment
source $VENV_HOME/course-env/bin/activate
DATA_DIR="$VENV_HOME/data"


SCRIPT=train.py
ARGS="--num-layers 4 --hidden-size 1536 --data-dir ${DATA_DIR} --batch-size 32 --lr 0.0001 --image-size 64"

MIXED_PRECISION="${MIXED_PRECISION:=false}"
CHECKPOINT_ACTIVATIONS="${CHECKPOINT_ACTIVATIONS:=false}"

if [ ${MIXED_PRECISION} == "true" ]; then
	SCRIPT="train_mp.py"
fi

if [ ${CHECKPOINT_ACTIVATIONS} == "true" ]; then
	SCRIPT="train_mp.py"
	ARGS="${ARGS} --checkpoint-activations"
fi

cmd="python -u ${SCRIPT} ${ARGS}"
echo $cmd

python ${SCRIPT} ${ARGS}

