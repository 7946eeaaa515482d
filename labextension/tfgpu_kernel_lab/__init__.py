"""The GPU of a TF-GPU (clean restart) kernel in JupyterLab 4 and Notebook 7.

A prebuilt JupyterLab extension: the wheel puts it in
share/jupyter/labextensions/@tfgpu/kernel-lab, where JupyterLab and
Notebook 7 find it. This module only names it for `jupyter labextension`.
"""

__version__ = "0.1.0"


def _jupyter_labextension_paths():
    return [{"src": "labextension", "dest": "@tfgpu/kernel-lab"}]
