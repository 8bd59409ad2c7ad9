#!/bin/bash 
#SBATCH -C gpu 
#SBATCH -A proj123_g
#SBATCH --ntasks-per-node 4
#SBATCH --cpus-per-task 32
#SBATCH --gpus-per-node 4
#SBATCH --time=0:15:00
#SBATCH --image=nersc/unet-cosmo:latest
#SBATCH --reservation=workshop
#SBATCH -J unet-crop64
#SBATCH -o %x-%j.out

DATADIR=/pscratch/project/cosmo/samples
LOGDIR=${SCRATCH}/unet-cosmo/logs
mkdir -p ${LOGDIR}
args="${@}"

hostname

export NCCL_NET_GDR_LEVEL=PHB

# optional Nsight Systems profile
if [ "${ENABLE_PROFILING:-0}" -eq 1 ]; then
    echo "profiling on"
    NSYS_ARGS="--trace=cuda,cublas,nvtx --kill none -c cudaProfilerApi -f true"
    NSYS_OUTPUT=${PROFILE_OUTPUT:-"profile"}
    export PROFILE_CMD="nsys profile $NSYS_ARGS -o $NSYS_OUTPUT"
fi

PERFMON_CONFIG=perfmon-conf.yaml
PERFMON_OUTPUT=${PERFMON_OUTPUT:-"perfmon_output"}
sed "s/.*output_filename.*/        output_filename: ${PERFMON_OUTPUT}.json/" ${PERFMON_CONFIG} > perfmon-run-${SLURM_JOBID}.yaml
export PERFMON_CONFIG_FILE=perfmon-run-${SLURM_JOBID}.yaml
export MASTER_ADDR=$(hostname)

# GPU order reversed so that each rank sits next to its CPU cores
export CUDA_VISIBLE_DEVICES=3,2,1,0

set -x
srun -u shifter -V ${DATADIR}:/data -V ${LOGDIR}:/logs \
    bash -c "
    source set_dist_env.sh
    ${PROFILE_CMD} python train.py ${args}
    "
rm perfmon-run-${SLURM_JOBID}.yaml
