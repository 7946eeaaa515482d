#!/bin/bash
# TestE2ESlurm's batch job (cmd/tfgpu-kernel/e2e_slurm_test.go): a plain job
# script as Open OnDemand's Jupyter app writes one. The driver is the
# script's child, not exec'd, so the script's shell stays the job's first
# process. sbatch is given the options (--mem, -o, -e, -J) on its command
# line; the environment (JUPYTER_PATH, TFGPU_STATE_DIR, E2E_*) is sbatch's
# own, exported by default.
echo "job $SLURM_JOB_ID on $(hostname): shell $$, part $1"
cat /proc/self/cgroup
/usr/bin/python3 "$E2E_SLURM_DRIVER" "$1"
echo "driver exited $?"
