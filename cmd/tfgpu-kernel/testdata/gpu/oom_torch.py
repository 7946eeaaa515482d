"""The real-GPU check's out-of-memory error (cmd/tfgpu-kernel/realgpu_test.go):
PyTorch asked for more than cuda:0 has, and the error it raises written to
argv[1] as a Jupyter error message's content (ename, evalue, traceback) and
the class's module, for internal/gpu/oom.Match to recognise.

With --fake, on a machine without a GPU, the error is raised as PyTorch
raises it (a torch.OutOfMemoryError, module "torch") without PyTorch, so
that the check itself is tested.
"""

import json
import sys
import traceback

out = sys.argv[1]
try:
    if "--fake" in sys.argv:
        import types

        torch = types.ModuleType("torch")

        class OutOfMemoryError(RuntimeError):
            pass

        OutOfMemoryError.__module__ = "torch"
        raise OutOfMemoryError("CUDA out of memory. Tried to allocate 142.00 GiB. GPU 0 has a total capacity of "
                               "141.00 GiB of which 139.00 GiB is free.")
    import torch

    total = torch.cuda.get_device_properties(0).total_memory
    torch.empty(total + (1 << 30), dtype=torch.uint8, device="cuda:0")
    sys.exit("allocated more than the GPU has")
except Exception as e:  # noqa: BLE001 — whatever PyTorch raised is the point
    with open(out, "w") as f:
        json.dump({"ename": type(e).__name__, "evalue": str(e), "module": type(e).__module__,
                   "traceback": traceback.format_exception(type(e), e, e.__traceback__)}, f)
