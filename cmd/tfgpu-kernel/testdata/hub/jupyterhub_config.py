# TestE2EHub's JupyterHub (cmd/tfgpu-kernel/e2e_hub_test.go): batchspawner's
# SlurmSpawner on the test's one-node Slurm cluster, configurable-http-proxy
# from npm, DummyAuthenticator with a password, and two API-token services:
# the test's driver (testdata/e2e/hub.py) and the idle culler, which the
# driver runs only when it wants a server culled. The test fills in the
# E2E_HUB_* variables; everything else is what an admin writes (the recipe
# in docs/operating.md is these lines).
import json
import os

c = get_config()  # noqa: F821 (JupyterHub's config loader defines it)
E = os.environ
here = E["E2E_HUB_DIR"]

# The hub, its API and the proxy on loopback, at ports the test chose.
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = int(E["E2E_HUB_PORT"])
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = int(E["E2E_HUB_API_PORT"])
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:%s" % E["E2E_HUB_PROXY_API_PORT"]
c.ConfigurableHTTPProxy.command = [E["E2E_HUB_CHP"]]
c.JupyterHub.db_url = "sqlite:///" + os.path.join(here, "jupyterhub.sqlite")
c.JupyterHub.cookie_secret_file = os.path.join(here, "jupyterhub_cookie_secret")
c.JupyterHub.pid_file = os.path.join(here, "jupyterhub.pid")

c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = E["E2E_HUB_PASSWORD"]

# ---- the recipe: batchspawner's SlurmSpawner with the tfgpu kernelspec
c.JupyterHub.spawner_class = "batchspawner.SlurmSpawner"
# Commands run as the user (no sudo on this host: runuser keeps the
# environment batchspawner passes, as sudo -E does).
c.SlurmSpawner.exec_prefix = "/usr/sbin/runuser -u {username} --"
# Each server: 1.5 GiB (the job's memory cgroup: task/cgroup,
# ConstrainRAMSpace=yes), enough for the server and a few kernels.
c.SlurmSpawner.req_memory = "1536M"
# batchspawner's own script less --get-user-env=L (the test's users have
# no login shell); the server runs as a job step (srun), as by default.
c.SlurmSpawner.batch_script = """#!/bin/bash
#SBATCH --output={{homedir}}/jupyterhub_slurmspawner_%j.log
#SBATCH --job-name=spawner-jupyterhub
#SBATCH --chdir={{homedir}}
#SBATCH --export={{keepvars}}
{% if memory %}#SBATCH --mem={{memory}}
{% endif %}{% if options %}#SBATCH {{options}}{% endif %}

set -euo pipefail

trap 'echo SIGTERM received' TERM
{{prologue}}
{% if srun %}{{srun}} {% endif %}{{cmd}}
echo "jupyterhub-singleuser ended gracefully"
{{epilogue}}
"""
c.Spawner.environment = {
    # The venv with jupyterhub, batchspawner, jupyter_server and ipykernel
    # (the job finds batchspawner-singleuser and jupyterhub-singleuser on
    # PATH), and where the tfgpu kernelspec is installed.
    "PATH": E["E2E_HUB_VENV_BIN"] + ":/usr/bin:/bin",
    "JUPYTER_PATH": E["E2E_HUB_JUPYTER_PATH"],
    # The test's own: its cluster and the tag every job's process carries.
    "SLURM_CONF": E["SLURM_CONF"],
    "E2E_TAG": E["E2E_HUB_JOB_TAG"],
    "PYTHONDONTWRITEBYTECODE": "1",
}
# The single-user server's own kernel culler (jupyter_server's
# MappingKernelManager): an idle kernel with no client connected is shut
# down after this long.
c.Spawner.args = [
    "--MappingKernelManager.cull_idle_timeout=%s" % E["E2E_HUB_KERNEL_CULL"],
    "--MappingKernelManager.cull_interval=2",
]
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120
# ---- end of the recipe

c.JupyterHub.services = [
    {"name": "e2e-driver", "api_token": E["E2E_HUB_DRIVER_TOKEN"]},
    {"name": "idle-culler", "api_token": E["E2E_HUB_CULLER_TOKEN"]},
]
c.JupyterHub.load_roles = [
    {
        "name": "e2e-driver",
        "scopes": ["admin:users", "admin:servers", "tokens", "access:servers"],
        "services": ["e2e-driver"],
    },
    {
        # What jupyterhub-idle-culler's README asks for, culling servers only.
        "name": "idle-culler",
        "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
        "services": ["idle-culler"],
    },
]
if E.get("E2E_HUB_DEBUG"):
    c.JupyterHub.log_level = "DEBUG"
    c.Spawner.debug = True
print("e2e hub config: " + json.dumps({"port": c.JupyterHub.port, "spawner": "SlurmSpawner"}))
