#!/bin/bash 
#SBATCH -C gpu 
#SBATCH -A proj123
#SBATCH --ntasks-per-node 8
#SBATCH --cpus-per-task 10
#SBATCH --gpus-per-task 1
#SBATCH --time=0:30:00
#SBATCH --image=nersc/unet-cosmo:latest
#SBATCH -J unet-crop64
#SBATCH -o %x-%j.out

DATADIR=/global/scratch/project/cosmo/samples
LOGDIR=${SCRATCH}/unet-cosmo/logs
mkdir -p ${LOGDIR}
args="${@}"

hostname

#

# optional Nsight Systems profile
if [ "${ENABLE_PROFILING:-0}" -eq 1 ]; then
    echo "profiling on"
    NSYS_ARGS="--trace=cuda,cublas,nvtx --kill none -c cudaProfilerApi -f true"
    PROFILE_OUTPUT=/logs/$SLURM_JOB_ID
    export PROFILE_CMD="nsys profile $NSYS_ARGS -o $PROFILE_OUTPUT"
fi

set -x
srun -u shifter -V ${DATADIR}:/data -V ${LOGDIR}:/logs \
    bash -c "
    source set_dist_env.sh
    ${PROFILE_CMD} python train.py --config=V100_crop64_sqrt ${args}
    "
