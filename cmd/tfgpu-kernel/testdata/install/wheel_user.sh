#!/bin/sh
# wheel_user.sh BASE_PYTHON VENV REQUIREMENTS WHEEL [PIP ARGS…]
#
# What a user of the wheel does and meets, for TestE2EWheel: a fresh venv
# of BASE_PYTHON with the Jupyter stack REQUIREMENTS pins, `pip install
# WHEEL` into it, then, with only that venv added to PATH: the binary's
# version, the kernelspecs Jupyter lists, the Lab extensions, a kernel
# started, restarted and shut down by jupyter_client (wheel_check.py;
# WHEEL_CHECK_ARGS=--gpu to hold the fake GPU), the same once an admin
# configured it and pip upgraded it, and `pip uninstall`. PIP
# ARGS go to both installs (--no-index --find-links DIR in a root with no
# network). Lines the test reads start with WHEEL-.
set -eu
py=$1 venv=$2 req=$3 whl=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
for t in go gcc cc node npm; do
	if p=$(command -v "$t"); then echo "WHEEL-FOUND $t $p"; fi
done
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-input "$@" -r "$req"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-input "$@" "$whl"
PATH=$venv/bin:$PATH
export PATH
echo "WHEEL-VERSION $(tfgpu-kernel --version)"
echo "WHEEL-WHICH $(command -v tfgpu-kernel)"
echo "WHEEL-SPECS $(jupyter kernelspec list --json | tr -d '\n')"
jupyter labextension list 2>&1 | sed 's/^/WHEEL-LABEXT /'
# shellcheck disable=SC2086  # WHEEL_CHECK_ARGS is words
python "$here/wheel_check.py" ${WHEEL_CHECK_ARGS:-}
# An admin's settings, then an upgrade (the same wheel again): pip
# rewrites the kernelspec, the settings stay in etc/jupyter and run reads them.
echo "WHEEL-CONFIGURED $(tfgpu-kernel install --sys-prefix --python "$venv/bin/python" --max-message-size 2G --env WHEEL_SETTING=kept 2>&1)"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-input --force-reinstall --no-deps "$@" "$whl"
# shellcheck disable=SC2086
python "$here/wheel_check.py" ${WHEEL_CHECK_ARGS:-}
echo "WHEEL-UNCONFIGURED $(tfgpu-kernel install --uninstall --sys-prefix --python "$venv/bin/python" 2>&1)"
python -m pip uninstall -y -q tfgpu-kernel
if [ -e "$venv/etc/jupyter/tfgpu-kernel.json" ]; then echo "WHEEL-LEFT $venv/etc/jupyter/tfgpu-kernel.json"; fi
# Files only: pip leaves a scope directory (labextensions/@tfgpu) empty, as
# it does for every scoped extension's.
for p in "$venv/bin/tfgpu-kernel" "$venv/share/jupyter/kernels/tfgpu" "$venv/share/jupyter/labextensions/@tfgpu"; do
	if [ -e "$p" ]; then find "$p" ! -type d | sed 's/^/WHEEL-LEFT /'; fi
done
ls "$venv"/lib/python3*/site-packages | grep -i tfgpu | sed 's/^/WHEEL-LEFT site-packages: /' || true
echo "WHEEL-DONE"
