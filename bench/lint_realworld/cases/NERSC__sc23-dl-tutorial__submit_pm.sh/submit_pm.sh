#!/bin/bash 
#SBATCH -C gpu 
#SBATCH -q shared
#SBATCH -A proj123
#SBATCH --cpus-per-task 32
#SBATCH --gpus-per-task 1
#SBATCH --gpu-bind none
#SBATCH --time=01:00:00
#SBATCH --image=nersc/pytorch:ngc-23.07-v0
#SBATCH --module=gpu,nccl-2.18
#SBATCH --reservation=workshop_day1
#SBATCH -J weather-vit
#SBATCH -o %x-%j.out

DATADIR=/pscratch/project/weather/era5_small
LOGDIR=${SCRATCH}/vit-weather/logs
mkdir -p ${LOGDIR}
args="${@}"

export FI_MR_CACHE_MONITOR=userfaultfd
export HDF5_USE_FILE_LOCKING=FALSE

# optional Nsight Systems profile
if [ "${ENABLE_PROFILING:-0}" -eq 1 ]; then
    echo "profiling on"
    NSYS_ARGS="--trace=cuda,cublas,nvtx --kill none -c cudaProfilerApi -f true"
    NSYS_OUTPUT=${LOGDIR}/${PROFILE_OUTPUT:-"profile"}
    export PROFILE_CMD="nsys profile $NSYS_ARGS -o $NSYS_OUTPUT"
fi

export MASTER_ADDR=$(hostname)

# GPU order reversed so that each rank sits next to its CPU cores
export CUDA_VISIBLE_DEVICES=3,2,1,0

set -x
srun -u shifter -V ${DATADIR}:/data -V ${LOGDIR}:/logs \
    bash -c "
    source set_dist_env.sh
    ${PROFILE_CMD} python train.py ${args}
    "
